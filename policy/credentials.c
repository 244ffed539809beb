#include "policy/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/audit.h"

#include "policy/netpolicy.h"
#include "policy/policy.h"

static void credentials_free(void *data)
{
	struct credential_set *s = data;
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free(s->v[i].source_file);
		free(s->v[i].source_env);
		free(s->v[i].origin);
		free(s->v[i].variable);
		free(s->v[i].header);
		free(s->v[i].header_format);
		network_policy_free(s->v[i].access);
	}
	free(s->v);
	free(s);
}

static bool cred_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return false;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '_' || *s == '.' || *s == '-'))
			return false;
	return true;
}

/* `header: {name: N, format: F}` (credentials.h). */
static int parse_header(struct pctx *ctx, const struct pnode *h, const char *w, struct credential *c)
{
	static const char *const keys[] = { "name", "format", NULL };
	/* framing, routing and hop-by-hop: never ours to set */
	static const char *const refused[] = { "host", "content-length", "transfer-encoding", "connection",
					       "upgrade", "te", "trailer", "keep-alive", "proxy-connection",
					       "proxy-authorization", "expect", NULL };
	int r;
	if ((r = pnode_expect_map(ctx, h, "header")) < 0 || (r = pmap_check_keys(ctx, h, "header", keys)) < 0)
		return r;
	const struct pnode *n = pmap_get(h, "name"), *f = pmap_get(h, "format");
	const char *nm, *fm = "{}";
	if (!n)
		return pnode_error(ctx, h, "%s.header needs a 'name' (the HTTP header the proxy sets)", w);
	if ((r = pnode_expect_string(ctx, n, "header.name", &nm)) < 0)
		return r;
	size_t nl = strlen(nm);
	bool tok = nl > 0 && nl <= 64;
	for (size_t i = 0; tok && i < nl; i++)
		tok = (nm[i] >= 'A' && nm[i] <= 'Z') || (nm[i] >= 'a' && nm[i] <= 'z') ||
		      (nm[i] >= '0' && nm[i] <= '9') || strchr("!#$%&'*+-.^_`|~", nm[i]);
	if (!tok)
		return pnode_error(ctx, n, "header.name '%s': an HTTP header name (1-64 token characters)", nm);
	for (size_t i = 0; refused[i]; i++)
		if (strcasecmp(nm, refused[i]) == 0)
			return pnode_error(ctx, n, "header.name '%s': a framing or hop-by-hop header the proxy "
					   "does not set", nm);
	if (f && (r = pnode_expect_string(ctx, f, "header.format", &fm)) < 0)
		return r;
	const char *at = strstr(fm, "{}");
	if (!at || strstr(at + 2, "{}") || strlen(fm) > 256 || strpbrk(fm, "\r\n"))
		return pnode_error(ctx, f ? f : h, "header.format '%s': exactly one {} (the secret), at most 256 "
				   "bytes, no CR or LF", fm);
	if (!(c->header = strdup(nm)) || !(c->header_format = strdup(fm)))
		return -ENOMEM;
	return 0;
}

