/* sock_diag lookups through libnl.
 *
 * Why not the idiagnl_* object API alone: libnl-idiag can only send the old
 * struct inet_diag_req as a whole-table dump (idiagnl_send_simple: family
 * and states, no socket id), and its idiagnl_msg object has no accessor for
 * idiag_cookie. An exact TCP lookup needs inet_diag_req_v2 with the socket
 * id filled in, and attribution needs the cookie. So the socket is a libnl
 * nl_sock connected with idiagnl_connect(), requests are nl_msg built with
 * nlmsg_alloc_simple/nlmsg_append/nla_put, replies go through nl_recvmsgs
 * with our callbacks, and only the fixed struct inet_diag_msg is read by
 * hand (after a length check). */
#include "identity/sockdiag.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <netlink/attr.h>
#include <netlink/handlers.h>
#include <netlink/idiag/idiagnl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include "common/util.h"

/* A reply that takes longer than this means the kernel or the socket is in
 * trouble; fail the lookup rather than block a proxy worker. */
#define SOCKDIAG_TIMEOUT_NS (2ULL * 1000 * 1000 * 1000)

/* TCP states in which a socket is connected and owned by a process. Not
 * LISTEN (a 4-tuple lookup can fall back to a listener), not TIME_WAIT or
 * NEW_SYN_RECV (no inode, nobody holds them), not CLOSE. */
#define TCP_CONNECTED_STATES                                                                    \
	((1U << TCP_ESTABLISHED) | (1U << TCP_SYN_SENT) | (1U << TCP_SYN_RECV) |                \
	 (1U << TCP_FIN_WAIT1) | (1U << TCP_FIN_WAIT2) | (1U << TCP_CLOSE_WAIT) |               \
	 (1U << TCP_LAST_ACK) | (1U << TCP_CLOSING))

enum match_quality { MATCH_NONE = 0, MATCH_WILDCARD = 1, MATCH_EXACT = 2 };

struct lookup_state {
	const struct flow_tuple *t;
	uint32_t seq;
	bool dump;
	bool done;
	int error; /* -errno from an NLMSG_ERROR, or a parse error */
	/* best match so far and how many sockets share that quality */
	enum match_quality best;
	unsigned n_best;
	struct sockdiag_result res;
};

struct sockdiag {
	struct nl_sock *sk;
	struct nl_cb *cb;
	struct lookup_state *cur; /* the lookup in progress: not thread-safe */
};

static size_t addr_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* Does the reply's address (in the reply's family) equal the tuple's? A
 * dual-stack AF_INET6 socket talking IPv4 is reported with v4-mapped
 * addresses (::ffff:a.b.c.d) while the other end sees a plain IPv4 flow. */
static bool addr_eq(const struct flow_tuple *t, const union flow_addr *want, uint8_t m_family,
		    const __be32 m[4])
{
	if (m_family == t->family)
		return memcmp(m, want->raw, addr_len(t->family)) == 0;
	if (t->family == AF_INET && m_family == AF_INET6)
		return m[0] == 0 && m[1] == 0 && m[2] == htonl(0xffff) &&
		       memcmp(&m[3], want->raw, 4) == 0;
	return false;
}

static bool addr_is_any(uint8_t m_family, const __be32 m[4])
{
	if (m_family == AF_INET)
		return m[0] == 0;
	return m[0] == 0 && m[1] == 0 && m[2] == 0 && m[3] == 0;
}

/* Does the reply describe the socket the tuple names? The kernel's exact
 * lookup can return a listener or a TIME_WAIT entry, and a dump returns
 * every socket on the port, so every reply is checked field by field. */
static enum match_quality reply_match(const struct flow_tuple *t, const struct inet_diag_msg *m)
{
	if (m->idiag_family != t->family &&
	    !(t->family == AF_INET && m->idiag_family == AF_INET6))
		return MATCH_NONE;
	if (ntohs(m->id.idiag_sport) != t->sport)
		return MATCH_NONE;
	if (m->idiag_inode == 0)
		return MATCH_NONE; /* orphaned or TIME_WAIT: nobody holds it */

