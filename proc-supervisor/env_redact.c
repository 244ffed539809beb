/* The redactor: a single left-to-right scan with a few recognisers. When
 * unsure it redacts: a false positive costs readability, a false negative
 * leaks. */
#include "proc-supervisor/env_redact.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/secrets.h"
#include "common/util.h"

struct sb {
	char *b;
	size_t n, cap;
	bool oom;
};

static void sb_add(struct sb *s, const char *p, size_t len)
{
	if (s->oom)
		return;
	if (s->n + len + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 64;
		while (cap < s->n + len + 1)
			cap *= 2;
		char *nb = realloc(s->b, cap);
		if (!nb) {
			s->oom = true;
			return;
		}
		s->b = nb;
		s->cap = cap;
	}
	memcpy(s->b + s->n, p, len);
	s->n += len;
	s->b[s->n] = '\0';
}

static void sb_str(struct sb *s, const char *p) { sb_add(s, p, strlen(p)); }

static char *sb_done(struct sb *s)
{
	if (s->oom) {
		free(s->b);
		return NULL;
	}
	if (!s->b)
		return strdup("");
	return s->b;
}

static bool idch(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}

bool redact_key_secretish(const char *id, size_t len)
{
	static const char *const comps[] = { "key",    "apikey",   "token",       "secret",
					     "password", "passwd", "pass",        "pwd",
					     "auth",   "credential", "credentials", "cookie",
					     "session", "bearer",  "privatekey",  "pat" };
	static const char *const infix[] = { "password", "passwd", "secret", "token", "apikey", "credential" };
	char low[128];
	if (len == 0)
		return false;
	if (len >= sizeof(low)) { /* the tail carries the _TOKEN / -key part */
		id += len - (sizeof(low) - 1);
		len = sizeof(low) - 1;
	}
	for (size_t i = 0; i < len; i++)
		low[i] = (char)tolower((unsigned char)id[i]);
	low[len] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(infix); i++)
		if (strstr(low, infix[i]))
			return true;
	for (size_t i = 0; i < len;) {
		while (i < len && (low[i] == '-' || low[i] == '_' || low[i] == '.'))
			i++;
		size_t j = i;
		while (j < len && low[j] != '-' && low[j] != '_' && low[j] != '.')
			j++;
		for (size_t k = 0; k < ARRAY_SIZE(comps); k++)
			if (strlen(comps[k]) == j - i && memcmp(low + i, comps[k], j - i) == 0)
				return true;
		i = j;
	}
	return false;
}

/* Token shapes: prefix, body charset, min and exact body length. */
enum cs { CS_ALNUM_DASH, CS_ALNUM_US, CS_UPPER_DIGIT, CS_B64URL };
static const struct shape {
	const char *prefix;
	enum cs cs;
	size_t min, exact;
} shapes[] = {
	{ "sk-", CS_ALNUM_DASH, 4, 0 },       { "github_pat_", CS_ALNUM_US, 4, 0 },
	{ "ghp_", CS_ALNUM_US, 4, 0 },        { "gho_", CS_ALNUM_US, 4, 0 },
	{ "ghs_", CS_ALNUM_US, 4, 0 },        { "ghu_", CS_ALNUM_US, 4, 0 },
	{ "ghr_", CS_ALNUM_US, 4, 0 },        { "glpat-", CS_ALNUM_DASH, 4, 0 },
	{ "AKIA", CS_UPPER_DIGIT, 16, 16 },   { "ASIA", CS_UPPER_DIGIT, 16, 16 },
	{ "AIza", CS_B64URL, 30, 0 },
};

static bool in_cs(enum cs cs, char c)
{
	unsigned char u = (unsigned char)c;
	switch (cs) {
	case CS_ALNUM_DASH:
		return isalnum(u) || c == '-' || c == '_';
	case CS_ALNUM_US:
		return isalnum(u) || c == '_';
	case CS_UPPER_DIGIT:
		return isupper(u) || isdigit(u);
	default:
		return isalnum(u) || c == '-' || c == '_';
	}
}

/* Length of a token starting at p, or 0. */
static size_t token_at(const char *p)
{
	for (size_t i = 0; i < ARRAY_SIZE(shapes); i++) {
		size_t pl = strlen(shapes[i].prefix);
		if (strncmp(p, shapes[i].prefix, pl) != 0)
			continue;
		size_t n = 0;
		while (p[pl + n] && in_cs(shapes[i].cs, p[pl + n]))
			n++;
		if (n >= shapes[i].min && (!shapes[i].exact || n == shapes[i].exact))
			return pl + n;
	}
	/* Slack: xox?- */
	if (strncmp(p, "xox", 3) == 0 && isalpha((unsigned char)p[3]) && p[4] == '-') {
		size_t n = 0;
		while (p[5 + n] && in_cs(CS_ALNUM_DASH, p[5 + n]))
			n++;
		if (n >= 4)
			return 5 + n;
	}
	/* JWT: eyJ<b64url>.<b64url>[.<b64url>] */
	if (strncmp(p, "eyJ", 3) == 0) {
		size_t n = 0, dots = 0;
		while (n < 16384 && p[n] && (in_cs(CS_B64URL, p[n]) || p[n] == '.')) {
			dots += p[n] == '.';
			n++;
		}
		if (dots >= 1 && n >= 16)
			return n;
	}
	return 0;
}