static int parse_one(struct pctx *ctx, const struct pnode *e, size_t idx, struct credential_set *s)
{
	static const char *const extra[] = { "source", "variable", "header", NULL };
	char w[48];
	snprintf(w, sizeof(w), "credentials[%zu]", idx);
	int r = pnode_expect_map(ctx, e, w);
	if (r < 0)
		return r;
	const struct pnode *name = pmap_get(e, "name"), *src = pmap_get(e, "source");
	const char *nm;
	if (!name)
		return pnode_error(ctx, e, "%s needs a 'name'", w);
	if ((r = pnode_expect_string(ctx, name, "name", &nm)) < 0)
		return r;
	if (!cred_name_ok(nm))
		return pnode_error(ctx, name, "credential name '%s': 1-64 of A-Z a-z 0-9 _ . -", nm);
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].name, nm) == 0)
			return pnode_error(ctx, name, "credential '%s' is already defined (at %s)", nm, s->v[i].origin);
	struct credential *v = realloc(s->v, (s->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	s->v = v;
	struct credential *c = &s->v[s->n++];
	memset(c, 0, sizeof(*c));
	char origin[512];
	snprintf(origin, sizeof(origin), "%s:%u", pctx_file(ctx), e->line);
	if (!(c->name = strdup(nm)) || !(c->origin = strdup(origin)) || !(c->access = network_policy_new()))
		return -ENOMEM;
	if ((r = netpol_parse_rule(ctx, e, w, extra, c->access)) < 0)
		return r;
	const struct pnode *var = pmap_get(e, "variable");
	const char *vn = nm;
	if (var && (r = pnode_expect_string(ctx, var, "variable", &vn)) < 0)
		return r;
	if (!*vn || strchr(vn, '=') || strncasecmp(vn, "TETHER_", 7) == 0)
		return pnode_error(ctx, var ? var : name, "variable '%s': a name without '=', not TETHER_*", vn);
	for (size_t i = 0; i + 1 < s->n; i++)
		if (strcmp(s->v[i].variable, vn) == 0)
			return pnode_error(ctx, var ? var : name, "variable '%s' already holds credential %s", vn,
					   s->v[i].name);
	if (!(c->variable = strdup(vn)))
		return -ENOMEM;
	const struct pnode *hdr = pmap_get(e, "header");
	if (hdr && (r = parse_header(ctx, hdr, w, c)) < 0)
		return r;
	if (!src)
		return pnode_error(ctx, e, "%s needs a 'source' ({file: /path} or {env: NAME})", w);
	static const char *const skeys[] = { "file", "env", NULL };
	if ((r = pnode_expect_map(ctx, src, "source")) < 0 || (r = pmap_check_keys(ctx, src, "source", skeys)) < 0)
		return r;
	const struct pnode *f = pmap_get(src, "file"), *en = pmap_get(src, "env");
	if (!!f == !!en)
		return pnode_error(ctx, src, "%s.source needs exactly one of 'file' or 'env'", w);
	const char *sv;
	if (f) {
		if ((r = pnode_expect_abspath(ctx, f, "source.file", &sv)) < 0)
			return r;
		if (!(c->source_file = strdup(sv)))
			return -ENOMEM;
	} else {
		if ((r = pnode_expect_string(ctx, en, "source.env", &sv)) < 0)
			return r;
		if (!*sv || strchr(sv, '='))
			return pnode_error(ctx, en, "source.env '%s' is not a variable name", sv);
		if (!(c->source_env = strdup(sv)))
			return -ENOMEM;
	}
	return 0;
}

static int credentials_parse(struct pctx *ctx, const struct pnode *node, void **data)
{
	int r = pnode_expect_seq(ctx, node, "credentials");
	if (r < 0)
		return r;
	struct credential_set *s = *data;
	if (!s && !(s = *data = calloc(1, sizeof(*s))))
		return -ENOMEM;
	if (pctx_immutable(ctx) && pctx_layer(ctx) > POLICY_LAYER_SYSTEM && node->n > 0)
		return pnode_error(ctx, node, "credentials: the system policy is immutable; other layers "
				   "may not add credentials");
	for (size_t i = 0; i < node->n; i++)
		if ((r = parse_one(ctx, node->vals[i], i, s)) < 0)
			return r;
	return 0;
}

const struct policy_section credentials_section = {
	.name = "credentials",
	.parse = credentials_parse,
	.free = credentials_free,
};

const struct credential *credential_for_variable(const struct credential_set *set, const char *name)
{
	for (size_t i = 0; set && i < set->n; i++)
		if (strcmp(set->v[i].variable, name) == 0)
			return &set->v[i];
	return NULL;
}

bool credential_permits(const struct credential *cred, const struct flow_identity *id, const char *host,
			uint16_t port, const struct netaddr *ip)
{
	struct netpolicy_decision d = netpolicy_decide(cred->access, id, host, port, ip);
	return d.allow && !d.audit_mode;
}

void credentials_register_values(const struct credential_set *set)
{
	for (size_t i = 0; set && i < set->n; i++) {
		const struct credential *c = &set->v[i];
		if (c->source_env) {
			const char *v = getenv(c->source_env);
			if (v && *v)
				(void)audit_secret_add(v);
			continue;
		}
		if (!c->source_file)
			continue;
		int fd = open(c->source_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		char buf[8192 + 1];
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		size_t len = (size_t)n;
		if (buf[len - 1] == '\n')
			len--;
		if (len && buf[len - 1] == '\r')
			len--;
		buf[len] = '\0';
		if (len)
			(void)audit_secret_add(buf);
		explicit_bzero(buf, sizeof(buf));
	}
}
