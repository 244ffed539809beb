/* What the connect-notifier tests (test_notify.c, test_notify_cache.c)
 * share: a recorder of what the notifier attributes, the world the tests
 * run in (server, filter, loop, notifier), the child side of a workload
 * under the filter (its listener handed to the parent over a Unix socket),
 * and bounded waits for the listener and for notifications. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "identity/procref.h"
#include "proc-supervisor/notify.h"
#include "proc-supervisor/seccomp.h"

#define NOTIFY_REC_MAX 8

/* The records, in order; the notifier's ops.user. */
struct notify_rec {
	int n;
	uint64_t cookie[NOTIFY_REC_MAX];
	pid_t pid[NOTIFY_REC_MAX];
	char key[NOTIFY_REC_MAX][PROCREF_KEY_MAX];
	char exe[NOTIFY_REC_MAX][PATH_MAX]; /* the ref's exe path */
	uint64_t exe_ino[NOTIFY_REC_MAX];
	struct exe_tuple exe_tuple[NOTIFY_REC_MAX]; /* the ref's whole exe tuple */
	bool fail_identify; /* notify_rec_identify: the caller gone before its ref is completed */
};

/* ops.identify: procref_from_pidfd, or -ESRCH while rec->fail_identify. */
int notify_rec_identify(void *rec, const struct kernel_caps *caps, int pidfd, struct procref *out);
/* ops.record: appends (-ENOSPC when full). */
int notify_rec_record(void *rec, uint64_t cookie, const struct procref *ref);
/* ops.release */
void notify_rec_release(void *rec, struct procref *ref);

/* A test's world: the kernel's caps, a loopback server (port) the
 * children connect to, the workload filter with connect notification, a
 * loop, the recorder and a notifier recording into it. It must not move
 * (the notifier points into it). */
struct notify_world {
	struct kernel_caps caps;
	int srv, port;
	struct workload_filter f;
	uv_loop_t loop;
	struct notify_rec rec;
	struct notifier *n;
};

/* Set up the world with identify as ops.identify (notify_rec_identify or
 * notifier_identify_default). 0, or -1 after saying on stderr what failed. */
int notify_world_open(struct notify_world *w,
		      int (*identify)(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out));
/* The notifier closed, the loop run dry and closed, the filter freed. */
void notify_world_close(struct notify_world *w);

/* In a new child, over sock: the filter installed (no_new_privs, death
 * signal), its listener sent to the parent, then wait for the parent's
 * one-byte "go". Exits the child (90..93) on any failure. */
void notify_child_setup(const struct workload_filter *f, int sock);

/* Parent side: the listener fd the child sent (5 s at most), or -1. */
int notify_recv_listener(int sock);

/* Handle count notifications on lfd, each within 10 s. 0, -ETIMEDOUT or
 * notifier_handle's error. */
int notify_handle_n(struct notifier *n, int lfd, int count);

/* Copy everything in `in` to `out` (sendfile). 0 or -errno. */
int notify_copy_fd(int in, int out);
/* Copy a file to a new path (mode 0755, O_EXCL). 0 or -errno. */
int notify_copy_file(const char *from, const char *to);
