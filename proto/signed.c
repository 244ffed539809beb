#include "proto/signed.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "identity.pb-c.h"
#include "proto/pbutil.h"

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
	uint8_t *d = malloc(n ? n : 1);
	if (d && n)
		memcpy(d, p, n);
	return d;
}

int signed_context_pack(const struct signed_context *sc, uint8_t **out, size_t *len)
{
	Tether__SignedContext m = TETHER__SIGNED_CONTEXT__INIT;
	m.context.data = sc->context;
	m.context.len = sc->context_len;
	m.signature.data = (uint8_t *)sc->signature;
	m.signature.len = PROTO_SIG_LEN;
	m.instance_key_id.data = (uint8_t *)sc->key_id;
	m.instance_key_id.len = PROTO_KEY_ID_LEN;
	size_t n = tether__signed_context__get_packed_size(&m);
	uint8_t *b = malloc(n);
	if (!b)
		return -ENOMEM;
	*len = tether__signed_context__pack(&m, b);
	*out = b;
	return 0;
}

int signed_context_unpack(const uint8_t *buf, size_t len, struct signed_context *out)
{
	memset(out, 0, sizeof(*out));
	Tether__SignedContext *m = tether__signed_context__unpack(NULL, len, buf);
	if (!m)
		return -EBADMSG;
	int r = -EBADMSG;
	if (m->context.len > 0 && m->context.len <= PROTO_MAX_SIGNED_LEN &&
	    m->signature.len == PROTO_SIG_LEN && m->instance_key_id.len == PROTO_KEY_ID_LEN &&
	    !pb_has_unknown_fields(&m->base)) {
		out->context = dup_bytes(m->context.data, m->context.len);
		if (!out->context) {
			r = -ENOMEM;
		} else {
			out->context_len = m->context.len;
			memcpy(out->signature, m->signature.data, PROTO_SIG_LEN);
			memcpy(out->key_id, m->instance_key_id.data, PROTO_KEY_ID_LEN);
			r = 0;
		}
	}
	tether__signed_context__free_unpacked(m, NULL);
	return r;
}

int signed_context_copy(struct signed_context *dst, const struct signed_context *src)
{
	*dst = *src;
	dst->context = dup_bytes(src->context, src->context_len);
	return dst->context ? 0 : -ENOMEM;
}

void signed_context_clear(struct signed_context *sc)
{
	free(sc->context);
	memset(sc, 0, sizeof(*sc));
}

int signed_cert_pack(const struct signed_cert *sc, uint8_t **out, size_t *len)
{
	Tether__SignedCertificate m = TETHER__SIGNED_CERTIFICATE__INIT;
	m.certificate.data = sc->cert;
	m.certificate.len = sc->cert_len;
	m.signature.data = (uint8_t *)sc->signature;
	m.signature.len = PROTO_SIG_LEN;
	size_t n = tether__signed_certificate__get_packed_size(&m);
	uint8_t *b = malloc(n);
	if (!b)
		return -ENOMEM;
	*len = tether__signed_certificate__pack(&m, b);
	*out = b;
	return 0;
}

int signed_cert_unpack(const uint8_t *buf, size_t len, struct signed_cert *out)
{
	memset(out, 0, sizeof(*out));
	Tether__SignedCertificate *m = tether__signed_certificate__unpack(NULL, len, buf);
	if (!m)
		return -EBADMSG;
	int r = -EBADMSG;
	if (m->certificate.len > 0 && m->certificate.len <= PROTO_MAX_SIGNED_LEN &&
	    m->signature.len == PROTO_SIG_LEN && !pb_has_unknown_fields(&m->base)) {
		out->cert = dup_bytes(m->certificate.data, m->certificate.len);
		if (!out->cert) {
			r = -ENOMEM;
		} else {
			out->cert_len = m->certificate.len;
			memcpy(out->signature, m->signature.data, PROTO_SIG_LEN);
			r = 0;
		}
	}
	tether__signed_certificate__free_unpacked(m, NULL);
	return r;
}

int signed_cert_copy(struct signed_cert *dst, const struct signed_cert *src)
{
	*dst = *src;
	dst->cert = dup_bytes(src->cert, src->cert_len);
	return dst->cert ? 0 : -ENOMEM;
}

void signed_cert_clear(struct signed_cert *sc)
{
	free(sc->cert);
	memset(sc, 0, sizeof(*sc));
}

int signed_base64_encode(const uint8_t *buf, size_t len, char **out)
{
	size_t n = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
	char *s = malloc(n);
	if (!s)
		return -ENOMEM;
	sodium_bin2base64(s, n, buf, len, sodium_base64_VARIANT_ORIGINAL);
	*out = s;
	return 0;
}

int signed_base64_decode(const char *b64, uint8_t **out, size_t *len)
{
	size_t sl = strlen(b64);
	if (sl > 4 * (PROTO_MAX_SIGNED_LEN + 1024) / 3 + 4)
		return -EMSGSIZE;
	uint8_t *b = malloc(sl / 4 * 3 + 3);
	if (!b)
		return -ENOMEM;
	size_t n = 0;
	const char *end = NULL;
	if (sodium_base642bin(b, sl / 4 * 3 + 3, b64, sl, NULL, &n, &end,
			      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    end != b64 + sl) {
		free(b);
		return -EBADMSG;
	}
	*out = b;
	*len = n;
	return 0;
}
