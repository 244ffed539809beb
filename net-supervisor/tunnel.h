/* An allowed flow still open (a tunnel) as the revocation judges see it,
 * and why one is ended early: the words the audit lines (tunnel_revoked)
 * and metrics use. Plain data, so that the proxy, the audit lines and the
 * metrics need not depend on revoke.h, whose timers use the proxy. */
#pragma once

#include <stdint.h>

#include "common/flow_identity.h"
#include "common/netaddr.h"

enum revoke_why {
	REVOKE_KEEP = 0,
	REVOKE_ANCHOR_LOST,
	REVOKE_ANCHOR_REPLACED,
	REVOKE_POLICY_CHANGED,
	REVOKE_MAX_LIFETIME,
	REVOKE__COUNT
};
/* "anchor_lost", "anchor_replaced", "policy_changed", "max_lifetime".
 * Inline: the audit lines and metrics need the word without depending on
 * revoke.c, which depends on the proxy. */
static inline const char *revoke_word(enum revoke_why w)
{
	switch (w) {
	case REVOKE_ANCHOR_LOST: return "anchor_lost";
	case REVOKE_ANCHOR_REPLACED: return "anchor_replaced";
	case REVOKE_POLICY_CHANGED: return "policy_changed";
	case REVOKE_MAX_LIFETIME: return "max_lifetime";
	default: return "keep";
	}
}

/* An allowed flow still open (connecting upstream or relaying). */
struct tunnel_view {
	const struct flow_identity *id; /* NULL: allowed without one (audit mode) */
	const char *host;               /* as the client named it */
	uint16_t port;
	const struct netaddr *addr;     /* the address it connects or relays to */
	uint64_t allowed_at_ms;         /* uv_now() of the allowing decision */
};
