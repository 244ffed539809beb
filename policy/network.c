#include "policy/network.h"

#include "policy/credentials.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"
#include "policy/binpath.h"
#include "policy/policy_int.h"

/* ---------- globs and host names ---------- */

bool netpol_path_match(const char *pattern, const char *path)
{
	/* Dynamic programming over path positions, one pattern token at a
	 * time: no backtracking, so a hostile pattern cannot blow up.
	 * dp[j]: the pattern so far matches path[0, j). */
	size_t pn = strlen(pattern), sn = strlen(path);
	_cleanup_free_ bool *dp = calloc(sn + 1, sizeof(bool));
	_cleanup_free_ bool *nx = calloc(sn + 1, sizeof(bool));
	if (!dp || !nx)
		return false;
	dp[0] = true;
	for (size_t i = 0; i < pn;) {
		if (pattern[i] == '*' && pattern[i + 1] == '*' && pattern[i + 2] == '/') {
			/* "**" + "/": zero or more whole directories, so /usr/[**]/git
			 * also matches /usr/git. */
			bool seen = dp[0];
			nx[0] = dp[0];
			for (size_t j = 1; j <= sn; j++) {
				nx[j] = dp[j] || (seen && path[j - 1] == '/');
				seen = seen || dp[j];
			}
			i += 3;
		} else if (pattern[i] == '*') {
			bool dstar = pattern[i + 1] == '*';
			nx[0] = dp[0];
			for (size_t j = 1; j <= sn; j++)
				nx[j] = dp[j] || (nx[j - 1] && (dstar || path[j - 1] != '/'));
			i += dstar ? 2 : 1;
		} else {
			nx[0] = false;
			for (size_t j = 1; j <= sn; j++)
				nx[j] = dp[j - 1] && path[j - 1] == pattern[i];
			i++;
		}
		bool *t = dp;
		dp = nx;
		nx = t;
	}
	return dp[sn];
}

static bool label_is_numeric(const char *l, size_t n)
{
	size_t i = 0;
	if (n >= 2 && l[0] == '0' && l[1] == 'x') {
		for (i = 2; i < n; i++)
			if (!isxdigit((unsigned char)l[i]))
				return false;
		return true;
	}
	for (; i < n; i++)
		if (!isdigit((unsigned char)l[i]))
			return false;
	return n > 0;
}

int netpol_host_normalize(const char *in, char *out, size_t size)
{
	struct netaddr ip;
	size_t n = strlen(in);
	if (n == 0 || n >= size || n > 255)
		return -EINVAL;
	if (netaddr_parse(in, &ip) == 0) {
		netaddr_format(&ip, out, size);
		return 0;
	}
	if (n > 0 && in[n - 1] == '.')
		n--;
	if (n == 0 || n > 253)
		return -EINVAL;
	size_t label = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c == '.') {
			if (label == 0)
				return -EINVAL;
			label = 0;
			out[i] = '.';
			continue;
		}
		if (!(isalnum(c) || c == '-' || c == '_'))
			return -EINVAL;
		if (++label > 63)
			return -EINVAL;
		out[i] = (char)tolower(c);
	}
	if (label == 0)
		return -EINVAL;
	out[n] = '\0';
	/* "127.1", "2130706433", "0x7f.1": the resolver (inet_aton) would read
	 * these as addresses; refuse instead of letting getaddrinfo guess. A
	 * numeric last label is never a real DNS name either. */
	const char *last = strrchr(out, '.');
	last = last ? last + 1 : out;
	if (label_is_numeric(last, strlen(last)))
		return -EINVAL;
	bool every = true;
	for (const char *l = out; *l;) {
		const char *dot = strchr(l, '.');
		size_t ln = dot ? (size_t)(dot - l) : strlen(l);
		if (!label_is_numeric(l, ln))
			every = false;
		l += ln + (dot ? 1 : 0);
	}
	if (every)
		return -EINVAL;
	return 0;
}

/* ---------- lifetime ---------- */

struct network_policy *network_policy_new(void)
{
	return calloc(1, sizeof(struct network_policy));
}

