/* libFuzzer: the corporate upstream proxy's parsers (net-supervisor/
 * upstream.h) on raw bytes. The first byte picks the target:
 *   even: the proxy's reply head, fed as growing prefixes. Asserted: a
 *         prefix of an incomplete head is never complete; once complete,
 *         the head length is within the bytes given, ends with CRLF CRLF,
 *         the status is 100-999 and every longer prefix agrees.
 *   odd:  a --no-upstream-proxy list (NUL-terminated), then matching the
 *         rest of the input as a host name against it. Asserted: never
 *         more than UPSTREAM_MAX_BYPASS entries; a name entry matches
 *         itself. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void reply(const char *buf, size_t size)
{
	int first_status = -1;
	size_t first_head = 0;
	for (size_t len = 0; len <= size; len++) {
		int status = 0;
		size_t head = 0;
		int r = upstream_parse_reply(buf, len, &status, &head);
		if (r < 0)
			return; /* refused: a longer prefix is refused too (not asserted) */
		if (r == 0) {
			if (first_status >= 0)
				abort(); /* was complete, now incomplete */
			continue;
		}
		if (head > len || head < 4 || memcmp(buf + head - 4, "\r\n\r\n", 4) != 0 || status < 100 ||
		    status > 999)
			abort();
		if (first_status < 0) {
			first_status = status;
			first_head = head;
		} else if (status != first_status || head != first_head) {
			abort();
		}
	}
}

static void bypass(const char *in, size_t size)
{
	char *list = strndup(in, size);
	if (!list)
		return;
	size_t nl = strlen(list);
	const char *host = nl < size ? in + nl + 1 : "";
	char *name = strndup(host, size - (size_t)(host - in));
	struct upstream_proxy *up = calloc(1, sizeof(*up));
	char err[256];
	if (name && up && upstream_parse_bypass(up, list, err, sizeof(err)) == 0) {
		if (up->n_bypass > UPSTREAM_MAX_BYPASS)
			abort();
		struct netaddr a;
		bool lit = netaddr_parse(name, &a) == 0;
		(void)upstream_bypassed(up, name, lit ? &a : NULL);
		for (size_t i = 0; i < up->n_bypass; i++)
			if (!up->bypass[i].is_cidr && !up->bypass[i].suffix &&
			    !upstream_bypassed(up, up->bypass[i].name, NULL))
				abort();
	}
	free(up);
	free(name);
	free(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 16384)
		return 0;
	if (data[0] % 2 == 0)
		reply((const char *)data + 1, size - 1);
	else
		bypass((const char *)data + 1, size - 1);
	return 0;
}
