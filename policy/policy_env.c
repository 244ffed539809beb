/* The built-in sections `environment:` and `exec:` (docs/environment.md), and
 * the name helpers the env boundary shares with them. Merging across layers
 * happens here, so the env builder sees one resolved struct policy_env. */
#include "policy/policy_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "policy/trust_bundle.h"

static const char *const mode_words[] = { "sanitized", "explicit", "baseline", "secrets-off", NULL };

const char *policy_env_mode_name(enum policy_env_mode m)
{
	if ((unsigned)m >= POLICY_ENV__COUNT)
		return "unknown";
	return mode_words[m];
}

static bool ends_with_icase(const char *s, size_t n, const char *suf)
{
	size_t m = strlen(suf);
	return n >= m && strcasecmp(s + n - m, suf) == 0;
}

static bool contains_icase(const char *s, const char *needle)
{
	return strcasestr(s, needle) != NULL;
}

bool policy_name_secret_shaped(const char *name)
{
	size_t n = strlen(name);
	static const char *const suffixes[] = { "_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASSWD",
						"_PASS", "_PAT", "_APIKEY" };
	static const char *const infixes[] = { "CREDENTIAL", "SECRET", "PASSWORD", "PRIVATE_KEY",
					       "API_KEY", "_TOKEN_" };
	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++)
		if (ends_with_icase(name, n, suffixes[i]))
			return true;
	for (size_t i = 0; i < ARRAY_SIZE(infixes); i++)
		if (contains_icase(name, infixes[i]))
			return true;
	return false;
}

bool policy_pattern_match(const char *pattern, const char *name, bool icase)
{
	size_t pl = strlen(pattern);
	if (pl && pattern[pl - 1] == '*')
		return icase ? strncasecmp(pattern, name, pl - 1) == 0 : strncmp(pattern, name, pl - 1) == 0;
	return icase ? strcasecmp(pattern, name) == 0 : strcmp(pattern, name) == 0;
}

static void names_done(struct policy_names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i].pattern);
	free(ns->v);
	ns->v = NULL;
	ns->n = 0;
}

void policy_env_done(struct policy_env *env)
{
	names_done(&env->baseline);
	names_done(&env->pass_through);
	names_done(&env->deny);
	for (size_t i = 0; i < env->n_set; i++) {
		free(env->set[i].name);
		free(env->set[i].value);
	}
	free(env->set);
	env->set = NULL;
	env->n_set = 0;
}

/* NAME or PREFIX*: [A-Za-z_][A-Za-z0-9_]* with an optional trailing '*'. */
static int check_name(struct pctx *ctx, const struct pnode *n, const char *what, bool wildcard,
		      const char **out)
{
	const char *s;
	int r = pnode_expect_string(ctx, n, what, &s);
	if (r < 0)
		return r;
	size_t len = strlen(s);
	char ps[80];
	pnode_printable(s, len, ps, sizeof(ps));
	if (len == 0 || len > 255)
		return pnode_error(ctx, n, "%s: '%s' is not a valid variable name", what, ps);
	if (strcmp(s, "*") == 0)
		return pnode_error(ctx, n,
				   "%s: '*' alone would pass every host variable (that is inherit-all, which is not allowed); list the names you need",
				   what);
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '*') {
			if (!wildcard)
				return pnode_error(ctx, n, "%s: '%s': wildcards are not allowed here", what, ps);
			if (i != len - 1)
				return pnode_error(ctx, n, "%s: '%s': '*' is only allowed as a trailing wildcard",
						   what, ps);
			continue;
		}
		bool ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (i > 0 && c >= '0' && c <= '9');
		if (!ok)
			return pnode_error(ctx, n,
					   "%s: '%s' is not a valid variable name (letters, digits and '_', not starting with a digit)",
					   what, ps);
	}
	*out = s;
	return 0;
}

