#include "proc-supervisor/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <linux/sched.h>
#include <linux/prctl.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <netinet/in.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#ifndef CLONE_NEWUSER
#define CLONE_NEWUSER 0x10000000
#endif
#ifndef AF_PACKET
#define AF_PACKET 17
#endif
#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif
#ifndef PR_SET_MM
#define PR_SET_MM 35
#endif
#ifndef TIOCSTI
#define TIOCSTI 0x5412
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW 0xAA00 /* _IO(0xAA, 0x00): /dev/userfaultfd (>= 6.1) */
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef F_SETOWN_EX
#define F_SETOWN_EX 15
#endif
#ifndef FIOSETOWN
#define FIOSETOWN 0x8901
#endif
#ifndef SIOCSPGRP
#define SIOCSPGRP 0x8902
#endif

/* Kernel int arguments are 32 bits wide: compare only the low half, or a
 * caller sets a high bit and slips past an equality test. */
#define LOW32 0xffffffffULL

enum rule_action { ACT_EPERM, ACT_ENOSYS };

struct rule_cmp {
	unsigned arg; /* 0..5 */
	enum scmp_compare op;
	scmp_datum_t a, b;
};

struct rule {
	const char *syscall;
	enum rule_action act;
	unsigned n_cmp;
	struct rule_cmp cmp[3];
	struct workload_rule_doc doc;
};

#define M32(arg, v) { arg, SCMP_CMP_MASKED_EQ, LOW32, (scmp_datum_t)(uint32_t)(v) }
#define BIT(arg, bit) { arg, SCMP_CMP_MASKED_EQ, (bit), (bit) }
/* Any non-zero register. For an int argument that is fail-closed: a value
 * whose low half is non-zero is non-zero as a whole. */
#define NZ(arg) { arg, SCMP_CMP_NE, 0, 0 }
#define DOC(sc, when, act, why) { sc, when, act, why }

