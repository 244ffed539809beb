/* tether exec: ask a running proc-supervisor's exec gateway to spawn a
 * command as its own child (docs/exec-gateway.md).
 *
 * Non-PTY: our stdio fds travel to the gateway by SCM_RIGHTS and become the
 * child's; we only wait for ExecExited (forwarding INT/TERM/HUP/QUIT as
 * ExecSignal). PTY: the gateway allocates the pty and hands us the master
 * with ExecStarted; we relay stdin -> master -> stdout ourselves (our
 * terminal raw meanwhile) and send ExecResize on SIGWINCH. Exit status: the
 * child's, 128+N for signal N, 126/127 exec errors, 125 our own failure. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/fdpass.h"
#include "common/util.h"
#include "policy/policy.h"
#include "proto/frame.h"
#include "proto/message.h"

extern char **environ;

static int sig_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	unsigned char b = (unsigned char)sig;
	int saved = errno;
	if (write(sig_pipe[1], &b, 1) < 0) {
		/* full pipe: the signal is already pending there */
	}
	errno = saved;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: tether exec --socket PATH [--pty] [--cwd DIR] [--policy FILE] -- CMD [ARG...]\n"
		"       tether exec --socket PATH --ssh [--policy FILE]\n\n"
		"Run CMD as a child of the proc-supervisor listening on PATH (its exec\n"
		"gateway), with this terminal's stdio, or a PTY the supervisor allocates.\n"
		"--ssh is for sshd's ForceCommand: it runs $SSH_ORIGINAL_COMMAND through\n"
		"the shell's -c, or a login shell when there is none, with a PTY when\n"
		"stdin is a terminal. The shell: the policy's exec.shell (--policy FILE,\n"
		"else the supervisor's policy), else the user's passwd entry, else /bin/sh.\n"
		"Exit status: CMD's own (128+N on signal N); 126/127 exec errors; 125 when\n"
		"tether itself failed.\n");
}

static int send_msg(int fd, const struct ctl_msg *m, const int *fds, size_t n_fds)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len;
	int r = ctl_encode(m, &buf, &len);
	if (r < 0)
		return r;
	size_t off = 0;
	while (off < len) {
		/* the descriptors ride on the first bytes only */
		ssize_t n = fdpass_send_fds(fd, buf + off, len - off, fds, off ? 0 : n_fds, 0);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return (int)n;
		off += (size_t)n;
	}
	return 0;
}

static int read_full(int fd, uint8_t *p, size_t n, int *passed_fd)
{
	size_t got = 0;
	while (got < n) {
		union {
			char b[CMSG_SPACE(sizeof(int) * 4)];
			struct cmsghdr align;
		} cm;
		struct iovec iov = { .iov_base = p + got, .iov_len = n - got };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < cnt; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (passed_fd && *passed_fd < 0)
					*passed_fd = f;
				else
					close(f);
			}
		}
		if (r == 0)
			return -EPIPE;
		got += (size_t)r;
	}
	return 0;
}

/* One whole frame (the gateway sends whole frames). */
static int read_msg(int fd, struct ctl_msg *m, int *passed_fd)
{
	uint8_t hdr[PROTO_FRAME_PREFIX];
	int r = read_full(fd, hdr, sizeof(hdr), passed_fd);
	if (r < 0)
		return r;
	uint32_t len = ((uint32_t)hdr[0] << 24) | ((uint32_t)hdr[1] << 16) | ((uint32_t)hdr[2] << 8) | hdr[3];
	if (len == 0 || len > PROTO_MAX_FRAME)
		return -EBADMSG;
	_cleanup_free_ uint8_t *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	r = read_full(fd, buf, len, passed_fd);
	if (r < 0)
		return r;
	return ctl_decode(buf, len, m);
}

static bool env_wanted(const char *e)
{
	return !strncmp(e, "TERM=", 5) || !strncmp(e, "LANG=", 5) || !strncmp(e, "LC_", 3);
}

static int exit_from(const struct ctl_msg *m)
{
	if (m->u.exec_exited.signal > 0)
		return 128 + m->u.exec_exited.signal;
	return m->u.exec_exited.exit_code;
}

struct session {
	int sock;
	int master;
	bool pty;
	bool stdin_open;
	bool raw;
	struct termios saved;
	int exit_code; /* -1 until ExecExited */
};

static void restore_tty(struct session *s)
{
	if (s->raw) {
		tcsetattr(STDIN_FILENO, TCSADRAIN, &s->saved);
		s->raw = false;
	}
}

static void send_resize(struct session *s)
{
	struct winsize ws;
	if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0)
		return;
	struct ctl_msg m = { .kind = CTL_EXEC_RESIZE };
	m.u.exec_resize.rows = ws.ws_row;
	m.u.exec_resize.cols = ws.ws_col;
	(void)send_msg(s->sock, &m, NULL, 0);
}

