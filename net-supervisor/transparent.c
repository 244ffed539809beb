#include "net-supervisor/transparent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "net-supervisor/conn.h"
#include "net-supervisor/dns.h"
#include "net-supervisor/dnsrec.h"
#include "net-supervisor/hostport.h"

/* Accepts per wakeup: one busy listener cannot starve the loop. */
#define ACCEPT_BATCH 64
/* Flows being peeked at once; past it a new one is reset (each holds a
 * FLOWPEEK_MAX buffer while it waits). */
#define MAX_PEEKING 1024
/* Wakeups of one flow's peek: a client trickling its head a byte at a
 * time would otherwise cost a re-peek and a re-parse of up to
 * FLOWPEEK_MAX bytes per byte; past this the poll stops and the timer's
 * last peek decides. A normal client needs one to three. */
#define MAX_PEEK_WAKEUPS 16

struct transparent_listener {
	uv_poll_t poll;
	struct netsup *ns;
	int fd;
	char addr[64];
	/* the first peek at accept time (the loop's thread only): most
	 * clients have written by then, and need no peek state at all */
	uint8_t first[FLOWPEEK_MAX];
};

/* One flow while its first bytes are awaited (before it becomes a conn). */
struct tpeek {
	struct netsup *ns;
	uv_poll_t poll;
	uv_timer_t timer;
	int fd;
	int open_handles;
	bool finished;
	unsigned wakeups;
	struct sockaddr_storage orig;
	uint8_t *buf;
	size_t len;
	struct flowpeek fp;
};

/* ---------- the name ---------- */

const char *transparent_name(const struct flowpeek *fp, struct dnsrec *rec, const struct sockaddr *orig,
			     char *host, size_t host_size, char *peeked, size_t peeked_size)
{
	peeked[0] = '\0';
	if (fp->have_name) {
		if (rec && dnsrec_has(rec, fp->name, orig)) {
			strscpy(host, fp->name, host_size);
			return fp->kind == FLOWPEEK_TLS ? "sni" : "http_host";
		}
		/* A claim the workload's own lookups do not back: kept for the
		 * audit, never matched against a host rule. */
		strscpy(peeked, fp->name, peeked_size);
	} else if (rec) {
		if (dnsrec_first_name(rec, orig, host, host_size))
			return "dns";
	}
	struct netaddr a;
	if (netaddr_from_sockaddr(orig, &a) < 0 || !netaddr_format(&a, host, host_size))
		strscpy(host, "", host_size);
	return "none";
}

/* ---------- after the peek: a conn ---------- */

/* Close with a reset (SO_LINGER 0): the client sees its connection refused
 * or reset at once, never a clean end it could take for an answer. */