	if (t->proto == IPPROTO_TCP) {
		if (!((1U << m->idiag_state) & TCP_CONNECTED_STATES))
			return MATCH_NONE;
		if (ntohs(m->id.idiag_dport) != t->dport ||
		    !addr_eq(t, &t->src, m->idiag_family, m->id.idiag_src) ||
		    !addr_eq(t, &t->dst, m->idiag_family, m->id.idiag_dst))
			return MATCH_NONE;
		return MATCH_EXACT;
	}

	/* UDP: the local address must be ours or the wildcard; a connected
	 * socket must be connected to the tuple's peer. */
	bool src_exact = addr_eq(t, &t->src, m->idiag_family, m->id.idiag_src);
	if (!src_exact && !addr_is_any(m->idiag_family, m->id.idiag_src))
		return MATCH_NONE;
	bool connected = m->id.idiag_dport != 0;
	if (connected) {
		if (ntohs(m->id.idiag_dport) != t->dport ||
		    !addr_eq(t, &t->dst, m->idiag_family, m->id.idiag_dst))
			return MATCH_NONE;
		return src_exact ? MATCH_EXACT : MATCH_WILDCARD;
	}
	return MATCH_WILDCARD;
}

static int on_seq_check(struct nl_msg *msg, void *arg)
{
	struct sockdiag *sd = arg;
	/* Leftovers of an earlier, abandoned request are skipped, not
	 * mistaken for this answer. */
	if (!sd->cur || nlmsg_hdr(msg)->nlmsg_seq != sd->cur->seq)
		return NL_SKIP;
	return NL_OK;
}

static int on_valid(struct nl_msg *msg, void *arg)
{
	struct sockdiag *sd = arg;
	struct lookup_state *st = sd->cur;
	struct nlmsghdr *h = nlmsg_hdr(msg);

	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
		return NL_SKIP;
	if (nlmsg_datalen(h) < (int)sizeof(struct inet_diag_msg)) {
		st->error = -EBADMSG;
		st->done = true;
		return NL_STOP;
	}
	const struct inet_diag_msg *m = nlmsg_data(h);
	enum match_quality q = reply_match(st->t, m);
	if (q != MATCH_NONE) {
		if (q > st->best) {
			st->best = q;
			st->n_best = 0;
		}
		if (q == st->best) {
			st->n_best++;
			st->res = (struct sockdiag_result){
				.inode = m->idiag_inode,
				.uid = m->idiag_uid,
				.cookie = (uint64_t)m->id.idiag_cookie[0] |
					  ((uint64_t)m->id.idiag_cookie[1] << 32),
				.state = m->idiag_state,
				.family = m->idiag_family,
			};
		}
	}
	if (!st->dump) {
		/* An exact query has exactly one answer message. */
		st->done = true;
		return NL_STOP;
	}
	return NL_OK;
}

static int on_finish(struct nl_msg *msg, void *arg)
{
	struct sockdiag *sd = arg;
	sd->cur->done = true;
	return NL_STOP;
}

static int on_error(struct sockaddr_nl *nla, struct nlmsgerr *err, void *arg)
{
	struct sockdiag *sd = arg;
	if (!sd->cur || err->msg.nlmsg_seq != sd->cur->seq)
		return NL_SKIP;
	sd->cur->error = err->error < 0 ? err->error : -EPROTO;
	sd->cur->done = true;
	return NL_STOP;
}

struct sockdiag *sockdiag_open(void)
{
	struct sockdiag *sd = calloc(1, sizeof(*sd));
	int r;