/* The profile. Keep docs/threat-model.md in step with this table. */
static const struct rule rules[] = {
	{ "clone", ACT_EPERM, 1, { BIT(0, CLONE_PARENT) },
	  DOC("clone", "flags & CLONE_PARENT", "EPERM",
	      "a child of P could mint siblings of itself as children of P: ppid would lie about the creator (threat 2/3)") },
	{ "clone", ACT_EPERM, 1, { BIT(0, CLONE_NEWUSER) },
	  DOC("clone", "flags & CLONE_NEWUSER", "EPERM",
	      "a user namespace grants CAP_SYS_RESOURCE for PR_SET_MM_MAP (exe forgery) and mount tricks (threat 6)") },
	{ "clone3", ACT_ENOSYS, 0, { { 0 } },
	  DOC("clone3", "always", "ENOSYS",
	      "clone3 flags live in memory the filter cannot read; ENOSYS makes libc fall back to clone, whose flags it can") },
	{ "unshare", ACT_EPERM, 1, { BIT(0, CLONE_NEWUSER) },
	  DOC("unshare", "flags & CLONE_NEWUSER", "EPERM", "as clone(CLONE_NEWUSER)") },
	{ "setns", ACT_EPERM, 0, { { 0 } },
	  DOC("setns", "always", "EPERM",
	      "joining another namespace (e.g. the host netns via a leaked fd) leaves the fence") },
	{ "prctl", ACT_EPERM, 1, { M32(0, PR_SET_MM) },
	  DOC("prctl", "option == PR_SET_MM", "EPERM",
	      "PR_SET_MM_EXE_FILE/MAP re-points /proc/<pid>/exe at another binary (threat 6)") },
	{ "ptrace", ACT_EPERM, 0, { { 0 } },
	  DOC("ptrace", "always", "EPERM",
	      "a tracer can make any traced process (e.g. an allowed binary) connect for it (threats 6, 10)") },
	{ "process_vm_readv", ACT_EPERM, 0, { { 0 } },
	  DOC("process_vm_readv", "always", "EPERM", "reads another process's memory (secrets, threat 10)") },
	{ "process_vm_writev", ACT_EPERM, 0, { { 0 } },
	  DOC("process_vm_writev", "always", "EPERM",
	      "writes another process's memory: code injection into an allowed binary (threat 6)") },
	{ "io_uring_setup", ACT_EPERM, 0, { { 0 } },
	  DOC("io_uring_setup", "always", "EPERM",
	      "io_uring connect/openat run without the syscall, so without seccomp's view (threat 9)") },
	{ "io_uring_enter", ACT_EPERM, 0, { { 0 } },
	  DOC("io_uring_enter", "always", "EPERM", "as io_uring_setup (a ring fd passed in from outside)") },
	{ "io_uring_register", ACT_EPERM, 0, { { 0 } },
	  DOC("io_uring_register", "always", "EPERM", "as io_uring_setup") },
	{ "bpf", ACT_EPERM, 0, { { 0 } },
	  DOC("bpf", "always", "EPERM", "BPF programs can redirect sockets and read kernel memory") },
	{ "perf_event_open", ACT_EPERM, 0, { { 0 } },
	  DOC("perf_event_open", "always", "EPERM", "observes other processes; a large kernel attack surface") },
	{ "kexec_load", ACT_EPERM, 0, { { 0 } },
	  DOC("kexec_load", "always", "EPERM", "replaces the running kernel") },
	{ "kexec_file_load", ACT_EPERM, 0, { { 0 } },
	  DOC("kexec_file_load", "always", "EPERM", "replaces the running kernel") },
	{ "open_by_handle_at", ACT_EPERM, 0, { { 0 } },
	  DOC("open_by_handle_at", "always", "EPERM",
	      "opens files by handle outside the mount/chroot (the 'shocker' container escape)") },
	{ "name_to_handle_at", ACT_EPERM, 0, { { 0 } },
	  DOC("name_to_handle_at", "always", "EPERM", "the other half of open_by_handle_at") },
	{ "pidfd_getfd", ACT_EPERM, 0, { { 0 } },
	  DOC("pidfd_getfd", "always", "EPERM",
	      "steals a socket from another process: a flow would be attributed to its first holder (threat 7)") },
	{ "mount", ACT_EPERM, 0, { { 0 } },
	  DOC("mount", "always", "EPERM", "bind mounts make /proc/<pid>/exe paths lie (threat 6); remounting /proc or cgroupfs") },
	{ "umount2", ACT_EPERM, 0, { { 0 } }, DOC("umount2", "always", "EPERM", "uncovers masked paths") },
	{ "pivot_root", ACT_EPERM, 0, { { 0 } }, DOC("pivot_root", "always", "EPERM", "as mount") },
	{ "move_mount", ACT_EPERM, 0, { { 0 } }, DOC("move_mount", "always", "EPERM", "new mount API: as mount") },
	{ "open_tree", ACT_EPERM, 0, { { 0 } }, DOC("open_tree", "always", "EPERM", "new mount API: as mount") },
	{ "fsopen", ACT_EPERM, 0, { { 0 } }, DOC("fsopen", "always", "EPERM", "new mount API: as mount") },
	{ "fsconfig", ACT_EPERM, 0, { { 0 } }, DOC("fsconfig", "always", "EPERM", "new mount API: as mount") },
	{ "fsmount", ACT_EPERM, 0, { { 0 } }, DOC("fsmount", "always", "EPERM", "new mount API: as mount") },
	{ "fspick", ACT_EPERM, 0, { { 0 } }, DOC("fspick", "always", "EPERM", "new mount API: as mount") },
	{ "mount_setattr", ACT_EPERM, 0, { { 0 } },
	  DOC("mount_setattr", "always", "EPERM", "new mount API: clears nosuid/noexec/ro") },
	{ "init_module", ACT_EPERM, 0, { { 0 } }, DOC("init_module", "always", "EPERM", "loads kernel code") },
	{ "finit_module", ACT_EPERM, 0, { { 0 } }, DOC("finit_module", "always", "EPERM", "loads kernel code") },
	{ "delete_module", ACT_EPERM, 0, { { 0 } },
	  DOC("delete_module", "always", "EPERM", "unloads e.g. the netfilter modules the fence relies on") },
	{ "userfaultfd", ACT_EPERM, 0, { { 0 } },
	  DOC("userfaultfd", "always", "EPERM", "stalls the kernel mid-copy: the classic race-widening exploit aid") },
	{ "ioctl", ACT_EPERM, 1, { M32(1, USERFAULTFD_IOC_NEW) },
	  DOC("ioctl", "request == USERFAULTFD_IOC_NEW", "EPERM",
	      "the same userfaultfd through /dev/userfaultfd (>= 6.1), which a root workload can open") },
	{ "prlimit64", ACT_EPERM, 2, { NZ(0), NZ(2) },
	  DOC("prlimit64", "pid != 0 and new limits given", "EPERM",
	      "a workload of the supervisor's uid could set its limits: RLIMIT_CPU kills it (SIGKILL from the kernel, "
	      "which Landlock does not scope), RLIMIT_NOFILE starves it (threat 10). Own limits (pid 0, setrlimit) "
	      "and reading others' stay allowed") },
	{ "keyctl", ACT_EPERM, 0, { { 0 } },
	  DOC("keyctl", "always", "EPERM", "kernel keyrings are not namespaced: credentials of other sandboxes/host") },
	{ "add_key", ACT_EPERM, 0, { { 0 } }, DOC("add_key", "always", "EPERM", "as keyctl") },
	{ "request_key", ACT_EPERM, 0, { { 0 } }, DOC("request_key", "always", "EPERM", "as keyctl") },
	{ "reboot", ACT_EPERM, 0, { { 0 } },
	  DOC("reboot", "always", "EPERM",
	      "in a child PID namespace reboot(2) kills its init - the supervisor when it is PID 1 (threat 10)") },
	{ "vhangup", ACT_EPERM, 0, { { 0 } },
	  DOC("vhangup", "always", "EPERM",
	      "hangs up the terminal the workload shares with the shell that started the supervisor: the kernel "
	      "sends that shell SIGHUP, past Landlock's signal scope (root: CAP_SYS_TTY_CONFIG)") },
	{ "iopl", ACT_EPERM, 0, { { 0 } }, DOC("iopl", "always", "EPERM", "raw hardware I/O port access") },
	{ "ioperm", ACT_EPERM, 0, { { 0 } }, DOC("ioperm", "always", "EPERM", "raw hardware I/O port access") },
	{ "ioctl", ACT_EPERM, 1, { M32(1, TIOCSTI) },
	  DOC("ioctl", "request == TIOCSTI", "EPERM",
	      "injects keystrokes into a terminal the workload shares with the shell that started the supervisor") },
	{ "ioctl", ACT_EPERM, 1, { M32(1, TIOCLINUX) },
	  DOC("ioctl", "request == TIOCLINUX", "EPERM", "console selection paste: as TIOCSTI") },
	{ "socket", ACT_EPERM, 2, { M32(0, AF_INET), { 1, SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW } },
	  DOC("socket", "AF_INET, SOCK_RAW", "EPERM", "raw IP bypasses the proxy and the connect hook (threat 9)") },
	{ "socket", ACT_EPERM, 2, { M32(0, AF_INET6), { 1, SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW } },
	  DOC("socket", "AF_INET6, SOCK_RAW", "EPERM", "as AF_INET raw") },
	{ "socket", ACT_EPERM, 1, { M32(0, AF_PACKET) },
	  DOC("socket", "AF_PACKET", "EPERM", "link-layer frames bypass IP routing and the fence (threat 9)") },
	{ "socket", ACT_EPERM, 1, { M32(0, AF_VSOCK) },
	  DOC("socket", "AF_VSOCK", "EPERM",
	      "vsock reaches the VM host (or, with vsock loopback, local listeners) without IP: no route, fence or "
	      "proxy sees it (threat 9)") },
	{ "socket", ACT_EPERM, 3,
	  { M32(0, AF_INET), { 1, SCMP_CMP_MASKED_EQ, 0xf, SOCK_DGRAM }, M32(2, IPPROTO_ICMP) },
	  DOC("socket", "AF_INET, SOCK_DGRAM, IPPROTO_ICMP", "EPERM",
	      "unprivileged ICMP 'ping' sockets: an egress channel that never connects (threat 9)") },
	{ "socket", ACT_EPERM, 3,
	  { M32(0, AF_INET6), { 1, SCMP_CMP_MASKED_EQ, 0xf, SOCK_DGRAM }, M32(2, IPPROTO_ICMPV6) },
	  DOC("socket", "AF_INET6, SOCK_DGRAM, IPPROTO_ICMPV6", "EPERM", "as ICMP ping sockets") },
};