static void reset_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static uint16_t sockaddr_port(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
					: ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* The peek is done: fd becomes a conn (transparent.h); takes fd. */
static void hand_over(struct netsup *ns, int fd, const struct sockaddr_storage *orig, const struct flowpeek *fp)
{
	if (ns->stopping) {
		reset_close(fd);
		return;
	}
	struct conn_transparent *tp = calloc(1, sizeof(*tp));
	if (!tp) {
		close(fd);
		return;
	}
	enum flowpeek_kind k = fp->kind;
	ns->sh->metrics.transparent_flows[k == FLOWPEEK_TLS ? 0 : k == FLOWPEEK_HTTP ? 1 : k == FLOWPEEK_OTHER ? 2 : 3]++;
	tp->kind = k == FLOWPEEK_TLS || k == FLOWPEEK_HTTP ? NETPOLICY_FLOW_HTTP : NETPOLICY_FLOW_RAW;
	tp->peek = flowpeek_kind_word(k);
	struct dnsrec *rec = ns->dns ? dns_records(ns->dns) : NULL;
	tp->name_source = transparent_name(fp, rec, (const struct sockaddr *)orig, tp->host,
					   sizeof(tp->host), tp->peeked_name, sizeof(tp->peeked_name));
	struct conn *c = conn_adopt_fd(ns, fd, tp);
	if (!c)
		return;
	/* The flow as the workload's socket sees it: to the original
	 * destination, not to us (identity finds the socket by this tuple). */
	memcpy(&c->tuple.proxy, orig, sizeof(*orig));
	c->port = sockaddr_port(orig);
	if (netaddr_from_sockaddr((const struct sockaddr *)orig, &c->resolved[0]) == 0) {
		c->n_resolved = 1;
		c->gai_done = true; /* the original address: never looked up again */
	}
	conn_dest_ready(c);
}

static void peek_closed(uv_handle_t *h)
{
	struct tpeek *p = h->data;
	if (--p->open_handles > 0)
		return;
	p->ns->sh->n_peeking--;
	if (p->fd >= 0)
		hand_over(p->ns, p->fd, &p->orig, &p->fp);
	free(p->buf);
	free(p);
}

static void peek_finish(struct tpeek *p)
{
	if (p->finished)
		return;
	p->finished = true;
	int one = 1;
	setsockopt(p->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
	uv_poll_stop(&p->poll);
	uv_timer_stop(&p->timer);
	/* the fd goes to a uv_tcp_t once the poll handle is closed */
	uv_close((uv_handle_t *)&p->poll, peek_closed);
	uv_close((uv_handle_t *)&p->timer, peek_closed);
}

/* Peek again and parse: what is in the socket now. */
static ssize_t repeek(struct tpeek *p)
{
	ssize_t n = recv(p->fd, p->buf, FLOWPEEK_MAX, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		p->len = (size_t)n;
		flowpeek_parse(p->buf, p->len, &p->fp);
	}
	return n;
}

static void peek_timeout(uv_timer_t *t)
{
	/* a server-speaks-first protocol, or a slow client: decide on what
	 * came (below SO_RCVLOWAT too) */
	struct tpeek *p = t->data;
	repeek(p);
	peek_finish(p);
}

static void peek_readable(uv_poll_t *h, int status, int events)
{
	struct tpeek *p = h->data;
	if (status < 0) {
		peek_finish(p);
		return;
	}
	if (++p->wakeups > MAX_PEEK_WAKEUPS) {
		uv_poll_stop(&p->poll); /* the timer decides */
		return;
	}
	ssize_t n = recv(p->fd, p->buf, FLOWPEEK_MAX, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		peek_finish(p);
		return;
	}
	p->len = (size_t)n;
	enum flowpeek_kind k = flowpeek_parse(p->buf, p->len, &p->fp);
	if (k != FLOWPEEK_NEED_MORE || (events & UV_DISCONNECT) || p->len >= FLOWPEEK_MAX) {
		peek_finish(p);
		return;
	}
	/* Wake only when more than what is there arrived (the bytes stay in
	 * the socket, so a level-triggered poll would spin otherwise); for a
	 * TLS record, when the whole record is there. */
	int low = (int)p->len + 1;
	if (p->len >= 5 && p->buf[0] == 0x16) {
		int rec = 5 + (p->buf[3] << 8 | p->buf[4]);
		if (rec > low)
			low = rec < FLOWPEEK_MAX ? rec : FLOWPEEK_MAX;
	}
	if (setsockopt(p->fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof(low)) < 0)
		peek_finish(p);
}

/* ---------- accepting ---------- */

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	struct netaddr x, y;
	return netaddr_from_sockaddr((const struct sockaddr *)a, &x) == 0 &&
	       netaddr_from_sockaddr((const struct sockaddr *)b, &y) == 0 && netaddr_equal(&x, &y) &&
	       sockaddr_port(a) == sockaddr_port(b);
}

/* The destination the client connected to before nftables redirected it.
 * -errno; -EADDRNOTAVAIL when it was not redirected (made to us). */
static int original_dst(int fd, struct sockaddr_storage *orig)
{
	struct sockaddr_storage local;
	socklen_t len = sizeof(local);
	if (getsockname(fd, (struct sockaddr *)&local, &len) < 0)
		return -errno;
	memset(orig, 0, sizeof(*orig));
	len = sizeof(*orig);
	int r = local.ss_family == AF_INET6
			? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, orig, &len)
			: getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, orig, &len);
	if (r < 0)
		return -errno;
	if (same_addr(orig, &local))
		return -EADDRNOTAVAIL;
	return 0;
}

