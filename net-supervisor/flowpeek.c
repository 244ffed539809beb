#include "net-supervisor/flowpeek.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>

const char *flowpeek_kind_word(enum flowpeek_kind k)
{
	switch (k) {
	case FLOWPEEK_TLS: return "tls";
	case FLOWPEEK_HTTP: return "http";
	case FLOWPEEK_OTHER: return "other";
	case FLOWPEEK_NEED_MORE: break;
	}
	return "incomplete";
}

/* Copy a host name of n bytes into out->name if it is one (see flowpeek.h). */
static void take_name(struct flowpeek *out, const char *s, size_t n)
{
	out->have_name = false;
	out->name[0] = '\0';
	if (n && s[n - 1] == '.')
		n--;
	if (n == 0 || n > FLOWPEEK_NAME_MAX || s[n - 1] == '.')
		return; /* empty, too long, or an empty last label ("a..") */
	bool alpha = false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (!isalnum(ch) && ch != '-' && ch != '_' && ch != '.')
			return;
		if (ch == '.' && (i == 0 || s[i - 1] == '.'))
			return;
		if (isalpha(ch))
			alpha = true;
		out->name[i] = (char)tolower(ch);
	}
	out->name[n] = '\0';
	/* an address literal is not a name (a cidr rule speaks for it) */
	unsigned char tmp[16];
	if (!alpha || inet_pton(AF_INET, out->name, tmp) == 1) {
		out->name[0] = '\0';
		return;
	}
	out->have_name = true;
}

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

/* ---------- TLS ---------- */

/* The ALPN extension's protocol_name_list (len bytes at e, all present):
 * keep h2 and http/1.1 in the client's order, once each. A malformed list
 * is no offer. */
static void tls_alpn(const uint8_t *e, size_t len, struct flowpeek *out)
{
	if (len < 2 || 2 + be16(e) != len)
		return;
	bool h2 = false, h1 = false;
	uint8_t keep[FLOWPEEK_ALPN_MAX];
	size_t kl = 0;
	for (size_t q = 2; q < len;) {
		size_t nl = e[q++];
		if (nl == 0 || q + nl > len)
			return;
		const uint8_t *nm = e + q;
		q += nl;
		if (nl == 2 && memcmp(nm, "h2", 2) == 0 && !h2) {
			h2 = true;
		} else if (nl == 8 && memcmp(nm, "http/1.1", 8) == 0 && !h1) {
			h1 = true;
		} else {
			continue;
		}
		keep[kl++] = (uint8_t)nl;
		memcpy(keep + kl, nm, nl);
		kl += nl;
	}
	out->have_alpn = true;
	memcpy(out->alpn, keep, kl);
	out->alpn_len = kl;
}

/* The SNI and the ALPN offer from a ClientHello body (after the 4-byte handshake header) of
 * n bytes, all present. */
static void tls_sni(const uint8_t *p, size_t n, struct flowpeek *out)
{
	size_t o = 2 + 32; /* client_version, random */
	if (o + 1 > n)
		return;
	o += 1 + p[o]; /* session_id */
	if (o + 2 > n)
		return;
	o += 2 + be16(p + o); /* cipher_suites */
	if (o + 1 > n)
		return;
	o += 1 + p[o]; /* compression_methods */
	if (o + 2 > n)
		return;
	size_t ext_end = o + 2 + be16(p + o);
	o += 2;
	if (ext_end > n)
		ext_end = n;
	bool sni_seen = false;
	while (o + 4 <= ext_end) {
		uint32_t type = be16(p + o), len = be16(p + o + 2);
		o += 4;
		if (o + len > ext_end)
			return;
		if (type == 16 && !out->have_alpn) /* application_layer_protocol_negotiation */
			tls_alpn(p + o, len, out);
		if (type == 0 && !sni_seen) { /* server_name: the first only */
			sni_seen = true;
			const uint8_t *e = p + o;
			size_t list_end = len >= 2 ? 2 + be16(e) : 0;
			for (size_t q = 2; list_end <= len && q + 3 <= list_end;) {
				uint8_t nt = e[q];
				size_t nl = be16(e + q + 1);
				q += 3;
				if (q + nl > list_end)
					break;
				if (nt == 0) {
					take_name(out, (const char *)e + q, nl);
					break;
				}
				q += nl;
			}
		}
		o += len;
	}
}

