/* The two signed wrappers: SignedContext {context bytes, signature,
 * instance key id} and SignedCertificate {certificate bytes, signature}.
 * The typed form owns a copy of the signed bytes; pack/unpack give the
 * serialized wrapper that travels in IdentityResponse/HelloAck and is
 * written (base64) to the audit log. unpack checks only the wrapper's shape
 * (signature 64 bytes, key id 16, payload non-empty and at most
 * PROTO_MAX_SIGNED_LEN); whether the signature is good is the verifier's
 * job. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "proto/keys.h"

#define PROTO_MAX_SIGNED_LEN (60 * 1024)

struct signed_context {
	uint8_t *context;
	size_t context_len;
	uint8_t signature[PROTO_SIG_LEN];
	uint8_t key_id[PROTO_KEY_ID_LEN];
};

struct signed_cert {
	uint8_t *cert;
	size_t cert_len;
	uint8_t signature[PROTO_SIG_LEN];
};

/* *out malloc'd. */
int signed_context_pack(const struct signed_context *sc, uint8_t **out, size_t *len);
/* -EBADMSG on a malformed wrapper. */
int signed_context_unpack(const uint8_t *buf, size_t len, struct signed_context *out);
/* Copy (bytes duplicated). */
int signed_context_copy(struct signed_context *dst, const struct signed_context *src);
void signed_context_clear(struct signed_context *sc);

int signed_cert_pack(const struct signed_cert *sc, uint8_t **out, size_t *len);
int signed_cert_unpack(const uint8_t *buf, size_t len, struct signed_cert *out);
int signed_cert_copy(struct signed_cert *dst, const struct signed_cert *src);
void signed_cert_clear(struct signed_cert *sc);

/* Base64 (original alphabet, padded) of a packed wrapper, and back; for
 * the audit log fields `signed_context` and `anchor_certificate`.
 * *out malloc'd and NUL-terminated. */
int signed_base64_encode(const uint8_t *buf, size_t len, char **out);
int signed_base64_decode(const char *b64, uint8_t **out, size_t *len);
