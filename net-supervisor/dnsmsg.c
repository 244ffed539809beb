#include "net-supervisor/dnsmsg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}
static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static bool label_byte_ok(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
	       c == '_';
}

/* Decode the name at *off into text (lower case, no trailing dot). *off
 * moves past the name as it sits at *off (a pointer counts 2 bytes). A
 * pointer must point at or after the header and before every place this
 * name was read from so far (each jump lands strictly before the last), so
 * the walk ends; the 255-byte wire bound holds across jumps. */
static int read_name(const uint8_t *msg, size_t len, size_t *off, char *text, size_t tsize)
{
	size_t p = *off, wire = 0, t = 0, end = 0, floor = *off;
	bool jumped = false;
	unsigned labels = 0;
	for (;;) {
		if (p >= len)
			return -EBADMSG;
		uint8_t l = msg[p];
		if ((l & 0xc0) == 0xc0) {
			if (p + 1 >= len)
				return -EBADMSG;
			size_t to = (size_t)(l & 0x3f) << 8 | msg[p + 1];
			if (to < DNS_HEADER_LEN || to >= floor)
				return -EBADMSG;
			floor = to;
			if (!jumped)
				end = p + 2;
			jumped = true;
			p = to;
			continue;
		}
		if (l & 0xc0)
			return -EBADMSG; /* 0x40, 0x80: extended label types */
		wire += 1u + l;
		if (wire > DNS_NAME_MAX || ++labels > 127)
			return -EBADMSG;
		if (l == 0) {
			if (!jumped)
				end = p + 1;
			break;
		}
		if (p + 1 + l > len)
			return -EBADMSG;
		if (t) {
			if (t + 1 >= tsize)
				return -EBADMSG;
			text[t++] = '.';
		}
		for (size_t i = 0; i < l; i++) {
			uint8_t c = msg[p + 1 + i];
			if (!label_byte_ok(c))
				return -EBADMSG;
			if (t + 1 >= tsize)
				return -EBADMSG;
			text[t++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
		}
		p += 1u + l;
	}
	if (t >= tsize)
		return -EBADMSG;
	text[t] = '\0';
	*off = end;
	return 0;
}

int dnsmsg_header(const uint8_t *msg, size_t len, uint16_t *id, uint16_t *flags)
{
	if (!msg || len < DNS_HEADER_LEN)
		return -EBADMSG;
	*id = get16(msg);
	*flags = get16(msg + 2);
	return 0;
}

/* The question at *off: text name, type, class and its wire bytes. */
static int read_question(const uint8_t *msg, size_t len, size_t *off, struct dns_question *q)
{
	size_t start = *off;
	int r = read_name(msg, len, off, q->name, sizeof(q->name));
	if (r < 0)
		return r;
	if (*off + 4 > len)
		return -EBADMSG;
	q->qtype = get16(msg + *off);
	q->qclass = get16(msg + *off + 2);
	*off += 4;
	/* The question is echoed: it must be one uncompressed name (a query's
	 * question has nothing before it to point at anyway). */
	size_t wl = *off - start;
	if (wl > sizeof(q->wire))
		return -EBADMSG;
	for (size_t p = start; p < *off - 4;) {
		uint8_t l = msg[p];
		if (l & 0xc0)
			return -EBADMSG;
		p += 1u + l;
	}
	memcpy(q->wire, msg + start, wl);
	q->wire_len = wl;
	return 0;
}

/* One resource record's fixed part after its name. */
struct rr_head {
	uint16_t type, rclass, rdlen;
	uint32_t ttl;
	size_t rdata;
};

static int read_rr(const uint8_t *msg, size_t len, size_t *off, char *name, size_t nsize, struct rr_head *h)
{
	int r = read_name(msg, len, off, name, nsize);
	if (r < 0)
		return r;
	if (*off + 10 > len)
		return -EBADMSG;
	h->type = get16(msg + *off);
	h->rclass = get16(msg + *off + 2);
	h->ttl = get32(msg + *off + 4);
	h->rdlen = get16(msg + *off + 8);
	h->rdata = *off + 10;
	if (h->rdata + h->rdlen > len)
		return -EBADMSG;
	*off = h->rdata + h->rdlen;
	return 0;
}

int dnsmsg_parse_query(const uint8_t *msg, size_t len, struct dns_query *out)
{
	memset(out, 0, sizeof(*out));
	if (len > 65535 || dnsmsg_header(msg, len, &out->id, &out->flags) < 0)
		return -EBADMSG;
	if (out->flags & DNS_FLAG_QR)
		return -EPROTO;
	uint16_t qd = get16(msg + 4), an = get16(msg + 6), ns = get16(msg + 8), ar = get16(msg + 10);
	if (qd != 1 || an != 0 || ns != 0 || ar > 1)
		return -EBADMSG;
	size_t off = DNS_HEADER_LEN;
	int r = read_question(msg, len, &off, &out->q);
	if (r < 0)
		return r;
	out->udp_size = 512;
	if (ar == 1) {
		char name[DNS_NAME_TEXT_MAX];
		struct rr_head h;
		if ((r = read_rr(msg, len, &off, name, sizeof(name), &h)) < 0)
			return r;
		if (h.type != DNS_TYPE_OPT || name[0])
			return -EBADMSG;
		out->edns = true;
		if (h.rclass > 512)
			out->udp_size = h.rclass;
	}
	if (off != len)
		return -EBADMSG; /* trailing bytes */
	return 0;
}

int dnsmsg_parse_answer(const uint8_t *msg, size_t len, struct dns_answer *out)
{
	memset(out, 0, sizeof(*out));
	if (len > 65535 || dnsmsg_header(msg, len, &out->id, &out->flags) < 0)
		return -EBADMSG;
	if (!(out->flags & DNS_FLAG_QR))
		return -EBADMSG;
	uint16_t qd = get16(msg + 4), an = get16(msg + 6), ns = get16(msg + 8), ar = get16(msg + 10);
	if (qd != 1)
		return -EBADMSG;
	size_t off = DNS_HEADER_LEN;
	int r = read_question(msg, len, &off, &out->q);
	if (r < 0)
		return r;
	if (an > DNSMSG_MAX_RR)
		return -E2BIG; /* the header and question are valid */
	for (unsigned i = 0; i < an; i++) {
		struct dns_rr *rr = &out->an[out->n_an];
		struct rr_head h;
		if ((r = read_rr(msg, len, &off, rr->name, sizeof(rr->name), &h)) < 0)
			return r;
		if (h.rclass != DNS_CLASS_IN ||
		    (h.type != DNS_TYPE_A && h.type != DNS_TYPE_AAAA && h.type != DNS_TYPE_CNAME)) {
			out->n_other++;
			continue;
		}
		rr->type = h.type;
		rr->rclass = h.rclass;
		rr->ttl = h.ttl > 0x7fffffffu ? 0 : h.ttl; /* RFC 2181 8: a TTL with the top bit set is 0 */
		if (h.type == DNS_TYPE_A) {
			if (h.rdlen != 4)
				return -EBADMSG;
			rr->addr.family = AF_INET;
			memcpy(rr->addr.a, msg + h.rdata, 4);
		} else if (h.type == DNS_TYPE_AAAA) {
			if (h.rdlen != 16)
				return -EBADMSG;
			rr->addr.family = AF_INET6;
			memcpy(rr->addr.a, msg + h.rdata, 16);
		} else {
			size_t t = h.rdata;
			if ((r = read_name(msg, len, &t, rr->target, sizeof(rr->target))) < 0)
				return r;
			if (t != h.rdata + h.rdlen)
				return -EBADMSG;
		}
		out->n_an++;
	}
	/* authority and additional: bounds only */
	for (unsigned i = 0; i < (unsigned)ns + ar; i++) {
		char name[DNS_NAME_TEXT_MAX];
		struct rr_head h;
		if ((r = read_rr(msg, len, &off, name, sizeof(name), &h)) < 0)
			return r;
	}
	return 0;
}

/* Append a text name as uncompressed wire labels. */
static int put_name(uint8_t *buf, size_t cap, size_t *off, const char *name)
{
	size_t o = *off;
	const char *p = name;
	while (*p) {
		size_t l = strcspn(p, ".");
		if (l == 0 || l > 63 || o + 1 + l > cap)
			return -ENOSPC;
		buf[o++] = (uint8_t)l;
		memcpy(buf + o, p, l);
		o += l;
		p += l;
		if (*p == '.')
			p++;
	}
	if (o + 1 > cap || o - *off + 1 > DNS_NAME_MAX)
		return -ENOSPC;
	buf[o++] = 0;
	*off = o;
	return 0;
}

static int put_opt(uint8_t *buf, size_t cap, size_t *off)
{
	if (*off + 11 > cap)
		return -ENOSPC;
	uint8_t *p = buf + *off;
	p[0] = 0;
	put16(p + 1, DNS_TYPE_OPT);
	put16(p + 3, DNS_EDNS_UDP_SIZE);
	put32(p + 5, 0);
	put16(p + 9, 0);
	*off += 11;
	return 0;
}

static void put_header(uint8_t *buf, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ar)
{
	put16(buf, id);
	put16(buf + 2, flags);
	put16(buf + 4, qd);
	put16(buf + 6, an);
	put16(buf + 8, 0);
	put16(buf + 10, ar);
}

int dnsmsg_build_query(uint8_t *buf, size_t cap, uint16_t id, const struct dns_question *q)
{
	size_t off = DNS_HEADER_LEN;
	if (cap < DNS_HEADER_LEN + q->wire_len)
		return -ENOSPC;
	put_header(buf, id, DNS_FLAG_RD, 1, 0, 1);
	memcpy(buf + off, q->wire, q->wire_len);
	off += q->wire_len;
	int r = put_opt(buf, cap, &off);
	return r < 0 ? r : (int)off;
}

static int put_rr(uint8_t *buf, size_t cap, size_t *off, const struct dns_query *q, const struct dns_rr *rr)
{
	size_t o = *off;
	int r;
	if (strcmp(rr->name, q->q.name) == 0) {
		if (o + 2 > cap)
			return -ENOSPC;
		put16(buf + o, 0xc000 | DNS_HEADER_LEN);
		o += 2;
	} else if ((r = put_name(buf, cap, &o, rr->name)) < 0) {
		return r;
	}
	if (o + 10 > cap)
		return -ENOSPC;
	put16(buf + o, rr->type);
	put16(buf + o + 2, DNS_CLASS_IN);
	put32(buf + o + 4, rr->ttl);
	size_t rdlen_at = o + 8;
	o += 10;
	if (rr->type == DNS_TYPE_A || rr->type == DNS_TYPE_AAAA) {
		size_t n = rr->type == DNS_TYPE_A ? 4 : 16;
		if (o + n > cap)
			return -ENOSPC;
		memcpy(buf + o, rr->addr.a, n);
		o += n;
	} else if ((r = put_name(buf, cap, &o, rr->target)) < 0) {
		return r;
	}
	put16(buf + rdlen_at, (uint16_t)(o - rdlen_at - 2));
	*off = o;
	return 0;
}

int dnsmsg_build_answer(uint8_t *buf, size_t cap, size_t limit, const struct dns_query *q, int rcode,
			const struct dns_rr *rrs, size_t n)
{
	if (limit > cap)
		limit = cap;
	size_t base = DNS_HEADER_LEN + q->q.wire_len;
	if (base + (q->edns ? 11 : 0) > limit)
		return -ENOSPC;
	uint16_t flags = DNS_FLAG_QR | DNS_FLAG_RA | (q->flags & DNS_FLAG_RD) | (uint16_t)(rcode & 0xf);
	memcpy(buf + DNS_HEADER_LEN, q->q.wire, q->q.wire_len);
	size_t off = base;
	uint16_t an = 0;
	bool truncated = false;
	for (size_t i = 0; i < n; i++) {
		if (rrs[i].type != DNS_TYPE_A && rrs[i].type != DNS_TYPE_AAAA && rrs[i].type != DNS_TYPE_CNAME)
			continue;
		if (put_rr(buf, limit - (q->edns ? 11 : 0), &off, q, &rrs[i]) < 0) {
			truncated = true;
			break;
		}
		an++;
	}
	if (truncated) {
		flags |= DNS_FLAG_TC;
		an = 0;
		off = base;
	}
	if (q->edns && put_opt(buf, limit, &off) < 0)
		return -ENOSPC;
	put_header(buf, q->id, flags, 1, an, q->edns ? 1 : 0);
	return (int)off;
}

const char *dnsmsg_type_word(uint16_t type, char *buf, size_t size)
{
	static const struct {
		uint16_t t;
		const char *w;
	} words[] = {
		{ DNS_TYPE_A, "A" },     { DNS_TYPE_NS, "NS" },     { DNS_TYPE_CNAME, "CNAME" },
		{ DNS_TYPE_SOA, "SOA" }, { DNS_TYPE_PTR, "PTR" },   { DNS_TYPE_MX, "MX" },
		{ DNS_TYPE_TXT, "TXT" }, { DNS_TYPE_AAAA, "AAAA" }, { DNS_TYPE_SRV, "SRV" },
		{ DNS_TYPE_SVCB, "SVCB" }, { DNS_TYPE_HTTPS, "HTTPS" }, { DNS_TYPE_ANY, "ANY" },
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (words[i].t == type)
			return words[i].w;
	snprintf(buf, size, "TYPE%u", (unsigned)type);
	return buf;
}
