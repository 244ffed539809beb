/* exec_gateway: see exec_gateway.h and docs/exec-gateway.md. */
#include "proc-supervisor/exec_gateway.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "proc-supervisor/env_build.h"
#include "proc-supervisor/peercheck.h"
#include "proto/conn.h"
#include "proto/endpoint.h"
#include "proto/frame.h"
#include "proto/message.h"

#define GW_MAX_REQUEST PROTO_MAX_FRAME
#define GW_LINGER_MS 5000 /* after ExecExited, wait this long for the client to hang up */

enum sess_state { SESS_HANDSHAKE = 1, SESS_RUNNING, SESS_DONE };

struct gw_session {
	struct exec_gw *gw;
	struct gw_session *next;
	enum sess_state state;
	int fd;            /* until handed to conn */
	struct proto_conn *conn;
	bool conn_open;
	uv_poll_t poll;
	bool poll_open;
	uv_timer_t timer;
	bool timer_open;
	uint8_t hdr[PROTO_FRAME_PREFIX];
	size_t hdr_len;
	uint8_t *payload;
	size_t payload_len, payload_got;
	int fds[3];
	size_t n_fds;
	bool bad_fds;      /* more than 3, or a non-fd control message */
	int master;        /* PTY sessions: the supervisor's copy, for resizes */
	bool spawned;      /* on_exit pending until exited */
	bool exited;
	int wstatus;
	pid_t pid;
	uid_t peer_uid;
	pid_t peer_pid;
	int peer_pidfd;
};

struct exec_gw {
	uv_loop_t *loop;
	struct exec_gw_opts o;
	char *path;
	char *shell;
	char **extra;
	struct peer_allow allow; /* copies of o.allow_uids / o.allow_gids */
	int listen_fd;
	uv_poll_t listen_poll;
	bool listen_open;
	struct gw_session *sessions;
	size_t n_sessions;
	bool stopping;
	void (*done)(void *);
	void *done_ud;
	struct log_ratelimit peer_log; /* see peer_log() */
};

/* A refused peer and a silent one each cost the client a connect only, and
 * each logged a line: with stderr a pipe whose reader stalls, ~880 refused
 * connections from any uid that can reach the socket blocked the loop in
 * write(2), and with it every session, the reaper and the seccomp notifier
 * (test_gw_hostile t_log_flood). So at most one such line per 10 s, with the
 * count held back. Lines that need a spawn (an allowed peer) stay. */
