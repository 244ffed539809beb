/* The `network:` section of a policy file, validated into typed structs.
 *
 * Parsing happens once, at the edge (network_section_parse, registered with
 * the layered loader in policy/policy.h); everything downstream works on
 * struct network_policy and never looks at YAML again. Layers merge by
 * concatenating rules (names must stay unique across layers) and the
 * strictest mode wins (enforce beats audit), so a later layer can never
 * weaken an earlier one's mode.
 *
 * Addresses and CIDRs (netaddr, netcidr) are common/netaddr.h: the policy
 * and the proxy use the same ones. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/netaddr.h"
#include "policy/httprules.h"

enum netpol_mode { NETPOL_ENFORCE = 0, NETPOL_AUDIT = 1 };

/* A binary (or ancestor) matcher: path is exact or a glob ('*' within one
 * path segment, '**' across segments); sha256 optionally pins the image. */
struct netpol_binary {
	char *path;      /* as written (display, audit) */
	bool has_sha256;
	char sha256[65]; /* lower-case hex */
	/* An exact path that is a symlink (or runs through one): what it
	 * resolves to in the workload's root, set by netpol_resolve_binaries;
	 * the entry matches this path too. NULL: not resolved, or no link. */
	char *resolved;
	char *where;     /* "FILE:LINE:COL" of the entry, for warnings */
};

enum netpol_host_kind {
	NETPOL_HOST_EXACT = 1, /* a DNS name, lower case, no trailing dot */
	NETPOL_HOST_GLOB,      /* "*.example.com": exactly one first label */
	NETPOL_HOST_IP,        /* an IP literal */
};

/* What an endpoint admits. HTTP (the default, `protocol: http`): what the
 * explicit proxy carries (CONNECT tunnels and forwarded requests) and a
 * transparent flow whose first bytes are a TLS ClientHello or an HTTP
 * request. TCP (`protocol: tcp`): any TCP stream, relayed without HTTP
 * parsing (ssh, git://, databases) — a superset of HTTP. */
enum netpol_protocol { NETPOL_PROTO_HTTP = 0, NETPOL_PROTO_TCP = 1 };

/* What the proxy does with a TLS flow to an endpoint (`tls:`). */
enum netpol_tls {
	NETPOL_TLS_PASSTHROUGH = 0, /* the default: the bytes are relayed untouched */
	NETPOL_TLS_INSPECT,         /* terminated with the sandbox CA's leaf, re-encrypted upstream */
};

struct netpol_endpoint {
	bool is_cidr;              /* else host */
	enum netpol_protocol protocol;
	enum netpol_tls tls;       /* `tls: inspect | passthrough` (a host endpoint only) */
	struct netpol_http_rules http; /* `rules:` and `mode:` (inspect only; policy/httprules.h) */
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
	/* Learn mode (net-supervisor --learn, never a file): every flow is
	 * allowed as in audit mode and its audit line says "learn":true with
	 * what the policy would have done. */
	bool learn;
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

/* Resolve every exact (glob-free) path of binaries and ancestors inside
 * rootfd, the workload's root (root_label names it in messages): a path
 * that is or goes through a symlink then also matches its target
 * (/usr/bin/python3 matches /usr/bin/python3.11), the written path stays
 * for display. A path that resolves to nothing (missing, dangling, a loop)
 * adds a warning to p and matches only itself: nothing is allowed by
 * guesswork. Call after every load (and reload). rootfd < 0: every exact
 * path gets the warning that it could not be resolved. 0 or -ENOMEM. */
struct policy;
int netpol_resolve_binaries(struct policy *p, int rootfd, const char *root_label);
/* The same for the rules of np (a section of p that matches as network
 * rules do: the credentials' access, policy/credentials.h). */
int netpol_resolve_rules(struct policy *p, struct network_policy *np, int rootfd, const char *root_label);

/* The section parser for the layered loader (policy/policy.h): pass it in
 * `ext`; policy_section_data(p, "network") is then a struct network_policy
 * (NULL when no layer has a `network:` section: deny everything). */
struct policy_section;
extern const struct policy_section network_policy_section;

/* Parse one rule map (name, binaries, ancestors, endpoints, plus the keys
 * in extra, which the caller reads itself) into np, as a `network.policies`
 * entry is: other sections reuse the matching (credentials.h). w names it
 * in errors. 0 or negative (the error is in ctx). */
struct pctx;
struct pnode;
int netpol_parse_rule(struct pctx *ctx, const struct pnode *e, const char *w, const char *const *extra,
		      struct network_policy *np);
