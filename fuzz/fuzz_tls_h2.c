/* libFuzzer: HTTP/2 inside inspected connections (net-supervisor/tls_h2.c)
 * on raw bytes from both peers. The input is a sequence of chunks, each a
 * header byte (bit 0: 0 the client's side, 1 the upstream's; the other
 * bits: length - 1) and its bytes; the client's side starts with the
 * connection preface so that frames are reached. After each chunk both
 * sessions' output is drained. Invariants: the memory counter is the
 * bridge's buffered count and within the two connection windows, and is 0
 * once the bridge is freed; no crash, leak or overread (ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/credsub.h"
#include "net-supervisor/tls_h2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct netpol_http_decision decide(void *ctx, const char *method, const char *target, bool ws)
{
	(void)ctx;
	(void)method;
	(void)ws;
	if (strchr(target, 'd'))
		return (struct netpol_http_decision){ .reason = REASON_HTTP_RULE_DENY };
	return (struct netpol_http_decision){ .allow = true, .reason = REASON_ALLOWED };
}

static void record(void *ctx, const char *method, const char *target, int status,
		   const struct netpol_http_decision *d)
{
	(void)ctx;
	(void)status;
	(void)d;
	if (!method || !target)
		abort();
}

static bool permit(void *ctx, const struct credsub_cred *c)
{
	(void)ctx;
	return c->name[0] == 'K';
}

static int rewrite(void *ctx, const char *head, size_t len, char **out, size_t *out_len,
		   struct netpol_http_decision *d)
{
	(void)ctx;
	struct credsub_cred creds[] = { { .name = "K", .secret = "secret" }, { .name = "J", .secret = "other" } };
	struct credsub_result res;
	int r = credsub_head(head, len, creds, 2, permit, NULL, &res);
	if (r != CREDSUB_OK) {
		*d = (struct netpol_http_decision){ .reason = REASON_CREDENTIAL_NOT_PERMITTED };
		return -1;
	}
	if (!res.head)
		return 0;
	*out = res.head;
	*out_len = res.head_len;
	return 1;
}

static const struct tls_http_ops ops = { .decide = decide, .record = record, .rewrite = rewrite };

static void drain(struct tls_h2 *h)
{
	const uint8_t *d;
	for (int side = 0; side < 2; side++)
		while (tls_h2_send(h, side == 0, &d) > 0)
			;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_Atomic size_t held = 0;
	struct tls_h2 *h = tls_h2_new(&ops, NULL, &held);
	if (!h)
		return 0;
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	bool failed = tls_h2_recv(h, true, preface, sizeof(preface) - 1) < 0;
	drain(h);
	for (size_t o = 0; o < size && !failed;) {
		uint8_t b = data[o++];
		size_t n = (size_t)(b >> 1) + 1;
		if (n > size - o)
			n = size - o;
		/* an exact-size copy: ASan sees any overread */
		char *chunk = malloc(n ? n : 1);
		if (!chunk)
			break;
		memcpy(chunk, data + o, n);
		o += n;
		failed = tls_h2_recv(h, (b & 1) == 0, chunk, n) < 0;
		free(chunk);
		drain(h);
		if (held != tls_h2_buffered(h) || held > 2 * TLS_H2_CONN_WINDOW + 2 * 65536)
			abort();
	}
	tls_h2_free(h);
	if (held != 0)
		abort();
	return 0;
}
