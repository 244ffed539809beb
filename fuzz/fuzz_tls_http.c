/* libFuzzer: the request gate of inspected connections (net-supervisor/
 * tls_http.h) on raw client bytes, and the answer parser on the same bytes.
 * The first byte is the chunk size the rest is fed in (1-256). Requests
 * whose target contains "deny" are denied, the rest allowed. Asserted:
 * what is passed on is always a prefix of the input; nothing is passed on
 * after a verdict other than OK; the same input fed in one piece passes on
 * the same bytes when both end OK; every decided request is recorded once
 * (at the verdict or at free). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/tls_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct sink {
	const uint8_t *in;
	size_t in_len, out;
	bool stopped;
	size_t decided, recorded;
};

static struct netpol_http_decision decide(void *ctx, const char *method, const char *target, bool ws)
{
	struct sink *s = ctx;
	(void)method;
	(void)ws;
	s->decided++;
	if (strstr(target, "deny"))
		return (struct netpol_http_decision){ .reason = REASON_HTTP_RULE_DENY, .rule = "deny" };
	return (struct netpol_http_decision){ .allow = true, .reason = REASON_ALLOWED };
}

static int forward(void *ctx, const char *buf, size_t len)
{
	struct sink *s = ctx;
	if (s->stopped || s->out + len > s->in_len || memcmp(s->in + s->out, buf, len) != 0)
		abort();
	s->out += len;
	return 0;
}

static void record(void *ctx, const char *method, const char *target, int status,
		   const struct netpol_http_decision *d)
{
	struct sink *s = ctx;
	(void)method;
	(void)target;
	(void)status;
	(void)d;
	s->recorded++;
}

static const struct tls_http_ops ops = { .decide = decide, .forward = forward, .record = record };

static enum tls_http_verdict feed(const uint8_t *in, size_t n, size_t chunk, size_t *out)
{
	struct sink s = { .in = in, .in_len = n };
	struct tls_http *h = tls_http_new(&ops, &s);
	if (!h)
		return TLS_HTTP_ERROR;
	enum tls_http_verdict v = TLS_HTTP_OK;
	for (size_t off = 0; off < n && v == TLS_HTTP_OK; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		v = tls_http_client(h, (const char *)in + off, k);
		tls_http_server(h, (const char *)in + off, k);
		if (v != TLS_HTTP_OK)
			s.stopped = true;
	}
	tls_http_free(h);
	if (s.recorded != s.decided)
		abort();
	*out = s.out;
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t chunk = (size_t)data[0] + 1;
	size_t a = 0, b = 0;
	enum tls_http_verdict va = feed(data + 1, size - 1, chunk, &a);
	enum tls_http_verdict vb = feed(data + 1, size - 1, size, &b);
	if (va == TLS_HTTP_OK && vb == TLS_HTTP_OK && a != b)
		abort();
	return 0;
}
