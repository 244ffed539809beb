/* probe_escape: try each escape-shaped syscall and print "name=RESULT"
 * (RESULT is OK or the errno name), one per line, for the tests to assert.
 * Usage: probe_escape CHECK...   (CHECK "all" = every harmless check) */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/filter.h>
#include <linux/reboot.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void report(const char *name, long r)
{
	if (r >= 0)
		printf("%s=OK\n", name);
	else
		printf("%s=%s\n", name, strerrorname_np(errno) ? strerrorname_np(errno) : "E?");
	fflush(stdout);
}

static long do_clone(unsigned long flags)
{
	long r = syscall(SYS_clone, flags | SIGCHLD, 0, NULL, NULL, 0);
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, 0);
	return r;
}

/* Run fn in a child and report how it ended: the filter's bad-arch action
 * kills the whole process (SIGSYS), so the probe itself must survive it.
 * "SIGSYS" / "SIGSEGV" (no IA-32 emulation: int $0x80 faults before any
 * syscall) / the errno name the child got. */
static void report_child(const char *name, long (*fn)(void))
{
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		errno = 0;
		long r = fn();
		_exit(r >= 0 ? 0 : errno > 0 && errno < 255 ? errno : 255);
	}
	int st = 0;
	if (p < 0 || waitpid(p, &st, 0) != p) {
		printf("%s=E?\n", name);
	} else if (WIFSIGNALED(st)) {
		printf("%s=SIG%s\n", name, sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
	} else {
		int e = WEXITSTATUS(st);
		printf("%s=%s\n", name, e == 0 ? "OK" : strerrorname_np(e) ? strerrorname_np(e) : "E?");
	}
	fflush(stdout);
}

#define X32_BIT 0x40000000L
static long x32_connect(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return syscall(X32_BIT | SYS_connect, s, &a, sizeof(a));
}

static long x32_getpid(void)
{
	return syscall(X32_BIT | SYS_getpid);
}

static long int80_getpid(void)
{
	long r;
	/* i386 getpid = 20; int $0x80 clobbers r8-r11 in a 64-bit process. */
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/* A signal to the parent through rt_sigqueueinfo, or rt_tgsigqueueinfo to
 * its main thread (si_code SI_QUEUE, which the kernel lets any sender use). */
static long sigqueue_parent(int sig, bool thread)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	return thread ? syscall(SYS_rt_tgsigqueueinfo, getppid(), getppid(), sig, &si)
		      : syscall(SYS_rt_sigqueueinfo, getppid(), sig, &si);
}

/* Ways of naming a SIGIO owner on a socket. */
enum owner_op { SETOWN_SELF, SIGIO_KILL_PARENT, SETOWN_EX_PARENT, FIOSETOWN_PARENT };

/* Run op on a fresh socket pair; its result with its errno. SETOWN_SELF is
 * ordinary SIGIO use, never refused; SIGIO_KILL_PARENT also arms SIGIO as
 * SIGKILL and sends a byte (the signal, if it goes out, is Landlock's to
 * stop). */
static long owner(enum owner_op op)
{
	int s[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) < 0)
		return -1;
	long r;
	if (op == SETOWN_EX_PARENT) {
		struct f_owner_ex o = { .type = F_OWNER_PID, .pid = getppid() };
		r = fcntl(s[0], F_SETOWN_EX, &o);
	} else if (op == FIOSETOWN_PARENT) {
		int pid = getppid();
		r = ioctl(s[0], 0x8901 /* FIOSETOWN */, &pid);
	} else {
		r = fcntl(s[0], F_SETOWN, op == SETOWN_SELF ? getpid() : getppid());
	}
	int e = errno;
	if (op == SIGIO_KILL_PARENT) {
		if (fcntl(s[0], F_SETSIG, SIGKILL) == 0 && fcntl(s[0], F_SETFL, O_ASYNC | O_NONBLOCK) == 0)
			(void)!write(s[1], "x", 1);
		usleep(100 * 1000);
	}
	close(s[0]);
	close(s[1]);
	errno = e;
	return r;
}

/* Set pid's RLIMIT_NOFILE to what it is already (harmless if allowed). */
static long prlimit_same(pid_t pid)
{
	struct rlimit cur;
	if (syscall(SYS_prlimit64, pid, RLIMIT_NOFILE, NULL, &cur) < 0)
		return -1;
	return syscall(SYS_prlimit64, pid, RLIMIT_NOFILE, &cur, NULL);
}

static void *thread_fn(void *a)
{
	return a;
}