/* The sends that can open a TCP connection, and where their flags are. */
static const struct {
	const char *name;
	unsigned flags_arg;
} fastopen_sends[] = { { "sendto", 3 }, { "sendmsg", 2 }, { "sendmmsg", 3 } };

static const struct workload_rule_doc extra_docs[] = {
	{ "connect", "always (not with --no-seccomp)", "USER_NOTIF",
	  "the supervisor records socket cookie -> calling process before the connect proceeds; "
	  "no listener => ENOSYS (fail closed)" },
	{ "sendto, sendmsg, sendmmsg", "flags & MSG_FASTOPEN (not with --no-seccomp)", "USER_NOTIF",
	  "TCP Fast Open connects inside the send: recorded as a connect; other sends are not notified" },
	{ "kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_open",
	  "pid == supervisor (or -pgid, or kill(-1)); only without Landlock signal scoping",
	  "EPERM", "a workload must not signal the supervisor (threat 10)" },
	{ "fcntl", "F_SETOWN to the supervisor (or -pgid); F_SETOWN_EX; only without Landlock signal scoping",
	  "EPERM", "SIGIO goes to the owner, and F_SETSIG makes it any signal, SIGKILL included (threat 10)" },
	{ "ioctl", "FIOSETOWN, SIOCSPGRP; only without Landlock signal scoping", "EPERM",
	  "set the same owner through a pointer" },
	{ "(any non-native ABI)", "e.g. i386 int 0x80 on x86_64", "KILL_PROCESS",
	  "the rules are written for the native ABI; another ABI would bypass them" },
};