static void binaries_free(struct netpol_binary *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(b[i].path);
		free(b[i].resolved);
		free(b[i].where);
	}
	free(b);
}

void network_policy_free(struct network_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_rules; i++) {
		struct netpol_rule *r = &p->rules[i];
		free(r->name);
		free(r->origin);
		binaries_free(r->binaries, r->n_binaries);
		binaries_free(r->ancestors, r->n_ancestors);
		for (size_t e = 0; e < r->n_endpoints; e++) {
			free(r->endpoints[e].host);
			free(r->endpoints[e].ports);
			netpol_http_rules_free(&r->endpoints[e].http);
		}
		free(r->endpoints);
	}
	free(p->rules);
	free(p);
}

/* ---------- the `network:` section parser ---------- */

#include "policy/policy.h"

/* Grow *v (n elements of size sz) by one zeroed element. */
static void *grow(void *vp, size_t *n, size_t sz)
{
	void **v = vp;
	void *nv = realloc(*v, (*n + 1) * sz);
	if (!nv)
		return NULL;
	*v = nv;
	memset((char *)nv + *n * sz, 0, sz);
	return (char *)nv + (*n)++ * sz;
}

static int parse_sha256(struct pctx *ctx, const struct pnode *n, const char *what, char out[65])
{
	const char *s;
	int r = pnode_expect_string(ctx, n, what, &s);
	if (r < 0)
		return r;
	if (strlen(s) != 64)
		return pnode_error(ctx, n, "%s must be 64 hex digits (SHA-256), got %zu characters",
				   what, strlen(s));
	for (size_t i = 0; i < 64; i++) {
		if (!isxdigit((unsigned char)s[i]))
			return pnode_error(ctx, n, "%s must be 64 hex digits (SHA-256)", what);
		out[i] = (char)tolower((unsigned char)s[i]);
	}
	out[64] = '\0';
	return 0;
}

static int parse_binaries(struct pctx *ctx, const struct pnode *seq, const char *what,
			  struct netpol_binary **out, size_t *n_out)
{
	static const char *const keys[] = { "path", "sha256", NULL };
	int r = pnode_expect_seq(ctx, seq, what);
	if (r < 0)
		return r;
	if (seq->n == 0)
		return pnode_error(ctx, seq, "%s must list at least one entry", what);
	for (size_t i = 0; i < seq->n; i++) {
		const struct pnode *e = seq->vals[i];
		char w[64];
		snprintf(w, sizeof(w), "%s[%zu]", what, i);
		if ((r = pnode_expect_map(ctx, e, w)) < 0 || (r = pmap_check_keys(ctx, e, w, keys)) < 0)
			return r;
		const struct pnode *p = pmap_get(e, "path");
		if (!p)
			return pnode_error(ctx, e, "%s needs 'path' (an absolute path or glob)", w);
		const char *path;
		if ((r = pnode_expect_abspath(ctx, p, "path", &path)) < 0)
			return r;
		struct netpol_binary *b = grow(out, n_out, sizeof(**out));
		if (!b)
			return -ENOMEM;
		if (!(b->path = pnode_strdup(ctx, p)))
			return -ENOMEM;
		if (asprintf(&b->where, "%s:%u:%u", pctx_file(ctx), p->line, p->col) < 0) {
			b->where = NULL;
			return -ENOMEM;
		}
		const struct pnode *h = pmap_get(e, "sha256");
		if (h) {
			if ((r = parse_sha256(ctx, h, "sha256", b->sha256)) < 0)
				return r;
			b->has_sha256 = true;
		}
	}
	return 0;
}

