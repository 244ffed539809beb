/* test_gw_hostile: the exec gateway of a REAL proc-supervisor (bin/
 * proc-supervisor --exec-socket, entrypoint `sleep 60`) against hostile and
 * broken clients. Each case checks the observable contract: a clear error
 * (ExecData on stream 2 + ExecExited 125) or a close, never a crash or a
 * hang, no session or process left behind (the status socket's live
 * exec_session members, the supervisor's children, pids by /proc), and the
 * supervisor's own descriptor count (entries of /proc/<pid>/fd) back at its
 * baseline once the clients are gone.
 *
 * t_disconnect_job_control is the regression test for jobs in process
 * groups of their own surviving a disconnect (exec_gateway.c
 * kill_session_members); t_log_flood for a line per refused peer that
 * blocked the daemon on a full stderr pipe (exec_gateway.c peer_log).
 *
 * Not repeated here (tests/proc-supervisor/test_gw_unit.c covers them on an
 * isolated gateway): plain garbage, an oversized length prefix, a non-PTY
 * request without fds, half a prefix then silence. test_gw_exec.sh covers a
 * non-PTY client killed mid-session (leader and group member gone).
 *
 * Every wait is bounded; a watchdog kills the supervisor (by pid) and exits
 * if the whole run goes over WATCHDOG_S. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fdpass.h"
#include "proto/frame.h"
#include "proto/message.h"

#define WATCHDOG_S 55
#define GW_CAP 64              /* exec_gw_opts.max_sessions default */
#define HANDSHAKE_MS 5000      /* exec_gw_opts.handshake_timeout_ms default */
#define MAX_REPLY_FDS 8

/* The test's one context: what the watchdog and teardown must reach. */
static struct {
	char dir[64];
	char sock[128], status[128], log[128], audit[128];
	char bin[512];
	pid_t sup;
	int base_fds;
	pid_t sup2; /* t_log_flood's supervisor, its stderr an unread pipe */
} T = { .sup = -1, .base_fds = -1, .sup2 = -1 };

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_watchdog(int sig)
{
	static const char m[] = "FAIL: test_gw_hostile watchdog: the run hung\n";
	(void)!write(2, m, sizeof(m) - 1);
	if (T.sup > 0)
		kill(T.sup, SIGKILL);
	if (T.sup2 > 0)
		kill(T.sup2, SIGKILL);
	_exit(1);
}

/* ---- the supervisor, observed from outside ---- */

static int sup_fd_count(void)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/fd", (int)T.sup);
	DIR *d = opendir(p);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void sup_fd_dump(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)T.sup);
	(void)!system(cmd);
}

/* Wait up to ms for the fd count to equal want; the last count seen. */
static int wait_fds(int want, int ms)
{
	int64_t end = now_ms() + ms;
	int n;
	while ((n = sup_fd_count()) != want && now_ms() < end)
		usleep(20 * 1000);
	if (n != want) {
		fprintf(stderr, "supervisor fds: %d, baseline %d\n", n, want);
		sup_fd_dump();
	}
	return n;
}

static bool sup_alive(void)
{
	int st;
	return T.sup > 0 && waitpid(T.sup, &st, WNOHANG) == 0;
}

/* Is pid gone (no /proc entry, or a zombie being reaped)? */
static bool pid_gone(pid_t pid)
{
	char p[64], buf[512];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return true;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *rp = strrchr(buf, ')');
	return !rp || rp[1] != ' ' || rp[2] == 'Z' || rp[2] == 'X';
}

static bool wait_gone(pid_t pid, int ms)
{
	int64_t end = now_ms() + ms;
	while (!pid_gone(pid) && now_ms() < end)
		usleep(20 * 1000);
	return pid_gone(pid);
}

/* Number of the supervisor's live children (all its threads). */
static int sup_children(void)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/task", (int)T.sup);
	DIR *d = opendir(p);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char cp[384];
		snprintf(cp, sizeof(cp), "/proc/%d/task/%s/children", (int)T.sup, e->d_name);
		FILE *f = fopen(cp, "re");
		if (!f)
			continue;
		int pid;
		while (fscanf(f, "%d", &pid) == 1)
			if (!pid_gone(pid))
				n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

static int wait_children(int want, int ms)
{
	int64_t end = now_ms() + ms;
	int n;
	while ((n = sup_children()) != want && now_ms() < end)
		usleep(20 * 1000);
	return n;
}

