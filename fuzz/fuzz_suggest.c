/* `tether policy suggest` on arbitrary audit bytes (one line per '\n'):
 * each line is taken, skipped or refused with a "line N: " message; a
 * write either fails with a message or yields a policy that the loader
 * reads back and that allows every flow taken (suggest_write checks that
 * itself: -EPROTO is a bug, so abort). Never a crash, leak or hang. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/suggest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct suggest *s;
	if (suggest_new(&s) < 0)
		return 0;
	const char *p = (const char *)data, *end = p + size;
	unsigned lineno = 0;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		char msg[256] = "";
		int r = suggest_add_line(s, p, len, ++lineno, msg, sizeof(msg));
		if (r == -EINVAL && strncmp(msg, "line ", 5) != 0)
			abort();
		if (r < 0)
			break;
		p += len;
	}
	for (int pin = 0; pin < 2; pin++) {
		struct suggest_opts o = { .pin = pin, .rootfd = -1 };
		char *yaml = NULL;
		size_t n;
		struct policy_diag d;
		int r = suggest_write(s, &o, &yaml, &n, &d);
		if (r == -EPROTO || (r == 0 && (!yaml || strlen(yaml) != n)))
			abort();
		free(yaml);
	}
	suggest_free(s);
	return 0;
}
