/* Tunnels that outlive what allowed them.
 *
 * A decision is taken once, when a flow is opened; a tunnel may live for
 * hours. Three things end it early, each audited as `tunnel_revoked` with
 * its reason word:
 *   - anchor_lost / anchor_replaced: the anchor instance that vouched for
 *     the flow's identity (flow_identity.anchor_epoch) is gone, or another
 *     instance took its place. Checked after --revoke-grace (a control
 *     channel that comes back with the same instance within it keeps its
 *     tunnels);
 *   - policy_changed: a reloaded policy would deny the flow's recorded
 *     identity and destination (netpolicy_decide on the address connected);
 *   - max_lifetime: older than --max-tunnel-lifetime (off by default).
 * Flows allowed without an identity (audit mode) are re-judged by policy
 * only. A request still waiting for its decision is not touched: it is
 * decided by the policy and anchor in force when it is decided. */
#pragma once

#include "net-supervisor/tunnel.h"

struct netsup;

/* Timers; call once the loop and config are set. */
void revoke_start(struct netsup *ns);
void revoke_stop(struct netsup *ns);
/* The policy was replaced: close what it would deny, now. */
void revoke_after_policy(struct netsup *ns);
/* The anchor was lost or replaced: judge the tunnels after the grace. */
void revoke_after_anchor(struct netsup *ns);