	if (!sd) {
		errno = ENOMEM;
		return NULL;
	}
	sd->sk = nl_socket_alloc();
	sd->cb = nl_cb_alloc(NL_CB_DEFAULT);
	if (!sd->sk || !sd->cb) {
		r = -ENOMEM;
		goto fail;
	}
	/* Replies are matched by our own sequence check; no ACKs are
	 * requested, so an exact query costs one request and one reply. */
	nl_socket_disable_auto_ack(sd->sk);
	/* One receive per reply, without peeking at its size first: the
	 * kernel never builds a netlink skb above 32 KiB (netlink_recvmsg
	 * caps max_recvmsg_len at SKB_WITH_OVERHEAD(32768)), so a 64 KiB
	 * buffer holds any dump batch whole. (A truncated read would be an
	 * error, i.e. a denial, never a wrong answer.) */
	if (nl_socket_set_msg_buf_size(sd->sk, 65536) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	nl_cb_set(sd->cb, NL_CB_SEQ_CHECK, NL_CB_CUSTOM, on_seq_check, sd);
	nl_cb_set(sd->cb, NL_CB_VALID, NL_CB_CUSTOM, on_valid, sd);
	nl_cb_set(sd->cb, NL_CB_FINISH, NL_CB_CUSTOM, on_finish, sd);
	nl_cb_err(sd->cb, NL_CB_CUSTOM, on_error, sd);

	r = idiagnl_connect(sd->sk);
	if (r < 0) {
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	/* Bound every blocking receive (see SOCKDIAG_TIMEOUT_NS). */
	struct timeval tv = { .tv_sec = 0, .tv_usec = 250 * 1000 };
	if (setsockopt(nl_socket_get_fd(sd->sk), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
		r = -errno;
		goto fail;
	}
	return sd;
fail:
	sockdiag_close(sd);
	errno = -r;
	return NULL;
}

void sockdiag_close(struct sockdiag *sd)
{
	if (!sd)
		return;
	if (sd->sk)
		nl_socket_free(sd->sk); /* closes the fd */
	if (sd->cb)
		nl_cb_put(sd->cb);
	free(sd);
}

static int tuple_check(const struct flow_tuple *t)
{
	if (!t)
		return -EINVAL;
	if (t->proto != IPPROTO_TCP && t->proto != IPPROTO_UDP)
		return -EINVAL;
	if (t->family != AF_INET && t->family != AF_INET6)
		return -EINVAL;
	if (t->sport == 0)
		return -EINVAL;
	if (t->proto == IPPROTO_TCP && t->dport == 0)
		return -EINVAL;
	return 0;
}

/* Kernel-side filter for a UDP dump: sport >= p && sport <= p, built from
 * the two port comparisons every kernel with sock_diag understands
 * (INET_DIAG_BC_S_EQ only exists since 4.16). Layout as in iproute2's ss:
 * each comparison is an op followed by a pseudo-op carrying the port in
 * its `no` field; `yes` falls through to the next op, `no` jumps past the
 * end (reject). */
static void udp_port_filter(uint16_t port, struct inet_diag_bc_op bc[4])
{
	bc[0] = (struct inet_diag_bc_op){ .code = INET_DIAG_BC_S_GE, .yes = 8, .no = 16 + 4 };
	bc[1] = (struct inet_diag_bc_op){ .code = INET_DIAG_BC_NOP, .yes = 0, .no = port };
	bc[2] = (struct inet_diag_bc_op){ .code = INET_DIAG_BC_S_LE, .yes = 8, .no = 8 + 4 };
	bc[3] = (struct inet_diag_bc_op){ .code = INET_DIAG_BC_NOP, .yes = 0, .no = port };
}

/* One request for sockets of req_family; replies accumulate in *st. */
static int query(struct sockdiag *sd, const struct flow_tuple *t, int req_family,
		 struct lookup_state *st)
{
	struct inet_diag_req_v2 req = { 0 };
	struct nl_msg *msg = NULL;
	int r;

	req.sdiag_family = (uint8_t)req_family;
	req.sdiag_protocol = (uint8_t)t->proto;
	req.idiag_ext = 0; /* the base message carries inode, uid and cookie */
	req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	req.id.idiag_sport = htons(t->sport);

	st->done = false;
	st->error = 0;
	if (t->proto == IPPROTO_TCP) {
		/* Exact lookup: the kernel finds one socket by the 4-tuple
		 * (an AF_INET query also finds a dual-stack AF_INET6 socket). */
		req.idiag_states = TCP_CONNECTED_STATES;
		req.id.idiag_dport = htons(t->dport);
		memcpy(req.id.idiag_src, t->src.raw, addr_len(t->family));
		memcpy(req.id.idiag_dst, t->dst.raw, addr_len(t->family));
		st->dump = false;
		msg = nlmsg_alloc_simple(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST);
	} else {
		/* UDP: a socket may be unconnected or bound to the wildcard,
		 * so dump the port and choose here. */
		req.idiag_states = ~0U;
		st->dump = true;
		msg = nlmsg_alloc_simple(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP);
	}
	if (!msg)
		return -ENOMEM;
	if (nlmsg_append(msg, &req, sizeof(req), NLMSG_ALIGNTO) < 0) {
		r = -ENOMEM;
		goto out;
	}
	if (st->dump) {
		struct inet_diag_bc_op bc[4];
		udp_port_filter(t->sport, bc);
		if (nla_put(msg, INET_DIAG_REQ_BYTECODE, sizeof(bc), bc) < 0) {
			r = -ENOMEM;
			goto out;
		}
	}

	/* The receive buffer libnl allocates for each read: 64 KiB for a
	 * dump (see sockdiag_open), 8 KiB for an exact query's one reply (an
	 * inet_diag_msg with the base attributes, or an error: well under
	 * 1 KiB), which keeps a 64 KiB allocation and its free (a heap
	 * consolidation every time) off every flow. A reply that did not fit
	 * would fail the lookup (a denial), never answer wrongly. */
	if (nl_socket_set_msg_buf_size(sd->sk, st->dump ? 65536 : 8192) < 0) {
		r = -ENOMEM;
		goto out;
	}
	sd->cur = st;
	r = nl_send_auto(sd->sk, msg);
	if (r < 0) {
		r = -EIO;
		goto out;
	}
	st->seq = nlmsg_hdr(msg)->nlmsg_seq;

	unsigned long long deadline = now_mono_ns() + SOCKDIAG_TIMEOUT_NS;
	while (!st->done) {
		r = nl_recvmsgs(sd->sk, sd->cb);
		if (st->done)
			break;
		if (r < 0) {
			r = -EIO;
			goto out;
		}
		if (now_mono_ns() > deadline) {
			r = -ETIMEDOUT;
			goto out;
		}
	}
	/* The kernel answers an exact query for a missing socket with
	 * ENOENT: that is "no match", not a failure. */
	r = st->error == -ENOENT ? 0 : st->error;
out:
	sd->cur = NULL;
	nlmsg_free(msg);
	return r;
}

int sockdiag_lookup(struct sockdiag *sd, const struct flow_tuple *t, struct sockdiag_result *out)
{
	struct lookup_state st = { .t = t };
	int r;

	if (!sd || !out)
		return -EINVAL;
	r = tuple_check(t);
	if (r < 0)
		return r;

	r = query(sd, t, t->family, &st);
	/* A dual-stack AF_INET6 UDP socket serving an IPv4 peer is only in
	 * the AF_INET6 table. */
	if (r == 0 && t->proto == IPPROTO_UDP && t->family == AF_INET)
		r = query(sd, t, AF_INET6, &st);
	if (r < 0)
		return r;
	if (st.best == MATCH_NONE)
		return -ENOENT;
	if (st.n_best > 1)
		return -ENOTUNIQ;
	*out = st.res;
	return 0;
}

int flow_tuple_from_sockaddr(struct flow_tuple *t, int proto, const struct sockaddr *src,
			     const struct sockaddr *dst)
{
	if (!t || !src || !dst || src->sa_family != dst->sa_family)
		return -EINVAL;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	t->proto = proto;
	t->family = src->sa_family;
	if (src->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)src, *d = (const void *)dst;
		t->src.v4 = s->sin_addr;
		t->dst.v4 = d->sin_addr;
		t->sport = ntohs(s->sin_port);
		t->dport = ntohs(d->sin_port);
	} else if (src->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)src, *d = (const void *)dst;
		t->src.v6 = s->sin6_addr;
		t->dst.v6 = d->sin6_addr;
		t->sport = ntohs(s->sin6_port);
		t->dport = ntohs(d->sin6_port);
	} else {
		return -EINVAL;
	}
	return 0;
}

int flow_tuple_format(const struct flow_tuple *t, char *buf, size_t size)
{
	char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
	if (!t || (t->family != AF_INET && t->family != AF_INET6))
		return -EINVAL;
	if (!inet_ntop(t->family, t->src.raw, s, sizeof(s)) ||
	    !inet_ntop(t->family, t->dst.raw, d, sizeof(d)))
		return -EINVAL;
	const char *p = t->proto == IPPROTO_TCP ? "tcp" : t->proto == IPPROTO_UDP ? "udp" : "?";
	int n;
	if (t->family == AF_INET)
		n = snprintf(buf, size, "%s %s:%u->%s:%u", p, s, t->sport, d, t->dport);
	else
		n = snprintf(buf, size, "%s [%s]:%u->[%s]:%u", p, s, t->sport, d, t->dport);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}