static int parse_http_rules(struct pctx *ctx, const struct pnode *seq, const char *w,
			    struct netpol_http_rules *out)
{
	static const char *const keys[] = { "name", "method", "path", "action", "websocket", NULL };
	int r;
	if ((r = pnode_expect_seq(ctx, seq, "rules")) < 0)
		return r;
	if (seq->n == 0)
		return pnode_error(ctx, seq, "%s: rules must list at least one rule (leave it out to "
				   "allow every request)", w);
	out->rules = calloc(seq->n, sizeof(*out->rules));
	if (!out->rules)
		return -ENOMEM;
	for (size_t i = 0; i < seq->n; i++) {
		const struct pnode *e = seq->vals[i];
		char rw[96];
		snprintf(rw, sizeof(rw), "%s.rules[%zu]", w, i);
		if ((r = pnode_expect_map(ctx, e, rw)) < 0 || (r = pmap_check_keys(ctx, e, rw, keys)) < 0)
			return r;
		struct netpol_http_rule *hr = &out->rules[out->n++];
		const struct pnode *name = pmap_get(e, "name"), *m = pmap_get(e, "method"),
				   *p = pmap_get(e, "path"), *a = pmap_get(e, "action"), *ws = pmap_get(e, "websocket");
		const char *ms = "*", *ps = NULL, *ns = NULL;
		if (m && (r = pnode_expect_string(ctx, m, "method", &ms)) < 0)
			return r;
		if (!p)
			return pnode_error(ctx, e, "%s needs 'path' (a glob such as /repos/**)", rw);
		if ((r = pnode_expect_string(ctx, p, "path", &ps)) < 0)
			return r;
		if (ps[0] != '/')
			return pnode_error(ctx, p, "path '%s' must start with '/'", ps);
		for (const char *q = ms; *q; q++)
			if (!(*q == '*' || (*q >= 'A' && *q <= 'Z') || *q == '-' || *q == '_'))
				return pnode_error(ctx, m, "method '%s': upper-case letters and '*' only", ms);
		if (a) {
			const char *as;
			if ((r = pnode_expect_string(ctx, a, "action", &as)) < 0)
				return r;
			if (strcmp(as, "deny") != 0 && strcmp(as, "allow") != 0)
				return pnode_error(ctx, a, "action '%s': expected allow or deny", as);
			hr->deny = strcmp(as, "deny") == 0;
		}
		if (ws && (r = pnode_expect_bool(ctx, ws, "websocket", &hr->websocket)) < 0)
			return r;
		if (name && (r = pnode_expect_string(ctx, name, "name", &ns)) < 0)
			return r;
		hr->method = strdup(ms);
		hr->path = strdup(ps);
		if (ns)
			hr->name = strdup(ns);
		else if (asprintf(&hr->name, "%s %s", ms, ps) < 0)
			hr->name = NULL;
		if (!hr->method || !hr->path || !hr->name)
			return -ENOMEM;
	}
	return 0;
}

