/* attribute: which verified process owns a flow.
 *
 * flow tuple -> sock_diag (inode, uid, cookie) -> the cookie registry
 * (who connected it, recorded at connect time) -> else a holder search
 * among the caller's member pids -> every holder verified. Fail closed:
 *   - no socket for the tuple, or no member holds it: identity_unavailable
 *     (a socket handed to a process outside the members by SCM_RIGHTS
 *     lands here);
 *   - holders running different binaries (exe tuple, path, or hash when
 *     both are hashed): ambiguous_socket_owner;
 *   - several holders of the same binary (fork sharing): attributed to the
 *     first verified holder, n_holders says how many;
 *   - a registry hit is attributable even after the connector exited (its
 *     record is the evidence); subject_alive says whether it still runs;
 *     see attribute_ctx_set_registry_holder_check for the strict variant.
 *
 * A context owns one sock_diag handle and one holder cache and is NOT
 * thread-safe (one per thread); the registry it borrows is. It answers for
 * the network namespace it was created in. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "identity/cookies.h"
#include "identity/holders.h"
#include "identity/procref.h"
#include "identity/sockdiag.h"

enum attribution_source {
	ATTRIBUTION_SOURCE_NONE = 0,
	ATTRIBUTION_SOURCE_REGISTRY,      /* the cookie registry */
	ATTRIBUTION_SOURCE_HOLDER_SEARCH, /* members' fd tables */
};

struct attribution {
	enum reason reason; /* REASON_OK when attributed */
	enum attribution_source source;
	bool socket_found;
	struct sockdiag_result sock; /* valid when socket_found */
	/* The subject. From the registry: a recorded ref (pidfd -1). From a
	 * holder search: a live ref owning its pidfd. */
	struct procref subject;
	bool subject_alive;
	size_t n_holders;  /* verified holders seen (registry: 0) */
	bool cache_hit;    /* holder search answered by the revalidated cache */
	size_t n_pinned;   /* holders that were the caller's pinned processes */
	int subject_fd;    /* holder search: the fd slot the subject was verified holding it in; -1 unknown */
};

struct attribute_ctx;

/* caps is borrowed (must outlive ctx); reg is borrowed and may be NULL (no
 * registry: holder search only). NULL with errno on failure. */
struct attribute_ctx *attribute_ctx_new(const struct kernel_caps *caps, struct cookie_registry *reg);
void attribute_ctx_free(struct attribute_ctx *ctx);
/* The holder cache, for benchmarks and tests that need a cold path. */
void attribute_ctx_clear_cache(struct attribute_ctx *ctx);
/* Whether a registry hit checks that the recorded process still runs
 * (fills subject_alive; costs a pidfd open). Default on. */
void attribute_ctx_set_check_alive(struct attribute_ctx *ctx, bool on);

/* Strict registry use (default off). Off: a registry hit names the
 * recorded connector even if it exited or no longer holds the socket — so
 * a connector that hands its connected socket to a non-member (SCM_RIGHTS)
 * before the first request still gets the flow attributed to itself. On: a
 * hit counts only while the connector still runs and holds the socket
 * (pidfd-pinned fd check); otherwise the holder search decides, which
 * denies the hand-off (and also connect-and-exit with no member holder). */
void attribute_ctx_set_registry_holder_check(struct attribute_ctx *ctx, bool on);

/* The holder search's fd-link budget (holders_set_link_budget): past it
 * attribution fails with -E2BIG. */
void attribute_ctx_set_link_budget(struct attribute_ctx *ctx, size_t links);
/* The holder search's pinned processes (holders_set_pinned). */
void attribute_ctx_set_pinned(struct attribute_ctx *ctx, holders_pinned_fn fn, void *userdata);

/* Attribute the flow. 0 when attributed (out->reason == REASON_OK); a
 * negative errno otherwise, with out->reason the deny reason:
 * -ENOENT no socket, -ESRCH no member holds it (both identity_unavailable),
 * -ENOTUNIQ ambiguous_socket_owner, other -errno identity_unavailable.
 * Always release out with attribution_release (closes the subject's pidfd). */
int attribute_flow(struct attribute_ctx *ctx, const struct flow_tuple *t, const pid_t *members,
		   size_t n_members, struct attribution *out);
/* attribute_flow for a socket the caller already looked up with its own
 * sock_diag handle in the same netns (saves the second query); the rest is
 * identical. */
int attribute_flow_sock(struct attribute_ctx *ctx, const struct sockdiag_result *sock,
			const pid_t *members, size_t n_members, struct attribution *out);
void attribution_release(struct attribution *out);

const char *attribution_source_word(enum attribution_source s); /* "registry", "holder_search", "none" */

/* Same binary for policy purposes: same exe file version (dev, ino, size,
 * mtime, ctime), same path, and same sha256 when both are hashed. */
bool attribute_same_binary(const struct procref *a, const struct procref *b);
