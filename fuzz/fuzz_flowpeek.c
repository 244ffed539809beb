/* libFuzzer: the transparent flow's peek parser (net-supervisor/flowpeek.c)
 * on raw bytes. Invariants checked: no read past the input (exact-size
 * copy), a name is only reported for TLS or HTTP and is a valid lower-case
 * host name, an ALPN offer only for TLS and made only of "h2" and
 * "http/1.1" (each once, wire format), and every prefix of an input that gave TLS or HTTP gives the
 * same kind or NEED_MORE (more bytes never turn a verdict back). */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/flowpeek.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > FLOWPEEK_MAX + 16)
		return 0;
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	struct flowpeek fp;
	enum flowpeek_kind k = flowpeek_parse(buf, size, &fp);
	if (fp.kind != k)
		abort();
	if (fp.have_name) {
		if (k != FLOWPEEK_TLS && k != FLOWPEEK_HTTP)
			abort();
		size_t n = strlen(fp.name);
		if (n == 0 || n > FLOWPEEK_NAME_MAX || fp.name[n - 1] == '.')
			abort();
		for (size_t i = 0; i < n; i++)
			if (isupper((unsigned char)fp.name[i]))
				abort();
	}
	if ((fp.have_alpn || fp.alpn_len) && k != FLOWPEEK_TLS)
		abort();
	if (fp.alpn_len > FLOWPEEK_ALPN_MAX || (fp.alpn_len && !fp.have_alpn))
		abort();
	for (size_t q = 0, h2 = 0, h1 = 0; q < fp.alpn_len;) {
		size_t nl = fp.alpn[q++];
		if (q + nl > fp.alpn_len)
			abort();
		if (nl == 2 && memcmp(fp.alpn + q, "h2", 2) == 0 && !h2++)
			;
		else if (nl == 8 && memcmp(fp.alpn + q, "http/1.1", 8) == 0 && !h1++)
			;
		else
			abort();
		q += nl;
	}
	if (k == FLOWPEEK_TLS || k == FLOWPEEK_HTTP) {
		for (size_t cut = size / 2; cut < size; cut += 1 + size / 8) {
			struct flowpeek p2;
			enum flowpeek_kind k2 = flowpeek_parse(buf, cut, &p2);
			if (k2 != k && k2 != FLOWPEEK_NEED_MORE)
				abort();
		}
	}
	free(buf);
	return 0;
}
