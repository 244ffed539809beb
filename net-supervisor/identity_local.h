/* `local` identity strategy (combined, shared-pid, vm-local): the
 * net-supervisor shares the PID namespace with the proc-supervisor (the
 * anchor) and reads identity itself from procfs.
 *
 * Anchor: either a pid (combined: the proc-supervisor spawned us, it is our
 * parent) opened as a pidfd, or the process at the other end of a Unix
 * socket we connect to (shared-pid), identified by SO_PEERPIDFD — or, when
 * kernel_caps.peer_pidfd is false, SO_PEERCRED's pid whose start_time must
 * not be later than our connect (a pid reused after the connect is
 * refused). Its running image's SHA-256 must equal expected_sha256, else
 * there is no anchor (not ready; the reason is logged and reported through
 * on_anchor_refused). The anchor is watched through its pidfd: its exit
 * drops the anchor (socket mode then retries).
 *
 * Per flow, all on the libuv thread pool: the accepted socket's tuple
 * (client -> proxy) -> sock_diag in the workload's netns (workload_netns, or
 * ours) -> holder search among the anchor's live descendants (found through
 * /proc/<pid>/task/<tid>/children from the anchor down, never all of /proc)
 * -> ancestry walk to the anchor -> optional cgroup check -> SHA-256 of the
 * subject's and the ancestors' running images (hash cache) -> flow_identity
 * with source local_procfs. Any failure is the walk's / attribution's
 * reason word. Each pool thread has its own sock_diag handle and a small
 * verified-flow cache (socket cookie -> pinned subject and chain): a flow
 * resolved again is re-proved (same socket in the same fd slot, no process
 * created since the holder scan or the same member set, same exe file and
 * label for every process, same live ppid chain, anchor alive) instead of
 * re-walked; any change takes the full path (identity_local.c). 
 *
 * WHAT LOCAL CANNOT SEE (compared with delegated): the proc-supervisor's
 * member table and cookie registry live in another process. Membership here
 * is the *live* ppid chain through the anchor ("live-chain" membership): a
 * process adopted by the anchor (nsenter'd orphan) is indistinguishable from
 * one it spawned, and a socket is attributable only while some descendant
 * still holds it (connect-and-exit, or a socket handed out of the tree, is
 * identity_unavailable). With sandbox_cgroup set, the subject must also sit
 * in that cgroup or below, which catches runtime-exec'd strangers. */
#pragma once

#include <sys/types.h>

#include "common/kernel.h"
#include "net-supervisor/identity_strategy.h"

struct identity_local_config {
	const struct kernel_caps *caps; /* borrowed, must outlive the strategy; NULL: probe */
	pid_t anchor_pid;               /* > 0: the anchor (combined) */
	const char *anchor_socket;      /* "unix:PATH" (or a bare path): connect, identify the peer */
	const char *expected_sha256;    /* required: lower/upper-case hex of the anchor's image */
	const char *workload_netns;     /* nsfs path for sock_diag (/proc/<pid>/ns/net,
					   /run/netns/NAME); NULL: our own netns */
	const char *sandbox_cgroup;     /* as /proc/<pid>/cgroup prints it ("/tether/sbx1"); NULL: no check */
	uint64_t retry_ms;              /* socket mode: retry after a failure or anchor exit; 0: 500 */
	size_t max_candidates;          /* descendant scan bound; 0: 65536 */
	bool measure_cpu;               /* fill identity_local_stats.cpu_ns (two
					   clock_gettime syscalls per resolution) */
	/* Connect-time identity: the anchor's identity feed ("unix:PATH", the
	 * proc-supervisor's --identity-feed), read only from a peer that is
	 * the established anchor (identity_feed.h). A flow whose socket the
	 * feed names is answered from it; any other takes the path above.
	 * NULL: no feed. feed_wait_ms: how long a flow the feed has not
	 * mentioned yet waits for it (0: 3 ms). */
	const char *identity_feed;
	uint64_t feed_wait_ms;
	/* Another local strategy (the main worker's, --workers) whose feed
	 * subscription this one shares (a view of it, identity_feed.h) instead
	 * of opening its own; NULL: its own. Read only here, in
	 * identity_local_new (either may be destroyed first: the shared table
	 * lives until its last user closed). */
	const struct identity_strategy *feed_owner;
	bool pool_only;                 /* never answer on the loop: every flow
					   through the thread pool (tests) */
	/* The anchor was refused (or lost): reason word and a one-line detail.
	 * May be NULL. Called on the loop. */
	void (*on_anchor_refused)(enum reason why, const char *detail, void *data);
	void *data;
};

int identity_local_new(uv_loop_t *loop, const struct identity_local_config *cfg,
		       struct identity_strategy **out);

/* The default expected anchor digest: SHA-256 of the proc-supervisor
 * installed beside this executable (dirname(/proc/self/exe)/proc-supervisor).
 * path (may be NULL) receives that path. BLOCKING (hashes a file): call at
 * startup, before the loop runs. -errno when it cannot be read. */
int identity_local_default_expected(char out[65], char *path, size_t path_size);

/* The last reason the anchor was refused or lost ("" when none). */
const char *identity_local_anchor_error(const struct identity_strategy *s);

/* Latency split of the last resolutions, for tests and benchmarks. */
struct identity_local_stats {
	uint64_t resolved, denied;
	uint64_t attribute_ns, walk_ns, hash_ns; /* sums over resolved requests (wall clock) */
	uint64_t cpu_ns;                          /* worker-thread CPU time, same requests
						     (only with config.measure_cpu) */
	uint64_t fast_hits;                       /* resolved by re-proving a cached flow */
	uint64_t pinned_holders;                  /* holders verified from a pinned process */
	uint64_t inline_answers;                  /* answered on the loop, no pool hop (of resolved+denied) */
	uint64_t inline_over_budget;              /* loop attempts that ran past the link budget
						     (then handed to the pool) */
	uint64_t feed_hits;                       /* answered from the identity feed (of resolved) */
	uint64_t feed_fallbacks;                  /* feed active, flow not in it: the path above */
};
struct idfeed_client_stats;
/* The identity feed's counters; false (zeroed) without a feed. */
bool identity_local_feed_stats(const struct identity_strategy *s, struct idfeed_client_stats *out);
/* false (and *out zeroed) when s is not the local strategy. */
bool identity_local_stats(const struct identity_strategy *s, struct identity_local_stats *out);
