/* ProcessIdentityContext: the typed form of what the proc side asserts about
 * the owner of one flow, and its wire encoding.
 *
 * context_encode() builds the protobuf from C structs (recorded procrefs) and
 * serializes it; context_decode() is the edge: it unpacks hostile bytes and
 * validates every field once into a struct identity_context (length limits,
 * enum ranges, sha256 exactly 32 bytes, nonce exactly 32 bytes, ancestors
 * bounded). Nothing downstream re-parses. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "identity/procref.h"
#include "proto/tuple.h"
#include "proto/version.h"


#define PROTO_NONCE_LEN 32
#define PROTO_KEY_ID_LEN 16
#define PROTO_MAX_ANCESTORS 64
#define PROTO_DEFAULT_LIFETIME_NS (5ull * 1000000000ull)

enum proto_topology {
	PROTO_TOPOLOGY_COMBINED = 1,
	PROTO_TOPOLOGY_SHARED_PID = 2,
	PROTO_TOPOLOGY_VM = 3,
	PROTO_TOPOLOGY_SPLIT = 4,
};

enum identity_source {
	IDENTITY_SOURCE_LOCAL_PROCFS = 1,
	IDENTITY_SOURCE_DELEGATED = 2,
};

/* "combined", "shared-pid", "vm", "split"; NULL for an invalid value. */
const char *proto_topology_word(enum proto_topology t);
/* 0 and *out set, or -EINVAL. */
int proto_topology_from_word(const char *w, enum proto_topology *out);
/* "local_procfs" / "delegated" (the audit identity_source words). */
const char *identity_source_word(enum identity_source s);

/* What the signer is given: borrowed pointers, nothing is copied. */
struct context_input {
	enum proto_topology topology;
	enum identity_source source;
	const struct procref *subject;
	const struct procref *ancestors; /* parent first, the anchor's child last */
	size_t n_ancestors;
	const struct procref *namespace_reference; /* may be NULL */
	const struct procref *anchor;
	const struct proto_tuple *tuple;
	uint64_t socket_cookie;
	const uint8_t *nonce; /* PROTO_NONCE_LEN bytes */
	uint64_t request_id;
	uint64_t policy_generation;
	uint64_t issued_at_ns;  /* 0: now (CLOCK_REALTIME) */
	uint64_t lifetime_ns;   /* 0: PROTO_DEFAULT_LIFETIME_NS */
};

/* A decoded, validated context. Refs are recorded refs (pidfd -1). */
struct identity_context {
	uint32_t version_major, version_minor;
	enum proto_topology topology;
	enum identity_source source;
	struct procref subject;
	struct procref *ancestors; /* n_ancestors entries, heap */
	size_t n_ancestors;
	bool has_namespace_reference;
	struct procref namespace_reference;
	struct procref anchor;
	struct proto_tuple tuple;
	uint64_t socket_cookie;
	uint8_t nonce[PROTO_NONCE_LEN];
	uint64_t request_id;
	uint64_t issued_at_ns, expires_at_ns;
	uint64_t policy_generation;
};

/* Serialize; *out is malloc'd. -EINVAL on a bad input (missing subject,
 * anchor, tuple or nonce; too many ancestors), -ENOMEM. */
int context_encode(const struct context_input *in, uint8_t **out, size_t *out_len);
/* Decode and validate. -EBADMSG malformed or invalid, -EPROTONOSUPPORT
 * unknown major version, -ENOMEM. On success *out must be context_free()d. */
int context_decode(const uint8_t *buf, size_t len, struct identity_context **out);
void context_free(struct identity_context *c);
