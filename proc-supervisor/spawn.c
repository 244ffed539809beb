#include "proc-supervisor/spawn.h"

#include <errno.h>
#include <linux/capability.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <termios.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* The child ran instrumented code on this stack while sharing our memory
 * (and so ASan's shadow of it): clear the poison it left, or the next
 * spawn that gets the same mapping trips over stale redzones. */
#define STACK_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define STACK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#include <unistd.h>

#include "common/kernel.h"
#include "common/util.h"
#include "proc-supervisor/env_harden.h"
#include "proc-supervisor/landlock.h"


static const char *const default_env[] = { "PATH=/usr/bin:/bin", NULL };

char *const *spawn_build_env(void)
{
	/* The supervisor passes envb_build()'s result; this is only the floor
	 * for callers without a policy (tests, benchmarks). */
	return (char *const *)default_env;
}

void spawn_opts_init(struct spawn_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->stdio[0] = o->stdio[1] = o->stdio[2] = -1;
	o->tty_fd = -1;
	o->landlock_fd = -1;
	o->cgroup_fd = -1;
}

static int check_exec(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EACCES;
	if (access(path, X_OK) < 0)
		return -errno == -ENOENT ? -ENOENT : -EACCES;
	return 0;
}

int spawn_resolve(const char *prog, const char *path_list, char *out, size_t size)
{
	if (!prog || !*prog)
		return -ENOENT;
	if (strchr(prog, '/')) {
		if (strscpy(out, prog, size) < 0)
			return -ENAMETOOLONG;
		return check_exec(prog);
	}
	if (!path_list)
		path_list = "/usr/bin:/bin";
	int best = -ENOENT;
	for (const char *p = path_list;;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		/* An empty element means the current directory (POSIX). */
		int n = len ? snprintf(out, size, "%.*s/%s", (int)len, p, prog) : snprintf(out, size, "%s", prog);
		if (n > 0 && (size_t)n < size) {
			int r = check_exec(out);
			if (r == 0)
				return 0;
			if (r == -EACCES)
				best = -EACCES; /* keep looking; remember it existed */
		}
		if (!colon)
			break;
		p = colon + 1;
	}
	return best;
}

static const char *env_path(char *const *envp)
{
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			return *e + 5;
	return NULL;
}

/* ---- the child side: async-signal-safe only ---- */

enum child_step {
	STEP_SIGNALS = 1,
	STEP_SESSION,
	STEP_TTY,
	STEP_STDIO,
	STEP_CLOSE_FDS,
	STEP_CHDIR,
	STEP_PDEATHSIG,
	STEP_NO_NEW_PRIVS,
	STEP_RLIMIT_CORE,
	STEP_RLIMIT_NOFILE,
	STEP_CAPS,
	STEP_IDS,
	STEP_LANDLOCK,
	STEP_SECCOMP,
	STEP_SEND_LISTENER,
	STEP_EXECVE,
	STEP_EXEC_SCRIPT, /* path unreachable for the uid, and a #! script cannot run by fd */
};

static const char *step_name(int step)
{
	switch (step) {
	case STEP_SIGNALS: return "reset signals";
	case STEP_SESSION: return "setsid/setpgid";
	case STEP_TTY: return "controlling terminal";
	case STEP_STDIO: return "stdio";
	case STEP_CLOSE_FDS: return "close fds";
	case STEP_CHDIR: return "chdir";
	case STEP_PDEATHSIG: return "PR_SET_PDEATHSIG";
	case STEP_NO_NEW_PRIVS: return "PR_SET_NO_NEW_PRIVS";
	case STEP_RLIMIT_CORE: return "RLIMIT_CORE";
	case STEP_RLIMIT_NOFILE: return "RLIMIT_NOFILE";
	case STEP_CAPS: return "drop CAP_SYS_PTRACE";
	case STEP_IDS: return "setresuid/setresgid";
	case STEP_LANDLOCK: return "landlock";
	case STEP_SECCOMP: return "seccomp";
	case STEP_SEND_LISTENER: return "send listener";
	case STEP_EXECVE: return "execve";
	case STEP_EXEC_SCRIPT: return "execve";
	}
	return "?";
}

struct child_msg {
	int32_t kind; /* MSG_ERROR or MSG_LISTENER */
	int32_t step;
	int32_t err;
};
#define MSG_ERROR 1
#define MSG_LISTENER 2
#define MSG_CGROUP 3 /* step = 1 joined the sandbox cgroup, 0 not (err says why) */
#define MSG_EXEC_FD 4 /* the path was out of reach (err): exec by the fd next */

static _Noreturn void child_fail(int sock, int step, int err)
{
	struct child_msg m = { .kind = MSG_ERROR, .step = step, .err = err };
	(void)!write(sock, &m, sizeof(m));
	_exit(127);
}

static int drop_ptrace_cap(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	const unsigned bit = CAP_SYS_PTRACE; /* < 32: in d[0] */
	if (!(d[0].permitted & (1U << bit)) && !(d[0].inheritable & (1U << bit)))
		return 0; /* nothing to drop (an unprivileged supervisor) */
	/* The bounding set too, so no later exec of a file with caps regains it
	 * (no_new_privs already forbids that; this is belt and braces). */
	if (prctl(PR_CAPBSET_DROP, bit, 0, 0, 0) < 0 && errno != EPERM)
		return -errno;
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, bit, 0, 0);
	d[0].effective &= ~(1U << bit);
	d[0].permitted &= ~(1U << bit);
	d[0].inheritable &= ~(1U << bit);
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	return 0;
}

