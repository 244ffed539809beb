/* Connect-time attribution through seccomp user notification.
 *
 * Every spawned tree carries a filter whose connect(2) is SECCOMP_RET_USER_
 * NOTIF; its listener fd is added here and watched on the supervisor's
 * libuv loop. For each notification the notifier, while the caller is
 * blocked: pins the caller (pidfd of its thread group, plus a thread pidfd
 * for a non-leader thread), takes the socket argument with pidfd_getfd,
 * captures the exe tuple as of this connect, proves with
 * SECCOMP_IOCTL_NOTIF_ID_VALID - after the pidfd and the fd were taken -
 * that the caller is still that very task blocked in connect (so neither
 * the pid nor the fd table can have belonged to another process), and
 * reads SO_COOKIE. Then it answers SECCOMP_USER_NOTIF_FLAG_CONTINUE and,
 * in the same loop callback (before any other event is served), checks the
 * socket is inet, closes its duplicate, completes the ProcessRef and hands
 * (cookie, ref) to ops.record (normally the cookie registry).
 *
 * Caller cache (fast path: pidfs keys and our own /proc). Callers are
 * cached by thread id with their pidfds, key, completed ref and exe tuple,
 * so a repeated connect by the same thread costs, while it is blocked:
 * pidfd_getfd on the cached pidfd, one stat of /proc/<tid>/exe, ID_VALID
 * and SO_COOKIE. Why that is still exact:
 *  - identity: pidfd_getfd on a pidfd whose process (or thread) is gone
 *    fails with ESRCH, and then the entry is dropped and the caller opened
 *    afresh. If it succeeds and ID_VALID succeeds afterwards, the tid was
 *    held by the blocked caller throughout, and a live pidfd for that
 *    number can only be the caller's: the cached key is the caller's key.
 *  - image: the stat of /proc/<tid>/exe is the running image now (exec
 *    replaces it; the caller cannot exec while blocked, and a sibling
 *    thread's exec kills the caller first, which ID_VALID then sees). If
 *    (dev, ino, size, mtime, ctime) and "unlinked" all match the cached
 *    tuple (exe_tuple_matches_stat) it is the same file in the same
 *    version, and the cached path label is kept; otherwise the image is
 *    captured again. link, unlink and
 *    rename change ctime, so a renamed or unlinked image is relabelled too.
 *  - the rest of the ref: pid, key, start time and procfs pid are fixed
 *    for a process; ppid, credentials and cgroup are refreshed with
 *    PIDFD_GET_INFO after CONTINUE where available; comm is the one read
 *    when the ref was last completed (first connect, or the first after an
 *    exec).
 * Without pidfs keys or with a foreign /proc nothing is cached and the
 * whole ref (ops.identify) is read before ID_VALID.
 *
 * Nothing is decided from pointer arguments: only the fd number is read.
 * Any failure still continues the connect (attribution then falls back to
 * holder search) and is counted. A listener ends when its tree is gone
 * (POLLHUP). If the supervisor dies, every listener closes and notified
 * connects fail with ENOSYS: fail closed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

#include "common/kernel.h"
#include "identity/procref.h"

struct notifier_ops {
	/* Fill *out from the caller's pidfd (the callee dups it). -errno. */
	int (*identify)(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out);
	/* Record the attribution; ref->pidfd (-1, or the caller's live pidfd)
	 * stays owned by the notifier. */
	int (*record)(void *user, uint64_t cookie, const struct procref *ref);
	void (*release)(void *user, struct procref *ref); /* procref_close */
	void *user;
	/* Optional: a connect to an inet destination that is neither loopback
	 * nor an allowed one (notifier_allow_destination): an attempt to go
	 * around the proxy, which the nftables fences refuse. Called after
	 * CONTINUE, once per such connect; ref is the caller's (NULL when it
	 * could not be had); sotype SOCK_STREAM, SOCK_DGRAM, ... (0 unknown).
	 * dst was read from the caller's memory while it was blocked, before
	 * ID_VALID: a hostile thread can change it between our read and the
	 * kernel's, so it is evidence, never a decision. */
	void (*bypass)(void *user, const struct sockaddr_storage *dst, int sotype, const struct procref *ref);
	/* Optional: after record succeeded, the socket itself (our dup of the
	 * caller's inet socket, still owned by the notifier: dup it to keep
	 * it). The caller's connect has been CONTINUEd; it may not have run
	 * yet. Used to learn the flow's tuple (delegated pushes, idservice.h). */
	void (*record_sock)(void *user, uint64_t cookie, int sockfd);
	/* Optional: whether record_sock wants sockets now (NULL: whenever it
	 * is set). Asked after CONTINUE: when it does not, our duplicate is
	 * closed at once, so the workload's socket has no second holder
	 * while the connect proceeds (a holder search would see two). */
	bool (*wants_sock)(void *user);
};