static void check(const char *c)
{
	long r;
	if (!strcmp(c, "clone_parent"))
		report(c, do_clone(CLONE_PARENT));
	else if (!strcmp(c, "clone_newuser"))
		report(c, do_clone(CLONE_NEWUSER));
	else if (!strcmp(c, "unshare_user"))
		report(c, unshare(CLONE_NEWUSER));
	else if (!strcmp(c, "clone3")) {
		r = syscall(435 /* clone3 */, NULL, 0);
		report(c, r);
	} else if (!strcmp(c, "fork")) {
		pid_t p = fork();
		if (p == 0)
			_exit(0);
		int st = 0;
		if (p > 0)
			waitpid(p, &st, 0);
		report(c, p > 0 && WIFEXITED(st) ? 0 : -1);
	} else if (!strcmp(c, "thread")) {
		pthread_t t;
		int e = pthread_create(&t, NULL, thread_fn, NULL);
		if (e == 0)
			pthread_join(t, NULL);
		errno = e;
		report(c, e ? -1 : 0);
	} else if (!strcmp(c, "posix_spawn")) {
		pid_t p;
		char *argv[] = { "/bin/true", NULL };
		int e = posix_spawn(&p, "/bin/true", NULL, NULL, argv, environ);
		int st = 0;
		if (e == 0)
			waitpid(p, &st, 0);
		errno = e;
		report(c, e ? -1 : 0);
	} else if (!strcmp(c, "prctl_mm"))
		report(c, prctl(PR_SET_MM, PR_SET_MM_START_CODE, 0x10000, 0, 0));
	else if (!strcmp(c, "prctl_mm_highbits"))
		report(c, syscall(SYS_prctl, (1UL << 32) | PR_SET_MM, PR_SET_MM_START_CODE, 0x10000, 0, 0));
	else if (!strcmp(c, "io_uring")) {
		struct io_uring_params p;
		memset(&p, 0, sizeof(p));
		r = syscall(__NR_io_uring_setup, 4, &p);
		if (r >= 0)
			close((int)r);
		report(c, r);
	} else if (!strcmp(c, "raw_socket")) {
		r = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
		report(c, r);
	} else if (!strcmp(c, "raw6_socket"))
		report(c, socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6));
	else if (!strcmp(c, "packet_socket"))
		report(c, socket(17 /* AF_PACKET */, SOCK_RAW, 0));
	else if (!strcmp(c, "ping_socket"))
		report(c, socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP));
	else if (!strcmp(c, "tcp_socket"))
		report(c, socket(AF_INET, SOCK_STREAM, 0));
	else if (!strcmp(c, "udp_socket"))
		report(c, socket(AF_INET6, SOCK_DGRAM, 0));
	else if (!strcmp(c, "netlink_socket"))
		report(c, socket(AF_NETLINK, SOCK_RAW, 0));
	else if (!strcmp(c, "setns")) {
		int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		report(c, fd < 0 ? -1 : setns(fd, 0));
	} else if (!strcmp(c, "mount"))
		report(c, mount("none", "/nonexistent-tether", "tmpfs", 0, NULL));
	else if (!strcmp(c, "bpf"))
		report(c, syscall(__NR_bpf, 0, NULL, 0));
	else if (!strcmp(c, "perf_event_open"))
		report(c, syscall(__NR_perf_event_open, NULL, 0, -1, -1, 0));
	else if (!strcmp(c, "keyctl"))
		report(c, syscall(__NR_keyctl, 0, 0, 0, 0, 0));
	else if (!strcmp(c, "userfaultfd"))
		report(c, syscall(__NR_userfaultfd, 0));
	else if (!strcmp(c, "pidfd_getfd"))
		report(c, syscall(438, -1, 0, 0));
	else if (!strcmp(c, "open_by_handle_at"))
		report(c, syscall(__NR_open_by_handle_at, -1, NULL, 0));
	else if (!strcmp(c, "process_vm_readv"))
		report(c, syscall(__NR_process_vm_readv, getpid(), NULL, 0, NULL, 0, 0));
	else if (!strcmp(c, "reboot")) /* bad magic: EINVAL when allowed, harmless */
		report(c, syscall(SYS_reboot, 0, 0, 0, NULL));
	else if (!strcmp(c, "vhangup")) /* no controlling tty when allowed: a no-op */
		report(c, vhangup());
	else if (!strcmp(c, "tiocsti"))
		report(c, syscall(SYS_ioctl, 0, 0x5412UL, "x"));
	else if (!strcmp(c, "tiocsti_highbits"))
		report(c, syscall(SYS_ioctl, 0, (1UL << 32) | 0x5412UL, "x"));
	else if (!strcmp(c, "ptrace_self_child")) {
		/* ptrace is denied outright, even of our own child */
		report(c, ptrace(PTRACE_TRACEME, 0, NULL, NULL));
	} else if (!strcmp(c, "ptrace_parent"))
		report(c, ptrace(PTRACE_ATTACH, getppid(), NULL, NULL));
	else if (!strcmp(c, "kill_parent0"))
		report(c, kill(getppid(), 0));
	else if (!strcmp(c, "kill_parent"))
		report(c, kill(getppid(), SIGKILL));
	else if (!strcmp(c, "kill_all"))
		report(c, kill(-1, 0));
	else if (!strcmp(c, "pidfd_kill_parent")) {
		int fd = (int)syscall(434, getppid(), 0);
		report(c, fd < 0 ? -1 : syscall(424, fd, SIGKILL, NULL, 0));
	} else if (!strcmp(c, "x32_connect"))
		report_child(c, x32_connect);
	else if (!strcmp(c, "x32_getpid"))
		report_child(c, x32_getpid);
	else if (!strcmp(c, "int80_getpid"))
		report_child(c, int80_getpid);
	else if (!strcmp(c, "sigqueue_parent0"))
		report(c, sigqueue_parent(0, false));
	else if (!strcmp(c, "sigqueue_parent"))
		report(c, sigqueue_parent(SIGKILL, false));
	else if (!strcmp(c, "tgsigqueue_parent0"))
		report(c, sigqueue_parent(0, true));
	else if (!strcmp(c, "tgsigqueue_parent"))
		report(c, sigqueue_parent(SIGKILL, true));
	else if (!strcmp(c, "prlimit_parent"))
		report(c, prlimit_same(getppid()));
	else if (!strcmp(c, "prlimit_parent_read")) {
		struct rlimit cur;
		report(c, syscall(SYS_prlimit64, getppid(), RLIMIT_CPU, NULL, &cur));
	} else if (!strcmp(c, "prlimit_self"))
		report(c, prlimit_same(0));
	else if (!strcmp(c, "setrlimit_self")) {
		struct rlimit cur;
		report(c, getrlimit(RLIMIT_NOFILE, &cur) < 0 ? -1 : setrlimit(RLIMIT_NOFILE, &cur));
	} else if (!strcmp(c, "prlimit_parent_cpu")) {
		/* The attack itself: with a hard RLIMIT_CPU of 1 s the kernel
		 * SIGKILLs the parent once it has used a second of CPU. */
		struct rlimit one = { 1, 1 };
		report(c, syscall(SYS_prlimit64, getppid(), RLIMIT_CPU, &one, NULL));
	} else if (!strcmp(c, "sigio_kill_parent"))
		report(c, owner(SIGIO_KILL_PARENT));
	else if (!strcmp(c, "setown_ex_parent"))
		report(c, owner(SETOWN_EX_PARENT));
	else if (!strcmp(c, "fiosetown_parent"))
		report(c, owner(FIOSETOWN_PARENT));
	else if (!strcmp(c, "setown_self"))
		report(c, owner(SETOWN_SELF));
	else if (!strcmp(c, "userfaultfd_dev")) {
		int fd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
		r = fd < 0 ? -1 : ioctl(fd, USERFAULTFD_IOC_NEW, O_CLOEXEC);
		if (r >= 0)
			close((int)r);
		if (fd >= 0) {
			int e = errno;
			close(fd);
			errno = e;
		}
		report(c, r);
	} else if (!strcmp(c, "vsock_socket")) {
		r = socket(40 /* AF_VSOCK */, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (r >= 0)
			close((int)r);
		report(c, r);
	} else if (!strcmp(c, "own_listener")) {
		/* A second listener in the same filter chain: the kernel says EBUSY. */
		struct sock_filter f[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
		struct sock_fprog p = { 1, f };
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		report(c, syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &p));
	} else {
		printf("%s=UNKNOWN\n", c);
	}
}

int main(int argc, char **argv)
{
	static const char *const all[] = {
		"fork", "thread", "posix_spawn", "tcp_socket", "udp_socket", "netlink_socket", "clone_parent",
		"clone_newuser", "unshare_user", "clone3", "prctl_mm", "prctl_mm_highbits", "io_uring", "raw_socket",
		"raw6_socket", "packet_socket", "ping_socket", "setns", "mount", "bpf", "perf_event_open", "keyctl",
		"userfaultfd", "pidfd_getfd", "open_by_handle_at", "process_vm_readv", "reboot", "tiocsti",
		"tiocsti_highbits", "ptrace_self_child", "own_listener", "x32_connect", "x32_getpid", "prlimit_parent",
		"prlimit_parent_read", "prlimit_self", "setrlimit_self", "vsock_socket", "setown_self", "vhangup", NULL,
	};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "all"))
			for (const char *const *c = all; *c; c++)
				check(*c);
		else
			check(argv[i]);
	}
	return 0;
}