static int names_add(struct pctx *ctx, struct policy_names *ns, const struct pnode *n, const char *s)
{
	struct policy_name *v = realloc(ns->v, (ns->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	ns->v = v;
	char *d = strdup(s);
	if (!d)
		return -ENOMEM;
	v[ns->n++] = (struct policy_name){ .pattern = d, .layer = ctx->layer, .file = ctx->file,
					   .line = n->line, .col = n->col };
	return 0;
}

/* Is `name` already granted by the (immutable) system layer itself? */
static bool system_grants(const struct policy_env *env, const char *name)
{
	for (size_t i = 0; i < env->pass_through.n; i++)
		if (env->pass_through.v[i].layer == POLICY_LAYER_SYSTEM &&
		    strcmp(env->pass_through.v[i].pattern, name) == 0)
			return true;
	return false;
}

static int parse_names(struct pctx *ctx, const struct pnode *n, const char *what,
		       struct policy_names *dst, bool lockdown_check)
{
	int r = pnode_expect_seq(ctx, n, what);
	if (r < 0)
		return r;
	struct policy_env *env = &ctx->policy->env;
	for (size_t i = 0; i < n->n; i++) {
		const char *s;
		r = check_name(ctx, n->vals[i], what, true, &s);
		if (r < 0)
			return r;
		/* A wildcard never passes a secret-shaped name (the builder
		 * enforces it), so only an explicit name can add a secret. */
		if (lockdown_check && ctx->immutable && ctx->layer > POLICY_LAYER_SYSTEM &&
		    !strchr(s, '*') && policy_name_secret_shaped(s) && !system_grants(env, s))
			return pnode_error(ctx, n->vals[i],
					   "policy lockdown violation: the %s layer adds secret-shaped '%s' to environment.pass_through, but the system policy is immutable",
					   policy_layer_name(ctx->layer), s);
		if (strncasecmp(s, "TETHER_", 7) == 0)
			pnode_warn(ctx, n->vals[i], "%s: '%s': TETHER_* variables are never taken from the parent",
				   what, s);
		r = names_add(ctx, dst, n->vals[i], s);
		if (r < 0)
			return r;
	}
	return 0;
}

static int parse_set(struct pctx *ctx, const struct pnode *n)
{
	int r = pnode_expect_map(ctx, n, "environment.set");
	if (r < 0)
		return r;
	struct policy_env *env = &ctx->policy->env;
	for (size_t i = 0; i < n->n; i++) {
		const char *name, *value;
		r = check_name(ctx, n->keys[i], "environment.set", false, &name);
		if (r < 0)
			return r;
		r = pnode_expect_string(ctx, n->vals[i], "environment.set value", &value);
		if (r < 0)
			return r;
		struct policy_setvar *sv = NULL;
		for (size_t j = 0; j < env->n_set; j++)
			if (strcmp(env->set[j].name, name) == 0)
				sv = &env->set[j];
		if (!sv) {
			struct policy_setvar *v = realloc(env->set, (env->n_set + 1) * sizeof(*v));
			if (!v)
				return -ENOMEM;
			env->set = v;
			sv = &v[env->n_set++];
			*sv = (struct policy_setvar){ 0 };
			if (!(sv->name = strdup(name)))
				return -ENOMEM;
		}
		char *d = strdup(value);
		if (!d)
			return -ENOMEM;
		free(sv->value);
		sv->value = d;
		sv->layer = ctx->layer;
		sv->file = ctx->file;
		sv->line = n->keys[i]->line;
		sv->col = n->keys[i]->col;
	}
	return 0;
}

int policy_env_parse(struct pctx *ctx, const struct pnode *node)
{
	static const char *const keys[] = { "mode", "pass_through", "deny", "set", "path_strict",
					    "broker", "git_ssh_via_proxy", "trust_bundle", NULL };
	static const char *const baseline_keys[] = { "pass_through", NULL };
	struct policy_env *env = &ctx->policy->env;
	int r = pnode_expect_map(ctx, node, "environment");
	if (r < 0)
		return r;
	bool base = ctx->layer == POLICY_LAYER_BASELINE;
	r = pmap_check_keys(ctx, node, "environment", base ? baseline_keys : keys);
	if (r < 0)
		return r;

	const struct pnode *m = pmap_get(node, "mode");
	if (m) {
		if (m->kind == PNODE_SCALAR && strcmp(m->str, "inherit-all") == 0)
			return pnode_error(ctx, m,
					   "environment.mode 'inherit-all' is not allowed: it would hand every host variable, secrets included, to the workload; use 'sanitized' and list what you need in pass_through");
		int mode;
		r = pnode_expect_enum(ctx, m, "environment.mode", mode_words, &mode);
		if (r < 0)
			return r;
		/* Under an immutable system layer a lower layer may only move to
		 * a mode that passes less: secrets-off or explicit. */
		if (ctx->immutable && ctx->layer > POLICY_LAYER_SYSTEM && (enum policy_env_mode)mode != env->mode &&
		    mode != POLICY_ENV_SECRETS_OFF && mode != POLICY_ENV_EXPLICIT)
			return pnode_error(ctx, m,
					   "policy lockdown violation: the %s layer changes environment.mode from '%s' to '%s', but the system policy is immutable",
					   policy_layer_name(ctx->layer), policy_env_mode_name(env->mode),
					   mode_words[mode]);
		env->mode = (enum policy_env_mode)mode;
		env->mode_layer = ctx->layer;
	}

	const struct pnode *pt = pmap_get(node, "pass_through");
	if (pt && (r = parse_names(ctx, pt, "environment.pass_through",
				   base ? &env->baseline : &env->pass_through, !base)) < 0)
		return r;
	const struct pnode *dn = pmap_get(node, "deny");
	if (dn && (r = parse_names(ctx, dn, "environment.deny", &env->deny, false)) < 0)
		return r;
	const struct pnode *st = pmap_get(node, "set");
	if (st && (r = parse_set(ctx, st)) < 0)
		return r;
	const struct pnode *ps = pmap_get(node, "path_strict");
	if (ps) {
		bool b;
		if ((r = pnode_expect_bool(ctx, ps, "environment.path_strict", &b)) < 0)
			return r;
		env->path_strict |= b; /* tighten only */
	}
	const struct pnode *br = pmap_get(node, "broker");
	if (br) {
		bool b;
		if ((r = pnode_expect_bool(ctx, br, "environment.broker", &b)) < 0)
			return r;
		if (b && !env->broker && ctx->immutable && ctx->layer > POLICY_LAYER_SYSTEM)
			return pnode_error(ctx, br,
					   "policy lockdown violation: the %s layer enables environment.broker, but the system policy is immutable",
					   policy_layer_name(ctx->layer));
		env->broker = b;
	}
	/* Routes git's ssh through the proxy, where the network policy still
	 * decides: it widens nothing, so any layer may set it. */
	const struct pnode *gs = pmap_get(node, "git_ssh_via_proxy");
	if (gs && (r = pnode_expect_bool(ctx, gs, "environment.git_ssh_via_proxy", &env->git_ssh_via_proxy)) < 0)
		return r;
	const struct pnode *tb = pmap_get(node, "trust_bundle");
	if (tb) {
		const char *path;
		if ((r = pnode_expect_abspath(ctx, tb, "environment.trust_bundle", &path)) < 0)
			return r;
		if (env->trust_bundle && env->trust_bundle_layer == POLICY_LAYER_SYSTEM && ctx->immutable &&
		    ctx->layer > POLICY_LAYER_SYSTEM && strcmp(env->trust_bundle, path) != 0)
			return pnode_error(ctx, tb,
					   "policy lockdown violation: the %s layer changes environment.trust_bundle, but the system policy is immutable",
					   policy_layer_name(ctx->layer));
		char why[512];
		if (!ctx->skip_workload_files && (r = trust_bundle_check(path, why, sizeof(why))) < 0)
			return r == -ENOMEM ? r : pnode_error(ctx, tb, "environment.trust_bundle: %s", why);
		char *d = strdup(path);
		if (!d)
			return -ENOMEM;
		free(env->trust_bundle);
		env->trust_bundle = d;
		env->trust_bundle_layer = ctx->layer;
	}
	return 0;
}

int policy_exec_parse(struct pctx *ctx, const struct pnode *node)
{
	static const char *const keys[] = { "shell", NULL };
	int r = pnode_expect_map(ctx, node, "exec");
	if (r < 0)
		return r;
	if ((r = pmap_check_keys(ctx, node, "exec", keys)) < 0)
		return r;
	const struct pnode *sh = pmap_get(node, "shell");
	if (sh) {
		const char *s;
		if ((r = pnode_expect_abspath(ctx, sh, "exec.shell", &s)) < 0)
			return r;
		char *d = strdup(s);
		if (!d)
			return -ENOMEM;
		free(ctx->policy->exec.shell);
		ctx->policy->exec.shell = d;
	}
	return 0;
}