struct notifier_stats {
	uint64_t notifications; /* received */
	uint64_t recorded;      /* cookie -> ref handed to ops.record */
	uint64_t not_inet;      /* non-socket fd or non-inet socket: continued */
	uint64_t stale;         /* caller vanished before we were sure (id no longer valid) */
	uint64_t failures;      /* identification/dup/cookie/record failed: continued */
	uint64_t respond_errors;
	uint64_t listeners;     /* currently watched */
	uint64_t late_partial;  /* fast path: the caller was gone before its ref was completed;
				   recorded with the key, pid and image proven while it was blocked */
	uint64_t handle_ns;     /* total time from RECV to the SEND call (the caller is blocked) */
	uint64_t after_ns;      /* total time after SEND returned (ref completion, record) */
	bool sync_wakeup;       /* SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP in use */
	/* Caller cache (appended). */
	uint64_t cache_hits;    /* the caller's cached pidfd and key were reused */
	uint64_t cache_misses;  /* the caller was opened afresh */
	uint64_t cache_stale;   /* a cached pidfd was of a gone process (tid reused): reopened */
	uint64_t exe_changed;   /* a cached caller's image differed (exec): re-read */
	/* Bypass reports (appended). */
	uint64_t bypass_attempts; /* ops.bypass calls */
	uint64_t dst_unread;      /* the sockaddr could not be read from the caller */
};

struct notifier;

/* The identify step the daemon uses: the ProcessRef through the pidfd
 * without the maps scan (PROCREF_NO_EXE), plus the exe tuple as of this
 * connect by exe_capture_pid(EXE_CAPTURE_CHEAP): the strict readers' rules
 * for path, deleted and memfd, without the open and the maps scan
 * (identity/exe.h says what differs; the identity service verifies the image
 * at decision time). On the fast path only its ProcessRef part runs, after
 * CONTINUE; the caller cache captures with the same function. */
int notifier_identify_default(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out);

int notifier_new(uv_loop_t *loop, const struct kernel_caps *caps, const struct notifier_ops *ops,
		 struct notifier **out);
/* Callers kept in the cache (default NOTIFIER_CACHE_DEFAULT, at most
 * NOTIFIER_CACHE_MAX; 0 = no cache: every connect opens its caller, as a
 * first connect does). Shrinking drops the entries above the new size. */
#define NOTIFIER_CACHE_DEFAULT 64
#define NOTIFIER_CACHE_MAX 4096
int notifier_set_cache(struct notifier *n, size_t entries);
/* A destination a workload may connect to without a bypass report: the
 * proxy's listener, a DNS service. An unspecified address (0.0.0.0, ::)
 * allows the port on every address of that family. Until one is added no
 * connect is reported. -E2BIG past NOTIFIER_ALLOWED_MAX, -EAFNOSUPPORT for
 * a non-inet address. */
#define NOTIFIER_ALLOWED_MAX 8
int notifier_allow_destination(struct notifier *n, const struct sockaddr *sa, socklen_t len);
/* Watch a listener; takes ownership of fd (closed on error too). */
int notifier_add_listener(struct notifier *n, int fd);
/* Handle one pending notification on fd synchronously (tests, benchmarks).
 * 0 handled, -ENOENT the caller is gone, other -errno. */
int notifier_handle(struct notifier *n, int fd);
const struct notifier_stats *notifier_stats(const struct notifier *n);
/* Stop watching and close every listener; the notifier is freed once libuv
 * has closed its handles (run the loop). Pending connects then get ENOSYS. */
void notifier_close(struct notifier *n);