const struct workload_rule_doc *workload_filter_rule_doc(size_t i)
{
	if (i < ARRAY_SIZE(rules))
		return &rules[i].doc;
	i -= ARRAY_SIZE(rules);
	return i < ARRAY_SIZE(extra_docs) ? &extra_docs[i] : NULL;
}

static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
		    const struct rule_cmp *c, unsigned *count)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR) {
		/* Older libseccomp without the name: the kernel may still have it,
		 * but there is no number to filter on. Say so, don't fail. */
		log_warn("seccomp: libseccomp does not know %s; rule skipped", name);
		return 0;
	}
	struct scmp_arg_cmp args[3];
	for (unsigned i = 0; i < n; i++)
		args[i] = (struct scmp_arg_cmp){ .arg = c[i].arg, .op = c[i].op, .datum_a = c[i].a, .datum_b = c[i].b };
	int r = seccomp_rule_add_array(ctx, action, nr, n, args);
	if (r < 0) {
		log_error("seccomp: adding rule for %s: %s", name, strerror(-r));
		return r;
	}
	(*count)++;
	return 0;
}

static int export_prog(scmp_filter_ctx ctx, struct sock_fprog *prog)
{
	_cleanup_close_ int fd = memfd_create("tether-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = seccomp_export_bpf(ctx, fd);
	if (r < 0)
		return r;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) ||
	    st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS)
		return -E2BIG;
	struct sock_filter *f = malloc((size_t)st.st_size);
	if (!f)
		return -ENOMEM;
	ssize_t n = pread(fd, f, (size_t)st.st_size, 0);
	if (n != st.st_size) {
		free(f);
		return n < 0 ? -errno : -EIO;
	}
	prog->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
	prog->filter = f;
	return 0;
}