static bool starts_icase(const char *p, const char *w)
{
	return strncasecmp(p, w, strlen(w)) == 0;
}

static bool value_end(char c)
{
	return !c || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '&' || c == ',' || c == ';' ||
	       c == '"' || c == '\'' || c == '}' || c == ']' || c == ')';
}

/* After `=` or `:` of a secret-ish key: redact the value; returns the index
 * after it. */
static size_t redact_value(struct sb *o, const char *s, size_t i)
{
	while (s[i] == ' ' || s[i] == '\t')
		sb_add(o, s + i++, 1);
	if (s[i] == '"' || s[i] == '\'') {
		char q = s[i];
		const char *e = strchr(s + i + 1, q);
		sb_add(o, &q, 1);
		sb_str(o, REDACTED);
		if (!e)
			return strlen(s);
		sb_add(o, &q, 1);
		return (size_t)(e - s) + 1;
	}
	size_t j = i;
	while (!value_end(s[j]))
		j++;
	if (j > i)
		sb_str(o, REDACTED);
	return j;
}

static char *redact_shapes(const char *s)
{
	struct sb o = { 0 };
	size_t i = 0, n = strlen(s);
	while (i < n) {
		char prev = i ? s[i - 1] : ' ';
		bool boundary = !idch(prev);
		/* PEM blocks */
		if (strncmp(s + i, "-----BEGIN ", 11) == 0) {
			const char *h = strstr(s + i + 11, "-----");
			if (h) {
				size_t hl = (size_t)(h - (s + i)) + 5;
				sb_add(&o, s + i, hl);
				sb_str(&o, REDACTED);
				const char *e = strstr(s + i + hl, "-----END ");
				if (!e)
					return sb_done(&o);
				i = (size_t)(e - s);
				const char *ee = strstr(e + 9, "-----");
				size_t el = ee ? (size_t)(ee - e) + 5 : strlen(e);
				sb_add(&o, e, el);
				i += el;
				continue;
			}
		}
		/* Authorization-style headers */
		static const char *const headers[] = { "proxy-authorization:", "authorization:", "cookie:",
						       "set-cookie:", "x-api-key:", "x-auth-token:" };
		bool hit = false;
		for (size_t h = 0; boundary && h < ARRAY_SIZE(headers) && !hit; h++) {
			if (!starts_icase(s + i, headers[h]))
				continue;
			size_t hl = strlen(headers[h]);
			sb_add(&o, s + i, hl);
			i += hl;
			while (s[i] == ' ' || s[i] == '\t')
				sb_add(&o, s + i++, 1);
			size_t w = 0;
			while (isalpha((unsigned char)s[i + w]))
				w++;
			if (w && s[i + w] == ' ' && h < 2) { /* keep the scheme word: Bearer, Basic */
				sb_add(&o, s + i, w + 1);
				i += w + 1;
			}
			size_t j = i;
			while (s[j] && s[j] != '\n' && s[j] != '\r' && s[j] != '"' && s[j] != '\'')
				j++;
			if (j > i)
				sb_str(&o, REDACTED);
			i = j;
			hit = true;
		}
		if (hit)
			continue;
		/* URL userinfo: scheme://user:pass@host */
		if (strncmp(s + i, "://", 3) == 0) {
			sb_add(&o, s + i, 3);
			i += 3;
			size_t j = i, colon = 0;
			while (s[j] && !strchr("/@ \t\n\"'?#", s[j])) {
				if (s[j] == ':' && !colon)
					colon = j;
				j++;
			}
			if (s[j] == '@' && colon) {
				sb_add(&o, s + i, colon - i + 1);
				sb_str(&o, REDACTED);
				i = j;
			}
			continue;
		}
		/* token shapes */
		size_t tl = boundary ? token_at(s + i) : 0;
		if (tl) {
			sb_str(&o, REDACTED);
			i += tl;
			continue;
		}
		/* key=value and key: value (also "key": "value") */
		if (s[i] == '=' || s[i] == ':') {
			size_t e = i;
			if (e && (s[e - 1] == '"' || s[e - 1] == '\''))
				e--;
			size_t b = e;
			while (b && idch(s[b - 1]))
				b--;
			/* "key: v" needs the space (or a quote): "host:port" is not a pair */
			bool colon_ok = s[i] == '=' || s[i + 1] == ' ' || s[i + 1] == '"' || s[i + 1] == '\t';
			size_t v = i + 1;
			while (s[v] == ' ' || s[v] == '\t')
				v++;
			bool has_value = s[v] == '"' || s[v] == '\'' || !value_end(s[v]);
			if (e > b && colon_ok && has_value && redact_key_secretish(s + b, e - b)) {
				sb_add(&o, s + i, 1);
				i = redact_value(&o, s, i + 1);
				continue;
			}
		}
		sb_add(&o, s + i, 1);
		i++;
	}
	return sb_done(&o);
}

