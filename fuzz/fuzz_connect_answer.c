/* libFuzzer: `tether connect`'s parser of the proxy's answer head
 * (cli/connect_answer.c) on raw bytes, fed in chunks whose size comes from
 * the first input byte, so split points are fuzzed too. Asserted: a feed
 * never claims more bytes than it was given, nothing is consumed once the
 * head ended, a head accepted as finished has a status in 100-599 (the
 * fuzzer found "HTTP/1.1 2 x" accepted by http-parser), and the reason word
 * stays NUL-terminated and printable as given ([A-Za-z0-9_]). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/connect_answer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = (size_t)data[0] % 64 + 1;
	data++;
	size--;
	struct connect_answer a;
	connect_answer_init(&a);
	size_t off = 0;
	bool ok = true;
	while (off < size) {
		size_t n = size - off < step ? size - off : step;
		bool was_done = a.headers_done;
		ssize_t used = connect_answer_feed(&a, (const char *)data + off, n);
		if (used < 0) {
			ok = false;
			break;
		}
		if ((size_t)used > n || (was_done && used != 0))
			abort();
		off += n;
	}
	if (ok && a.headers_done && (a.parser.status_code < 100 || a.parser.status_code > 599))
		abort();
	size_t rl = strnlen(a.reason, sizeof(a.reason));
	if (rl == sizeof(a.reason))
		abort();
	for (size_t i = 0; i < rl; i++) {
		char c = a.reason[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
			abort();
	}
	return 0;
}