static void take(struct transparent_listener *l, int fd)
{
	struct netsup *ns = l->ns;
	struct sockaddr_storage orig;
	int r = original_dst(fd, &orig);
	if (r < 0) {
		log_debug("transparent %s: a connection without an original destination (%s): reset", l->addr,
			  strerror(-r));
		ns->sh->metrics.transparent_unredirected++;
		reset_close(fd);
		return;
	}
	/* Most clients have written their first bytes by now. */
	ssize_t n = recv(fd, l->first, sizeof(l->first), MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		struct flowpeek fp;
		if (flowpeek_parse(l->first, (size_t)n, &fp) != FLOWPEEK_NEED_MORE) {
			hand_over(ns, fd, &orig, &fp);
			return;
		}
	}
	if (ns->sh->n_peeking >= MAX_PEEKING) {
		ns->sh->metrics.conns_dropped++;
		reset_close(fd);
		return;
	}
	struct tpeek *p = calloc(1, sizeof(*p));
	uint8_t *buf = p ? malloc(FLOWPEEK_MAX) : NULL;
	if (!p || !buf) {
		free(p);
		free(buf);
		reset_close(fd);
		return;
	}
	p->ns = ns;
	p->fd = fd;
	p->buf = buf;
	p->orig = orig;
	if (uv_poll_init(ns->loop, &p->poll, fd) < 0) {
		free(buf);
		free(p);
		reset_close(fd);
		return;
	}
	ns->sh->n_peeking++;
	p->poll.data = p;
	uv_timer_init(ns->loop, &p->timer);
	p->timer.data = p;
	p->open_handles = 2;
	uv_timer_start(&p->timer, peek_timeout, ns->cfg.transparent_peek_ms, 0);
	if (uv_poll_start(&p->poll, UV_READABLE | UV_DISCONNECT, peek_readable) < 0)
		peek_finish(p);
}

static void on_listen_readable(uv_poll_t *h, int status, int events)
{
	(void)events;
	struct transparent_listener *l = h->data;
	if (status < 0)
		return;
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
				l->ns->sh->metrics.accept_errors++;
				uint64_t held_back;
				if (log_ratelimit_ok(&l->ns->accept_log, uv_now(l->ns->loop), 10000, &held_back))
					log_warn("accept on transparent %s: %s (%llu more since the last warning)",
						 l->addr, strerror(errno), (unsigned long long)held_back);
			}
			return;
		}
		take(l, fd);
	}
}

int transparent_listen(struct netsup *ns, const char *addr, struct transparent_listener **out)
{
	struct sockaddr_storage ss;
	int r = netsup_parse_hostport(addr, &ss);
	if (r < 0) {
		log_error("--transparent-listen %s: expected ADDR:PORT (e.g. 127.0.0.1:3129, [::1]:3129)", addr);
		return r;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		log_error("--transparent-listen %s: socket: %s", addr, strerror(-r));
		return r;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* --workers > 1: one socket per worker in a SO_REUSEPORT group */
	if (ns->cfg.workers > 1 && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
		r = -errno;
		log_error("--transparent-listen %s: SO_REUSEPORT: %s", addr, strerror(-r));
		close(fd);
		return r;
	}
	if (ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	socklen_t len = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 1024) < 0) {
		r = -errno;
		log_error("cannot listen on %s (transparent): %s", addr, strerror(-r));
		close(fd);
		return r;
	}
	struct transparent_listener *l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return -ENOMEM;
	}
	l->ns = ns;
	l->fd = fd;
	strscpy(l->addr, addr, sizeof(l->addr));
	r = uv_poll_init(ns->loop, &l->poll, fd);
	if (r < 0) {
		close(fd);
		free(l);
		return r;
	}
	l->poll.data = l;
	r = uv_poll_start(&l->poll, UV_READABLE, on_listen_readable);
	if (r < 0) {
		log_error("cannot listen on %s (transparent): %s", addr, uv_strerror(r));
		transparent_listener_close(l);
		return r;
	}
	*out = l;
	return 0;
}

static void listener_closed(uv_handle_t *h)
{
	struct transparent_listener *l = h->data;
	close(l->fd);
	free(l);
}

void transparent_listener_close(struct transparent_listener *l)
{
	if (l)
		uv_close((uv_handle_t *)&l->poll, listener_closed);
}
