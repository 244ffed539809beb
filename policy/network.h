/* The `network:` section of a policy file, validated into typed structs.
 *
 * Parsing happens once, at the edge (network_section_parse, registered with
 * the layered loader in policy/policy.h); everything downstream works on
 * struct network_policy and never looks at YAML again. Layers merge by
 * concatenating rules (names must stay unique across layers) and the
 * strictest mode wins (enforce beats audit), so a later layer can never
 * weaken an earlier one's mode.
 *
 * Address helpers (netaddr_*) live here because CIDRs are part of the policy
 * vocabulary; the proxy uses the same ones for resolved addresses. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

/* An IP address. IPv4-mapped/compatible IPv6 forms are NOT folded here:
 * netaddr_unmap() does that where a check needs it. */
struct netaddr {
	int family;     /* AF_INET or AF_INET6 */
	uint8_t a[16];  /* network order; 4 bytes used for AF_INET */
};

/* Strict literal parse: dotted quad (no 127.1, no octal/hex) or an IPv6
 * literal (optionally in brackets). -EINVAL otherwise. */
int netaddr_parse(const char *s, struct netaddr *out);
int netaddr_from_sockaddr(const struct sockaddr *sa, struct netaddr *out);
/* ::ffff:a.b.c.d, ::a.b.c.d (deprecated compatible) and 64:ff9b::a.b.c.d
 * (NAT64) become the IPv4 a.b.c.d; anything else is copied. */
void netaddr_unmap(const struct netaddr *in, struct netaddr *out);
bool netaddr_equal(const struct netaddr *x, const struct netaddr *y);
/* Text form into buf (INET6_ADDRSTRLEN is enough). */
const char *netaddr_format(const struct netaddr *a, char *buf, size_t size);

struct netcidr {
	struct netaddr base; /* host bits zero */
	unsigned prefix;     /* 0..32 or 0..128 */
};
/* "198.51.100.0/24", "fd00::/8"; a bare address is a /32 or /128.
 * Host bits set is -EINVAL (a typo more often than intent). */
int netcidr_parse(const char *s, struct netcidr *out);
/* Compares unmapped forms: an IPv4 CIDR contains ::ffff:10.0.0.1. */
bool netcidr_contains(const struct netcidr *c, const struct netaddr *a);

enum netpol_mode { NETPOL_ENFORCE = 0, NETPOL_AUDIT = 1 };

/* A binary (or ancestor) matcher: path is exact or a glob ('*' within one
 * path segment, '**' across segments); sha256 optionally pins the image. */
struct netpol_binary {
	char *path;
	bool has_sha256;
	char sha256[65]; /* lower-case hex */
};

enum netpol_host_kind {
	NETPOL_HOST_EXACT = 1, /* a DNS name, lower case, no trailing dot */
	NETPOL_HOST_GLOB,      /* "*.example.com": exactly one first label */
	NETPOL_HOST_IP,        /* an IP literal */
};

struct netpol_endpoint {
	bool is_cidr;              /* else host */
	enum netpol_host_kind host_kind;
	char *host;                /* host form; for GLOB the suffix incl. the dot */
	struct netaddr host_ip;    /* NETPOL_HOST_IP */
	struct netcidr cidr;       /* is_cidr */
	uint16_t *ports;
	size_t n_ports;
};

struct netpol_rule {
	char *name;
	struct netpol_binary *binaries;
	size_t n_binaries;
	struct netpol_binary *ancestors; /* empty: no ancestor requirement */
	size_t n_ancestors;
	struct netpol_endpoint *endpoints;
	size_t n_endpoints;
	char *origin; /* "FILE:LINE" of the rule, for explain/audit */
};

struct network_policy {
	enum netpol_mode mode;
	bool mode_set;   /* some layer said `mode:` */
	struct netpol_rule *rules;
	size_t n_rules;
};

struct network_policy *network_policy_new(void);
void network_policy_free(struct network_policy *p);

/* Glob match of a path ('*' = any run of non-'/' chars, '**' = any run,
 * everything else literal). Linear-time in practice (DP, no backtracking
 * blow-up on hostile patterns). */
bool netpol_path_match(const char *pattern, const char *path);

/* Normalise a destination host for matching: lower case, one trailing dot
 * dropped, brackets removed from IPv6 literals. -EINVAL for anything that
 * is neither a valid DNS name nor a strict IP literal (numeric forms like
 * "127.1" or "2130706433" are rejected rather than guessed). */
int netpol_host_normalize(const char *in, char *out, size_t size);

/* The section parser for the layered loader (policy/policy.h): pass it in
 * `ext`; policy_section_data(p, "network") is then a struct network_policy
 * (NULL when no layer has a `network:` section: deny everything). */
struct policy_section;
extern const struct policy_section network_policy_section;
