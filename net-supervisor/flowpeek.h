/* flowpeek: what the first bytes of a captured (transparent) TCP stream
 * say, without terminating anything: a TLS ClientHello and its SNI, an
 * HTTP/1 request and its Host header, or something else.
 *
 * A pure parser over a byte prefix (the net-supervisor fills it with
 * recv(MSG_PEEK), so the bytes stay in the socket for the relay). Bounded:
 * it reads at most FLOWPEEK_MAX bytes and never allocates. The name it
 * returns is lower case, without a trailing dot or a port, made only of
 * letters, digits, '-', '_' and '.', 1..253 characters; anything else
 * (an IP literal, an empty or malformed name) is reported as no name.
 * From a ClientHello it also keeps the ALPN offer (the protocols TLS
 * inspection can carry: h2 and http/1.1; tls_inspect.h).
 *
 * Not trusted on its own: a peeked name is a claim of the client. The
 * caller checks it against what the workload's own DNS lookups returned
 * for the flow's destination (dnsrec.h) before a host rule may use it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most bytes worth peeking: one TLS record (16 KiB) and its header. */
#define FLOWPEEK_MAX (16384 + 5)
#define FLOWPEEK_NAME_MAX 253

enum flowpeek_kind {
	FLOWPEEK_NEED_MORE = 0, /* a prefix of a ClientHello or an HTTP head: peek again */
	FLOWPEEK_TLS,           /* a TLS ClientHello (name: its SNI, if any) */
	FLOWPEEK_HTTP,          /* an HTTP/1 request head (name: its Host, if any) */
	FLOWPEEK_OTHER,         /* neither: a raw stream (ssh, a database, git://) */
};

/* The ALPN offer kept from a ClientHello: only "h2" and "http/1.1", in
 * the client's order, each once, in wire format (a length byte, then the
 * name): at most 1+2 + 1+8 bytes. */
#define FLOWPEEK_ALPN_MAX 12

struct flowpeek {
	enum flowpeek_kind kind;
	bool have_name;
	char name[FLOWPEEK_NAME_MAX + 1];
	/* TLS only: whether the hello had an ALPN extension at all (a
	 * malformed one counts as none), and what of it is kept (alpn_len 0:
	 * nothing known was offered) */
	bool have_alpn;
	uint8_t alpn[FLOWPEEK_ALPN_MAX];
	size_t alpn_len;
};

/* Classify buf[0..len). NEED_MORE only while len < FLOWPEEK_MAX and the
 * bytes so far are a proper prefix of a ClientHello or a request head; a
 * caller out of time or bytes treats NEED_MORE as it would OTHER. A
 * ClientHello or head that is well formed as far as it goes but whose SNI
 * or Host is malformed is TLS or HTTP without a name. */
enum flowpeek_kind flowpeek_parse(const uint8_t *buf, size_t len, struct flowpeek *out);

/* "tls", "http", "other", "incomplete". */
const char *flowpeek_kind_word(enum flowpeek_kind k);
