/* verify: a flow's tuple -> the verified process that holds its socket.
 *
 * One verifier holds what the answers share: the exe hash cache, the
 * anchor the chains must end at (with its membership table), and a set of
 * per-thread contexts. A context is what one thread needs to answer
 * without holding a lock across netlink or procfs I/O: its own sock_diag
 * handle and attribution context (holder cache), in the netns whose
 * sockets are asked about, and a small cache of flows it verified, each
 * with its subject and ancestors pinned by pidfds (chain.h):
 *
 *   flow_verifier_ctx_take -> flow_verifier_verify (as often as needed) -> flow_verifier_ctx_put
 *
 * Candidates, one source per verifier:
 *   FLOW_CANDIDATES_DESCENDANTS  the live descendants of an anchor the
 *       caller watches (/proc/<pid>/task/<tid>/children, breadth first),
 *       remembered per context while the host's fork count is unchanged;
 *       a context caches verified flows by socket cookie and the chains
 *       of their subjects (the net-supervisor's local strategy);
 *   FLOW_CANDIDATES_MEMBERS  the live members of a membership table whose
 *       anchor is the caller itself, with a connect-time cookie registry
 *       first when there is one; a context caches the pinned chains of
 *       the subjects it answered for, found again by subject or by
 *       parent (the proc-supervisor's identity service).
 *
 * flow_verifier_verify's outcomes:
 *   0        out->reason says: REASON_OK (out names the subject, its image
 *            and its ancestors below the anchor) or why not;
 *   -EAGAIN  only with a budget: answering needs more than it allows
 *            (listing the tree, a walk, hashing an image, more candidates
 *            or fd links than allowed; with the members source, always).
 *            Nothing was decided: ask again without a budget (a
 *            thread-pool thread).
 *
 * No libuv and no loop state: every function may run on any thread; the
 * anchor is set and cleared only while no verification runs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "identity/attribute.h"
#include "identity/cookies.h"
#include "identity/members.h"
#include "identity/procref.h"
#include "identity/sockdiag.h"

#define VERIFY_MAX_CONTEXTS 16

struct flow_verifier;
struct verify_ctx;

enum flow_candidates {
	FLOW_CANDIDATES_DESCENDANTS = 0,
	FLOW_CANDIDATES_MEMBERS,
};

struct flow_verifier_config {
	const struct kernel_caps *caps;
	enum flow_candidates candidates;
	/* DESCENDANTS: per-thread contexts made now, 1..VERIFY_MAX_CONTEXTS
	 * (a taker may wait for one). MEMBERS: 0, made on demand and kept (a
	 * taker never waits). */
	size_t n_contexts;
	size_t max_candidates;    /* descendants considered (0: 65536) */
	size_t hash_cache_entries; /* exe hash cache size (0: 1024) */
	bool measure_cpu;         /* fill verified_flow.t_cpu (two clock_gettime calls) */
	/* MEMBERS only. */
	struct cookie_registry *cookies; /* may be NULL */
	bool strict_socket_owner; /* a registry hit counts only while its process holds the socket */
	bool no_chain_cache;      /* walk every time (tests) */
};

/* Call in the netns whose sockets will be verified (netlink sockets answer
 * for the netns they were opened in; /proc is the same either way).
 * -errno when a context cannot be made. */
int flow_verifier_new(const struct flow_verifier_config *cfg, struct flow_verifier **out);
void flow_verifier_free(struct flow_verifier *v);

/* The anchor every chain must end at: a recorded copy is kept; anchor_pidfd
 * and table stay the caller's and must outlive their use (until the next
 * flow_verifier_set_anchor). NULL anchor: none (every verification fails
 * closed). MEMBERS: anchor_pidfd -1, the caller is the anchor, table the
 * candidates' table. Forgets every cached flow. Only while no
 * verification runs. */
void flow_verifier_set_anchor(struct flow_verifier *v, const struct procref *anchor, int anchor_pidfd,
			 struct members *table);

/* A free context; with wait the caller sleeps until one is put back, else
 * NULL when none is free (an event loop never waits). MEMBERS: a new one
 * when none is free; NULL (errno set) when it cannot be made. */
struct verify_ctx *flow_verifier_ctx_take(struct flow_verifier *v, bool wait);
void flow_verifier_ctx_put(struct flow_verifier *v, struct verify_ctx *c);

/* What the caller's thread may spend (an event loop's): candidates in the
 * tree and fd links read. */
struct verify_budget {
	size_t max_candidates;
	size_t max_links;
};

struct verified_hop {
	char *path; /* the hop's exe path, or its comm when it has none */
	int pid;
	char sha256[65]; /* "" when not hashed */
};

struct verified_flow {
	enum reason reason;
	/* REASON_OK: the subject and its ancestors (parent first, anchor excluded). */
	int pid;
	char sha256[65];
	char *binary_path;
	char *process_key;
	struct verified_hop *hops;
	size_t n_hops;
	/* How it was answered. */
	bool fast;          /* re-proved from a cached flow or chain */
	size_t pinned;      /* holders verified from a pinned process */
	bool over_budget;   /* the holder search ran past budget->max_links */
	uint64_t t_attr, t_walk, t_hash, t_cpu; /* ns */
	/* MEMBERS fills these instead of the names above: the records a
	 * signed context is made of (recorded copies, no pidfds). */
	char detail[200];                  /* why not, in a sentence */
	enum attribution_source source;
	bool have_subject;                 /* also when refused after attribution */
	struct procref subject;            /* its image hashed when REASON_OK */
	struct procref *ancestors;         /* parent first, anchor excluded */
	size_t n_ancestors;
	bool socket_found;
	uint64_t socket_cookie;            /* valid when socket_found */
	enum { FLOW_CHAIN_WALKED, FLOW_CHAIN_SUBJECT_HIT, FLOW_CHAIN_PARENT_HIT } chain;
};

/* See the outcomes above. budget NULL: unbounded. out is reset first (the
 * caller releases it with verified_flow_release either way). */
int flow_verifier_verify(struct flow_verifier *v, struct verify_ctx *c, const struct flow_tuple *ft,
		    const struct verify_budget *budget, struct verified_flow *out);

void verified_flow_release(struct verified_flow *f);

/* MEMBERS with a cookie registry: verify the process the registry recorded
 * for this socket cookie (its connector), without a tuple: the same walk,
 * image check and pinned chains as a registry hit of flow_verifier_verify
 * (the identity feed's worker, proc-supervisor/idpublish.h). 0 and
 * out->reason (REASON_OK or why not; identity_unavailable when the
 * registry has no such cookie); -EINVAL for a verifier of another kind. */
int flow_verifier_verify_cookie(struct flow_verifier *v, struct verify_ctx *c, uint64_t cookie,
				struct verified_flow *out);

/* Hash a recorded ancestor's image the way the walk's hops are hashed: the
 * hash cache for its exe tuple, else its live /proc/PID/exe, checked to be
 * still that tuple (-ESTALE) of still that process (-ESRCH). 0 with
 * h->exe.sha256/hashed set (already hashed: 0 at once); -errno otherwise,
 * h unhashed. Blocking (a worker thread's). A MEMBERS answer leaves
 * ancestors unhashed; a policy that pins an ancestor needs its hash. */
int flow_verifier_hash_hop(struct flow_verifier *v, struct procref *h);

/* DESCENDANTS contexts: the socket cookie of the flow's socket, one exact
 * sock_diag query in the context's netns. -ENOENT: no such socket. */
int flow_verifier_ctx_cookie(struct verify_ctx *c, const struct flow_tuple *ft, uint64_t *cookie);
