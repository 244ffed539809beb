/* Connect-time attribution through seccomp user notification.
 *
 * Every spawned tree carries a filter whose connect(2) is SECCOMP_RET_USER_
 * NOTIF; its listener fd is added here and watched on the supervisor's
 * libuv loop. For each notification the notifier: opens a pidfd for the
 * caller's thread group, identifies it, checks with
 * SECCOMP_IOCTL_NOTIF_ID_VALID that the caller is still that very task
 * blocked in connect (so the pid could not have been reused in between),
 * duplicates the socket argument with pidfd_getfd, reads SO_COOKIE, always
 * answers SECCOMP_USER_NOTIF_FLAG_CONTINUE, and hands (cookie, ref) to
 * ops.record (normally the cookie registry). With pidfs keys and our own
 * /proc (the fast path) only the key (fstat of the pidfd) and the exe
 * tuple are read while the caller is blocked; the rest of the ref
 * (ops.identify) is read after CONTINUE through the pinned pidfd, and a
 * caller already gone by then is recorded with what was proven (key, pid,
 * exe). Otherwise ops.identify runs before ID_VALID.
 * Nothing is decided from pointer arguments: only the fd number is read.
 * Any failure still continues the connect (attribution then falls back to
 * holder search) and is counted. A listener ends when its tree is gone
 * (POLLHUP). If the supervisor dies, every listener closes and notified
 * connects fail with ENOSYS: fail closed. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/kernel.h"
#include "identity/procref.h"

struct notifier_ops {
	/* Fill *out from the caller's pidfd (the callee dups it). -errno. */
	int (*identify)(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out);
	/* Record the attribution; ref->pidfd stays owned by the notifier. */
	int (*record)(void *user, uint64_t cookie, const struct procref *ref);
	void (*release)(void *user, struct procref *ref); /* procref_close */
	void *user;
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
	uint64_t handle_ns;     /* total time from RECV to SEND (the caller is blocked) */
	uint64_t handle_cpu_ns; /* CPU time of the whole handling, the part after SEND included */
	bool sync_wakeup;       /* SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP in use */
};

struct notifier;

/* The identify step the daemon uses: the ProcessRef through the pidfd
 * without the maps scan (PROCREF_NO_EXE), plus the exe tuple as of this
 * connect from a stat and a readlink of /proc/<pid>/exe - the cheap parts,
 * because the caller is blocked meanwhile. maps_mismatch is not checked
 * here (the identity service verifies the image at decision time). */
int notifier_identify_default(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out);

int notifier_new(uv_loop_t *loop, const struct kernel_caps *caps, const struct notifier_ops *ops,
		 struct notifier **out);
/* Watch a listener; takes ownership of fd (closed on error too). */
int notifier_add_listener(struct notifier *n, int fd);
/* Handle one pending notification on fd synchronously (tests, benchmarks).
 * 0 handled, -ENOENT the caller is gone, other -errno. */
int notifier_handle(struct notifier *n, int fd);
const struct notifier_stats *notifier_stats(const struct notifier *n);
/* Stop watching and close every listener; the notifier is freed once libuv
 * has closed its handles (run the loop). Pending connects then get ENOSYS. */
void notifier_close(struct notifier *n);
