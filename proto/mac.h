/* Per-channel MAC keys (protocol 1.2, docs/protocol.md "MAC'd answers").
 *
 * At the channel handshake each side makes an ephemeral X25519 key pair
 * (libsodium crypto_kx): the net side sends its public key in Hello, the
 * proc side answers with its own in the HelloAck, together with an Ed25519
 * signature by its instance key (the key the anchor certificate vouches
 * for) over ("tether-mac-kx-v1\0", net public key, proc public key,
 * instance key id). Both sides derive the crypto_kx session key in the
 * proc -> net direction and from it, with crypto_kdf (context "tthrmac1",
 * subkey 1), the channel's MAC key. Only the anchor's instance and this
 * net side know it, and it lives only as long as the channel.
 *
 * An identity answer on such a channel carries crypto_auth
 * (HMAC-SHA-512-256) over ("tether-context-mac-v1\0", the serialized
 * ProcessIdentityContext) in place of the Ed25519 signature; the signature
 * over the same bytes follows off the connect path (ContextSignature) for
 * the audit log. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/keys.h"

#define PROTO_KX_PUBLIC_LEN 32
#define PROTO_MAC_KEY_LEN 32
#define PROTO_MAC_LEN 32

struct mac_kx {
	uint8_t pk[PROTO_KX_PUBLIC_LEN];
	uint8_t sk[32];
};

/* A fresh ephemeral key pair; -EIO when libsodium is unusable. */
int mac_kx_generate(struct mac_kx *out);
/* Zero it. */
void mac_kx_clear(struct mac_kx *kx);

/* The proc side's transcript signature (instance key) and its check. */
void mac_kx_sign(const struct sign_key *instance, const uint8_t net_pk[PROTO_KX_PUBLIC_LEN],
		 const uint8_t proc_pk[PROTO_KX_PUBLIC_LEN], uint8_t sig[PROTO_SIG_LEN]);
bool mac_kx_verify(const struct pub_key *instance, const uint8_t net_pk[PROTO_KX_PUBLIC_LEN],
		   const uint8_t proc_pk[PROTO_KX_PUBLIC_LEN], const uint8_t sig[PROTO_SIG_LEN]);

/* The channel's MAC key, on the net side (crypto_kx client) and on the
 * proc side (crypto_kx server); both give the same key. -EINVAL for a bad
 * peer public key (crypto_kx refuses it). */
int mac_key_net(const struct mac_kx *net, const uint8_t proc_pk[PROTO_KX_PUBLIC_LEN],
		uint8_t key[PROTO_MAC_KEY_LEN]);
int mac_key_proc(const struct mac_kx *proc, const uint8_t net_pk[PROTO_KX_PUBLIC_LEN],
		 uint8_t key[PROTO_MAC_KEY_LEN]);

/* MAC over ("tether-context-mac-v1\0", context bytes) and its
 * constant-time check. */
void context_mac(const uint8_t key[PROTO_MAC_KEY_LEN], const uint8_t *ctx, size_t len, uint8_t mac[PROTO_MAC_LEN]);
bool context_mac_verify(const uint8_t key[PROTO_MAC_KEY_LEN], const uint8_t *ctx, size_t len,
			const uint8_t mac[PROTO_MAC_LEN]);

/* Protocol 1.3, connect-time identity pushes. The net side's Hello
 * carries a fresh random push seed; the context of push P carries the
 * nonce BLAKE2b-256("tether-push-nonce-v1\0" || seed || P as 8 big-endian
 * bytes) and request_id P. Push ids have PROTO_PUSH_ID_BIT set, so they
 * never equal a request id (a counter from 1) in the signature that
 * follows (bit 62, so that it stays a positive JSON integer in the audit). The verifier checks the nonce like a request's (freshness: a
 * seed of this channel's Hello) and keeps it in the replay window. */
#define PROTO_PUSH_SEED_LEN 32
#define PROTO_PUSH_ID_BIT (1ull << 62)
void push_nonce(const uint8_t seed[PROTO_PUSH_SEED_LEN], uint64_t push_id, uint8_t nonce[32]);
