/* The egress decision: a pure function of (policy, verified identity,
 * destination). No I/O, no clock, no globals: the proxy, `tether policy
 * explain` and the tests all call exactly this.
 *
 * Default deny. A flow is allowed when some rule has a matching binary
 * (path glob, and sha256 if pinned), its ancestor requirement (if any) is met
 * by some ancestor below the anchor, and an endpoint matches the destination
 * (host or cidr, and the port). Addresses in the blocked ranges (loopback,
 * link-local/metadata, unspecified, private, CGNAT, ULA, multicast, reserved,
 * and their IPv4-mapped forms) are only reachable through a `cidr` endpoint
 * that names them at least as specifically as the blocked range (so
 * 0.0.0.0/0 does not unblock 127.0.0.1, 127.0.0.0/8 does). In audit mode a
 * would-be denial is allowed with its reason kept and audit_mode set. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/flow_identity.h"
#include "common/reason.h"
#include "policy/network.h"

struct netpolicy_decision {
	bool allow;
	enum reason reason;  /* REASON_ALLOWED, or why it is (or would be) denied */
	const char *policy;  /* the deciding rule's name (points into the policy), or NULL */
	bool audit_mode;     /* allowed only because the mode is audit (or learn) */
	bool learn;          /* the policy is in learn mode (network_policy.learn) */
	bool tls_inspect;    /* allowed by an endpoint with `tls: inspect` */
	/* the endpoint that allowed it (points into the policy: valid until
	 * the policy is reloaded), or NULL */
	const struct netpol_endpoint *endpoint;
};

/* host: the destination as the client named it, normalised with
 * netpol_host_normalize(); ip: the resolved address the proxy would connect
 * to, or NULL when the name was not looked up (no cidr endpoint matches
 * then, but a rule whose cidr endpoint has the port still gives its
 * binary_hash_mismatch / ancestor_requirement_unmet reason). p NULL (no policy) denies with policy_not_loaded; id NULL denies with
 * identity_unavailable. Same as netpolicy_decide_flow(..., NETPOLICY_FLOW_HTTP). */
struct netpolicy_decision netpolicy_decide(const struct network_policy *p,
					   const struct flow_identity *id, const char *host,
					   uint16_t port, const struct netaddr *ip);

/* The flow's kind for netpolicy_decide_flow: HTTP for everything the
 * explicit proxy carries and a transparent flow that opened with a TLS
 * ClientHello or an HTTP request; RAW for any other transparent stream,
 * which only a `protocol: tcp` endpoint admits (a rule whose http endpoint
 * matched gives protocol_not_allowed). */
enum netpolicy_flow { NETPOLICY_FLOW_HTTP = 0, NETPOLICY_FLOW_RAW = 1 };
struct netpolicy_decision netpolicy_decide_flow(const struct network_policy *p,
						const struct flow_identity *id, const char *host,
						uint16_t port, const struct netaddr *ip,
						enum netpolicy_flow kind);

/* Could resolving `host` change the decision to an allow? True when the
 * policy is in audit mode (the flow goes ahead either way) or some rule
 * whose binaries and ancestors match id has an endpoint for `port` that is
 * a cidr (only an address can tell) or names `host`. When false, the
 * decision is netpolicy_decide(p, id, host, port, NULL), a denial: the
 * proxy then never asks the resolver about a name a denied process chose
 * (no lookup for DNS exfiltration to ride on). p or id NULL: false unless
 * audit mode. */
bool netpolicy_resolution_may_allow(const struct network_policy *p, const struct flow_identity *id,
				    const char *host, uint16_t port);

/* The name of the first rule with an endpoint for this destination,
 * whatever its binaries (ip NULL: a host that is an address literal stands
 * for itself), or NULL: where a binary that no rule names for the
 * destination would be added (the hint of `tether run`'s denial line). */
const char *netpolicy_rule_for_destination(const struct network_policy *p, const char *host, uint16_t port,
					   const struct netaddr *ip);
/* May id look `host` up at all (the workload's resolver, dns.h)? True in
 * audit mode, or when some rule whose binaries and ancestors match id has
 * an endpoint, on any port, that is a cidr (an address could match) or
 * names host (exact, or a glob it matches). False: no rule of this binary
 * could ever allow a flow to that name, and the resolver answers NXDOMAIN
 * (dns_no_rule). p or id NULL: false unless audit mode. */
bool netpolicy_name_may_allow(const struct network_policy *p, const struct flow_identity *id,
			      const char *host);

/* Is ip in a blocked range? On true, *range (optional) is that range. */
bool netpolicy_ip_blocked(const struct netaddr *ip, struct netcidr *range);
