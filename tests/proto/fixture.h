/* Shared test fixture for the delegation protocol: recorded procrefs, a
 * deterministic provisioning key, an instance key and its certificate, and
 * a signed context for a fixed flow. Used by tests/proto and fuzz/. */
#pragma once

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "proto/cert.h"
#include "proto/context.h"
#include "proto/keys.h"
#include "proto/signer.h"

#define FIX_BOOT "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
#define FIX_T0 1764000000000000000ull /* a fixed wall-clock time (ns) */

static inline void fix_ref(struct procref *r, pid_t pid, uint64_t ino, const char *path)
{
	memset(r, 0, sizeof(*r));
	r->pidfd = -1;
	strcpy(r->boot_id, FIX_BOOT);
	r->key_kind = PROCREF_KEY_PIDFS;
	r->pidfs_ino = ino;
	r->pid = pid;
	r->ppid = pid > 1 ? pid - 1 : 0;
	r->start_time = 1000 + (uint64_t)pid;
	r->ruid = r->euid = r->suid = r->fsuid = 1000;
	r->rgid = r->egid = r->sgid = r->fsgid = 1000;
	r->cgroup_id = 4242;
	r->info_source = PROCREF_SRC_PROCFS;
	strcpy(r->comm, "comm");
	r->exe.dev = 2049;
	r->exe.ino = ino * 7;
	r->exe.size = 12345;
	r->exe.mtime_ns = 1;
	r->exe.ctime_ns = 2;
	strcpy(r->exe.path, path);
	r->exe.hashed = true;
	memset(r->exe.sha256, (int)(ino & 0xff), 32);
	snprintf(r->key, sizeof(r->key), "%s:%llu", FIX_BOOT, (unsigned long long)ino);
}

struct fixture {
	struct sign_key *prov;
	struct pub_key prov_pub;
	struct sign_key *inst;
	struct pub_key inst_pub;
	struct procref subject, parent, anchor;
	struct proto_tuple tuple;
	uint8_t nonce[PROTO_NONCE_LEN];
	struct signed_cert cert;
};

static inline int fix_seeded_key(uint8_t fill, struct sign_key **out)
{
	uint8_t seed[32];
	memset(seed, fill, sizeof(seed));
	return sign_key_from_seed(seed, out);
}

/* Certificate issued at `t0`; pidns ino `ns`. */
static inline int fix_cert(struct fixture *f, const struct sign_key *prov, const struct sign_key *inst,
			   uint64_t t0, uint64_t ns, struct signed_cert *out)
{
	struct pub_key ip;
	sign_key_public(inst, &ip);
	struct cert_input ci = {
		.instance = &ip,
		.anchor = &f->anchor,
		.pidns = { .dev = 4, .ino = ns },
		.topology = PROTO_TOPOLOGY_SPLIT,
		.issued_at_ns = t0,
		.validity_ns = 3600ull * 1000000000ull,
	};
	return cert_issue(prov, &ci, out);
}

static inline int fix_init(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	if (fix_seeded_key(0x11, &f->prov) < 0 || fix_seeded_key(0x22, &f->inst) < 0)
		return -1;
	sign_key_public(f->prov, &f->prov_pub);
	sign_key_public(f->inst, &f->inst_pub);
	fix_ref(&f->subject, 300, 9003, "/usr/bin/curl");
	fix_ref(&f->parent, 200, 9002, "/bin/sh");
	fix_ref(&f->anchor, 100, 9001, "/usr/libexec/tether/proc-supervisor");
	proto_tuple_from_strings(&f->tuple, IPPROTO_TCP, "192.0.2.10", 40000, "198.51.100.7", 443);
	memset(f->nonce, 0xab, sizeof(f->nonce));
	return fix_cert(f, f->prov, f->inst, FIX_T0, 0xeffff, &f->cert);
}

static inline int fix_sign(const struct fixture *f, const struct sign_key *key, const uint8_t *nonce,
			   const struct proto_tuple *tuple, uint64_t issued_at, struct signed_context *out)
{
	struct context_input in = {
		.topology = PROTO_TOPOLOGY_SPLIT,
		.source = IDENTITY_SOURCE_DELEGATED,
		.subject = &f->subject,
		.ancestors = &f->parent,
		.n_ancestors = 1,
		.anchor = &f->anchor,
		.tuple = tuple ? tuple : &f->tuple,
		.socket_cookie = 77,
		.nonce = nonce ? nonce : f->nonce,
		.request_id = 5,
		.policy_generation = 3,
		.issued_at_ns = issued_at ? issued_at : FIX_T0 + 1000,
	};
	return context_sign(key ? key : f->inst, &in, out);
}

static inline void fix_free(struct fixture *f)
{
	sign_key_free(f->prov);
	sign_key_free(f->inst);
	signed_cert_clear(&f->cert);
}