/* glibc refuses sigaction() for the signals it reserves (32, 33), yet a
 * disposition of those is inherited from whoever started us and an ignored
 * one survives execve. Read and set them with the raw syscall: kernel
 * sigaction layout {handler, flags, restorer, mask} on the architectures
 * we build for. -ENOSYS elsewhere. */
static int raw_sigaction(int sig, bool set, void (*handler)(int), void (**old)(int))
{
#if defined(__x86_64__) || defined(__aarch64__)
	struct ksigaction {
		void (*handler)(int);
		unsigned long flags;
		void (*restorer)(void);
		uint64_t mask;
	} ksa = { .handler = handler }, kold = { 0 };
	if (syscall(SYS_rt_sigaction, sig, set ? &ksa : NULL, old ? &kold : NULL, sizeof(ksa.mask)) < 0)
		return -errno;
	if (old)
		*old = kold.handler;
	return 0;
#else
	(void)sig, (void)set, (void)handler, (void)old;
	return -ENOSYS;
#endif
}

#define SIGBIT(s) (1ULL << ((s) - 1))

void spawn_sigconf_capture(struct spawn_sigconf *sc)
{
	memset(sc, 0, sizeof(*sc));
	for (int s = 1; s <= 64 && s < _NSIG; s++) {
		/* glibc's own signals (SIGCANCEL, SIGSETXID: 32 up to SIGRTMIN)
		 * belong to the C library, ours and the workload's: never handed
		 * down ignored (an ignored SIGCANCEL would break pthread_cancel
		 * in the workload). Under ASan their disposition read back as
		 * ignored. */
		if (s == SIGKILL || s == SIGSTOP || s == SIGCHLD || (s >= 32 && s < SIGRTMIN))
			continue;
		struct sigaction old;
		void (*h)(int) = SIG_DFL;
		if (sigaction(s, NULL, &old) == 0)
			h = old.sa_handler;
		else if (raw_sigaction(s, false, NULL, &h) < 0)
			continue;
		if (h == SIG_IGN)
			sc->ignored |= SIGBIT(s);
	}
	/* The raw call: glibc's sigprocmask hides its reserved signals. */
	uint64_t mask = 0;
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &mask, sizeof(mask)) == 0)
		sc->blocked = mask & ~(SIGBIT(SIGKILL) | SIGBIT(SIGSTOP));
}

struct exec_target {
	const char *path;
	int fd;      /* the program opened by the supervisor (set_ids only), -1 */
	bool script; /* it starts with #! */
};

