/* The proxy's answer to `tether connect`'s CONNECT, parsed incrementally
 * with http-parser: the status code and the X-Tether-Reason word. Bytes
 * after the head belong to the tunnel and are not consumed. Separate from
 * cmd_connect.c so the fuzz target (fuzz/fuzz_connect_answer.c) runs it. */
#pragma once

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct connect_answer {
	http_parser parser;
	bool headers_done;
	bool in_reason_field;
	char reason[64]; /* [A-Za-z0-9_] only, NUL-terminated, truncated */
};

void connect_answer_init(struct connect_answer *a);

/* Feed the next len bytes. Returns how many were part of the head (all of
 * them until the head ends), or -1 when the answer is not HTTP (a status
 * outside 100-599 included). Once
 * a->headers_done, a->parser.status_code is the status and the bytes past
 * the returned count are tunnel data. */
ssize_t connect_answer_feed(struct connect_answer *a, const char *buf, size_t len);
