#include "policy/netpolicy.h"

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

struct blocked {
	int family;
	uint8_t a[16];
	unsigned prefix;
};

/* Checked after netaddr_unmap(), so ::ffff:127.0.0.1, ::127.0.0.1 and
 * 64:ff9b::7f00:1 all land in 127.0.0.0/8. */
static const struct blocked blocked_ranges[] = {
	{ AF_INET, { 0 }, 8 },                 /* 0.0.0.0/8 "this network", incl. 0.0.0.0 */
	{ AF_INET, { 10 }, 8 },                /* private */
	{ AF_INET, { 100, 64 }, 10 },          /* CGNAT shared space */
	{ AF_INET, { 127 }, 8 },               /* loopback */
	{ AF_INET, { 169, 254 }, 16 },         /* link-local, incl. 169.254.169.254 metadata */
	{ AF_INET, { 172, 16 }, 12 },          /* private */
	{ AF_INET, { 192, 0, 0 }, 24 },        /* IETF protocol assignments */
	{ AF_INET, { 192, 168 }, 16 },         /* private */
	{ AF_INET, { 224 }, 4 },               /* multicast */
	{ AF_INET, { 240 }, 4 },               /* reserved, incl. 255.255.255.255 */
	{ AF_INET6, { 0 }, 128 },              /* :: unspecified */
	{ AF_INET6, { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, 128 }, /* ::1 */
	{ AF_INET6, { 0xfe, 0x80 }, 10 },      /* link-local */
	{ AF_INET6, { 0xfc }, 7 },             /* ULA */
	{ AF_INET6, { 0xff }, 8 },             /* multicast */
	{ AF_INET6, { 0xfe, 0xc0 }, 10 },      /* deprecated site-local */
};

bool netpolicy_ip_blocked(const struct netaddr *ip, struct netcidr *range)
{
	struct netaddr u;
	netaddr_unmap(ip, &u);
	for (size_t i = 0; i < sizeof(blocked_ranges) / sizeof(blocked_ranges[0]); i++) {
		const struct blocked *b = &blocked_ranges[i];
		struct netcidr c = { .prefix = b->prefix };
		c.base.family = b->family;
		memcpy(c.base.a, b->a, 16);
		if (netcidr_contains(&c, &u)) {
			if (range)
				*range = c;
			return true;
		}
	}
	return false;
}

static bool binary_match(const struct netpol_binary *b, const char *path, const char *sha,
			 bool *hash_mismatch)
{
	if (!path)
		return false;
	/* the written path, or the binary a symlinked path resolved to */
	if (!netpol_path_match(b->path, path) && !(b->resolved && strcmp(b->resolved, path) == 0))
		return false;
	if (b->has_sha256 && (!sha || strcmp(b->sha256, sha) != 0)) {
		*hash_mismatch = true;
		return false;
	}
	return true;
}

static bool port_match(const struct netpol_endpoint *ep, uint16_t port)
{
	for (size_t i = 0; i < ep->n_ports; i++)
		if (ep->ports[i] == port)
			return true;
	return false;
}

static bool host_match(const struct netpol_endpoint *ep, const char *host)
{
	switch (ep->host_kind) {
	case NETPOL_HOST_EXACT:
		return strcmp(ep->host, host) == 0;
	case NETPOL_HOST_GLOB: {
		/* "*.github.com": exactly one non-empty label before the suffix. */
		size_t hl = strlen(host), sl = strlen(ep->host);
		if (hl <= sl || strcmp(host + hl - sl, ep->host) != 0)
			return false;
		return memchr(host, '.', hl - sl) == NULL;
	}
	case NETPOL_HOST_IP: {
		struct netaddr a;
		return netaddr_parse(host, &a) == 0 && netaddr_equal(&a, &ep->host_ip);
	}
	}
	return false;
}

/* Does an endpoint let (host, port, ip) through? *blocked_hit is set when it
 * matched by name/port but the address is in a blocked range it does not
 * name. */
static bool endpoint_match(const struct netpol_endpoint *ep, const char *host, uint16_t port,
			   const struct netaddr *ip, bool ip_blocked, const struct netcidr *range,
			   bool *blocked_hit, enum netpolicy_flow kind, bool *proto_hit)
{
	if (!port_match(ep, port))
		return false;
	if (kind == NETPOLICY_FLOW_RAW && ep->protocol != NETPOL_PROTO_TCP) {
		bool dummy = false;
		if (endpoint_match(ep, host, port, ip, ip_blocked, range, &dummy, NETPOLICY_FLOW_HTTP, &dummy))
			*proto_hit = true;
		return false;
	}
	if (ep->is_cidr) {
		if (!ip || !netcidr_contains(&ep->cidr, ip))
			return false;
		if (ip_blocked) {
			/* Compare in unmapped space: ::ffff:0:0/96 CIDRs were folded. */
			unsigned prefix = ep->cidr.prefix;
			if (ep->cidr.base.family == AF_INET6 && range->base.family == AF_INET &&
			    prefix >= 96)
				prefix -= 96;
			if (prefix < range->prefix) {
				*blocked_hit = true;
				return false;
			}
		}
		return true;
	}
	if (!host_match(ep, host))
		return false;
	if (ip_blocked) {
		*blocked_hit = true;
		return false;
	}
	return true;
}

static bool ancestors_match(const struct netpol_rule *rule, const struct flow_identity *id)
{
	if (rule->n_ancestors == 0)
		return true;
	bool dummy = false;
	for (size_t a = 0; a < id->n_ancestors; a++) {
		const struct flow_ancestor *fa = &id->ancestors[a];
		for (size_t i = 0; i < rule->n_ancestors; i++)
			if (binary_match(&rule->ancestors[i], fa->path,
					 fa->sha256[0] ? fa->sha256 : NULL, &dummy))
				return true;
	}
	return false;
}

struct netpolicy_decision netpolicy_decide(const struct network_policy *p,
					   const struct flow_identity *id, const char *host,
					   uint16_t port, const struct netaddr *ip)
{
	return netpolicy_decide_flow(p, id, host, port, ip, NETPOLICY_FLOW_HTTP);
}

struct netpolicy_decision netpolicy_decide_flow(const struct network_policy *p,
						const struct flow_identity *id, const char *host,
						uint16_t port, const struct netaddr *ip,
						enum netpolicy_flow kind)
{
	struct netpolicy_decision d = { .allow = false, .reason = REASON_NO_MATCHING_POLICY };
	if (!p) {
		d.reason = REASON_POLICY_NOT_LOADED;
		return d;
	}
	if (!id || !id->binary_path) {
		d.reason = REASON_IDENTITY_UNAVAILABLE;
		goto out;
	}
	struct netcidr range = { 0 };
	bool ip_blocked = ip && netpolicy_ip_blocked(ip, &range);
	/* Precedence of deny reasons, most telling first. */
	const char *hash_rule = NULL, *anc_rule = NULL, *blocked_rule = NULL, *proto_rule = NULL;
	for (size_t r = 0; r < p->n_rules; r++) {
		const struct netpol_rule *rule = &p->rules[r];
		bool dest_ok = false, blocked_hit = false, proto_hit = false;
		size_t e_hit = 0;
		for (size_t e = 0; e < rule->n_endpoints && !dest_ok; e++)
			if ((dest_ok = endpoint_match(&rule->endpoints[e], host, port, ip, ip_blocked,
						      &range, &blocked_hit, kind, &proto_hit)))
				e_hit = e;
		bool hash_bad = false, bin_ok = false;
		for (size_t b = 0; b < rule->n_binaries && !bin_ok; b++)
			bin_ok = binary_match(&rule->binaries[b], id->binary_path,
					      id->sha256[0] ? id->sha256 : NULL, &hash_bad);
		if (!dest_ok && !ip) {
			/* No address (the name was not looked up): a cidr endpoint
			 * for the port might have matched, so the deny reason is
			 * the one an address would have given for this rule. */
			for (size_t e = 0; e < rule->n_endpoints && !dest_ok; e++)
				if (rule->endpoints[e].is_cidr && port_match(&rule->endpoints[e], port)) {
					if (!bin_ok && hash_bad && !hash_rule)
						hash_rule = rule->name;
					else if (bin_ok && !ancestors_match(rule, id) && !anc_rule)
						anc_rule = rule->name;
					break;
				}
		}
		if (!dest_ok) {
			if (blocked_hit && bin_ok && !blocked_rule)
				blocked_rule = rule->name;
			if (proto_hit && bin_ok && ancestors_match(rule, id) && !proto_rule)
				proto_rule = rule->name;
			continue;
		}
		if (!bin_ok) {
			if (hash_bad && !hash_rule)
				hash_rule = rule->name;
			continue;
		}
		if (!ancestors_match(rule, id)) {
			if (!anc_rule)
				anc_rule = rule->name;
			continue;
		}
		d.allow = true;
		d.reason = REASON_ALLOWED;
		d.policy = rule->name;
		d.learn = p->learn;
		d.tls_inspect = rule->endpoints[e_hit].tls == NETPOL_TLS_INSPECT;
		d.endpoint = &rule->endpoints[e_hit];
		return d;
	}
	if (hash_rule) {
		d.reason = REASON_BINARY_HASH_MISMATCH;
		d.policy = hash_rule;
	} else if (anc_rule) {
		d.reason = REASON_ANCESTOR_REQUIREMENT_UNMET;
		d.policy = anc_rule;
	} else if (proto_rule) {
		d.reason = REASON_PROTOCOL_NOT_ALLOWED;
		d.policy = proto_rule;
	} else if (ip_blocked) {
		d.reason = REASON_BLOCKED_DESTINATION;
		d.policy = blocked_rule;
	}
out:
	if (p->mode == NETPOL_AUDIT || p->learn) {
		d.allow = true;
		d.audit_mode = true;
		d.learn = p->learn;
	}
	return d;
}

/* Audit or learn mode, or some rule whose binaries and ancestors match id
 * has an endpoint that is a cidr or names host, for port (any port when
 * any_port). */
static bool some_rule_may_allow(const struct network_policy *p, const struct flow_identity *id,
				const char *host, uint16_t port, bool any_port)
{
	if (!p)
		return false;
	if (p->mode == NETPOL_AUDIT || p->learn)
		return true;
	if (!id || !id->binary_path || !host)
		return false;
	for (size_t r = 0; r < p->n_rules; r++) {
		const struct netpol_rule *rule = &p->rules[r];
		bool bin_ok = false, hash_bad = false;
		for (size_t b = 0; b < rule->n_binaries && !bin_ok; b++)
			bin_ok = binary_match(&rule->binaries[b], id->binary_path,
					      id->sha256[0] ? id->sha256 : NULL, &hash_bad);
		if (!bin_ok || !ancestors_match(rule, id))
			continue;
		for (size_t e = 0; e < rule->n_endpoints; e++) {
			const struct netpol_endpoint *ep = &rule->endpoints[e];
			if ((any_port || port_match(ep, port)) && (ep->is_cidr || host_match(ep, host)))
				return true;
		}
	}
	return false;
}

const char *netpolicy_rule_for_destination(const struct network_policy *p, const char *host, uint16_t port,
					   const struct netaddr *ip)
{
	if (!p || !host)
		return NULL;
	struct netaddr literal;
	if (!ip && netaddr_parse(host, &literal) == 0)
		ip = &literal;
	for (size_t r = 0; r < p->n_rules; r++) {
		const struct netpol_rule *rule = &p->rules[r];
		for (size_t e = 0; e < rule->n_endpoints; e++) {
			const struct netpol_endpoint *ep = &rule->endpoints[e];
			if (!port_match(ep, port))
				continue;
			if (ep->is_cidr ? ip && netcidr_contains(&ep->cidr, ip) : host_match(ep, host))
				return rule->name;
		}
	}
	return NULL;
}

bool netpolicy_resolution_may_allow(const struct network_policy *p, const struct flow_identity *id,
				    const char *host, uint16_t port)
{
	return some_rule_may_allow(p, id, host, port, false);
}

bool netpolicy_name_may_allow(const struct network_policy *p, const struct flow_identity *id,
			      const char *host)
{
	return some_rule_may_allow(p, id, host, 0, true);
}