static _Noreturn void child_run(const struct spawn_opts *o, const struct exec_target *x, char *const *envp,
				int sock, pid_t parent, int cg_procs)
{
	const char *path = x->path;
	/* 1. Signals: default dispositions, or ignored where the supervisor
	 * was started with them ignored (our own handlers are libuv's and
	 * must not run here); the mask stays full (inherited from the blocked
	 * parent) until just before execve. */
	uint64_t ignored = o->sigconf ? o->sigconf->ignored : 0;
	for (int s = 1; s < _NSIG; s++) {
		if (s == SIGKILL || s == SIGSTOP)
			continue;
		bool ign = s <= 64 && (ignored & SIGBIT(s));
		struct sigaction sa = { .sa_handler = ign ? SIG_IGN : SIG_DFL };
		/* glibc's own signals straight to the kernel: glibc refuses
		 * them, and a sanitizer's interceptor may claim success
		 * without setting anything. */
		if ((s >= 32 && s < SIGRTMIN) || sigaction(s, &sa, NULL) < 0)
			(void)raw_sigaction(s, true, sa.sa_handler, NULL);
	}

	/* Into the sandbox cgroup before anything of the workload runs (vfork
	 * clone has no CLONE_INTO_CGROUP; moving ourselves first is as good:
	 * no workload code exists yet). A failure means lineage membership. */
	if (cg_procs >= 0) {
		struct child_msg cm = { .kind = MSG_CGROUP, .step = 1 };
		if (write(cg_procs, "0", 1) != 1)
			cm.step = 0, cm.err = errno;
		(void)!write(sock, &cm, sizeof(cm));
		close(cg_procs);
	}

	/* 2. Session. */
	if (o->session == SPAWN_FOREGROUND) {
		if (setpgid(0, 0) < 0)
			child_fail(sock, STEP_SESSION, errno);
		/* SIGTTOU is blocked here, so a background caller may do this. */
		if (o->tty_fd >= 0 && tcsetpgrp(o->tty_fd, getpid()) < 0 && errno != ENOTTY)
			child_fail(sock, STEP_TTY, errno);
	} else if (setsid() < 0)
		child_fail(sock, STEP_SESSION, errno);

	/* 3. stdio: lift every source above the target range first, so
	 * overlapping assignments (stdout -> 0) cannot clobber one another. */
	int hi[3] = { -1, -1, -1 };
	for (int i = 0; i < 3; i++)
		if (o->stdio[i] >= 0 && (hi[i] = fcntl(o->stdio[i], F_DUPFD_CLOEXEC, 3)) < 0)
			child_fail(sock, STEP_STDIO, errno);
	for (int i = 0; i < 3; i++)
		if (hi[i] >= 0 && dup2(hi[i], i) < 0)
			child_fail(sock, STEP_STDIO, errno);
	if (o->session == SPAWN_PTY && ioctl(0, TIOCSCTTY, 0) < 0)
		child_fail(sock, STEP_TTY, errno);

	/* 4. Close every fd but 0-2, keep_fds, and our own plumbing (the env
	 * boundary's hook; it clears CLOEXEC on what it keeps, so set it back
	 * on the two fds that must vanish at execve). */
	int keep[SPAWN_MAX_KEEP + 3];
	size_t nk = 0;
	keep[nk++] = sock;
	if (o->landlock_fd >= 0)
		keep[nk++] = o->landlock_fd;
	if (x->fd >= 0)
		keep[nk++] = x->fd;
	for (size_t i = 0; i < o->n_keep && i < SPAWN_MAX_KEEP; i++)
		keep[nk++] = o->keep_fds[i];
	int r = envb_close_fds(keep, nk, 0);
	if (r < 0)
		child_fail(sock, STEP_CLOSE_FDS, -r);
	if (fcntl(sock, F_SETFD, FD_CLOEXEC) < 0 ||
	    (o->landlock_fd >= 0 && fcntl(o->landlock_fd, F_SETFD, FD_CLOEXEC) < 0) ||
	    (x->fd >= 0 && fcntl(x->fd, F_SETFD, FD_CLOEXEC) < 0))
		child_fail(sock, STEP_CLOSE_FDS, errno);

	/* CAP_SYS_PTRACE would let a root workload open the (non-dumpable)
	 * supervisor's /proc/<pid>/mem and environ; ptrace is denied anyway.
	 * Before the id change: dropping it from the bounding set needs
	 * CAP_SETPCAP, which a non-root uid no longer has. */
	if ((r = drop_ptrace_cap()) < 0)
		child_fail(sock, STEP_CAPS, -r);

	/* The workload's own uid (--user): groups first (needs CAP_SETGID),
	 * then gid, then uid; a non-root uid loses every capability here.
	 * Raw syscalls: glibc's wrappers broadcast to all threads through a
	 * signal, which a vfork child sharing our memory must not do. */
	if (o->set_ids) {
		gid_t groups[1] = { o->gid };
		if (syscall(SYS_setgroups, 1, groups) < 0 ||
		    syscall(SYS_setresgid, o->gid, o->gid, o->gid) < 0 ||
		    syscall(SYS_setresuid, o->uid, o->uid, o->uid) < 0)
			child_fail(sock, STEP_IDS, errno);
	}

	if (o->cwd && chdir(o->cwd) < 0)
		child_fail(sock, STEP_CHDIR, errno);

	/* The workload must not outlive a dead supervisor unsupervised. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		child_fail(sock, STEP_PDEATHSIG, errno);
	if (getppid() != parent)
		child_fail(sock, STEP_PDEATHSIG, ESRCH);

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(sock, STEP_NO_NEW_PRIVS, errno);
	/* No core file can ever hold the environment (API keys). */
	if ((r = envb_core_limit_zero()) < 0)
		child_fail(sock, STEP_RLIMIT_CORE, -r);
	/* The limit we were started with, not the one we raised for
	 * ourselves (after the fds are closed: that walk may be bounded by
	 * it). setrlimit is a plain syscall wrapper (per process, no
	 * broadcast to threads). */
	if (o->nofile && setrlimit(RLIMIT_NOFILE, o->nofile) < 0)
		child_fail(sock, STEP_RLIMIT_NOFILE, errno);

	if (o->landlock_fd >= 0 && (r = landlock_scope_enter(o->landlock_fd)) < 0)
		child_fail(sock, STEP_LANDLOCK, -r);

	/* Last before exec: from here on the workload filter applies to us. */
	if (o->filter) {
		if (o->filter->notify_connect) {
			int lfd = workload_filter_install_listener(o->filter);
			if (lfd < 0)
				child_fail(sock, STEP_SECCOMP, -lfd);
			struct child_msg m = { .kind = MSG_LISTENER };
			union {
				struct cmsghdr h;
				char buf[CMSG_SPACE(sizeof(int))];
			} cm;
			memset(&cm, 0, sizeof(cm));
			struct iovec iov = { &m, sizeof(m) };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
					     .msg_controllen = sizeof(cm.buf) };
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &lfd, sizeof(int));
			if (sendmsg(sock, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(m))
				child_fail(sock, STEP_SEND_LISTENER, errno);
			/* No ack to wait for (the parent is suspended until execve,
			 * CLONE_VFORK): the listener in flight is held by the socket,
			 * so notifications queue until the supervisor receives it, and
			 * fail (ENOSYS) if it never does. */
			close(lfd);
		} else if ((r = workload_filter_install(o->filter)) < 0)
			child_fail(sock, STEP_SECCOMP, -r);
	}

	/* The raw call: glibc's sigprocmask would drop its reserved signals
	 * from the set. */
	uint64_t mask = o->sigconf ? o->sigconf->blocked : 0;
	(void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, sizeof(mask));
	execve(path, o->argv, envp);
	int e = errno;
	if (e == EACCES && x->fd >= 0) {
		/* The supervisor could reach the program, our uid cannot (a
		 * directory on the way it may not enter): run the file it
		 * opened. A #! script would be handed to its interpreter as
		 * /dev/fd/N, gone at exec (CLOEXEC), so it is not tried. */
		if (x->script)
			child_fail(sock, STEP_EXEC_SCRIPT, e);
		struct child_msg m = { .kind = MSG_EXEC_FD, .err = e };
		(void)!write(sock, &m, sizeof(m));
		syscall(SYS_execveat, x->fd, "", o->argv, envp, AT_EMPTY_PATH);
		e = errno;
	}
	child_fail(sock, STEP_EXECVE, e);
}