static int parse_endpoint(struct pctx *ctx, const struct pnode *e, const char *w,
			  struct netpol_endpoint *ep)
{
	static const char *const keys[] = { "host", "cidr", "ports", "protocol", "tls", "rules", "mode", NULL };
	int r;
	if ((r = pnode_expect_map(ctx, e, w)) < 0 || (r = pmap_check_keys(ctx, e, w, keys)) < 0)
		return r;
	const struct pnode *h = pmap_get(e, "host"), *c = pmap_get(e, "cidr"),
			   *ports = pmap_get(e, "ports"), *proto = pmap_get(e, "protocol"), *tls = pmap_get(e, "tls");
	if (proto) {
		const char *s;
		if ((r = pnode_expect_string(ctx, proto, "protocol", &s)) < 0)
			return r;
		if (strcmp(s, "http") == 0)
			ep->protocol = NETPOL_PROTO_HTTP;
		else if (strcmp(s, "tcp") == 0)
			ep->protocol = NETPOL_PROTO_TCP;
		else
			return pnode_error(ctx, proto, "protocol '%s': expected http (the default: TLS or "
					   "HTTP) or tcp (any TCP stream, e.g. ssh)", s);
	}
	if (tls) {
		const char *s;
		if ((r = pnode_expect_string(ctx, tls, "tls", &s)) < 0)
			return r;
		if (strcmp(s, "inspect") == 0)
			ep->tls = NETPOL_TLS_INSPECT;
		else if (strcmp(s, "passthrough") == 0)
			ep->tls = NETPOL_TLS_PASSTHROUGH;
		else
			return pnode_error(ctx, tls, "tls '%s': expected inspect or passthrough", s);
		if (ep->tls == NETPOL_TLS_INSPECT && ep->protocol == NETPOL_PROTO_TCP)
			return pnode_error(ctx, tls, "tls: inspect reads the HTTP inside TLS; it does not go "
					   "with protocol: tcp (any stream)");
		if (c && ep->tls == NETPOL_TLS_INSPECT)
			return pnode_error(ctx, tls, "tls: inspect needs a 'host' endpoint (the "
					   "certificate is minted for, and checked against, a name)");
	}
	const struct pnode *rules = pmap_get(e, "rules"), *mode = pmap_get(e, "mode");
	if ((rules || mode) && ep->tls != NETPOL_TLS_INSPECT)
		return pnode_error(ctx, rules ? rules : mode, "%s: 'rules' and 'mode' judge HTTP requests, "
				   "which only an endpoint with 'tls: inspect' can see", w);
	if (mode) {
		const char *s;
		if ((r = pnode_expect_string(ctx, mode, "mode", &s)) < 0)
			return r;
		if (strcmp(s, "audit") != 0 && strcmp(s, "enforce") != 0)
			return pnode_error(ctx, mode, "mode '%s': expected enforce or audit", s);
		ep->http.audit = strcmp(s, "audit") == 0;
	}
	if (rules && (r = parse_http_rules(ctx, rules, w, &ep->http)) < 0)
		return r;
	if (!!h == !!c)
		return pnode_error(ctx, e, "%s needs exactly one of 'host' or 'cidr'", w);
	if (h) {
		const char *s;
		if ((r = pnode_expect_string(ctx, h, "host", &s)) < 0)
			return r;
		char norm[256];
		if (s[0] == '*') {
			if (s[1] != '.' || strchr(s + 1, '*') ||
			    netpol_host_normalize(s + 2, norm, sizeof(norm)) < 0 ||
			    netaddr_parse(s + 2, &ep->host_ip) == 0)
				return pnode_error(ctx, h, "host '%s': a glob may only be '*.' followed "
						   "by a DNS name (e.g. *.github.com)", s);
			ep->host_kind = NETPOL_HOST_GLOB;
			char suffix[258];
			snprintf(suffix, sizeof(suffix), ".%s", norm);
			ep->host = strdup(suffix);
		} else if (strchr(s, '*')) {
			return pnode_error(ctx, h, "host '%s': '*' is only allowed as the whole first "
					   "label (e.g. *.github.com)", s);
		} else if (netaddr_parse(s, &ep->host_ip) == 0) {
			ep->host_kind = NETPOL_HOST_IP;
			char buf[64];
			ep->host = strdup(netaddr_format(&ep->host_ip, buf, sizeof(buf)));
		} else if (netpol_host_normalize(s, norm, sizeof(norm)) == 0) {
			ep->host_kind = NETPOL_HOST_EXACT;
			ep->host = strdup(norm);
		} else {
			return pnode_error(ctx, h, "host '%s' is neither a DNS name nor an IP literal "
					   "(numeric forms like 127.1 are not accepted)", s);
		}
		if (!ep->host)
			return -ENOMEM;
	} else {
		const char *s;
		if ((r = pnode_expect_string(ctx, c, "cidr", &s)) < 0)
			return r;
		if (netcidr_parse(s, &ep->cidr) < 0)
			return pnode_error(ctx, c, "cidr '%s' is not an address/prefix with zero host "
					   "bits (e.g. 198.51.100.0/24, fd00::/8)", s);
		ep->is_cidr = true;
	}
	if (!ports)
		return pnode_error(ctx, e, "%s needs 'ports' (a list such as [443]); there is no "
				   "implicit any-port", w);
	if ((r = pnode_expect_seq(ctx, ports, "ports")) < 0)
		return r;
	if (ports->n == 0)
		return pnode_error(ctx, ports, "ports must list at least one port");
	ep->ports = calloc(ports->n, sizeof(uint16_t));
	if (!ep->ports)
		return -ENOMEM;
	for (size_t i = 0; i < ports->n; i++) {
		uint64_t v;
		if ((r = pnode_expect_uint(ctx, ports->vals[i], "port", 65535, &v)) < 0)
			return r;
		if (v == 0)
			return pnode_error(ctx, ports->vals[i], "port 0 is not a destination port");
		ep->ports[ep->n_ports++] = (uint16_t)v;
	}
	return 0;
}

