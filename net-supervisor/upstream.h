/* The corporate upstream proxy: after a flow is decided and its address
 * checked, the net-supervisor may reach that destination through an HTTP
 * proxy of the site's (--upstream-proxy http://HOST:PORT) with a CONNECT
 * request, for CONNECT tunnels and plain-HTTP forward requests alike.
 *
 * The order never changes: identity, policy decision and blocked-range
 * checks run on the real destination first, exactly as without an
 * upstream proxy; only the socket then goes to the corporate proxy
 * instead of the destination. What the CONNECT line names:
 *   address (the default): the address the checks saw ("CONNECT
 *     198.51.100.10:443"), so the corporate proxy is asked for nothing
 *     the checks did not see (whether it honours that is up to it);
 *   name: the host name as the client gave it ("CONNECT example.com:443"),
 *     for proxies that must resolve or filter by name themselves; the
 *     address finally reached is then the corporate proxy's resolution,
 *     which our checks did not see (docs/net-supervisor.md).
 * Credentials (--upstream-proxy-auth-file, "user:password") are sent as
 * Proxy-Authorization: Basic; the file must be ours alone (no group or
 * other permission bits), and it lives outside the sandbox.
 * --no-upstream-proxy LIST names destinations reached directly.
 *
 * Parsing and matching are pure functions (unit-tested in
 * tests/net-supervisor/test_upstream.c); upstream_hop_start() runs the CONNECT
 * handshake on a conn's upstream socket (proxy.c calls it). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/netaddr.h"
#include "common/reason.h"

#define UPSTREAM_MAX_BYPASS 64
#define UPSTREAM_REPLY_MAX 8192   /* the corporate proxy's reply head */
#define UPSTREAM_AUTH_FILE_MAX 1024

enum upstream_connect_by { UPSTREAM_BY_ADDRESS, UPSTREAM_BY_NAME };

struct upstream_bypass {
	bool is_cidr;
	bool suffix;             /* ".corp.example": every name below it */
	struct netcidr cidr;     /* is_cidr */
	char name[254];          /* lower case, no trailing dot */
};

struct upstream_proxy {
	char host[256];                  /* as given (a name or an address) */
	uint16_t port;
	struct sockaddr_storage addr;    /* resolved once, at start */
	char *auth_header;               /* "Proxy-Authorization: Basic …\r\n" or NULL */
	enum upstream_connect_by by;
	struct upstream_bypass bypass[UPSTREAM_MAX_BYPASS];
	size_t n_bypass;
};

/* "http://HOST:PORT" (a trailing "/" allowed; HOST a name, an IPv4
 * address or a bracketed IPv6 one). No user info (credentials go in the
 * auth file), no other scheme. 0 or -EINVAL with a sentence in err. */
int upstream_parse_url(const char *url, char *host, size_t host_size, uint16_t *port, char *err,
		       size_t err_size);

/* Comma- or space-separated entries: a host name (that name only), a
 * ".suffix" or "*.suffix" (every name below suffix), an address or a
 * CIDR. Appends to up->bypass. 0 or -EINVAL with a sentence in err. */
int upstream_parse_bypass(struct upstream_proxy *up, const char *list, char *err, size_t err_size);

/* True when the destination goes direct: its name (as the client gave
 * it) matches a name entry, or the checked address matches an address
 * or CIDR entry. */
bool upstream_bypassed(const struct upstream_proxy *up, const char *host, const struct netaddr *addr);

/* Read "user:password" (one line; a final newline is dropped) from path
 * into a ready header line (malloc'd, *header). Refuses a missing file,
 * anything but a regular file, a file with any group/other permission
 * bit, an empty user or no ':'. 0 or -errno with a sentence in err. */
int upstream_read_auth_file(const char *path, char **header, char *err, size_t err_size);

/* The CONNECT request for host/addr:port (by up->by), malloc'd, *len
 * set; NULL when the name is unusable in a request line (or on ENOMEM). */
char *upstream_connect_request(const struct upstream_proxy *up, const char *host,
			       const struct netaddr *addr, uint16_t port, size_t *len);

/* Parse the corporate proxy's reply head in buf[0..len): 0 = need more,
 * 1 = complete (*status, *head_len = bytes of the head, the rest are the
 * tunnel's first bytes), -EPROTO = not an HTTP reply or over
 * UPSTREAM_REPLY_MAX. */
int upstream_parse_reply(const char *buf, size_t len, int *status, size_t *head_len);

/* The reason word and the status we answer our client with for the
 * corporate proxy's non-2xx status: 407 (or 401, which tinyproxy sends
 * to a CONNECT with bad credentials) → upstream_proxy_auth_required
 * (502), 403 → upstream_proxy_refused (403), else upstream_proxy_refused
 * (502). */
enum reason upstream_reason_for_status(int status, int *our_status);

/* Load --upstream-proxy, --upstream-proxy-auth-file, --no-upstream-proxy
 * and --upstream-proxy-connect (NULL: address) into a new *out; resolves
 * HOST once. 0 or -errno, logged. */
int upstream_load(const char *url, const char *auth_file, const char *const *bypass, size_t n_bypass,
		  const char *connect_by, struct upstream_proxy **out);
void upstream_free(struct upstream_proxy *up);

/* The handshake on a connected upstream socket (conn.h): send the
 * CONNECT, read the reply head, then call done with REASON_OK or the
 * reason and the status to answer our client with. Bytes the corporate
 * proxy sent after its head belong to the tunnel: done sends them on with
 * upstream_hop_send_leftover() after its own answer, before the relay. */
struct conn;
typedef void (*upstream_done_cb)(struct conn *c, enum reason r, int status);
int upstream_hop_start(struct conn *c, upstream_done_cb done);
int upstream_hop_send_leftover(struct conn *c);
/* Free the handshake's state (once the tunnel is up, and in conn_free);
 * idempotent. */
void upstream_hop_free(struct conn *c);