#define peer_log(gw, level, fmt, ...)                                                              \
	do {                                                                                        \
		uint64_t held_;                                                                     \
		if (log_ratelimit_ok(&(gw)->peer_log, uv_now((gw)->loop), 10000, &held_))           \
			level(fmt " (%llu such lines held back)", ##__VA_ARGS__, (unsigned long long)held_); \
	} while (0)

/* ---- helpers ---- */

int exec_gw_resolve_shell(const char *policy_shell, uid_t uid, char *out, size_t size, char *msg,
			  size_t msg_size)
{
	/* An explicit policy choice that does not work is an error, not a
	 * silent fallback: the operator asked for that shell. */
	if (policy_shell && policy_shell[0]) {
		if (!envb_shell_usable(policy_shell)) {
			snprintf(msg, msg_size, "exec.shell %s is not an executable file", policy_shell);
			return -ENOENT;
		}
		strscpy(out, policy_shell, size);
		return 0;
	}
	/* The passwd shell of an image is often bash in /etc/passwd while the
	 * image ships none, or nologin for a service user: then /bin/sh. */
	if (envb_passwd_shell(uid, out, size))
		return 0;
	if (envb_shell_usable("/bin/sh")) {
		strscpy(out, "/bin/sh", size);
		return 0;
	}
	snprintf(msg, msg_size, "no shell: exec.shell unset, passwd shell of uid %u unusable, /bin/sh missing",
		 (unsigned)uid);
	return -ENOENT;
}

static bool env_name_allowed(const struct exec_gw *gw, const char *name, size_t len)
{
	if ((len == 4 && !memcmp(name, "TERM", 4)) || (len == 4 && !memcmp(name, "LANG", 4)) ||
	    (len > 3 && !memcmp(name, "LC_", 3)))
		return true;
	for (size_t i = 0; i < gw->o.n_extra_env_names; i++)
		if (strlen(gw->extra[i]) == len && !memcmp(gw->extra[i], name, len))
			return true;
	return false;
}

static int send_raw(int fd, const struct ctl_msg *m, int pass_fd)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len;
	int r = ctl_encode(m, &buf, &len);
	if (r < 0)
		return r;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (pass_fd >= 0) {
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.b;
		mh.msg_controllen = sizeof(cm.b);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	/* Only used while nothing else is queued on a fresh socket: a small
	 * frame fits the socket buffer, so a short write is an error. */
	ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

static void send_error_raw(int fd, const char *text)
{
	struct ctl_msg m = { .kind = CTL_EXEC_DATA };
	m.u.exec_data.stream = 2;
	m.u.exec_data.data = (uint8_t *)text;
	m.u.exec_data.len = strlen(text);
	(void)send_raw(fd, &m, -1);
}

/* ---- session lifecycle ---- */

static void gw_maybe_done(struct exec_gw *gw);

static void sess_close_fds(struct gw_session *s)
{
	for (size_t i = 0; i < s->n_fds; i++)
		if (s->fds[i] >= 0)
			close(s->fds[i]);
	s->n_fds = 0;
}

static void sess_maybe_free(struct gw_session *s)
{
	if (s->poll_open || s->timer_open || s->conn_open || s->fd >= 0)
		return;
	if (s->spawned && !s->exited)
		return;
	struct exec_gw *gw = s->gw;
	for (struct gw_session **pp = &gw->sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	gw->n_sessions--;
	sess_close_fds(s);
	if (s->master >= 0)
		close(s->master);
	if (s->peer_pidfd >= 0)
		close(s->peer_pidfd);
	free(s->payload);
	free(s);
	gw_maybe_done(gw);
}

static void on_poll_closed(uv_handle_t *h)
{
	struct gw_session *s = h->data;
	s->poll_open = false;
	sess_maybe_free(s);
}

static void on_timer_closed(uv_handle_t *h)
{
	struct gw_session *s = h->data;
	s->timer_open = false;
	sess_maybe_free(s);
}

/* SIGKILL every process of session sid that a group kill misses. Job
 * control (any interactive shell: `tether exec --pty`, --ssh logins) puts
 * each job in a process group of its own within the session, and those
 * survived a disconnect (tests/proc-supervisor/test_gw_hostile.c). The kernel
 * has no kill-by-session, so scan /proc for the session id (field 6 of
 * stat). The number cannot name another session meanwhile: a pid stays
 * allocated while any process has it as its sid. Only when /proc is our
 * own pid namespace's (its numbers are ours). A second pass catches a
 * member forked while the first one read the directory. */
static void kill_session_members(pid_t sid)
{
	char self[32];
	ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
	if (n <= 0)
		return;
	self[n] = '\0';
	if (strtol(self, NULL, 10) != getpid())
		return;
	for (int pass = 0; pass < 2; pass++) {
		DIR *d = opendir("/proc");
		if (!d)
			return;
		struct dirent *e;
		while ((e = readdir(d))) {
			char *end, path[300], buf[1024];
			long pid = strtol(e->d_name, &end, 10);
			if (*end || pid <= 0 || pid == getpid())
				continue;
			snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
			if (read_file_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
				continue;
			/* after the comm (it may hold anything): state ppid pgrp session */
			const char *q = strrchr(buf, ')');
			char st;
			long ppid, pgrp, sess;
			if (q && sscanf(q + 1, " %c %ld %ld %ld", &st, &ppid, &pgrp, &sess) == 4 && sess == sid &&
			    st != 'Z' && st != 'X')
				(void)kill((pid_t)pid, SIGKILL);
		}
		closedir(d);
	}
}

static void sess_kill_group(struct gw_session *s)
{
	if (s->spawned && !s->exited && s->pid > 0) {
		/* The session leader's pid is its process group (new session):
		 * everything it started in that group goes with it. */
		if (kill(-s->pid, SIGKILL) < 0 && errno == ESRCH)
			(void)kill(s->pid, SIGKILL);
		kill_session_members(s->pid);
	}
}

/* Abort before the conn exists. */
static void sess_abort(struct gw_session *s)
{
	if (s->poll_open && !uv_is_closing((uv_handle_t *)&s->poll))
		uv_close((uv_handle_t *)&s->poll, on_poll_closed);
	if (s->timer_open && !uv_is_closing((uv_handle_t *)&s->timer))
		uv_close((uv_handle_t *)&s->timer, on_timer_closed);
	if (s->fd >= 0) {
		close(s->fd);
		s->fd = -1;
	}
	s->state = SESS_DONE;
	sess_maybe_free(s);
}

static void on_conn_msg(struct proto_conn *c, struct ctl_msg *m, void *ud)
{
	struct gw_session *s = ud;
	switch (m->kind) {
	case CTL_EXEC_RESIZE:
		if (s->master >= 0) {
			struct winsize ws = { .ws_row = m->u.exec_resize.rows, .ws_col = m->u.exec_resize.cols };
			if (ioctl(s->master, TIOCSWINSZ, &ws) < 0)
				log_debug("exec session %d: resize: %m", (int)s->pid);
		}
		return;
	case CTL_EXEC_SIGNAL: {
		int sig = m->u.exec_signal.signo;
		/* Only what a terminal user could send anyway. */
		if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGQUIT && sig != SIGKILL &&
		    sig != SIGUSR1 && sig != SIGUSR2 && sig != SIGWINCH && sig != SIGCONT && sig != SIGTSTP) {
			proto_conn_close(c, -EBADMSG);
			return;
		}
		if (s->spawned && !s->exited)
			(void)kill(-s->pid, sig);
		return;
	}
	case CTL_EXEC_DATA:
		/* stdin is the client's own fd (or the pty master it holds):
		 * the gateway never carries data upstream. */
	default:
		proto_conn_close(c, -EBADMSG);
		return;
	}
}

static void on_conn_close(struct proto_conn *c, int err, void *ud)
{
	struct gw_session *s = ud;
	s->conn_open = false;
	s->conn = NULL;
	if (!s->exited) {
		log_info("exec session %d: client gone (%s): killing its process group", (int)s->pid,
			 err ? strerror(-err) : "EOF");
		sess_kill_group(s);
	}
	if (s->timer_open && !uv_is_closing((uv_handle_t *)&s->timer))
		uv_close((uv_handle_t *)&s->timer, on_timer_closed);
	s->state = SESS_DONE;
	sess_maybe_free(s);
}

static void on_linger(uv_timer_t *t)
{
	struct gw_session *s = t->data;
	if (s->conn_open)
		proto_conn_close(s->conn, 0);
}

static void on_session_exit(void *token, int wstatus)
{
	struct gw_session *s = token;
	s->exited = true;
	s->wstatus = wstatus;
	if (s->conn_open) {
		struct ctl_msg m = { .kind = CTL_EXEC_EXITED };
		if (WIFSIGNALED(wstatus))
			m.u.exec_exited.exit_code = 128 + WTERMSIG(wstatus), m.u.exec_exited.signal = WTERMSIG(wstatus);
		else
			m.u.exec_exited.exit_code = WEXITSTATUS(wstatus);
		if (proto_conn_send(s->conn, &m) < 0)
			proto_conn_close(s->conn, 0);
		else if (s->timer_open)
			uv_timer_start(&s->timer, on_linger, GW_LINGER_MS, 0);
	}
	sess_maybe_free(s);
}

static void on_handshake_timeout(uv_timer_t *t)
{
	struct gw_session *s = t->data;
	peer_log(s->gw, log_info, "exec gateway: client sent no request in time");
	sess_abort(s);
}

static int open_pty(uint16_t rows, uint16_t cols, int *master, int *slave)
{
	_cleanup_close_ int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -errno;
	if (grantpt(m) < 0 || unlockpt(m) < 0)
		return -errno;
	char name[128];
	if (ptsname_r(m, name, sizeof(name)) != 0)
		return -errno;
	int sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (sl < 0)
		return -errno;
	if (rows && cols) {
		struct winsize ws = { .ws_row = rows, .ws_col = cols };
		(void)ioctl(m, TIOCSWINSZ, &ws);
	}
	*slave = sl;
	*master = fd_steal(&m);
	return 0;
}

static void fail_session(struct gw_session *s, int exit_code, const char *msg)
{
	char line[700];
	snprintf(line, sizeof(line), "tether exec: %s\n", msg);
	send_error_raw(s->fd, line);
	struct ctl_msg m = { .kind = CTL_EXEC_EXITED };
	m.u.exec_exited.exit_code = exit_code;
	(void)send_raw(s->fd, &m, -1);
	sess_abort(s);
}

/* The request is complete: validate it, spawn, answer, go to the conn. */
static void sess_start(struct gw_session *s)
{
	struct exec_gw *gw = s->gw;
	struct ctl_msg m;
	int r = ctl_decode(s->payload, s->payload_len, &m);
	if (r < 0 || m.kind != CTL_EXEC_REQUEST) {
		if (r == 0)
			ctl_msg_clear(&m);
		fail_session(s, 125, "protocol error: the first message must be an ExecRequest");
		return;
	}
	bool pty = m.u.exec_request.pty;
	if (s->bad_fds || (pty && s->n_fds != 0) || (!pty && s->n_fds != 3)) {
		ctl_msg_clear(&m);
		fail_session(s, 125, "protocol error: a non-PTY request carries exactly 3 fds, a PTY request none");
		return;
	}
	if (gw->stopping) {
		ctl_msg_clear(&m);
		fail_session(s, 125, "the supervisor is shutting down");
		return;
	}

	/* argv; "" as argv[0] is the supervisor-side login shell. */
	size_t argc = m.u.exec_request.argc;
	char **argv = calloc(argc + 2, sizeof(*argv));
	char shell[PATH_MAX];
	char msg[512];
	if (!argv) {
		ctl_msg_clear(&m);
		fail_session(s, 125, "out of memory");
		return;
	}
	size_t k = 0;
	if (m.u.exec_request.argv[0][0] == '\0') {
		if (exec_gw_resolve_shell(gw->shell, geteuid(), shell, sizeof(shell), msg, sizeof(msg)) < 0) {
			free(argv);
			ctl_msg_clear(&m);
			fail_session(s, 127, msg);
			return;
		}
		argv[k++] = shell;
		if (argc == 1)
			argv[k++] = "-l";
		for (size_t i = 1; i < argc; i++)
			argv[k++] = m.u.exec_request.argv[i];
	} else
		for (size_t i = 0; i < argc; i++)
			argv[k++] = m.u.exec_request.argv[i];
	argv[k] = NULL;

	/* env overlay: the edge filter; the env boundary does the rest. */
	size_t ne = m.u.exec_request.n_env;
	char **envp = calloc(ne + 1, sizeof(*envp));
	size_t nk = 0;
	for (size_t i = 0; envp && i < ne; i++) {
		const struct ctl_env_var *v = &m.u.exec_request.env[i];
		if (!env_name_allowed(gw, v->name, strlen(v->name)))
			continue;
		if (asprintf(&envp[nk], "%s=%s", v->name, v->value) < 0) {
			envp[nk] = NULL;
			break;
		}
		nk++;
	}

	int slave = -1;
	struct exec_gw_spawn req = {
		.argv = argv, .envp = envp, .cwd = m.u.exec_request.cwd,
		.session = pty ? SPAWN_PTY : SPAWN_SETSID,
		.on_exit = on_session_exit, .token = s,
	};
	struct exec_gw_spawned out = { 0 };
	struct spawn_error err = { 0 };
	if (!envp) {
		r = -ENOMEM;
		snprintf(err.message, sizeof(err.message), "out of memory");
		err.exit_code = 125;
	} else if (pty && (r = open_pty(m.u.exec_request.rows, m.u.exec_request.cols, &s->master, &slave)) < 0) {
		snprintf(err.message, sizeof(err.message), "allocating a pty: %s", strerror(-r));
		err.exit_code = 125;
	} else {
		for (int i = 0; i < 3; i++)
			req.stdio[i] = pty ? slave : s->fds[i];
		r = gw->o.spawn(gw->o.spawn_userdata, &req, &out, &err);
	}
	if (slave >= 0)
		close(slave);
	sess_close_fds(s); /* the child has its copies */
	for (size_t i = 0; envp && i < nk; i++)
		free(envp[i]);
	free(envp);
	free(argv);
	ctl_msg_clear(&m);
	if (r < 0) {
		fail_session(s, err.exit_code ? err.exit_code : 127,
			     err.message[0] ? err.message : strerror(-r));
		return;
	}
	s->spawned = true;
	s->pid = out.pid;
	log_info("exec session %d (%s) for uid %u pid %d%s", (int)out.pid, out.key, (unsigned)s->peer_uid,
		 (int)s->peer_pid, pty ? ", pty" : "");

	struct ctl_msg st = { .kind = CTL_EXEC_STARTED };
	st.u.exec_started.pid = out.pid;
	strscpy(st.u.exec_started.process_key, out.key, sizeof(st.u.exec_started.process_key));
	r = send_raw(s->fd, &st, pty ? s->master : -1);
	if (r < 0) {
		log_info("exec session %d: answering the client: %s", (int)out.pid, strerror(-r));
		sess_kill_group(s);
		sess_abort(s);
		return;
	}
	uv_timer_stop(&s->timer);
	struct proto_conn_opts co = { .read_deadline_ms = 0 };
	struct proto_conn_cbs cbs = { .on_msg = on_conn_msg, .on_close = on_conn_close };
	int fd = fd_steal(&s->fd);
	r = proto_conn_open(gw->loop, fd, &co, &cbs, s, &s->conn);
	if (r < 0) {
		log_info("exec session %d: %s", (int)out.pid, strerror(-r));
		sess_kill_group(s);
		sess_abort(s);
		return;
	}
	s->conn_open = true;
	s->state = SESS_RUNNING;
	if (s->exited) /* cannot happen before the loop runs, but be exact */
		on_session_exit(s, s->wstatus);
}

static void on_sess_readable(uv_poll_t *p, int status, int events)
{
	struct gw_session *s = p->data;
	if (status < 0) {
		sess_abort(s);
		return;
	}
	/* Read exactly the request frame (prefix, then payload), so nothing
	 * after it is consumed before the conn takes over the socket. */
	uint8_t *dst;
	size_t want;
	if (s->hdr_len < PROTO_FRAME_PREFIX) {
		dst = s->hdr + s->hdr_len;
		want = PROTO_FRAME_PREFIX - s->hdr_len;
	} else {
		dst = s->payload + s->payload_got;
		want = s->payload_len - s->payload_got;
	}
	union {
		char b[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = dst, .iov_len = want };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b) };
	ssize_t n = recvmsg(s->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			s->bad_fds = true;
			continue;
		}
		size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < cnt; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (s->n_fds < 3)
				s->fds[s->n_fds++] = fd;
			else {
				close(fd);
				s->bad_fds = true;
			}
		}
	}
	if (mh.msg_flags & MSG_CTRUNC)
		s->bad_fds = true;
	if (n <= 0) {
		sess_abort(s);
		return;
	}
	if (s->hdr_len < PROTO_FRAME_PREFIX) {
		s->hdr_len += (size_t)n;
		if (s->hdr_len < PROTO_FRAME_PREFIX)
			return;
		uint32_t len = ((uint32_t)s->hdr[0] << 24) | ((uint32_t)s->hdr[1] << 16) |
			       ((uint32_t)s->hdr[2] << 8) | s->hdr[3];
		if (len == 0 || len > GW_MAX_REQUEST) {
			fail_session(s, 125, "protocol error: bad request frame length");
			return;
		}
		s->payload = malloc(len);
		if (!s->payload) {
			sess_abort(s);
			return;
		}
		s->payload_len = len;
		return;
	}
	s->payload_got += (size_t)n;
	if (s->payload_got < s->payload_len)
		return;
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, on_poll_closed);
	sess_start(s);
}

