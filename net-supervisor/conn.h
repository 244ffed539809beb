/* One client connection of the proxy, shared by its parts: the front ends
 * (proxy.c reads a request and answers it; transparent.c adopts a captured
 * flow, conn_adopt_fd, with its destination already known), the relay that moves
 * the bytes once it is allowed (relay.c, relay_splice.c), and the lines it
 * leaves in the audit (audit_line.c). Internal to the net-supervisor.
 *
 * States, in order: C_HEAD (reading the request head) → C_WAIT (identity
 * and destination being resolved, then decided) → C_RECORD (decided; the
 * answer waits until the decision is in the audit file) → C_CONNECTING →
 * C_RELAY; C_RESPOND (an error answer being written) and C_CLOSING can
 * follow any of them. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "net-supervisor/context.h"
#include "net-supervisor/httpreq.h"
#include "policy/netpolicy.h"

#define MAX_ADDRS 16

#define CONN_IN_ACTIVE 0x1u    /* metrics.conns_active */
#define CONN_IN_RELAYING 0x2u  /* ns->n_relaying (a user-space relay, not splice) */
#define CONN_IN_REJECTING 0x4u /* ns->n_rejecting (over the connection limit, answered 503) */

struct splice_side;
struct upstream_hop;
struct tls_inspect;

/* C_RECORD: decided, waiting for the decision to be in the audit file
 * before the answer goes out (auditq.h). */
enum cstate { C_HEAD, C_WAIT, C_RECORD, C_CONNECTING, C_RELAY, C_RESPOND, C_CLOSING };

struct side {
	uv_tcp_t tcp;
	struct conn *c;
	struct side *peer;
	bool inited, reading, paused, eof, shut_done;
	uv_shutdown_t shut;
	/* Bulk reads: once a relay read fills a whole relay_buffer, this side
	 * reads RELAY_BULK_FACTOR times as much at once into its own buffer,
	 * reused while the other side takes every write at once
	 * (uv_try_write); a queued write holds it until written, then it
	 * comes back as the spare (a fresh 1 MiB malloc would be page-faulted
	 * in again). Back to pooled relay_buffer reads, both buffers freed,
	 * when a read returns less than 1/8 of relay_buffer: only flows that
	 * are moving data hold big buffers. Fewer, larger syscalls: about
	 * 10-20 % less proxy CPU per byte on loopback (docs/performance.md). */
	bool bulk;
	char *big;   /* the next read goes here */
	char *spare; /* a written-out big buffer waiting to be reused */
};

#define RELAY_BULK_FACTOR 4

struct conn {
	struct netsup *ns;
	struct conn *next, *prev;
	enum cstate state;
	struct side client, up;
	uv_timer_t timer;
	uv_connect_t connreq;
	uint64_t last_activity;
	int open_handles;
	/* The daemon's counts this conn is in (CONN_IN_*), taken back when
	 * it is freed. */
	unsigned counted_in;
	struct proxy_flow tuple;
	/* The destination as the client named it, set by the front end once
	 * known (NULL before): the decision, the upstream connect, the audit
	 * lines and revocation use these, never the request parser's fields,
	 * so a front end without an HTTP head can fill them too. */
	const char *host;
	uint16_t port;
	struct httpreq req; /* the CONNECT/forward front end's request head */
	char *early;       /* bytes after the head, sent upstream after connect */
	size_t early_len;
	/* identity */
	struct identity_request *idreq;
	bool id_done;
	enum reason id_reason;
	struct flow_identity *id;
	/* destination */
	uv_getaddrinfo_t gai;
	bool gai_pending, gai_done;
	int gai_status;
	struct netaddr resolved[MAX_ADDRS];
	size_t n_resolved;
	struct netaddr allowed[MAX_ADDRS];
	size_t n_allowed, next_addr;
	struct netaddr chosen;
	bool have_chosen;
	/* decision as taken (copied: a reload may free the policy) */
	bool decided;
	struct netpolicy_decision d;
	/* the answer held back until the decision is in the audit file */
	struct auditq_waiter recorded;
	bool recording;        /* its waiter is staged: the conn cannot be freed */
	bool answer_allow;     /* else answer_status/answer_reason */
	int answer_status;
	enum reason answer_reason;
	/* splice fast path (relay without copying through user space) */
	struct splice_side *sp[2]; /* [0] client fd, [1] upstream fd; set while spliced */
	char policy_name[132];
	uint64_t generation;
	uint64_t allowed_at; /* uv_now() of the allow: --max-tunnel-lifetime counts from here */
	uint8_t revoked;     /* enum revoke_why: revoked while its allow was being recorded */
	/* through the corporate upstream proxy (upstream.h): set at connect */
	bool via_upstream;
	struct upstream_hop *hop; /* its CONNECT handshake's state */
	/* A transparent flow (transparent.h): no HTTP head, no answer but a
	 * reset on a denial; the first bytes stay in the socket. */
	struct conn_transparent *tp;
	/* an inspected CONNECT (endpoint `tls: inspect`; tls_inspect.h) */
	struct tls_inspect *tls;
};

/* The transparent front end's part of a conn (transparent.c fills it). */
struct conn_transparent {
	enum netpolicy_flow kind;   /* RAW: only protocol: tcp endpoints admit it */
	const char *name_source;    /* "sni", "http_host", "dns", "none" */
	const char *peek;           /* flowpeek_kind_word() */
	char peeked_name[256];      /* a peeked name the dns table did not confirm, or "" */
	char host[256];             /* c->host points here: the name, or the address literal */
};

/* The conn for a client socket fd accepted by another front end (the
 * transparent one): counted and limited as proxy.c's own accepts. NULL:
 * the fd is closed (out of memory, or over --max-conns: refused with a
 * reset). Takes fd in every case. */
struct conn *conn_adopt_fd(struct netsup *ns, int fd, struct conn_transparent *tp);
/* The destination is known (c->host, c->port, and c->resolved when it
 * needs no lookup): resolve identity, decide, record, connect, relay, as
 * for a request head. */
void conn_dest_ready(struct conn *c);

/* Close every handle; the conn is freed once the last one is closed and
 * no lookup or audit waiter still refers to it. Idempotent. */
void conn_close(struct conn *c);
/* Free the conn if it is closing and nothing refers to it any more. */
void conn_maybe_free(struct conn *c);
/* Answer the client with status and reason (a JSON body, X-Tether-Reason),
 * then close politely; the upstream side is closed at once. */
void conn_respond(struct conn *c, int status, enum reason reason);
/* uv_alloc_cb for a side: a pooled relay_buffer (ns->pool). */
void conn_alloc_pooled(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
