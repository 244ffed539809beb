/* idfeed: the identity feed's wire format (connect-time identity).
 *
 * The proc-supervisor (the anchor) publishes, for each socket its connect
 * notifier recorded, the identity it verified for the connector, keyed by
 * the socket's cookie (proc-supervisor/idpublish.h); the net-supervisor's
 * local strategy reads them (net-supervisor/identity_feed.h) and answers a
 * new flow with one exact sock_diag query and a table lookup.
 *
 * One message per line, each a JSON object (jansson), at most
 * IDFEED_LINE_MAX bytes:
 *   {"due":COOKIE}                      a record for COOKIE is being made
 *   {"id":COOKIE,"pid":N,"key":"...","path":"...","sha256":"<hex>",
 *    "anc":[{"path":"...","pid":N,"sha256":"<hex>|"},...]}
 *                                       the verified connector (ancestors
 *                                       parent first, anchor excluded)
 *   {"no":COOKIE,"reason":"<reason word>"} the connector could not be
 *                                       verified: the reader falls back
 * COOKIE is the kernel's socket cookie (SO_COOKIE, sock_diag), unique per
 * boot and never reused. The format carries no authentication: a reader
 * must only accept lines from a peer it proved to be its anchor. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/flow_identity.h"
#include "common/reason.h"

#define IDFEED_LINE_MAX 65536

enum idfeed_kind { IDFEED_DUE = 1, IDFEED_ID, IDFEED_NO };

struct idfeed_msg {
	enum idfeed_kind kind;
	uint64_t cookie;
	enum reason reason;     /* IDFEED_NO */
	struct flow_identity *id; /* IDFEED_ID: owned by the message (source local_procfs) */
};

/* A line (with its '\n') into *out (malloc'd, *len its length). -errno. */
int idfeed_encode_due(uint64_t cookie, char **out, size_t *len);
int idfeed_encode_no(uint64_t cookie, enum reason why, char **out, size_t *len);
int idfeed_encode_id(uint64_t cookie, const struct flow_identity *id, char **out, size_t *len);

/* One line (without its '\n', len bytes). -EINVAL for anything malformed
 * (unknown shape, bad types, a sha256 that is not 64 hex digits, ...). */
int idfeed_decode(const char *line, size_t len, struct idfeed_msg *out);
void idfeed_msg_release(struct idfeed_msg *m);
