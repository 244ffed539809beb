/* libFuzzer: credential placeholder substitution (net-supervisor/credsub.h)
 * on raw request heads (a CRLF CRLF is appended). Credentials: A (permitted,
 * secret "SECRET-A") and B (not permitted, secret "SECRET-B"). Asserted:
 * a refused or unchanged head yields no new head; a new head ends with
 * CRLF CRLF, starts with the same request line, never contains B's secret
 * unless the input did, and keeps every SECRET-A the input had. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/credsub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct credsub_cred creds[] = {
	{ .name = "A", .secret = "SECRET-A" },
	{ .name = "B", .secret = "SECRET-B", .header = "X-B" },
	{ .name = "C", .secret = "SECRET-C", .header = "X-C" },
};

static bool permitted(void *ctx, const struct credsub_cred *c)
{
	(void)ctx;
	return strcmp(c->name, "A") == 0 || strcmp(c->name, "C") == 0;
}

static size_t count(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle), c = 0;
	for (size_t i = 0; i + k <= n; i++)
		if (memcmp(s + i, needle, k) == 0)
			c++;
	return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65536)
		return 0;
	char *head = malloc(size + 4);
	if (!head)
		return 0;
	memcpy(head, data, size);
	memcpy(head + size, "\r\n\r\n", 4);
	size_t len = size + 4;
	struct credsub_result r;
	int rc = credsub_head(head, len, creds, 3, permitted, NULL, &r);
	if (rc != CREDSUB_OK && r.head)
		abort();
	/* C is permitted and set by the proxy: exactly one line of it, ours */
	if (rc == CREDSUB_OK && (!r.head || count(r.head, r.head_len, "\r\nX-C: SECRET-C\r\n") != 1))
		abort();
	if (rc == CREDSUB_OK && r.head) {
		if (r.head_len < 4 || memcmp(r.head + r.head_len - 4, "\r\n\r\n", 4) != 0 || r.n_swapped == 0)
			abort();
		const char *eol = memmem(head, len, "\r\n", 2);
		size_t ll = (size_t)(eol - head) + 2;
		if (r.head_len < ll || memcmp(r.head, head, ll) != 0)
			abort();
		if (count(r.head, r.head_len, "SECRET-B") > count(head, len, "SECRET-B"))
			abort();
		/* (a client line of X-C is dropped, whatever it held) */
		if (!memmem(head, len, "-C:", 3) && !memmem(head, len, "-c:", 3) &&
		    count(r.head, r.head_len, "SECRET-A") < count(head, len, "SECRET-A"))
			abort();
		credsub_result_done(&r);
	}
	free(head);
	return 0;
}
