/* A verified flow identity: which process (binary, its image's digest,
 * its ancestors below the anchor) owns a flow, as an identity strategy
 * established it. Plain data: the network policy decides on it
 * (policy/netpolicy.h) without knowing how it was found, and the strategies
 * (net-supervisor/identity_strategy.h) produce it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum flow_source {
	FLOW_SOURCE_NONE = 0,
	FLOW_SOURCE_LOCAL_PROCFS,
	FLOW_SOURCE_DELEGATED,
	FLOW_SOURCE_STATIC_TEST,
	FLOW_SOURCE__COUNT
};
/* "local_procfs", "delegated", "static_test", "none" */
const char *flow_source_word(enum flow_source s);

struct flow_ancestor {
	char *path;
	int pid;
	char sha256[65]; /* "" when the strategy did not hash it */
};

/* A verified identity. Everything here was checked by the strategy; the
 * policy engine trusts it as is. */
struct flow_identity {
	char *binary_path;
	char sha256[65];             /* lower-case hex of the running image, or "" */
	int pid;                     /* as seen by the producer */
	char *process_key;           /* "<boot_id>:<pidfs ino>" or the fallback form */
	enum flow_source source;
	struct flow_ancestor *ancestors; /* parent first, up to (not incl.) the anchor */
	size_t n_ancestors;
	uint8_t *signed_context;     /* delegated: the serialized SignedContext, else NULL */
	size_t signed_context_len;
	/* delegated over a MAC'd channel (protocol 1.2): no signed_context yet;
	 * the signature over the same context comes later in the audit event
	 * `context_signed` with this request id. 0 otherwise. */
	uint64_t context_request_id;
	/* The strategy's anchor_epoch when the request started: which anchor
	 * instance vouched for this identity (set by the plumbing). */
	uint64_t anchor_epoch;
};

struct flow_identity *flow_identity_new(void);
struct flow_identity *flow_identity_dup(const struct flow_identity *id);
void flow_identity_free(struct flow_identity *id);
/* Append an ancestor (nearest first). -ENOMEM on failure. */
int flow_identity_add_ancestor(struct flow_identity *id, const char *path, int pid,
			       const char *sha256);
