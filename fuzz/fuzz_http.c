/* libFuzzer: the proxy's request-head parser (net-supervisor/httpreq.c) on
 * raw bytes, fed in chunks whose size comes from the first input byte, so
 * split points are fuzzed too. Completed heads are also rewritten for the
 * upstream (httpreq_upstream_head). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/httpreq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = (size_t)data[0] % 64 + 1;
	data++;
	size--;
	struct httpreq r;
	struct httpreq_limits lim = { .max_header_bytes = 4096, .max_headers = 32 };
	httpreq_init(&r, &lim);
	int rc = 0;
	size_t off = 0;
	while (off < size && rc == 0) {
		size_t n = size - off < step ? size - off : step, used = 0;
		rc = httpreq_feed(&r, (const char *)data + off, n, &used);
		if (used > n)
			abort();
		off += n;
	}
	if (rc == 1) {
		if (!r.host[0] || r.port == 0)
			abort(); /* a complete head always names a destination */
		if (!r.is_connect) {
			size_t hl;
			char *h = httpreq_upstream_head(&r, &hl);
			if (h && (hl != strlen(h) || hl < 4 || memcmp(h + hl - 4, "\r\n\r\n", 4) != 0))
				abort();
			free(h);
		}
	}
	if (rc < 0 && r.status == 0)
		abort(); /* every rejection carries a status */
	httpreq_done(&r);
	return 0;
}