/* A message from the gateway: 1 when the session is over. */
static int handle_msg(struct session *s, struct ctl_msg *m)
{
	switch (m->kind) {
	case CTL_EXEC_DATA:
		(void)write_all(m->u.exec_data.stream == 1 ? STDOUT_FILENO : STDERR_FILENO, m->u.exec_data.data,
				m->u.exec_data.len);
		return 0;
	case CTL_EXEC_EXITED:
		s->exit_code = exit_from(m);
		return 1;
	default:
		fprintf(stderr, "tether exec: unexpected %s from the gateway\n", ctl_kind_name(m->kind));
		return -EBADMSG;
	}
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* PTY: drain what the child wrote before it exited (bounded). */
static void drain_master(struct session *s)
{
	uint64_t end = now_ms() + 1000;
	uint8_t buf[16384];
	while (s->master >= 0 && now_ms() < end) {
		struct pollfd p = { .fd = s->master, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			break;
		ssize_t n = read(s->master, buf, sizeof(buf));
		if (n <= 0)
			break;
		(void)write_all(STDOUT_FILENO, buf, (size_t)n);
	}
}

static int run_session(struct session *s)
{
	uint8_t buf[16384];
	for (;;) {
		struct pollfd p[4];
		int n = 0, i_sock, i_sig, i_in = -1, i_m = -1;
		i_sock = n;
		p[n++] = (struct pollfd){ .fd = s->sock, .events = POLLIN };
		i_sig = n;
		p[n++] = (struct pollfd){ .fd = sig_pipe[0], .events = POLLIN };
		if (s->pty && s->stdin_open) {
			i_in = n;
			p[n++] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
		}
		if (s->pty && s->master >= 0) {
			i_m = n;
			p[n++] = (struct pollfd){ .fd = s->master, .events = POLLIN };
		}
		int r = poll(p, (nfds_t)n, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (p[i_sig].revents & POLLIN) {
			unsigned char sig;
			while (read(sig_pipe[0], &sig, 1) == 1) {
				if (sig == SIGWINCH) {
					if (s->pty)
						send_resize(s);
					continue;
				}
				struct ctl_msg m = { .kind = CTL_EXEC_SIGNAL };
				m.u.exec_signal.signo = sig;
				(void)send_msg(s->sock, &m, NULL, 0);
			}
		}
		if (i_m >= 0 && (p[i_m].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t k = read(s->master, buf, sizeof(buf));
			if (k > 0)
				(void)write_all(STDOUT_FILENO, buf, (size_t)k);
			else if (k < 0 && errno == EIO) {
				/* every slave closed: the session's output is done */
				close(s->master);
				s->master = -1;
			}
		}
		if (i_in >= 0 && (p[i_in].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t k = read(STDIN_FILENO, buf, sizeof(buf));
			if (k > 0 && s->master >= 0)
				(void)write_all(s->master, buf, (size_t)k);
			else if (k <= 0) {
				/* Our stdin ended (ssh -tt with a closed input): a
				 * pty has no EOF of its own; send the terminal's EOF
				 * character once so a shell reading it ends. */
				s->stdin_open = false;
				if (s->master >= 0) {
					struct termios t;
					unsigned char eof = 4;
					if (tcgetattr(s->master, &t) == 0 && t.c_cc[VEOF])
						eof = t.c_cc[VEOF];
					(void)write_all(s->master, &eof, 1);
				}
			}
		}
		if (p[i_sock].revents & (POLLIN | POLLHUP | POLLERR)) {
			struct ctl_msg m;
			r = read_msg(s->sock, &m, NULL);
			if (r < 0) {
				fprintf(stderr, "tether exec: lost the gateway connection: %s\n",
					r == -EPIPE ? "closed" : strerror(-r));
				return r;
			}
			int done = handle_msg(s, &m);
			ctl_msg_clear(&m);
			if (done < 0)
				return done;
			if (done) {
				if (s->pty)
					drain_master(s);
				return 0;
			}
		}
	}
}

static int resolve_policy_shell(const char *policy_file, char *out, size_t size)
{
	struct policy_loader *l;
	struct policy_diag d = { { 0 } };
	int r = policy_loader_new(NULL, 0, &l, &d);
	if (r >= 0)
		r = policy_loader_add_file(l, POLICY_LAYER_COMMAND, policy_file, false, &d);
	struct policy *p = NULL;
	if (r >= 0)
		r = policy_loader_finish(l, &p);
	else
		policy_loader_free(l);
	if (r < 0) {
		fprintf(stderr, "tether exec: %s\n", d.msg[0] ? d.msg : strerror(-r));
		return -EINVAL;
	}
	out[0] = '\0';
	if (p->exec.shell)
		strscpy(out, p->exec.shell, size);
	policy_free(p);
	return 0;
}

int cmd_exec(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "pty", no_argument, NULL, 't' },
		{ "cwd", required_argument, NULL, 'C' },
		{ "ssh", no_argument, NULL, 'S' },
		{ "policy", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *sock_path = NULL, *cwd = NULL, *policy_file = NULL;
	bool pty = false, ssh = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+s:tC:Sp:h", opts, NULL)) != -1) {
		switch (c) {
		case 's': sock_path = optarg; break;
		case 't': pty = true; break;
		case 'C': cwd = optarg; break;
		case 'S': ssh = true; break;
		case 'p': policy_file = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!sock_path || (ssh && optind != argc) || (!ssh && optind >= argc)) {
		usage(stderr);
		return 2;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(sock_path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "tether exec: socket path too long\n");
		return 2;
	}
	strcpy(sa.sun_path, sock_path);

	/* argv: an explicit command, or (ssh) "" = the supervisor's login shell. */
	char shell[4096] = "";
	if (policy_file && resolve_policy_shell(policy_file, shell, sizeof(shell)) < 0)
		return 125;
	char *sshargv[4];
	char **cmd_argv = argv + optind;
	size_t cmd_argc = (size_t)(argc - optind);
	if (ssh) {
		const char *orig = getenv("SSH_ORIGINAL_COMMAND");
		size_t k = 0;
		/* "" means: resolved by the supervisor, in its own view of the
		 * file system (policy exec.shell, passwd, /bin/sh). */
		sshargv[k++] = shell;
		if (orig && orig[0]) {
			sshargv[k++] = "-c";
			sshargv[k++] = (char *)orig;
		} else if (shell[0])
			sshargv[k++] = "-l";
		sshargv[k] = NULL;
		cmd_argv = sshargv;
		cmd_argc = k;
		pty = isatty(STDIN_FILENO);
	}

	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "tether exec: cannot connect to %s: %s\n", sock_path, strerror(errno));
		if (sock >= 0)
			close(sock);
		return 125;
	}

	struct ctl_msg req = { .kind = CTL_EXEC_REQUEST };
	req.u.exec_request.argv = cmd_argv;
	req.u.exec_request.argc = cmd_argc;
	req.u.exec_request.cwd = (char *)cwd;
	req.u.exec_request.pty = pty;
	struct ctl_env_var env[64];
	size_t ne = 0;
	for (char **e = environ; *e && ne < ARRAY_SIZE(env); e++) {
		if (!env_wanted(*e))
			continue;
		char *eq = strchr(*e, '=');
		size_t nl = (size_t)(eq - *e);
		if (nl == 0 || nl > 255)
			continue;
		env[ne].name = strndup(*e, nl);
		env[ne].value = eq + 1;
		if (env[ne].name)
			ne++;
	}
	req.u.exec_request.env = env;
	req.u.exec_request.n_env = ne;
	struct winsize ws;
	if (pty && ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0) {
		req.u.exec_request.rows = ws.ws_row;
		req.u.exec_request.cols = ws.ws_col;
	}
	int stdio_fds[3] = { STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO };
	int r = send_msg(sock, &req, stdio_fds, pty ? 0 : 3);
	for (size_t i = 0; i < ne; i++)
		free(env[i].name);
	if (r < 0) {
		/* A refusing gateway answers and hangs up before reading: show
		 * what it said, if anything. */
		struct ctl_msg m;
		bool said = false;
		while (read_msg(sock, &m, NULL) == 0) {
			if (m.kind == CTL_EXEC_DATA) {
				(void)write_all(STDERR_FILENO, m.u.exec_data.data, m.u.exec_data.len);
				said = true;
			}
			ctl_msg_clear(&m);
		}
		if (!said)
			fprintf(stderr, "tether exec: sending the request: %s\n", strerror(-r));
		close(sock);
		return 125;
	}

	struct session s = { .sock = sock, .master = -1, .pty = pty, .stdin_open = true, .exit_code = -1 };
	/* The first answer: ExecStarted (with the pty master), or an error
	 * (ExecData on stderr, then ExecExited). */
	for (;;) {
		struct ctl_msg m;
		r = read_msg(sock, &m, &s.master);
		if (r < 0) {
			fprintf(stderr, "tether exec: the gateway closed the connection%s%s\n", r == -EPIPE ? "" : ": ",
				r == -EPIPE ? "" : strerror(-r));
			close(sock);
			return 125;
		}
		if (m.kind == CTL_EXEC_STARTED) {
			ctl_msg_clear(&m);
			break;
		}
		int done = handle_msg(&s, &m);
		ctl_msg_clear(&m);
		if (done) {
			close(sock);
			if (s.master >= 0)
				close(s.master);
			return done < 0 ? 125 : s.exit_code;
		}
	}
	if (pty && s.master < 0) {
		fprintf(stderr, "tether exec: the gateway sent no pty\n");
		close(sock);
		return 125;
	}

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		close(sock);
		return 125;
	}
	struct sigaction sa_sig = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
	sigemptyset(&sa_sig.sa_mask);
	int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH };
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++) {
		if (sigs[i] == SIGINT || sigs[i] == SIGQUIT) {
			/* In PTY mode the terminal is raw: ^C arrives as a byte and
			 * the remote pty turns it into SIGINT itself. */
			if (pty)
				continue;
		}
		sigaction(sigs[i], &sa_sig, NULL);
	}
	signal(SIGPIPE, SIG_IGN);
	if (pty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &s.saved) == 0) {
		struct termios raw = s.saved;
		cfmakeraw(&raw);
		if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) == 0)
			s.raw = true;
	}
	r = run_session(&s);
	restore_tty(&s);
	close(sock);
	if (s.master >= 0)
		close(s.master);
	if (r < 0 || s.exit_code < 0)
		return 125;
	return s.exit_code;
}