/* Live exec_session members by the status socket, -1 on error. */
static int live_sessions(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, T.status);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	int64_t end = now_ms() + 3000;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (now_ms() > end || poll(&pf, 1, 100) < 0)
			break;
		if (!pf.revents)
			continue;
		if (len + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		ssize_t n = read(fd, buf + len, cap - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	json_t *j = json_loadb(buf, len, 0, NULL);
	free(buf);
	json_t *procs = j ? json_object_get(j, "processes") : NULL;
	if (!json_is_array(procs)) {
		json_decref(j);
		return -1;
	}
	int live = 0;
	size_t i;
	json_t *p;
	json_array_foreach(procs, i, p) {
		const char *join = json_string_value(json_object_get(p, "join"));
		if (join && !strcmp(join, "exec_session") && !json_is_true(json_object_get(p, "exited")))
			live++;
	}
	json_decref(j);
	return live;
}

static int wait_no_sessions(int ms)
{
	int64_t end = now_ms() + ms;
	int n;
	while ((n = live_sessions()) != 0 && now_ms() < end)
		usleep(50 * 1000);
	return n;
}

/* The pid of the last exec_session process_spawn audit line with tag as
 * one of its argv words, 0 if none. */
static pid_t audit_session_pid(const char *tag)
{
	FILE *f = fopen(T.audit, "re");
	if (!f)
		return 0;
	char *line = NULL;
	size_t cap = 0;
	pid_t pid = 0;
	while (getline(&line, &cap, f) > 0) {
		json_t *j = json_loads(line, 0, NULL);
		const char *ev = json_string_value(json_object_get(j, "event"));
		const char *kind = json_string_value(json_object_get(j, "kind"));
		if (ev && kind && !strcmp(ev, "process_spawn") && !strcmp(kind, "exec_session")) {
			size_t i;
			json_t *a;
			json_array_foreach(json_object_get(j, "argv"), i, a)
				if (json_string_value(a) && !strcmp(json_string_value(a), tag))
					pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
		}
		json_decref(j);
	}
	free(line);
	fclose(f);
	return pid;
}

/* Everything back to where it was: no live session, only the entrypoint as
 * a child, the descriptor baseline. */
static void assert_settled(const char *what)
{
	int s = wait_no_sessions(5000);
	int c = wait_children(1, 5000);
	int n = wait_fds(T.base_fds, 5000);
	if (s != 0 || c != 1 || n != T.base_fds)
		fprintf(stderr, "after %s: %d live sessions, %d children, %d fds (baseline %d)\n", what, s, c, n,
			T.base_fds);
	assert_int_equal(s, 0);
	assert_int_equal(c, 1);
	assert_int_equal(n, T.base_fds);
	assert_true(sup_alive());
}

/* ---- a client crafting frames ---- */

static int dial(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(fd >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, T.sock);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* All of buf, bounded by ms; fds ride on the first byte. */
static int send_all(int fd, const uint8_t *buf, size_t len, const int *fds, size_t n_fds, int ms)
{
	int64_t end = now_ms() + ms;
	size_t off = 0;
	while (off < len) {
		ssize_t n = fdpass_send_fds(fd, buf + off, len - off, fds, off ? 0 : n_fds, 0);
		if (n == -EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			int left = (int)(end - now_ms());
			if (left <= 0)
				return -ETIMEDOUT;
			(void)poll(&pf, 1, left);
			continue;
		}
		if (n < 0)
			return (int)n;
		off += (size_t)n;
	}
	return 0;
}

static int send_msg(int fd, const struct ctl_msg *m, const int *fds, size_t n_fds)
{
	uint8_t *buf;
	size_t len;
	int r = ctl_encode(m, &buf, &len);
	if (r < 0)
		return r;
	r = send_all(fd, buf, len, fds, n_fds, 3000);
	free(buf);
	return r;
}

static struct ctl_msg exec_req(char **argv, bool pty)
{
	struct ctl_msg m = { .kind = CTL_EXEC_REQUEST };
	size_t n = 0;
	while (argv[n])
		n++;
	m.u.exec_request.argv = argv;
	m.u.exec_request.argc = n;
	m.u.exec_request.pty = pty;
	m.u.exec_request.rows = pty ? 24 : 0;
	m.u.exec_request.cols = pty ? 80 : 0;
	return m;
}

struct reply {
	struct frame_decoder dec;
	bool started, exited, eof, bad;
	pid_t pid;
	int code;
	int master;  /* the fd that came with ExecStarted (PTY) */
	int extra_fds;
	char err[1024];
};

static void reply_init(struct reply *r)
{
	memset(r, 0, sizeof(*r));
	frame_decoder_init(&r->dec, 0);
	r->master = -1;
	r->code = -1;
}

static void reply_free(struct reply *r)
{
	frame_decoder_free(&r->dec);
	if (r->master >= 0)
		close(r->master);
	r->master = -1;
}

static int on_frame(const uint8_t *p, size_t len, void *ud)
{
	struct reply *r = ud;
	struct ctl_msg m;
	if (ctl_decode(p, len, &m) < 0) {
		r->bad = true;
		return 0;
	}
	switch (m.kind) {
	case CTL_EXEC_STARTED:
		r->started = true;
		r->pid = m.u.exec_started.pid;
		break;
	case CTL_EXEC_EXITED:
		r->exited = true;
		r->code = m.u.exec_exited.exit_code;
		break;
	case CTL_EXEC_DATA: {
		size_t have = strlen(r->err), room = sizeof(r->err) - have - 1;
		size_t n = m.u.exec_data.len < room ? m.u.exec_data.len : room;
		memcpy(r->err + have, m.u.exec_data.data, n);
		r->err[have + n] = 0;
		break;
	}
	default:
		r->bad = true;
	}
	ctl_msg_clear(&m);
	return 0;
}

enum until { UNTIL_STARTED, UNTIL_EXITED, UNTIL_EOF };

/* Read the gateway's frames until the condition (or EOF, or ms): true when
 * the condition was met. */
static bool read_reply(int fd, struct reply *r, enum until u, int ms)
{
	int64_t end = now_ms() + ms;
	for (;;) {
		if ((u == UNTIL_STARTED && r->started) || (u == UNTIL_EXITED && r->exited) || r->eof)
			return u == UNTIL_EOF ? r->eof : (u == UNTIL_STARTED ? r->started : r->exited);
		int left = (int)(end - now_ms());
		if (left <= 0)
			return false;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, left) <= 0)
			continue;
		uint8_t buf[4096];
		union {
			char b[CMSG_SPACE(sizeof(int) * MAX_REPLY_FDS)];
			struct cmsghdr align;
		} cm;
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < cnt; i++) {
				int got;
				memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (r->master < 0)
					r->master = got;
				else
					close(got), r->extra_fds++;
			}
		}
		if (n <= 0) {
			r->eof = true;
			continue;
		}
		if (frame_decoder_feed(&r->dec, buf, (size_t)n, on_frame, r) < 0)
			r->bad = true;
	}
}