struct child_args {
	const struct spawn_opts *o;
	const struct exec_target *x;
	char *const *envp;
	int sock;
	pid_t parent;
	int cg_procs;
};

static int child_entry(void *arg)
{
	const struct child_args *a = arg;
	child_run(a->o, a->x, a->envp, a->sock, a->parent, a->cg_procs);
}

/* ---- the parent side ---- */

/* Open the resolved program for an exec by fd, and note whether it is a #!
 * script (read as the supervisor: the workload may not read it). A file we
 * may not read (execute-only, non-root supervisor) is held by O_PATH. */
static void exec_target_open(struct exec_target *x)
{
	int fd = open(x->path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	bool readable = fd >= 0;
	if (!readable)
		fd = open(x->path, O_PATH | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return;
	}
	char head[2];
	x->script = readable && pread(fd, head, 2, 0) == 2 && head[0] == '#' && head[1] == '!';
	x->fd = fd;
}

static void set_error(struct spawn_error *e, int code, const char *step, int err, const char *prog)
{
	e->exit_code = code;
	e->step = step;
	e->err = err;
	if (code == 127 && err == ENOENT && (!strcmp(step, "resolve") || !strcmp(step, "execve")))
		snprintf(e->message, sizeof(e->message), "%s: command not found", prog);
	else if (code == 126)
		snprintf(e->message, sizeof(e->message), "%s: cannot execute: %s", prog, strerror(err));
	else
		snprintf(e->message, sizeof(e->message), "%s: spawn failed at %s: %s", prog, step, strerror(err));
}

/* An exec refused for the workload's uid: say which uid and what to do. */
static void set_exec_error(struct spawn_error *e, const struct spawn_opts *o, const struct exec_target *x,
			   int step, int err, const char *prog)
{
	set_error(e, err == ENOENT ? 127 : 126, step_name(step), err, prog);
	if (!o->set_ids || err != EACCES)
		return;
	if (step == STEP_EXEC_SCRIPT)
		snprintf(e->message, sizeof(e->message),
			 "%s: cannot execute: %s is a #! script in a directory uid %u cannot enter, and a script "
			 "is run by its path: put it where that user can read it (e.g. chmod o+x on each "
			 "directory above it) or run it with its interpreter as the command",
			 prog, x->path, (unsigned)o->uid);
	else
		snprintf(e->message, sizeof(e->message),
			 "%s: cannot execute: Permission denied for the workload's uid %u (that user must be "
			 "allowed to execute %s)", prog, (unsigned)o->uid, x->path);
}

static int recv_msg(int sock, struct child_msg *m, int *fd, int timeout_ms)
{
	*fd = -1;
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int r;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	ssize_t n;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	if (n == 0)
		return 0;
	if (n != sizeof(*m) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (*fd >= 0)
			close(*fd), *fd = -1;
		return -EPROTO;
	}
	return 1;
}

int spawn_process(const struct spawn_opts *o, struct spawn_result *res, struct spawn_error *err)
{
	memset(res, 0, sizeof(*res));
	memset(err, 0, sizeof(*err));
	res->pidfd = res->listener_fd = -1;
	if (!o->argv || !o->argv[0]) {
		set_error(err, 127, "argv", EINVAL, "(none)");
		return -EINVAL;
	}
	const char *prog = o->argv[0];
	char *const *envp = o->envp ? o->envp : spawn_build_env();
	int r = spawn_resolve(prog, env_path(envp), res->path, sizeof(res->path));
	if (r < 0) {
		set_error(err, r == -EACCES ? 126 : 127, "resolve", -r, prog);
		return r;
	}

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		r = -errno;
		set_error(err, 127, "socketpair", -r, prog);
		return r;
	}
	_cleanup_close_ int sock = sv[0];
	int child_sock = sv[1];

	/* The cgroup.procs fd the child writes itself into. */
	int cg_procs = -1;
	if (o->cgroup_fd >= 0 && (cg_procs = openat(o->cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC)) < 0)
		res->cgroup_err = errno;

	/* Another uid may not reach the path we resolved: hold the file. */
	struct exec_target x = { .path = res->path, .fd = -1 };
	if (o->set_ids)
		exec_target_open(&x);

	/* vfork-style: the child shares our memory and we sleep until it has
	 * exec'd or exited, like posix_spawn; no page-table copy. It runs on
	 * its own stack, with every signal blocked (our handlers are libuv's). */
	const size_t stack_size = 256 * 1024, guard = 4096;
	char *stack = mmap(NULL, stack_size + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		r = -errno;
		if (cg_procs >= 0)
			close(cg_procs);
		if (x.fd >= 0)
			close(x.fd);
		close(child_sock);
		set_error(err, 127, "stack", -r, prog);
		return r;
	}
	STACK_UNPOISON(stack + guard, stack_size);
	(void)mprotect(stack, guard, PROT_NONE);
	struct child_args ca = { .o = o, .x = &x, .envp = envp, .sock = child_sock, .parent = getpid(),
				 .cg_procs = cg_procs };
	int pidfd = -1;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t pid = clone(child_entry, stack + stack_size + guard, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &ca,
			  &pidfd);
	int clone_errno = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	STACK_UNPOISON(stack + guard, stack_size);
	munmap(stack, stack_size + guard);
	close(child_sock);
	if (cg_procs >= 0)
		close(cg_procs);
	if (x.fd >= 0)
		close(x.fd);
	if (pid < 0) {
		r = -clone_errno;
		set_error(err, 127, "clone", clone_errno, prog);
		return r;
	}
	res->pid = pid;
	res->pidfd = pidfd;

	int timeout = o->timeout_ms > 0 ? o->timeout_ms : 5000;
	for (;;) {
		struct child_msg m;
		int fd;
		r = recv_msg(sock, &m, &fd, timeout);
		if (r == 0) { /* EOF: the CLOEXEC socket closed by a successful execve */
			if (fd >= 0)
				close(fd);
			if (o->filter && o->filter->notify_connect && res->listener_fd < 0) {
				r = -EPROTO;
				set_error(err, 127, "listener", EPROTO, prog);
				goto fail;
			}
			return 0;
		}
		if (r < 0) {
			set_error(err, 127, "handshake", -r, prog);
			goto fail;
		}
		if (m.kind == MSG_LISTENER && fd >= 0 && res->listener_fd < 0) {
			res->listener_fd = fd;
			continue;
		}
		if (m.kind == MSG_CGROUP && fd < 0) {
			res->in_cgroup = m.step == 1;
			res->cgroup_err = res->in_cgroup ? 0 : (m.err > 0 ? m.err : EIO);
			continue;
		}
		if (m.kind == MSG_EXEC_FD && fd < 0) {
			res->exec_by_fd = true;
			continue;
		}
		if (fd >= 0)
			close(fd);
		if (m.kind == MSG_ERROR) {
			int e = m.err > 0 ? m.err : EIO;
			if (m.step == STEP_EXECVE || m.step == STEP_EXEC_SCRIPT)
				set_exec_error(err, o, &x, m.step, e, prog);
			else
				set_error(err, 127, step_name(m.step), e, prog);
			r = -e;
			goto fail;
		}
		r = -EPROTO;
		set_error(err, 127, "handshake", EPROTO, prog);
		goto fail;
	}
fail:
	/* The child never reached its program: end and reap it here so the
	 * supervisor's reaper never mistakes it for a workload exit. */
	sys_pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
	siginfo_t si;
	waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED);
	close(pidfd);
	if (res->listener_fd >= 0)
		close(res->listener_fd);
	res->pidfd = res->listener_fd = -1;
	res->pid = 0;
	return r;
}