static enum flowpeek_kind parse_tls(const uint8_t *buf, size_t len, struct flowpeek *out)
{
	/* record: type 22, version 3.x, length; handshake: type 1 (ClientHello) */
	if (len >= 2 && buf[1] != 3)
		return FLOWPEEK_OTHER;
	if (len < 5)
		return FLOWPEEK_NEED_MORE;
	size_t rec = be16(buf + 3);
	if (rec < 4 || rec > 16384)
		return FLOWPEEK_OTHER;
	if (len < 6)
		return FLOWPEEK_NEED_MORE;
	if (buf[5] != 1)
		return FLOWPEEK_OTHER;
	if (len < 9)
		return FLOWPEEK_NEED_MORE;
	size_t hs = (size_t)buf[6] << 16 | (size_t)buf[7] << 8 | buf[8];
	/* The ClientHello's first record: the SNI is in it in practice (a
	 * hello split over records is taken without a name). */
	size_t avail = rec - 4 < hs ? rec - 4 : hs;
	if (len < 9 + avail)
		return FLOWPEEK_NEED_MORE;
	out->kind = FLOWPEEK_TLS;
	tls_sni(buf + 9, avail, out);
	return FLOWPEEK_TLS;
}

/* ---------- HTTP/1 ---------- */

static const char *const methods[] = { "GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ",
				       "TRACE ", "PROPFIND ", "PROPPATCH ", "MKCOL ", "COPY ", "MOVE ",
				       "LOCK ", "UNLOCK ", "REPORT ", "SEARCH ", "PURGE ",
				       "PRI " /* the HTTP/2 prior-knowledge preface (h2c): no Host */ };

/* Does buf start with (a prefix of) a method and a space? 1 yes, 0 a
 * prefix so far, -1 no. */
static int http_method(const uint8_t *buf, size_t len)
{
	bool prefix = false;
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		size_t ml = strlen(methods[i]);
		size_t n = len < ml ? len : ml;
		if (memcmp(buf, methods[i], n) != 0)
			continue;
		if (len >= ml)
			return 1;
		prefix = true;
	}
	return prefix ? 0 : -1;
}

/* The end of the head (just past "\r\n\r\n" or "\n\n"), or 0. */
static size_t head_end(const uint8_t *buf, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (buf[i] == '\n' && buf[i + 1] == '\n')
			return i + 2;
		if (buf[i] == '\n' && buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

static void http_host(const uint8_t *buf, size_t end, struct flowpeek *out)
{
	const char *s = (const char *)buf;
	size_t i = 0;
	/* skip the request line */
	while (i < end && s[i] != '\n')
		i++;
	i++;
	while (i < end) {
		size_t line = i;
		while (i < end && s[i] != '\n')
			i++;
		size_t le = i; /* at '\n' or end */
		i++;
		if (le > line && s[le - 1] == '\r')
			le--;
		if (le == line)
			return; /* the blank line */
		if (le - line < 5 || strncasecmp(s + line, "host:", 5) != 0)
			continue;
		size_t v = line + 5;
		while (v < le && (s[v] == ' ' || s[v] == '\t'))
			v++;
		size_t ve = le;
		while (ve > v && (s[ve - 1] == ' ' || s[ve - 1] == '\t'))
			ve--;
		if (v < ve && s[v] == '[')
			return; /* an IPv6 literal: no name */
		/* drop ":port" */
		for (size_t k = v; k < ve; k++)
			if (s[k] == ':') {
				ve = k;
				break;
			}
		take_name(out, s + v, ve - v);
		return; /* the first Host header only */
	}
}

static enum flowpeek_kind parse_http(const uint8_t *buf, size_t len, struct flowpeek *out)
{
	int m = http_method(buf, len);
	if (m < 0)
		return FLOWPEEK_OTHER;
	if (m == 0)
		return FLOWPEEK_NEED_MORE;
	size_t end = head_end(buf, len);
	if (!end)
		return len >= FLOWPEEK_MAX ? FLOWPEEK_HTTP : FLOWPEEK_NEED_MORE;
	out->kind = FLOWPEEK_HTTP;
	http_host(buf, end, out);
	return FLOWPEEK_HTTP;
}

enum flowpeek_kind flowpeek_parse(const uint8_t *buf, size_t len, struct flowpeek *out)
{
	memset(out, 0, sizeof(*out));
	if (len > FLOWPEEK_MAX)
		len = FLOWPEEK_MAX;
	if (len == 0)
		return out->kind = FLOWPEEK_NEED_MORE;
	enum flowpeek_kind k = buf[0] == 0x16 ? parse_tls(buf, len, out) : parse_http(buf, len, out);
	if (k == FLOWPEEK_NEED_MORE && len >= FLOWPEEK_MAX)
		k = FLOWPEEK_OTHER;
	if (k != FLOWPEEK_TLS && k != FLOWPEEK_HTTP) {
		out->have_name = false;
		out->name[0] = '\0';
	}
	if (k != FLOWPEEK_TLS) {
		out->have_alpn = false;
		out->alpn_len = 0;
	}
	out->kind = k;
	return k;
}