static int open_null(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* Read from fd (non-blocking or not) until needle shows up, bounded. */
static bool read_until(int fd, const char *needle, int ms)
{
	char buf[8192];
	size_t len = 0;
	int64_t end = now_ms() + ms;
	while (now_ms() < end) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 100) <= 0)
			continue;
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			return false;
		len += (size_t)n;
		buf[len] = 0;
		if (strstr(buf, needle))
			return true;
		if (len > sizeof(buf) / 2) { /* keep the tail */
			memmove(buf, buf + len - 256, 256);
			len = 256;
		}
	}
	return false;
}

/* `tether exec --socket SOCK -- ARGV...` with /dev/null stdio: its exit
 * status, or -1 when it did not finish within ms (then killed). */
static int run_tether_exec_at(const char *sock, char *const *argv, int ms)
{
	char tether[600];
	snprintf(tether, sizeof(tether), "%s/tether", T.bin);
	char *full[16] = { tether, "exec", "--socket", (char *)sock, "--" };
	size_t k = 5;
	for (size_t i = 0; argv[i] && k < 15; i++)
		full[k++] = argv[i];
	full[k] = NULL;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0), dup2(nul, 1);
		execv(tether, full);
		_exit(127);
	}
	int64_t end = now_ms() + ms;
	int st;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(10 * 1000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run_tether_exec(char *const *argv, int ms)
{
	return run_tether_exec_at(T.sock, argv, ms);
}

/* A refusal: an ExecData line containing word, ExecExited 125 (when
 * want_exited), then the close; nothing spawned. */
static void expect_refusal(int fd, const char *word, bool want_exited)
{
	struct reply r;
	reply_init(&r);
	bool eof = read_reply(fd, &r, UNTIL_EOF, 3000);
	if (!eof || !strstr(r.err, word))
		fprintf(stderr, "refusal: eof %d, message \"%s\", want \"%s\"\n", eof, r.err, word);
	assert_true(eof);
	assert_false(r.started);
	assert_false(r.bad);
	assert_non_null(strstr(r.err, word));
	if (want_exited) {
		assert_true(r.exited);
		assert_int_equal(r.code, 125);
	}
	reply_free(&r);
}

/* proc-supervisor --exec-socket sock [--status-socket status] with stdout
 * and stderr on errfd, entrypoint `sleep 60`. */
static pid_t spawn_supervisor(const char *sock, const char *status, int errfd)
{
	char sup[600];
	snprintf(sup, sizeof(sup), "%s/proc-supervisor", T.bin);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	int nul = open("/dev/null", O_RDONLY);
	dup2(nul, 0), dup2(errfd, 1), dup2(errfd, 2);
	/* Nothing of ours beyond stdio (the baseline is the daemon's). */
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	if (status)
		execl(sup, sup, "--exec-socket", sock, "--status-socket", status, "--audit", T.audit, "--grace", "1",
		      "--", "sleep", "60", (char *)NULL);
	else
		execl(sup, sup, "--exec-socket", sock, "--grace", "1", "--", "sleep", "60", (char *)NULL);
	_exit(127);
}

/* ---- setup ---- */

static int group_setup(void **st)
{
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_watchdog);
	alarm(WATCHDOG_S);
	const char *b = getenv("TETHER_BIN");
	if (!b) {
		fprintf(stderr, "TETHER_BIN not set\n");
		return -1;
	}
	snprintf(T.bin, sizeof(T.bin), "%s", b);
	char sup[600], tether[600];
	snprintf(sup, sizeof(sup), "%s/proc-supervisor", T.bin);
	snprintf(tether, sizeof(tether), "%s/tether", T.bin);
	if (access(sup, X_OK) || access(tether, X_OK)) {
		fprintf(stderr, "FAIL: %s or %s is not built\n", sup, tether);
		return -1;
	}
	strcpy(T.dir, "/tmp/tt-gwh.XXXXXX");
	if (!mkdtemp(T.dir))
		return -1;
	snprintf(T.sock, sizeof(T.sock), "%s/exec", T.dir);
	snprintf(T.status, sizeof(T.status), "%s/status", T.dir);
	snprintf(T.log, sizeof(T.log), "%s/log", T.dir);
	snprintf(T.audit, sizeof(T.audit), "%s/audit", T.dir);
	int lf = open(T.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	pid_t pid = spawn_supervisor(T.sock, T.status, lf);
	close(lf);
	if (pid < 0)
		return -1;
	T.sup = pid;
	int64_t end = now_ms() + 10000;
	while ((access(T.sock, F_OK) || access(T.status, F_OK)) && now_ms() < end && sup_alive())
		usleep(20 * 1000);
	if (access(T.sock, F_OK) || access(T.status, F_OK)) {
		fprintf(stderr, "proc-supervisor did not start\n");
		return -1;
	}
	/* Warm up (lazily opened state, if any), then the baseline. */
	char *argv[] = { "/bin/true", NULL };
	if (run_tether_exec(argv, 10000) != 0) {
		fprintf(stderr, "warm-up tether exec failed\n");
		return -1;
	}
	if (wait_no_sessions(5000) != 0 || wait_children(1, 5000) != 1)
		return -1;
	usleep(200 * 1000);
	T.base_fds = sup_fd_count();
	fprintf(stderr, "supervisor %d: baseline %d fds\n", (int)T.sup, T.base_fds);
	return T.base_fds > 0 ? 0 : -1;
}

static int group_teardown(void **st)
{
	if (T.sup > 0) {
		kill(T.sup, SIGTERM);
		int64_t end = now_ms() + 5000;
		int s;
		while (waitpid(T.sup, &s, WNOHANG) == 0 && now_ms() < end)
			usleep(20 * 1000);
		kill(T.sup, SIGKILL);
		waitpid(T.sup, &s, WNOHANG);
		T.sup = -1;
	}
	if (T.sup2 > 0) {
		kill(T.sup2, SIGKILL);
		waitpid(T.sup2, NULL, 0);
		T.sup2 = -1;
	}
	if (getenv("GWH_KEEP")) {
		fprintf(stderr, "kept %s\n", T.dir);
		return 0;
	}
	char lp[160];
	snprintf(lp, sizeof(lp), "%s/listen", T.dir); /* left by a failed t_wrong_kind_fds */
	unlink(lp);
	snprintf(lp, sizeof(lp), "%s/exec2", T.dir); /* and t_log_flood */
	unlink(lp);
	unlink(T.sock), unlink(T.status), unlink(T.log), unlink(T.audit);
	rmdir(T.dir);
	return 0;
}

/* ---- 1. silence: dropped after the request timeout, the cap holds ---- */

static void t_silent_clients(void **st)
{
	/* GW_CAP clients that never send a byte hold every slot: one more is
	 * refused with a message, and all are dropped (closed, nothing
	 * written) after the handshake timeout, not before. */
	int fds[GW_CAP];
	int64_t t0 = now_ms();
	for (int i = 0; i < GW_CAP; i++)
		fds[i] = dial();
	/* The gateway accepts asynchronously; its fd count shows them held. */
	int64_t end = now_ms() + 3000;
	while (sup_fd_count() < T.base_fds + GW_CAP && now_ms() < end)
		usleep(20 * 1000);
	assert_true(sup_fd_count() >= T.base_fds + GW_CAP);
	int over = dial();
	expect_refusal(over, "too many sessions", false);
	close(over);

	int dropped = 0;
	int64_t first = 0, last = 0;
	bool got_bytes = false;
	for (int i = 0; i < GW_CAP; i++) {
		struct reply r;
		reply_init(&r);
		bool eof = read_reply(fds[i], &r, UNTIL_EOF, (int)(t0 + HANDSHAKE_MS + 5000 - now_ms()));
		if (eof) {
			int64_t t = now_ms() - t0;
			if (!first)
				first = t;
			last = t;
			dropped++;
		}
		got_bytes |= r.started || r.exited || r.err[0];
		reply_free(&r);
		close(fds[i]);
	}
	fprintf(stderr, "silent clients: %d of %d dropped, first after %lld ms, last after %lld ms\n", dropped,
		GW_CAP, (long long)first, (long long)last);
	assert_int_equal(dropped, GW_CAP);
	assert_false(got_bytes);
	assert_true(first >= HANDSHAKE_MS - 200);
	assert_true(last <= HANDSHAKE_MS + 4000);
	assert_settled("silent clients");
	/* The slots are free again. */
	char *argv[] = { "/bin/true", NULL };
	assert_int_equal(run_tether_exec(argv, 10000), 0);
	assert_settled("exec after silent clients");
}

/* ---- 2. broken first frames (those not in test_gw_unit.c) ---- */

static void t_truncated_then_close(void **st)
{
	/* Most of a real ExecRequest with its 3 fds, then close: the fds that
	 * arrived must be closed with the half session. */
	char *argv[] = { "/bin/sh", "-c", "echo TRUNCATED", NULL };
	struct ctl_msg m = exec_req(argv, false);
	uint8_t *buf;
	size_t len;
	assert_int_equal(ctl_encode(&m, &buf, &len), 0);
	int nul = open_null();
	int three[3] = { nul, nul, nul };
	int fd = dial();
	assert_int_equal(send_all(fd, buf, len - 5, three, 3, 2000), 0);
	free(buf);
	/* Let the gateway take the prefix and the fds before the close. */
	int64_t end = now_ms() + 2000;
	while (sup_fd_count() < T.base_fds + 4 && now_ms() < end) /* socket, 3 fds (+ pidfd) */
		usleep(10 * 1000);
	assert_true(sup_fd_count() >= T.base_fds + 4);
	close(fd);
	close(nul);
	/* The close is seen at once, not at the 5 s timeout. */
	int64_t t0 = now_ms();
	assert_int_equal(wait_fds(T.base_fds, 3000), T.base_fds);
	assert_true(now_ms() - t0 < 3000);
	assert_int_equal(audit_session_pid("echo TRUNCATED"), 0);
	assert_settled("truncated frame");
}

static void t_not_an_exec_request(void **st)
{
	/* Well-formed frames of other kinds as the first message. */
	struct ctl_msg msgs[4] = {
		{ .kind = CTL_HELLO },
		{ .kind = CTL_EXEC_RESIZE },
		{ .kind = CTL_EXEC_SIGNAL },
		{ .kind = CTL_EXEC_EXITED },
	};
	strcpy(msgs[0].u.hello.role, "proc");
	strcpy(msgs[0].u.hello.software, "x");
	msgs[1].u.exec_resize.rows = 10, msgs[1].u.exec_resize.cols = 10;
	msgs[2].u.exec_signal.signo = SIGKILL;
	for (int i = 0; i < 4; i++) {
		int nul = open_null();
		int three[3] = { nul, nul, nul };
		int fd = dial();
		assert_int_equal(send_msg(fd, &msgs[i], three, 3), 0);
		close(nul);
		expect_refusal(fd, "must be an ExecRequest", true);
		close(fd);
	}
	/* A PTY request must carry no fds. */
	char *argv[] = { "/bin/true", NULL };
	struct ctl_msg m = exec_req(argv, true);
	int nul = open_null();
	int three[3] = { nul, nul, nul };
	int fd = dial();
	assert_int_equal(send_msg(fd, &m, three, 3), 0);
	close(nul);
	expect_refusal(fd, "exactly 3 fds", true);
	close(fd);
	assert_settled("non-ExecRequest first frames");
}

static void t_request_then_garbage(void **st)
{
	/* A valid request and, in the same write, bytes that are no frame:
	 * the session starts, the garbage closes the connection, and that
	 * kills the session's group. */
	char *argv[] = { "sleep", "31", NULL };
	struct ctl_msg m = exec_req(argv, false);
	uint8_t *buf;
	size_t len;
	assert_int_equal(ctl_encode(&m, &buf, &len), 0);
	uint8_t *all = malloc(len + 9);
	memcpy(all, buf, len);
	memcpy(all + len, "\0\0\0\5\xff\xfe\xfd\xfc\xfb", 9);
	free(buf);
	int nul = open_null();
	int three[3] = { nul, nul, nul };
	int fd = dial();
	assert_int_equal(send_all(fd, all, len + 9, three, 3, 2000), 0);
	free(all);
	close(nul);
	struct reply r;
	reply_init(&r);
	assert_true(read_reply(fd, &r, UNTIL_EOF, 5000));
	assert_true(r.started);
	assert_true(r.pid > 0);
	assert_true(wait_gone(r.pid, 3000));
	reply_free(&r);
	close(fd);
	assert_settled("request then garbage");
}

/* ---- 3. fds: too many, wrong kinds, smuggled later ---- */

static void t_too_many_fds(void **st)
{
	/* 4 fds (all received by the gateway, the 4th closed by it) and 60
	 * (more than its control buffer: the kernel truncates, MSG_CTRUNC). */
	size_t counts[] = { 4, 60, 253 };
	for (size_t k = 0; k < 3; k++) {
		int fds[253];
		for (size_t i = 0; i < counts[k]; i++)
			fds[i] = open_null();
		char *argv[] = { "/bin/sh", "-c", "echo TOO_MANY", NULL };
		struct ctl_msg m = exec_req(argv, false);
		int fd = dial();
		assert_int_equal(send_msg(fd, &m, fds, counts[k]), 0);
		for (size_t i = 0; i < counts[k]; i++)
			close(fds[i]);
		expect_refusal(fd, "exactly 3 fds", true);
		close(fd);
		assert_int_equal(wait_fds(T.base_fds, 3000), T.base_fds);
	}
	assert_int_equal(audit_session_pid("echo TOO_MANY"), 0);
	assert_settled("too many fds");
}

static void t_wrong_kind_fds(void **st)
{
	/* A directory, a listening socket, an O_PATH fd, and the session's
	 * own connection as stdio: a working session or a refusal, but an
	 * answer, a close, and no descriptor kept. */
	int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int lst = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/listen", T.dir);
	assert_int_equal(bind(lst, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lst, 1), 0);
	int opath = open("/etc/passwd", O_PATH | O_CLOEXEC);
	assert_true(dir >= 0 && opath >= 0);
	int nul = open_null();
	struct {
		const char *what;
		int fds[3];
		bool self; /* fds[0] := the connection itself */
	} cases[] = {
		{ "dir/listen/O_PATH as 0/1/2", { dir, lst, opath }, false },
		{ "O_PATH/dir/listen as 0/1/2", { opath, dir, lst }, false },
		{ "listen as 0, O_PATH as 1, dir as 2", { lst, opath, dir }, false },
		{ "the connection itself as stdin", { -1, nul, nul }, true },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[] = { "/bin/sh", "-c", "exit 3", NULL };
		struct ctl_msg m = exec_req(argv, false);
		int fd = dial();
		if (cases[i].self)
			cases[i].fds[0] = fd;
		assert_int_equal(send_msg(fd, &m, cases[i].fds, 3), 0);
		struct reply r;
		reply_init(&r);
		bool ok = read_reply(fd, &r, UNTIL_EXITED, 5000);
		fprintf(stderr, "%s: %s, exit %d%s%s", cases[i].what, r.started ? "ran" : "refused", r.code,
			r.err[0] ? ", " : "\n", r.err);
		assert_true(ok);
		assert_false(r.bad);
		/* ran with the child's own status, or refused with a message */
		if (r.started)
			assert_int_equal(r.code, 3);
		else
			assert_true(r.code >= 125 && r.err[0]);
		reply_free(&r);
		close(fd);
		assert_int_equal(wait_fds(T.base_fds, 6000), T.base_fds);
	}
	close(dir), close(lst), close(opath), close(nul);
	unlink(sa.sun_path);
	assert_settled("wrong-kind fds");
}

/* ---- 4. more sessions than the cap ---- */

static void t_over_cap(void **st)
{
	/* GW_CAP running sessions, each waiting on a pipe we hold; 3 more are
	 * refused with a message; closing the pipes lets every one exit with
	 * its own status. */
	int conn[GW_CAP], wr[GW_CAP];
	pid_t pids[GW_CAP];
	int nul = open_null();
	char *argv[] = { "/bin/sh", "-c", "read x; exit 5", NULL };
	struct ctl_msg m = exec_req(argv, false);
	for (int i = 0; i < GW_CAP; i++) {
		int p[2];
		assert_int_equal(pipe2(p, O_CLOEXEC), 0);
		wr[i] = p[1];
		conn[i] = dial();
		int three[3] = { p[0], nul, nul };
		assert_int_equal(send_msg(conn[i], &m, three, 3), 0);
		close(p[0]);
	}
	for (int i = 0; i < GW_CAP; i++) {
		struct reply r;
		reply_init(&r);
		bool ok = read_reply(conn[i], &r, UNTIL_STARTED, 10000);
		if (!ok)
			fprintf(stderr, "session %d: not started (%s)\n", i, r.err);
		assert_true(ok);
		pids[i] = r.pid;
		reply_free(&r);
	}
	assert_int_equal(live_sessions(), GW_CAP);
	for (int k = 0; k < 3; k++) {
		int fd = dial();
		int three[3] = { nul, nul, nul };
		(void)send_msg(fd, &m, three, 3); /* may race the refusal's close */
		expect_refusal(fd, "too many sessions", false);
		close(fd);
	}
	assert_int_equal(live_sessions(), GW_CAP);
	for (int i = 0; i < GW_CAP; i++)
		close(wr[i]);
	int fives = 0;
	for (int i = 0; i < GW_CAP; i++) {
		struct reply r;
		reply_init(&r);
		if (read_reply(conn[i], &r, UNTIL_EXITED, 10000) && r.code == 5)
			fives++;
		reply_free(&r);
		close(conn[i]);
	}
	close(nul);
	assert_int_equal(fives, GW_CAP);
	for (int i = 0; i < GW_CAP; i++)
		assert_true(wait_gone(pids[i], 3000));
	assert_settled("sessions over the cap");
}

/* ---- 5. disconnects not in test_gw_exec.sh ---- */

/* Field n (1-based, after the comm) of /proc/pid/stat, -1 if gone. */
static long stat_field(pid_t pid, int n)
{
	char p[64], buf[1024];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return -1;
	size_t len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = 0;
	char *q = strrchr(buf, ')');
	if (!q)
		return -1;
	q += 2; /* field 3, the state */
	for (int i = 3; i < n; i++) {
		q = strchr(q, ' ');
		if (!q)
			return -1;
		q++;
	}
	return strtol(q, NULL, 10);
}

/* A session running script (which prints "BG=<pid>" of a background
 * member) whose client goes mid-session: the leader and that member must
 * be gone. other_pgrp: the member is in a process group of its own (job
 * control), still in the session. */
static void disconnect_case(const char *script, bool pty, bool other_pgrp)
{
	char *argv[] = { "/bin/sh", "-c", (char *)script, NULL };
	struct ctl_msg m = exec_req(argv, pty);
	int out[2] = { -1, -1 };
	int fd = dial();
	if (pty)
		assert_int_equal(send_msg(fd, &m, NULL, 0), 0);
	else {
		assert_int_equal(pipe2(out, O_CLOEXEC), 0);
		int nul = open_null();
		int three[3] = { nul, out[1], nul };
		assert_int_equal(send_msg(fd, &m, three, 3), 0);
		close(nul), close(out[1]);
	}
	struct reply r;
	reply_init(&r);
	assert_true(read_reply(fd, &r, UNTIL_STARTED, 5000));
	int src = pty ? r.master : out[0];
	assert_true(src >= 0);
	char buf[512] = { 0 };
	size_t len = 0;
	int64_t end = now_ms() + 5000;
	pid_t bg = 0;
	while (!bg && now_ms() < end) {
		struct pollfd pf = { .fd = src, .events = POLLIN };
		if (poll(&pf, 1, 100) <= 0)
			continue;
		ssize_t n = read(src, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		char *p = strstr(buf, "BG=");
		if (p && strchr(p, '\n'))
			bg = (pid_t)atoi(p + 3);
	}
	assert_true(bg > 0);
	pid_t lead = r.pid;
	assert_false(pid_gone(lead));
	/* the member may still be between fork and setpgid */
	end = now_ms() + 2000;
	while (other_pgrp && stat_field(bg, 5) == lead && now_ms() < end)
		usleep(10 * 1000);
	long pgrp = stat_field(bg, 5), sid = stat_field(bg, 6);
	fprintf(stderr, "%s session %d: member %d in pgrp %ld, session %ld\n", pty ? "pty" : "non-pty", (int)lead,
		(int)bg, pgrp, sid);
	assert_int_equal(sid, lead);
	if (other_pgrp)
		assert_true(pgrp != lead);
	else
		assert_int_equal(pgrp, lead);
	reply_free(&r); /* closes the master */
	if (out[0] >= 0)
		close(out[0]);
	close(fd);
	bool lead_gone = wait_gone(lead, 3000), bg_gone = wait_gone(bg, 3000);
	if (!bg_gone) {
		fprintf(stderr, "session member %d (pgrp %ld) survived the disconnect\n", (int)bg, pgrp);
		kill(bg, SIGKILL); /* ours to clean up: it is the test's session */
	}
	assert_true(lead_gone);
	assert_true(bg_gone);
	assert_settled("disconnect");
}

static void t_pty_disconnect(void **st)
{
	/* The supervisor holds a copy of the master; the client goes. */
	disconnect_case("sleep 32 & echo BG=$!; wait", true, false);
}

static void t_disconnect_job_control(void **st)
{
	/* A shell with job control (every interactive shell on a PTY, so
	 * every `tether exec --ssh` login) puts each job in a process group
	 * of its own: killing the leader's group alone leaves them running. */
	disconnect_case("set -m; sleep 35 & echo BG=$!; wait", true, true);
	disconnect_case("perl -e 'setpgrp(0, 0); sleep 36' & echo BG=$!; wait", false, true);
}

static void t_disconnect_before_started(void **st)
{
	/* The client sends its request and is gone before ExecStarted: the
	 * session was spawned (audit) and is killed when the answer fails. */
	char *argv[] = { "sleep", "33", NULL };
	struct ctl_msg m = exec_req(argv, false);
	int nul = open_null();
	int three[3] = { nul, nul, nul };
	int fd = dial();
	assert_int_equal(send_msg(fd, &m, three, 3), 0);
	close(fd);
	close(nul);
	pid_t pid = 0;
	int64_t end = now_ms() + 5000;
	while (!(pid = audit_session_pid("33")) && now_ms() < end)
		usleep(20 * 1000);
	assert_true(pid > 0);
	assert_true(wait_gone(pid, 3000));
	assert_settled("disconnect before ExecStarted");
}

/* ---- 6. PTY resize flood, fds smuggled on later frames ---- */

static void t_pty_resize_flood(void **st)
{
	char *argv[] = { "/bin/sh", "-c", "read x; stty size; exit 6", NULL };
	struct ctl_msg m = exec_req(argv, true);
	int fd = dial();
	assert_int_equal(send_msg(fd, &m, NULL, 0), 0);
	struct reply r;
	reply_init(&r);
	assert_true(read_reply(fd, &r, UNTIL_STARTED, 5000));
	assert_true(r.master >= 0);
	usleep(200 * 1000);
	int during = sup_fd_count();

	/* 10000 resizes in as few writes as the socket takes, the last 33x77. */
	enum { FLOOD = 10000 };
	size_t cap = 64 * FLOOD, len = 0;
	uint8_t *all = malloc(cap);
	for (int i = 0; i < FLOOD; i++) {
		struct ctl_msg z = { .kind = CTL_EXEC_RESIZE };
		z.u.exec_resize.rows = i == FLOOD - 1 ? 33 : (uint16_t)(10 + i % 50);
		z.u.exec_resize.cols = i == FLOOD - 1 ? 77 : (uint16_t)(20 + i % 100);
		uint8_t *b;
		size_t bl;
		assert_int_equal(ctl_encode(&z, &b, &bl), 0);
		assert_true(len + bl <= cap);
		memcpy(all + len, b, bl);
		len += bl;
		free(b);
	}
	int64_t t0 = now_ms();
	assert_int_equal(send_all(fd, all, len, NULL, 0, 10000), 0);
	free(all);
	/* 10 more resizes, each with 60 fds attached: the conn reads with
	 * read(2), so the kernel discards them; none may stay in the daemon. */
	int many[60];
	for (int i = 0; i < 60; i++)
		many[i] = open_null();
	for (int i = 0; i < 10; i++) {
		struct ctl_msg z = { .kind = CTL_EXEC_RESIZE };
		z.u.exec_resize.rows = 33, z.u.exec_resize.cols = 77;
		assert_int_equal(send_msg(fd, &z, many, 60), 0);
	}
	for (int i = 0; i < 60; i++)
		close(many[i]);
	/* The daemon stays responsive meanwhile. */
	char *tv[] = { "/bin/true", NULL };
	assert_int_equal(run_tether_exec(tv, 10000), 0);
	int64_t flood_ms = now_ms() - t0;
	fprintf(stderr, "resize flood: %d frames (%zu bytes) sent and a /bin/true session run in %lld ms\n",
		FLOOD + 10, len, (long long)flood_ms);
	assert_true(flood_ms < 10000);
	/* Still running, sized by the last resize, and exits with its status. */
	assert_false(pid_gone(r.pid));
	assert_int_equal(wait_fds(during, 3000), during);
	assert_int_equal(write(r.master, "go\n", 3), 3);
	assert_true(read_until(r.master, "33 77", 5000));
	assert_true(read_reply(fd, &r, UNTIL_EXITED, 5000));
	assert_int_equal(r.code, 6);
	assert_false(r.bad);
	reply_free(&r);
	close(fd);
	assert_settled("PTY resize flood");
}

/* ---- a flood of refusals with a stalled log reader ---- */

static void t_log_flood(void **st)
{
	/* A second supervisor whose stderr is a pipe nobody reads (a log
	 * collector that fell behind), its socket reachable by uid 65534,
	 * which is not allowed: each connection is refused with a line to the
	 * client. 2000 of them must neither stall the refusals nor the daemon
	 * (a line per refusal filled the pipe after ~880 and blocked the loop
	 * in write(2)). */
	char sock[160];
	snprintf(sock, sizeof(sock), "%s/exec2", T.dir);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	T.sup2 = spawn_supervisor(sock, NULL, p[1]);
	close(p[1]);
	assert_true(T.sup2 > 0);
	int64_t end = now_ms() + 10000;
	while (access(sock, F_OK) && now_ms() < end)
		usleep(20 * 1000);
	assert_int_equal(access(sock, F_OK), 0);
	assert_int_equal(chmod(T.dir, 0711), 0);
	assert_int_equal(chmod(sock, 0666), 0);

	enum { N = 2000 };
	pid_t fl = fork();
	assert_true(fl >= 0);
	if (fl == 0) {
		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
			_exit(3);
		for (int i = 0; i < N; i++) {
			int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			struct timeval tv = { .tv_sec = 2 };
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			strcpy(sa.sun_path, sock);
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
				_exit(4);
			char buf[512];
			ssize_t n, got = 0;
			while ((n = read(fd, buf, sizeof(buf))) > 0)
				got += n;
			if (n < 0 || got == 0) { /* timed out: the daemon stalled */
				fprintf(stderr, "refusal %d: %s\n", i, n < 0 ? strerror(errno) : "no line");
				_exit(1);
			}
			close(fd);
		}
		_exit(0);
	}
	int64_t t0 = now_ms();
	int wst = 0;
	while (waitpid(fl, &wst, WNOHANG) == 0) {
		if (now_ms() - t0 > 20000) {
			kill(fl, SIGKILL);
			waitpid(fl, &wst, 0);
			break;
		}
		usleep(20 * 1000);
	}
	fprintf(stderr, "%d refused connections: flooder %s %d after %lld ms\n", N,
		WIFEXITED(wst) ? "exit" : "signal", WIFEXITED(wst) ? WEXITSTATUS(wst) : WTERMSIG(wst),
		(long long)(now_ms() - t0));
	bool flood_ok = WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
	char *argv[] = { "/bin/true", NULL };
	int rc = run_tether_exec_at(sock, argv, 5000);
	/* What reached the pipe: a few lines, not one per refusal. */
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	char buf[65536 + 1];
	ssize_t n = read(p[0], buf, sizeof(buf) - 1);
	int lines = 0;
	for (ssize_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	fprintf(stderr, "its stderr: %d lines (%zd bytes)\n", lines, n);
	/* Stop it: the closed pipe unblocks a write stuck on it first. */
	close(p[0]);
	kill(T.sup2, SIGTERM);
	end = now_ms() + 5000;
	while (waitpid(T.sup2, &wst, WNOHANG) == 0 && now_ms() < end)
		usleep(20 * 1000);
	if (now_ms() >= end) {
		kill(T.sup2, SIGKILL);
		waitpid(T.sup2, &wst, 0);
	}
	T.sup2 = -1;
	chmod(T.dir, 0700);
	unlink(sock);
	assert_true(flood_ok);
	assert_int_equal(rc, 0);
	assert_true(lines < 50);
	assert_true(sup_alive());
}

/* ---- after all cases ---- */

static void t_still_serving(void **st)
{
	assert_true(sup_alive());
	char *argv[] = { "/bin/true", NULL };
	assert_int_equal(run_tether_exec(argv, 10000), 0);
	assert_settled("the final tether exec");
}

static void t_clean_shutdown(void **st)
{
	/* SIGTERM: the supervisor ends within its grace, by itself (no crash
	 * signal), and its log has no sanitizer report (ASan/UBSan builds;
	 * LeakSanitizer runs at this exit). */
	assert_true(sup_alive());
	kill(T.sup, SIGTERM);
	int64_t end = now_ms() + 10000;
	int wst = 0;
	pid_t r;
	while ((r = waitpid(T.sup, &wst, WNOHANG)) == 0 && now_ms() < end)
		usleep(20 * 1000);
	assert_int_equal(r, T.sup);
	T.sup = -1;
	fprintf(stderr, "supervisor ended: %s %d\n", WIFEXITED(wst) ? "exit" : "signal",
		WIFEXITED(wst) ? WEXITSTATUS(wst) : WTERMSIG(wst));
	assert_true(WIFEXITED(wst));
	FILE *f = fopen(T.log, "re");
	assert_non_null(f);
	char *line = NULL;
	size_t cap = 0;
	int reports = 0;
	while (getline(&line, &cap, f) > 0)
		if (strstr(line, "ERROR: AddressSanitizer") || strstr(line, "ERROR: LeakSanitizer") ||
		    strstr(line, "runtime error:")) {
			fprintf(stderr, "supervisor log: %s", line);
			reports++;
		}
	free(line);
	fclose(f);
	assert_int_equal(reports, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_silent_clients),
		cmocka_unit_test(t_truncated_then_close),
		cmocka_unit_test(t_not_an_exec_request),
		cmocka_unit_test(t_request_then_garbage),
		cmocka_unit_test(t_too_many_fds),
		cmocka_unit_test(t_wrong_kind_fds),
		cmocka_unit_test(t_over_cap),
		cmocka_unit_test(t_pty_disconnect),
		cmocka_unit_test(t_disconnect_job_control),
		cmocka_unit_test(t_disconnect_before_started),
		cmocka_unit_test(t_pty_resize_flood),
		cmocka_unit_test(t_log_flood),
		cmocka_unit_test(t_still_serving),
		cmocka_unit_test(t_clean_shutdown),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
