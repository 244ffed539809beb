/* Anchor certificates: "instance key K speaks for anchor A in PID namespace
 * N of boot B", signed by the provisioning key.
 *
 * cert_issue() runs on the proc side at start, with the provisioning secret
 * key. cert_verify() runs on the net side: the signature must be by one of
 * the pinned provisioning keys (each is tried; unauthenticated bytes are not
 * parsed before a signature matched), then the certificate is decoded and
 * validated. Whether it is valid *now* is cert_time_check(). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/reason.h"
#include "identity/procref.h"
#include "proto/context.h"
#include "proto/keys.h"
#include "proto/signed.h"

#define PROTO_CERT_DEFAULT_VALIDITY_NS (30ull * 24 * 3600 * 1000000000ull)

/* nsfs identity of a PID namespace: stat(/proc/<pid>/ns/pid). */
struct pidns_id {
	uint64_t dev;
	uint64_t ino;
};

struct anchor_cert {
	uint32_t version_major, version_minor;
	struct pub_key instance;
	struct procref anchor; /* recorded */
	char boot_id[37];
	struct pidns_id pidns;
	enum proto_topology topology;
	uint64_t issued_at_ns, not_after_ns;
	uint8_t provisioning_key_id[PROTO_KEY_ID_LEN];
};

struct cert_input {
	const struct pub_key *instance;
	const struct procref *anchor;
	const char *boot_id; /* NULL: anchor->boot_id */
	struct pidns_id pidns;
	enum proto_topology topology;
	uint64_t issued_at_ns; /* 0: now */
	uint64_t validity_ns;  /* 0: PROTO_CERT_DEFAULT_VALIDITY_NS */
};

/* -errno from stat. */
int pidns_id_of_pid(pid_t pid, struct pidns_id *out);

/* Serialize and sign with the provisioning key; out owns its bytes. */
int cert_issue(const struct sign_key *provisioning, const struct cert_input *in,
	       struct signed_cert *out);
/* REASON_OK and *out filled, or REASON_ANCHOR_CERTIFICATE_INVALID (bad
 * signature, unknown provisioning key, unknown major version, malformed). */
enum reason cert_verify(const struct pub_key *pinned, size_t n_pinned, const struct signed_cert *sc,
			struct anchor_cert *out);
/* REASON_OK when issued_at - skew <= now <= not_after + skew, else
 * REASON_ANCHOR_CERTIFICATE_INVALID. */
enum reason cert_time_check(const struct anchor_cert *c, uint64_t now_ns, uint64_t skew_ns);