static void gw_accept_one(struct exec_gw *gw, int fd)
{
	struct proto_peer peer;
	int r = proto_peer_get(fd, gw->o.caps, &peer);
	if (r < 0 || !peer.is_unix) {
		close(fd);
		return;
	}
	if (!peer_allow_check(&gw->allow, peer.uid, peer.gid) ||
	    (gw->o.caps->peer_pidfd && peer.pidfd < 0)) {
		char line[160];
		snprintf(line, sizeof(line), "tether exec: not allowed: uid %u gid %u is not in the gateway's allow list\n",
			 (unsigned)peer.uid, (unsigned)peer.gid);
		peer_log(gw, log_info, "exec gateway: refused uid %u gid %u pid %d", (unsigned)peer.uid,
			 (unsigned)peer.gid, (int)peer.pid);
		send_error_raw(fd, line);
		if (peer.pidfd >= 0)
			close(peer.pidfd);
		close(fd);
		return;
	}
	if (gw->n_sessions >= gw->o.max_sessions || gw->stopping) {
		send_error_raw(fd, "tether exec: too many sessions\n");
		if (peer.pidfd >= 0)
			close(peer.pidfd);
		close(fd);
		return;
	}
	struct gw_session *s = calloc(1, sizeof(*s));
	if (!s) {
		if (peer.pidfd >= 0)
			close(peer.pidfd);
		close(fd);
		return;
	}
	s->gw = gw;
	s->fd = fd;
	s->master = -1;
	s->peer_uid = peer.uid;
	s->peer_pid = peer.pid;
	s->peer_pidfd = peer.pidfd;
	s->state = SESS_HANDSHAKE;
	s->next = gw->sessions;
	gw->sessions = s;
	gw->n_sessions++;
	uv_timer_init(gw->loop, &s->timer);
	s->timer.data = s;
	s->timer_open = true;
	uv_timer_start(&s->timer, on_handshake_timeout, gw->o.handshake_timeout_ms, 0);
	if (uv_poll_init(gw->loop, &s->poll, fd) < 0) {
		sess_abort(s);
		return;
	}
	s->poll.data = s;
	s->poll_open = true;
	uv_poll_start(&s->poll, UV_READABLE, on_sess_readable);
}

