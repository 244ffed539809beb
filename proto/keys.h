/* Ed25519 keys: the per-run instance key and the long-term provisioning key.
 *
 * Secret keys live in sodium_malloc() memory (guard pages, mlock'd, zeroed
 * on free) and are never written anywhere except by provkey_write_files().
 * Key id = the first 16 bytes of BLAKE2b (crypto_generichash) of the public
 * key; hex when printed.
 *
 * Every signature is over a domain label followed by the exact bytes
 * signed ("tether-context-v1\0" + context bytes, "tether-anchor-cert-v1\0" +
 * certificate bytes), so a signature made for one purpose is never valid
 * for another; verification takes the received bytes as they are.
 *
 * Key files (docs/protocol.md): two lines each,
 *   provisioning.pub: "tether-provisioning-public-v1\n<64 hex: public key>\n"
 *   provisioning.key: "tether-provisioning-secret-v1\n<64 hex: seed>\n" (0600)
 * A secret key file readable by group or others is refused. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/context.h"

#define PROTO_PUBKEY_LEN 32
#define PROTO_SIG_LEN 64
#define PROTO_KEY_ID_HEX (2 * PROTO_KEY_ID_LEN + 1)

enum sign_domain { SIGN_DOMAIN_CONTEXT, SIGN_DOMAIN_CERTIFICATE, SIGN_DOMAIN_CLOCK, SIGN_DOMAIN_MAC_KX };

struct sign_key {
	uint8_t pk[PROTO_PUBKEY_LEN];
	uint8_t sk[64];
	uint8_t id[PROTO_KEY_ID_LEN];
};

struct pub_key {
	uint8_t pk[PROTO_PUBKEY_LEN];
	uint8_t id[PROTO_KEY_ID_LEN];
};

/* Initialize libsodium once (idempotent, thread-safe); -EIO on failure. */
int proto_crypto_init(void);

/* A fresh random key in locked memory (the instance key). */
int sign_key_generate(struct sign_key **out);
/* Deterministic key from a 32-byte seed (provisioning key files, tests). */
int sign_key_from_seed(const uint8_t seed[32], struct sign_key **out);
/* Zero and free; NULL is fine. */
void sign_key_free(struct sign_key *k);
void sign_key_freep(struct sign_key **k);
void sign_key_public(const struct sign_key *k, struct pub_key *out);

void key_id_compute(const uint8_t pk[PROTO_PUBKEY_LEN], uint8_t id[PROTO_KEY_ID_LEN]);
void key_id_hex(const uint8_t id[PROTO_KEY_ID_LEN], char out[PROTO_KEY_ID_HEX]);
void pub_key_from_bytes(const uint8_t pk[PROTO_PUBKEY_LEN], struct pub_key *out);

void sign_detached(const struct sign_key *k, enum sign_domain d, const uint8_t *msg, size_t len,
		   uint8_t sig[PROTO_SIG_LEN]);
/* true when sig is k's signature over (domain, msg). */
bool verify_detached(const struct pub_key *k, enum sign_domain d, const uint8_t *msg, size_t len,
		     const uint8_t sig[PROTO_SIG_LEN]);

/* Write DIR/provisioning.key (0600) and DIR/provisioning.pub (0644) for a
 * fresh key. Creates DIR (0700) if missing. -EEXIST when either file
 * exists (never overwrites). *id_out, if given, gets the key id. */
int provkey_write_files(const char *dir, uint8_t id_out[PROTO_KEY_ID_LEN]);
/* -EPERM when the file is group/world readable or not a regular file,
 * -EBADMSG on a bad format, -errno from open. */
int provkey_load_secret(const char *path, struct sign_key **out);
int provkey_load_public(const char *path, struct pub_key *out);