int workload_filter_build(const struct workload_filter_opts *o, struct workload_filter *out)
{
	memset(out, 0, sizeof(*out));
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -ENOMEM;
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0)
		goto out;
	unsigned count = 0;
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++) {
		const struct rule *ru = &rules[i];
		uint32_t act = ru->act == ACT_ENOSYS ? SCMP_ACT_ERRNO(ENOSYS) : SCMP_ACT_ERRNO(EPERM);
		r = add_rule(ctx, act, ru->syscall, ru->n_cmp, ru->cmp, &count);
		if (r < 0)
			goto out;
	}
	if (o->protect_pid > 0) {
		const pid_t targets[] = { o->protect_pid, -o->protect_pid, o->protect_pgid > 0 ? -o->protect_pgid : 0, -1 };
		for (size_t i = 0; i < ARRAY_SIZE(targets); i++) {
			if (targets[i] == 0)
				continue;
			struct rule_cmp c = M32(0, targets[i]);
			if ((r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "kill", 1, &c, &count)) < 0)
				goto out;
			/* F_SETOWN names who gets SIGIO, and F_SETSIG makes that
			 * any signal, SIGKILL included (-1 is group 1 here, not all). */
			struct rule_cmp own[2] = { M32(1, F_SETOWN), M32(2, targets[i]) };
			if (targets[i] != -1 && (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "fcntl", 2, own, &count)) < 0)
				goto out;
		}
		/* The same owner through a pointer the filter cannot read: denied
		 * outright, in this mode only (rarely used). */
		struct rule_cmp ownex = M32(1, F_SETOWN_EX), fio = M32(1, FIOSETOWN), spg = M32(1, SIOCSPGRP);
		if ((r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "fcntl", 1, &ownex, &count)) < 0 ||
		    (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &fio, &count)) < 0 ||
		    (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &spg, &count)) < 0)
			goto out;
		struct rule_cmp c = M32(0, o->protect_pid);
		/* rt_sigqueueinfo and rt_tgsigqueueinfo send any signal too
		 * (si_code SI_QUEUE passes the kernel's own check). */
		if ((r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "tgkill", 1, &c, &count)) < 0 ||
		    (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "tkill", 1, &c, &count)) < 0 ||
		    (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "rt_sigqueueinfo", 1, &c, &count)) < 0 ||
		    (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "rt_tgsigqueueinfo", 1, &c, &count)) < 0 ||
		    (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "pidfd_open", 1, &c, &count)) < 0)
			goto out;
	}
	if (o->notify_connect) {
		r = add_rule(ctx, SCMP_ACT_NOTIFY, "connect", 0, NULL, &count);
		if (r < 0)
			goto out;
		/* TCP Fast Open connects inside a send: sendto/sendmsg/sendmmsg
		 * with MSG_FASTOPEN. Their fd is argument 0 as in connect, so
		 * the notifier handles them alike; other sends are not notified. */
		for (size_t i = 0; i < ARRAY_SIZE(fastopen_sends); i++) {
			struct rule_cmp c = { fastopen_sends[i].flags_arg, SCMP_CMP_MASKED_EQ, MSG_FASTOPEN, MSG_FASTOPEN };
			if ((r = add_rule(ctx, SCMP_ACT_NOTIFY, fastopen_sends[i].name, 1, &c, &count)) < 0)
				goto out;
		}
	}
	r = export_prog(ctx, &out->prog);
	if (r < 0)
		goto out;
	out->notify_connect = o->notify_connect;
	out->n_rules = count;
out:
	seccomp_release(ctx);
	return r;
}

void workload_filter_free(struct workload_filter *f)
{
	free(f->prog.filter);
	f->prog.filter = NULL;
	f->prog.len = 0;
}

int workload_filter_install(const struct workload_filter *f)
{
	long r = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &f->prog);
	return r < 0 ? -errno : 0;
}

int workload_filter_install_listener(const struct workload_filter *f)
{
	long r = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &f->prog);
	return r < 0 ? -errno : (int)r;
}