static int parse_rule(struct pctx *ctx, const struct pnode *e, size_t idx, struct network_policy *np)
{
	char w[64];
	snprintf(w, sizeof(w), "network.policies[%zu]", idx);
	return netpol_parse_rule(ctx, e, w, NULL, np);
}

int netpol_parse_rule(struct pctx *ctx, const struct pnode *e, const char *w, const char *const *extra,
		      struct network_policy *np)
{
	const char *keys[16] = { "name", "binaries", "ancestors", "endpoints" };
	size_t nk = 4;
	for (size_t i = 0; extra && extra[i] && nk < 15; i++)
		keys[nk++] = extra[i];
	keys[nk] = NULL;
	int r;
	if ((r = pnode_expect_map(ctx, e, w)) < 0 || (r = pmap_check_keys(ctx, e, w, keys)) < 0)
		return r;
	const struct pnode *name = pmap_get(e, "name"), *bins = pmap_get(e, "binaries"),
			   *anc = pmap_get(e, "ancestors"), *eps = pmap_get(e, "endpoints");
	if (!name)
		return pnode_error(ctx, e, "%s needs a 'name'", w);
	const char *nm;
	if ((r = pnode_expect_string(ctx, name, "name", &nm)) < 0)
		return r;
	if (!*nm || strlen(nm) > 128)
		return pnode_error(ctx, name, "policy name must be 1..128 characters");
	for (size_t i = 0; i < np->n_rules; i++)
		if (strcmp(np->rules[i].name, nm) == 0)
			return pnode_error(ctx, name, "policy name '%s' is already used (at %s)", nm,
					   np->rules[i].origin);
	if (!bins)
		return pnode_error(ctx, e, "%s needs 'binaries'", w);
	if (!eps)
		return pnode_error(ctx, e, "%s needs 'endpoints'", w);
	struct netpol_rule *rule = grow(&np->rules, &np->n_rules, sizeof(*np->rules));
	if (!rule)
		return -ENOMEM;
	if (!(rule->name = pnode_strdup(ctx, name)))
		return -ENOMEM;
	char origin[512];
	snprintf(origin, sizeof(origin), "%s:%u", pctx_file(ctx), e->line);
	if (!(rule->origin = strdup(origin)))
		return -ENOMEM;
	if ((r = parse_binaries(ctx, bins, "binaries", &rule->binaries, &rule->n_binaries)) < 0)
		return r;
	if (anc && (r = parse_binaries(ctx, anc, "ancestors", &rule->ancestors, &rule->n_ancestors)) < 0)
		return r;
	if ((r = pnode_expect_seq(ctx, eps, "endpoints")) < 0)
		return r;
	if (eps->n == 0)
		return pnode_error(ctx, eps, "endpoints must list at least one endpoint");
	for (size_t i = 0; i < eps->n; i++) {
		struct netpol_endpoint *ep = grow(&rule->endpoints, &rule->n_endpoints,
						  sizeof(*rule->endpoints));
		if (!ep)
			return -ENOMEM;
		char ew[32];
		snprintf(ew, sizeof(ew), "endpoints[%zu]", i);
		if ((r = parse_endpoint(ctx, eps->vals[i], ew, ep)) < 0)
			return r;
	}
	return 0;
}