static void on_listen_readable(uv_poll_t *p, int status, int events)
{
	struct exec_gw *gw = p->data;
	if (status < 0)
		return;
	for (int i = 0; i < 16; i++) {
		int fd = accept4(gw->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		gw_accept_one(gw, fd);
	}
}

int exec_gw_start(uv_loop_t *loop, const struct exec_gw_opts *opts, struct exec_gw **out)
{
	if (!loop || !opts || !opts->path || !opts->caps || !opts->spawn || !out)
		return -EINVAL;
	struct exec_gw *gw = calloc(1, sizeof(*gw));
	if (!gw)
		return -ENOMEM;
	gw->loop = loop;
	gw->o = *opts;
	gw->listen_fd = -1;
	if (!gw->o.socket_mode)
		gw->o.socket_mode = 0600;
	if (!gw->o.handshake_timeout_ms)
		gw->o.handshake_timeout_ms = 5000;
	if (!gw->o.max_sessions)
		gw->o.max_sessions = 64;
	int r = -ENOMEM;
	gw->path = strdup(opts->path);
	gw->shell = opts->shell ? strdup(opts->shell) : NULL;
	gw->extra = calloc(opts->n_extra_env_names + 1, sizeof(char *));
	if (!gw->path || (opts->shell && !gw->shell) || !gw->extra)
		goto fail;
	for (size_t i = 0; i < opts->n_extra_env_names; i++)
		if (!(gw->extra[i] = strdup(opts->extra_env_names[i])))
			goto fail;
	/* Copies of the allow lists, so the caller's arrays may go. */
	if (peer_allow_init(&gw->allow, opts->allow_uids, opts->n_allow_uids, opts->allow_gids,
			    opts->n_allow_gids) < 0)
		goto fail;
	gw->o.allow_uids = gw->allow.uids;
	gw->o.allow_gids = gw->allow.gids;
	gw->o.path = gw->path;
	gw->o.shell = gw->shell;

	char spec[4200];
	snprintf(spec, sizeof(spec), "unix:%s", opts->path);
	struct endpoint ep;
	r = endpoint_parse(spec, &ep);
	if (r < 0)
		goto fail;
	r = endpoint_listen(&ep, 64, gw->o.socket_mode);
	if (r < 0)
		goto fail;
	gw->listen_fd = r;
	r = uv_poll_init(loop, &gw->listen_poll, gw->listen_fd);
	if (r < 0)
		goto fail;
	gw->listen_poll.data = gw;
	gw->listen_open = true;
	uv_poll_start(&gw->listen_poll, UV_READABLE, on_listen_readable);
	*out = gw;
	return 0;
fail:
	if (gw->listen_fd >= 0) {
		close(gw->listen_fd);
		unlink(gw->path);
	}
	for (size_t i = 0; gw->extra && gw->extra[i]; i++)
		free(gw->extra[i]);
	free(gw->extra);
	peer_allow_free(&gw->allow);
	free(gw->path);
	free(gw->shell);
	free(gw);
	return r;
}

static void gw_maybe_done(struct exec_gw *gw)
{
	if (!gw->stopping || gw->listen_open || gw->sessions)
		return;
	void (*done)(void *) = gw->done;
	void *ud = gw->done_ud;
	for (size_t i = 0; gw->extra && gw->extra[i]; i++)
		free(gw->extra[i]);
	free(gw->extra);
	peer_allow_free(&gw->allow);
	free(gw->path);
	free(gw->shell);
	free(gw);
	if (done)
		done(ud);
}

static void on_listen_closed(uv_handle_t *h)
{
	struct exec_gw *gw = h->data;
	gw->listen_open = false;
	close(gw->listen_fd);
	gw->listen_fd = -1;
	gw_maybe_done(gw);
}

void exec_gw_stop(struct exec_gw *gw, void (*done)(void *userdata), void *userdata)
{
	if (!gw || gw->stopping)
		return;
	gw->stopping = true;
	gw->done = done;
	gw->done_ud = userdata;
	unlink(gw->path);
	uv_close((uv_handle_t *)&gw->listen_poll, on_listen_closed);
	for (struct gw_session *s = gw->sessions, *nx; s; s = nx) {
		nx = s->next;
		sess_kill_group(s);
		if (s->conn_open)
			proto_conn_close(s->conn, 0);
		else if (s->state == SESS_HANDSHAKE)
			sess_abort(s);
	}
}

size_t exec_gw_session_count(const struct exec_gw *gw)
{
	return gw ? gw->n_sessions : 0;
}
