#include "proto/mac.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

#define MAC_LABEL "tether-context-mac-v1"
#define KDF_CONTEXT "tthrmac1"

_Static_assert(PROTO_KX_PUBLIC_LEN == crypto_kx_PUBLICKEYBYTES, "kx public key size");
_Static_assert(sizeof(((struct mac_kx *)0)->sk) == crypto_kx_SECRETKEYBYTES, "kx secret key size");
_Static_assert(PROTO_MAC_KEY_LEN == crypto_auth_KEYBYTES, "mac key size");
_Static_assert(PROTO_MAC_LEN == crypto_auth_BYTES, "mac size");
_Static_assert(crypto_kx_SESSIONKEYBYTES == crypto_kdf_KEYBYTES, "kdf key size");

int mac_kx_generate(struct mac_kx *out)
{
	if (proto_crypto_init() < 0)
		return -EIO;
	return crypto_kx_keypair(out->pk, out->sk) == 0 ? 0 : -EIO;
}

void mac_kx_clear(struct mac_kx *kx) { sodium_memzero(kx, sizeof(*kx)); }

static void transcript(const uint8_t net_pk[PROTO_KX_PUBLIC_LEN], const uint8_t proc_pk[PROTO_KX_PUBLIC_LEN],
		       const uint8_t key_id[PROTO_KEY_ID_LEN], uint8_t out[2 * PROTO_KX_PUBLIC_LEN + PROTO_KEY_ID_LEN])
{
	memcpy(out, net_pk, PROTO_KX_PUBLIC_LEN);
	memcpy(out + PROTO_KX_PUBLIC_LEN, proc_pk, PROTO_KX_PUBLIC_LEN);
	memcpy(out + 2 * PROTO_KX_PUBLIC_LEN, key_id, PROTO_KEY_ID_LEN);
}

void mac_kx_sign(const struct sign_key *instance, const uint8_t net_pk[PROTO_KX_PUBLIC_LEN],
		 const uint8_t proc_pk[PROTO_KX_PUBLIC_LEN], uint8_t sig[PROTO_SIG_LEN])
{
	uint8_t t[2 * PROTO_KX_PUBLIC_LEN + PROTO_KEY_ID_LEN];
	transcript(net_pk, proc_pk, instance->id, t);
	sign_detached(instance, SIGN_DOMAIN_MAC_KX, t, sizeof(t), sig);
}

bool mac_kx_verify(const struct pub_key *instance, const uint8_t net_pk[PROTO_KX_PUBLIC_LEN],
		   const uint8_t proc_pk[PROTO_KX_PUBLIC_LEN], const uint8_t sig[PROTO_SIG_LEN])
{
	uint8_t t[2 * PROTO_KX_PUBLIC_LEN + PROTO_KEY_ID_LEN];
	transcript(net_pk, proc_pk, instance->id, t);
	return verify_detached(instance, SIGN_DOMAIN_MAC_KX, t, sizeof(t), sig);
}

static void derive(const uint8_t session[crypto_kx_SESSIONKEYBYTES], uint8_t key[PROTO_MAC_KEY_LEN])
{
	crypto_kdf_derive_from_key(key, PROTO_MAC_KEY_LEN, 1, KDF_CONTEXT, session);
}

int mac_key_net(const struct mac_kx *net, const uint8_t proc_pk[PROTO_KX_PUBLIC_LEN],
		uint8_t key[PROTO_MAC_KEY_LEN])
{
	uint8_t rx[crypto_kx_SESSIONKEYBYTES], tx[crypto_kx_SESSIONKEYBYTES];
	if (crypto_kx_client_session_keys(rx, tx, net->pk, net->sk, proc_pk) != 0)
		return -EINVAL;
	derive(rx, key); /* proc -> net */
	sodium_memzero(rx, sizeof(rx));
	sodium_memzero(tx, sizeof(tx));
	return 0;
}

int mac_key_proc(const struct mac_kx *proc, const uint8_t net_pk[PROTO_KX_PUBLIC_LEN],
		 uint8_t key[PROTO_MAC_KEY_LEN])
{
	uint8_t rx[crypto_kx_SESSIONKEYBYTES], tx[crypto_kx_SESSIONKEYBYTES];
	if (crypto_kx_server_session_keys(rx, tx, proc->pk, proc->sk, net_pk) != 0)
		return -EINVAL;
	derive(tx, key); /* proc -> net */
	sodium_memzero(rx, sizeof(rx));
	sodium_memzero(tx, sizeof(tx));
	return 0;
}

static void mac_compute(const uint8_t key[PROTO_MAC_KEY_LEN], const uint8_t *ctx, size_t len,
			uint8_t mac[PROTO_MAC_LEN])
{
	crypto_auth_hmacsha512256_state st;
	crypto_auth_hmacsha512256_init(&st, key, PROTO_MAC_KEY_LEN);
	crypto_auth_hmacsha512256_update(&st, (const uint8_t *)MAC_LABEL, sizeof(MAC_LABEL));
	crypto_auth_hmacsha512256_update(&st, ctx, len);
	crypto_auth_hmacsha512256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

void context_mac(const uint8_t key[PROTO_MAC_KEY_LEN], const uint8_t *ctx, size_t len, uint8_t mac[PROTO_MAC_LEN])
{
	mac_compute(key, ctx, len, mac);
}

bool context_mac_verify(const uint8_t key[PROTO_MAC_KEY_LEN], const uint8_t *ctx, size_t len,
			const uint8_t mac[PROTO_MAC_LEN])
{
	uint8_t want[PROTO_MAC_LEN];
	mac_compute(key, ctx, len, want);
	bool ok = sodium_memcmp(want, mac, PROTO_MAC_LEN) == 0;
	sodium_memzero(want, sizeof(want));
	return ok;
}

void push_nonce(const uint8_t seed[PROTO_PUSH_SEED_LEN], uint64_t push_id, uint8_t nonce[32])
{
	static const char label[] = "tether-push-nonce-v1"; /* with its NUL */
	uint8_t in[sizeof(label) + PROTO_PUSH_SEED_LEN + 8];
	memcpy(in, label, sizeof(label));
	memcpy(in + sizeof(label), seed, PROTO_PUSH_SEED_LEN);
	for (int i = 0; i < 8; i++)
		in[sizeof(label) + PROTO_PUSH_SEED_LEN + i] = (uint8_t)(push_id >> (56 - 8 * i));
	crypto_generichash(nonce, 32, in, sizeof(in), NULL, 0);
}