char *redact_line(const char *s)
{
	char *r = redact_shapes(s);
	if (!r)
		return NULL;
	char *x = NULL;
	size_t xl = 0;
	int k = secrets_scrub(r, strlen(r), &x, &xl);
	if (k == 0)
		return r;
	free(r);
	return x; /* NULL on ENOMEM */
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static bool tool_is(const char *tool, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(tool, names[i]) == 0)
			return true;
	return false;
}

void redact_argv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

char **redact_argv(char *const *argv)
{
	static const char *const p_tools[] = { "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow",
					       "mysqlcheck", "mariadb", "mariadb-dump", "mariadb-admin", "sshpass" };
	static const char *const u_tools[] = { "curl", "wget" };
	size_t n = 0;
	while (argv && argv[n])
		n++;
	char **out = calloc(n + 1, sizeof(*out));
	if (!out)
		return NULL;
	const char *tool = n ? base_name(argv[0]) : "";
	bool p_tool = tool_is(tool, p_tools, ARRAY_SIZE(p_tools));
	bool u_tool = tool_is(tool, u_tools, ARRAY_SIZE(u_tools));
	enum { NONE, WHOLE, USERPASS } next = NONE;
	for (size_t i = 0; i < n; i++) {
		const char *a = argv[i];
		char *r = NULL;
		bool flag = a[0] == '-' && a[1] != '\0' && i > 0;
		if (next != NONE && !flag) {
			const char *c = next == USERPASS ? strchr(a, ':') : NULL;
			if (c) {
				if (asprintf(&r, "%.*s:%s", (int)(c - a), a, REDACTED) < 0)
					r = NULL;
			} else {
				r = strdup(REDACTED);
			}
			next = NONE;
			goto store;
		}
		next = NONE;
		if (flag) {
			const char *name = a;
			const char *eq = strchr(a, '=');
			size_t nl = eq ? (size_t)(eq - name) : strlen(name);
			if (p_tool && a[1] == 'p' && a[2] != '\0' && !eq) {
				if (asprintf(&r, "-p%s", REDACTED) < 0)
					r = NULL;
				goto store;
			}
			if (u_tool && (strcmp(a, "-u") == 0 || strcmp(a, "--user") == 0 ||
				       strcmp(a, "--proxy-user") == 0 || strcmp(a, "-U") == 0)) {
				next = USERPASS;
			} else if (u_tool && a[1] == 'u' && a[2] && strchr(a, ':')) {
				if (asprintf(&r, "%.*s:%s", (int)(strchr(a, ':') - a), a, REDACTED) < 0)
					r = NULL;
				goto store;
			} else if (!eq && redact_key_secretish(name, nl)) {
				next = WHOLE;
			}
		}
		r = redact_line(a);
store:
		if (r) { /* the kept part (a user name) may hold a registered value too */
			char *x = NULL;
			size_t xl = 0;
			int k = secrets_scrub(r, strlen(r), &x, &xl);
			if (k != 0) {
				free(r);
				r = x;
			}
		}
		if (!r) {
			redact_argv_free(out);
			return NULL;
		}
		out[i] = r;
	}
	return out;
}

static int redact_json_string(json_t *s, bool whole)
{
	if (whole)
		return json_string_set(s, REDACTED) < 0 ? -ENOMEM : 0;
	char *r = redact_line(json_string_value(s));
	if (!r)
		return -ENOMEM;
	int rc = strcmp(r, json_string_value(s)) == 0 ? 0 : json_string_set(s, r) < 0 ? -ENOMEM : 0;
	free(r);
	return rc;
}

static int redact_json_depth(json_t *j, unsigned depth)
{
	if (depth > 64)
		return 0; /* jansson documents cannot be this deep from our code */
	if (json_is_object(j)) {
		const char *k;
		json_t *v;
		json_object_foreach(j, k, v) {
			int rc = json_is_string(v) ? redact_json_string(v, redact_key_secretish(k, strlen(k)))
						   : redact_json_depth(v, depth + 1);
			if (rc < 0)
				return rc;
		}
	} else if (json_is_array(j)) {
		size_t i;
		json_t *v;
		json_array_foreach(j, i, v) {
			int rc = json_is_string(v) ? redact_json_string(v, false) : redact_json_depth(v, depth + 1);
			if (rc < 0)
				return rc;
		}
	} else if (json_is_string(j)) {
		return redact_json_string(j, false);
	}
	return 0;
}

int redact_json(json_t *j)
{
	return redact_json_depth(j, 0);
}
