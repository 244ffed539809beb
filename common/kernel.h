/* Kernel feature probes and syscall wrappers the system headers may lack.
 *
 * Every optional feature is probed at run time into struct kernel_caps and
 * the result is passed explicitly to whoever needs it. TETHER_FORCE_FALLBACK
 * (comma-separated: pidfs_ino, pidfd_info, peer_pidfd, cgroup, procfs_pidns,
 * all) turns
 * features off so the fallback paths can be tested on a new kernel. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/types.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif
#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif
#ifndef PID_FS_MAGIC
#define PID_FS_MAGIC 0x50494446
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* PIDFD_GET_INFO (kernel >= 6.13): _IOWR(0xFF, 11, struct pidfd_info). */
#define TETHER_PIDFS_IOCTL_MAGIC 0xFF
#define TETHER_PIDFD_INFO_PID (1UL << 0)
#define TETHER_PIDFD_INFO_CREDS (1UL << 1)
#define TETHER_PIDFD_INFO_CGROUPID (1UL << 2)
#define TETHER_PIDFD_INFO_EXIT (1UL << 3)

struct tether_pidfd_info {
	__u64 mask;
	__u64 cgroupid;
	__u32 pid;
	__u32 tgid;
	__u32 ppid;
	__u32 ruid;
	__u32 rgid;
	__u32 euid;
	__u32 egid;
	__u32 suid;
	__u32 sgid;
	__u32 fsuid;
	__u32 fsgid;
	__s32 exit_code;
	__u32 coredump_mask;
	__u32 __spare1;
};
#define TETHER_PIDFD_GET_INFO _IOWR(TETHER_PIDFS_IOCTL_MAGIC, 11, struct tether_pidfd_info)

struct tether_clone_args {
	__u64 flags;
	__u64 pidfd;
	__u64 child_tid;
	__u64 parent_tid;
	__u64 exit_signal;
	__u64 stack;
	__u64 stack_size;
	__u64 tls;
	__u64 set_tid;
	__u64 set_tid_size;
	__u64 cgroup;
};

struct kernel_caps {
	bool pidfs_ino;         /* fstat(pidfd).st_ino is a unique process key (>= 6.9) */
	bool pidfd_info;        /* PIDFD_GET_INFO ioctl (>= 6.13) */
	bool peer_pidfd;        /* SO_PEERPIDFD on Unix sockets (>= 6.5) */
	bool cgroup_v2;         /* a cgroup v2 hierarchy is mounted */
	char cgroup_root[256];  /* where: /sys/fs/cgroup or /sys/fs/cgroup/unified */
	char boot_id[37];       /* /proc/sys/kernel/random/boot_id */
	/* The prober's pid when /proc is a procfs of its own pid namespace
	 * (/proc/self names it), else 0. While getpid() still equals it, a
	 * pid we opened a pidfd from is the same number under /proc, and
	 * the pidfd's fdinfo need not be read to learn it. A forked child
	 * (another pid, maybe another pidns) sees a mismatch and falls back;
	 * a process that remounts /proc after probing must probe again. */
	pid_t procfs_self_pid;
	/* Not a kernel feature: TETHER_FORCE_FALLBACK=idfeed (or all) turns
	 * connect-time identity off, so every flow takes the holder search
	 * (net-supervisor/identity_feed.h). */
	bool no_idfeed;
	bool no_push; /* TETHER_FORCE_FALLBACK=push: no connect-time identity pushes (protocol 1.3) */
};

/* Probe the running kernel; honours TETHER_FORCE_FALLBACK. -errno only when
 * something every kernel has (pidfd_open, boot_id) is missing. */
int kernel_caps_probe(struct kernel_caps *caps);
/* Apply a fallback list such as "pidfs_ino,pidfd_info" to probed caps;
 * -EINVAL on an unknown word. */
int kernel_caps_force_fallback(struct kernel_caps *caps, const char *list);

int sys_pidfd_open(pid_t pid, unsigned int flags);
int sys_pidfd_send_signal(int pidfd, int sig, siginfo_t *info, unsigned int flags);
int sys_pidfd_getfd(int pidfd, int targetfd, unsigned int flags);
pid_t sys_clone3(struct tether_clone_args *args, size_t size);
/* 0 when the pidfd's process has not been reaped or exited yet (it may be a
 * zombie); -ESRCH when it has exited. Uses a zero-timeout poll. */
int pidfd_is_alive(int pidfd);