static int network_parse(struct pctx *ctx, const struct pnode *node, void **data)
{
	static const char *const keys[] = { "mode", "policies", NULL };
	int r = pnode_expect_map(ctx, node, "network");
	if (r < 0)
		return r;
	if ((r = pmap_check_keys(ctx, node, "network", keys)) < 0)
		return r;
	struct network_policy *np = *data;
	if (!np && !(np = *data = network_policy_new()))
		return -ENOMEM;
	bool locked = pctx_immutable(ctx) && pctx_layer(ctx) > POLICY_LAYER_SYSTEM;
	const struct pnode *m = pmap_get(node, "mode");
	if (m) {
		static const char *const modes[] = { "enforce", "audit", NULL };
		int mode;
		if ((r = pnode_expect_enum(ctx, m, "network.mode", modes, &mode)) < 0)
			return r;
		if (mode == NETPOL_AUDIT && locked)
			return pnode_error(ctx, m, "network.mode: audit would loosen an immutable "
					   "system policy");
		if (mode == NETPOL_AUDIT && np->mode_set && np->mode == NETPOL_ENFORCE)
			pnode_warn(ctx, m, "network.mode: audit ignored, an earlier layer set enforce "
				   "(the strictest mode wins)");
		else
			np->mode = (enum netpol_mode)mode;
		np->mode_set = true;
	}
	const struct pnode *pols = pmap_get(node, "policies");
	if (pols) {
		if ((r = pnode_expect_seq(ctx, pols, "network.policies")) < 0)
			return r;
		if (locked && pols->n > 0)
			return pnode_error(ctx, pols, "network.policies: the system policy is immutable; "
					   "other layers may not add rules");
		for (size_t i = 0; i < pols->n; i++)
			if ((r = parse_rule(ctx, pols->vals[i], i, np)) < 0)
				return r;
	}
	return 0;
}

/* ---------- symlinked paths, resolved in the workload's root ---------- */

static int resolve_list(struct policy *p, struct netpol_binary *v, size_t n, const char *what,
			int rootfd, const char *root)
{
	for (size_t i = 0; i < n; i++) {
		struct netpol_binary *b = &v[i];
		free(b->resolved);
		b->resolved = NULL;
		if (strchr(b->path, '*'))
			continue; /* a glob names many files; it is matched as written */
		char out[PATH_MAX], msg[PATH_MAX + 256];
		int r = rootfd < 0 ? -EBADF : binpath_resolve(rootfd, b->path, out, sizeof(out));
		if (r == 0) {
			if (strcmp(out, b->path) != 0 && !(b->resolved = strdup(out)))
				return -ENOMEM;
			continue;
		}
		snprintf(msg, sizeof(msg), "%s: %s[%zu].path %s %s in the workload's root (%s): "
			 "it matches no running binary", b->where ? b->where : "?", what, i, b->path,
			 r == -ENOENT ? "resolves to nothing" : r == -ELOOP ? "is a symlink loop" : "cannot be resolved",
			 root);
		if (r != -ENOENT && r != -ELOOP) {
			size_t l = strlen(msg);
			snprintf(msg + l, sizeof(msg) - l, " (%s)", strerror(-r));
		}
		if (policy_add_warning(p, msg) < 0)
			return -ENOMEM;
	}
	return 0;
}

int netpol_resolve_binaries(struct policy *p, int rootfd, const char *root_label)
{
	int r = netpol_resolve_rules(p, policy_section_data(p, "network"), rootfd, root_label);
	/* the credentials' binaries match as a network rule's do */
	struct credential_set *cs = policy_section_data(p, "credentials");
	for (size_t i = 0; r == 0 && cs && i < cs->n; i++)
		r = netpol_resolve_rules(p, cs->v[i].access, rootfd, root_label);
	return r;
}

int netpol_resolve_rules(struct policy *p, struct network_policy *np, int rootfd, const char *root_label)
{
	if (!np)
		return 0;
	for (size_t i = 0; i < np->n_rules; i++) {
		struct netpol_rule *rule = &np->rules[i];
		int r = resolve_list(p, rule->binaries, rule->n_binaries, "binaries", rootfd, root_label);
		if (r == 0)
			r = resolve_list(p, rule->ancestors, rule->n_ancestors, "ancestors", rootfd, root_label);
		if (r < 0)
			return r;
	}
	return 0;
}

static void network_free(void *data) { network_policy_free(data); }

const struct policy_section network_policy_section = {
	.name = "network",
	.parse = network_parse,
	.free = network_free,
};
