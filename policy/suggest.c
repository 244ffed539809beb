#include "policy/suggest.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/flow_identity.h"
#include "common/util.h"
#include "policy/netpolicy.h"
#include "policy/network.h"

struct sflow {
	char *path;
	char sha[65];      /* "" unknown */
	char **anc;        /* ancestor paths, nearest first */
	char **anc_sha;    /* their hashes, NULL entries when unknown */
	size_t n_anc;
	char *host;
	unsigned port;
	bool has_ip;
	struct netaddr ip;
	unsigned line;
	bool covered;      /* the merge policy allows it already */
	bool raw;          /* a captured stream neither TLS nor HTTP: needs protocol: tcp */
};

struct suggest {
	struct sflow *flows;
	size_t n_flows, cap;
	char **notes;
	size_t n_notes;
	struct suggest_stats st;
};

int suggest_new(struct suggest **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void flow_done(struct sflow *f)
{
	free(f->path);
	free(f->host);
	for (size_t i = 0; i < f->n_anc; i++) {
		free(f->anc[i]);
		free(f->anc_sha[i]);
	}
	free(f->anc);
	free(f->anc_sha);
}

void suggest_free(struct suggest *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_flows; i++)
		flow_done(&s->flows[i]);
	free(s->flows);
	for (size_t i = 0; i < s->n_notes; i++)
		free(s->notes[i]);
	free(s->notes);
	free(s);
}

const char *const *suggest_notes(const struct suggest *s, size_t *n)
{
	*n = s->n_notes;
	return (const char *const *)s->notes;
}

const struct suggest_stats *suggest_stats(const struct suggest *s) { return &s->st; }

static void note(struct suggest *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct suggest *s, const char *fmt, ...)
{
	if (s->n_notes >= SUGGEST_MAX_NOTES)
		return;
	char **v = realloc(s->notes, (s->n_notes + 1) * sizeof(*v));
	if (!v)
		return;
	s->notes = v;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s->notes[s->n_notes], fmt, ap) >= 0)
		s->n_notes++;
	va_end(ap);
}

/* A path a policy can name exactly: absolute, printable, no glob, no "..". */
static bool nameable(const char *p)
{
	if (p[0] != '/' || strlen(p) >= PATH_MAX || strchr(p, '*'))
		return false;
	for (const unsigned char *c = (const unsigned char *)p; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return false;
	for (const char *c = p; (c = strstr(c, "/..")) != NULL; c += 3)
		if (c[3] == '/' || c[3] == '\0')
			return false;
	return true;
}

static const char *jstr(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

#define BAD(...)                                          \
	do {                                              \
		snprintf(msg, msize, __VA_ARGS__);        \
		r = -EINVAL;                              \
		goto out;                                 \
	} while (0)

int suggest_add_line(struct suggest *s, const char *line, size_t len, unsigned lineno, char *msg,
		     size_t msize)
{
	int r = 0;
	struct sflow f = { .line = lineno };
	json_error_t jerr;
	s->st.lines++;
	/* blank lines (a trailing newline) are nothing */
	size_t i = 0;
	while (i < len && isspace((unsigned char)line[i]))
		i++;
	if (i == len)
		return 0;
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o)
		BAD("line %u: not JSON (%s)", lineno, jerr.text);
	if (!json_is_object(o))
		BAD("line %u: not a JSON object", lineno);
	const char *ev = jstr(o, "event");
	if (!ev)
		BAD("line %u: no \"event\" (is this a tether audit file?)", lineno);
	if (strcmp(ev, "egress_decision") != 0)
		goto out;
	json_t *bin = json_object_get(o, "binary"), *dest = json_object_get(o, "dest");
	const char *path = json_is_object(bin) ? jstr(bin, "path") : NULL;
	const char *host = json_is_object(dest) ? jstr(dest, "host") : NULL;
	json_t *port = json_is_object(dest) ? json_object_get(dest, "port") : NULL;
	if (!path || !path[0] || !host || !json_is_integer(port)) {
		s->st.no_identity++;
		goto out;
	}
	json_int_t pv = json_integer_value(port);
	if (pv < 1 || pv > 65535)
		BAD("line %u: dest.port %lld is not a port", lineno, (long long)pv);
	char norm[256];
	if (netpol_host_normalize(host, norm, sizeof(norm)) < 0 || strcmp(norm, host) != 0)
		BAD("line %u: dest.host is not a normalised host name or address", lineno);
	if (!nameable(path)) {
		s->st.left_out++;
		note(s, "line %u: binary path cannot be named exactly in a policy (a '*', '..' or a "
			"control character): flow left out", lineno);
		goto out;
	}
	const char *sha = jstr(bin, "sha256");
	if (sha) {
		if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64)
			BAD("line %u: binary.sha256 is not 64 lower-case hex digits", lineno);
		memcpy(f.sha, sha, 65);
	}
	/* a transparent flow whose first bytes were neither TLS nor HTTP */
	const char *cap = jstr(o, "capture"), *peek = jstr(o, "peek");
	f.raw = cap && !strcmp(cap, "transparent") && peek && strcmp(peek, "tls") != 0 && strcmp(peek, "http") != 0;
	const char *ips = jstr(dest, "ip");
	if (ips) {
		if (netaddr_parse(ips, &f.ip) < 0)
			BAD("line %u: dest.ip is not an IP address", lineno);
		f.has_ip = true;
	} else {
		f.has_ip = netaddr_parse(host, &f.ip) == 0;
	}
	if (f.has_ip && netpolicy_ip_blocked(&f.ip, NULL)) {
		char ipb[64];
		s->st.left_out++;
		note(s, "line %u: %s -> %s:%lld: %s is in a blocked range; left out (only a cidr endpoint "
			"naming it opens it: add one by hand if this flow is meant)", lineno, path, host,
		     (long long)pv, netaddr_format(&f.ip, ipb, sizeof(ipb)));
		goto out;
	}
	json_t *anc = json_object_get(o, "ancestors");
	if (anc && !json_is_array(anc) && !json_is_null(anc))
		BAD("line %u: ancestors is not a list", lineno);
	size_t ai;
	json_t *a;
	if (json_is_array(anc)) {
		if (json_array_size(anc) > 256)
			BAD("line %u: more than 256 ancestors", lineno);
		f.anc = calloc(json_array_size(anc) + 1, sizeof(char *));
		f.anc_sha = calloc(json_array_size(anc) + 1, sizeof(char *));
		if (!f.anc || !f.anc_sha) {
			r = -ENOMEM;
			goto out;
		}
		json_array_foreach(anc, ai, a) {
			const char *ap = json_is_object(a) ? jstr(a, "path") : NULL;
			if (!ap)
				BAD("line %u: ancestors[%zu] has no path", lineno, ai);
			const char *as = jstr(a, "sha256");
			if (as && (strlen(as) != 64 || strspn(as, "0123456789abcdef") != 64))
				BAD("line %u: ancestors[%zu].sha256 is not 64 lower-case hex digits", lineno, ai);
			if (!nameable(ap))
				continue; /* cannot be required: it simply is not required */
			f.anc[f.n_anc] = strdup(ap);
			f.anc_sha[f.n_anc] = as ? strdup(as) : NULL;
			if (!f.anc[f.n_anc++] || (as && !f.anc_sha[f.n_anc - 1])) {
				r = -ENOMEM;
				goto out;
			}
		}
	}
	if (s->n_flows >= SUGGEST_MAX_FLOWS) {
		snprintf(msg, msize, "line %u: more than %d flows", lineno, SUGGEST_MAX_FLOWS);
		r = -E2BIG;
		goto out;
	}
	if (s->n_flows == s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 64;
		struct sflow *v = realloc(s->flows, nc * sizeof(*v));
		if (!v) {
			r = -ENOMEM;
			goto out;
		}
		s->flows = v;
		s->cap = nc;
	}
	f.port = (unsigned)pv;
	f.path = strdup(path);
	f.host = strdup(host);
	if (!f.path || !f.host) {
		r = -ENOMEM;
		goto out;
	}
	s->flows[s->n_flows++] = f;
	memset(&f, 0, sizeof(f));
	s->st.flows++;
	r = 1;
out:
	flow_done(&f);
	json_decref(o);
	return r;
}

/* ---------- writing ---------- */

static int cmp_flow(const void *a, const void *b)
{
	const struct sflow *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	if (c)
		return c;
	return x->line < y->line ? -1 : x->line > y->line;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Plain unless the loader would read it as something other than a string
 * (null, a bool, a number) or it is empty. */
static int scalar(yaml_document_t *d, const char *v)
{
	static const char *const special[] = { "", "~", "null", "true", "false", "yes", "no", "on", "off", NULL };
	bool quote = strspn(v, "0123456789.+-eExXoO_") == strlen(v);
	for (size_t i = 0; special[i] && !quote; i++)
		quote = strcasecmp(v, special[i]) == 0;
	return yaml_document_add_scalar(d, NULL, (yaml_char_t *)v, -1,
					quote ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE);
}

static int num(yaml_document_t *d, unsigned v)
{
	char b[16];
	snprintf(b, sizeof(b), "%u", v);
	return yaml_document_add_scalar(d, NULL, (yaml_char_t *)b, -1, YAML_PLAIN_SCALAR_STYLE);
}

static bool pair(yaml_document_t *d, int map, const char *key, int val)
{
	int k = scalar(d, key);
	return k && val && yaml_document_append_mapping_pair(d, map, k, val);
}

/* The value node of key in a mapping node, or 0. */
static int map_get(yaml_document_t *d, int map, const char *key)
{
	yaml_node_t *m = yaml_document_get_node(d, map);
	if (!m || m->type != YAML_MAPPING_NODE)
		return 0;
	for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);
		if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
		    memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
			return p->value;
	}
	return 0;
}

struct names {
	char **v;
	size_t n;
};

static bool name_taken(const struct names *nm, const char *n)
{
	for (size_t i = 0; i < nm->n; i++)
		if (!strcmp(nm->v[i], n))
			return true;
	return false;
}

static int name_add(struct names *nm, const char *n)
{
	char **v = realloc(nm->v, (nm->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	nm->v = v;
	if (!(nm->v[nm->n] = strdup(n)))
		return -ENOMEM;
	nm->n++;
	return 0;
}

/* A rule name from the binary's basename, unique in nm. */
static int rule_name(struct names *nm, const char *path, char *out, size_t size)
{
	const char *b = strrchr(path, '/') + 1;
	char base[100];
	size_t n = 0;
	for (; *b && n < sizeof(base) - 1; b++)
		base[n++] = isalnum((unsigned char)*b) || strchr("._-", *b) ? *b : '-';
	base[n] = '\0';
	if (!n)
		strscpy(base, "binary", sizeof(base));
	snprintf(out, size, "%s", base);
	for (unsigned i = 2; name_taken(nm, out); i++)
		snprintf(out, size, "%s-%u", base, i);
	return name_add(nm, out);
}

/* The one hash every flow of [a, b) recorded for ancestor path p, or NULL
 * (unknown somewhere, or it changed: the ancestor is then not pinned). */
static const char *ancestor_sha(const struct sflow *f, size_t a, size_t b, const char *p)
{
	const char *sha = NULL;
	for (size_t i = a; i < b; i++)
		for (size_t j = 0; j < f[i].n_anc; j++) {
			if (strcmp(f[i].anc[j], p) != 0)
				continue;
			if (!f[i].anc_sha[j] || (sha && strcmp(sha, f[i].anc_sha[j]) != 0))
				return NULL;
			sha = f[i].anc_sha[j];
		}
	return sha;
}

/* One rule for flows [a, b) (same path, not covered). */
static int add_rule(yaml_document_t *d, int seq, struct sflow *f, size_t a, size_t b, bool pin,
		    struct names *nm, struct policy_diag *diag)
{
	char name[128];
	int r = rule_name(nm, f[a].path, name, sizeof(name));
	if (r < 0)
		return r;
	int rule = yaml_document_add_mapping(d, NULL, YAML_BLOCK_MAPPING_STYLE);
	if (!rule || !pair(d, rule, "name", scalar(d, name)))
		return -ENOMEM;
	/* binaries: the path, once per distinct hash when pinned */
	int bins = yaml_document_add_sequence(d, NULL, YAML_BLOCK_SEQUENCE_STYLE);
	if (!bins || !pair(d, rule, "binaries", bins))
		return -ENOMEM;
	for (size_t i = a; i < b; i++) {
		if (pin && !f[i].sha[0]) {
			snprintf(diag->msg, sizeof(diag->msg),
				 "--pin: the audit has no sha256 for %s (line %u): its identity was not "
				 "hashed, so it cannot be pinned", f[i].path, f[i].line);
			return -EINVAL;
		}
		bool seen = false;
		for (size_t j = a; j < i && !seen; j++)
			seen = !pin || strcmp(f[j].sha, f[i].sha) == 0;
		if (seen)
			continue;
		int e = yaml_document_add_mapping(d, NULL, YAML_BLOCK_MAPPING_STYLE);
		if (!e || !pair(d, e, "path", scalar(d, f[i].path)) ||
		    (pin && !pair(d, e, "sha256",
				  yaml_document_add_scalar(d, NULL, (yaml_char_t *)f[i].sha, 64,
							   YAML_DOUBLE_QUOTED_SCALAR_STYLE))) ||
		    !yaml_document_append_sequence_item(d, bins, e))
			return -ENOMEM;
	}
	/* ancestors: those of the first flow that every other flow has too */
	size_t n_keep = 0;
	const char *keep[256];
	for (size_t k = 0; k < f[a].n_anc && n_keep < 256; k++) {
		const char *p = f[a].anc[k];
		bool everywhere = true, dup = false;
		for (size_t j = 0; j < n_keep; j++)
			dup = dup || !strcmp(keep[j], p);
		for (size_t i = a + 1; i < b && everywhere && !dup; i++) {
			bool has = false;
			for (size_t j = 0; j < f[i].n_anc && !has; j++)
				has = !strcmp(f[i].anc[j], p);
			everywhere = has;
		}
		if (everywhere && !dup)
			keep[n_keep++] = p;
	}
	if (n_keep) {
		int anc = yaml_document_add_sequence(d, NULL, YAML_BLOCK_SEQUENCE_STYLE);
		if (!anc || !pair(d, rule, "ancestors", anc))
			return -ENOMEM;
		for (size_t k = 0; k < n_keep; k++) {
			int e = yaml_document_add_mapping(d, NULL, YAML_BLOCK_MAPPING_STYLE);
			const char *sha = pin ? ancestor_sha(f, a, b, keep[k]) : NULL;
			if (!e || !pair(d, e, "path", scalar(d, keep[k])) ||
			    (sha && !pair(d, e, "sha256",
					  yaml_document_add_scalar(d, NULL, (yaml_char_t *)sha, 64,
								   YAML_DOUBLE_QUOTED_SCALAR_STYLE))) ||
			    !yaml_document_append_sequence_item(d, anc, e))
				return -ENOMEM;
		}
	}
	/* endpoints: one per host (sorted), its ports sorted and unique */
	_cleanup_free_ char **hosts = calloc(b - a, sizeof(char *));
	if (!hosts)
		return -ENOMEM;
	size_t nh = 0;
	for (size_t i = a; i < b; i++) {
		bool dup = false;
		for (size_t j = 0; j < nh && !dup; j++)
			dup = !strcmp(hosts[j], f[i].host);
		if (!dup)
			hosts[nh++] = f[i].host;
	}
	qsort(hosts, nh, sizeof(char *), cmp_str);
	int eps = yaml_document_add_sequence(d, NULL, YAML_BLOCK_SEQUENCE_STYLE);
	if (!eps || !pair(d, rule, "endpoints", eps))
		return -ENOMEM;
	for (size_t h = 0; h < nh; h++) {
		int e = yaml_document_add_mapping(d, NULL, YAML_BLOCK_MAPPING_STYLE);
		int ports = yaml_document_add_sequence(d, NULL, YAML_FLOW_SEQUENCE_STYLE);
		if (!e || !ports || !pair(d, e, "host", scalar(d, hosts[h])) || !pair(d, e, "ports", ports))
			return -ENOMEM;
		bool raw = false;
		for (size_t i = a; i < b; i++)
			raw |= f[i].raw && !strcmp(f[i].host, hosts[h]);
		if (raw && !pair(d, e, "protocol", scalar(d, "tcp")))
			return -ENOMEM;
		unsigned last = 0;
		for (;;) {
			/* the next larger port of this host: sorted, unique */
			unsigned next = 0;
			for (size_t i = a; i < b; i++)
				if (!strcmp(f[i].host, hosts[h]) && f[i].port > last && (!next || f[i].port < next))
					next = f[i].port;
			if (!next)
				break;
			if (!yaml_document_append_sequence_item(d, ports, num(d, next)))
				return -ENOMEM;
			last = next;
		}
		if (!yaml_document_append_sequence_item(d, eps, e))
			return -ENOMEM;
	}
	return yaml_document_append_sequence_item(d, seq, rule) ? 0 : -ENOMEM;
}

struct buf {
	char *p;
	size_t n, cap;
};

static int buf_write(void *data, unsigned char *b, size_t n)
{
	struct buf *o = data;
	if (o->n + n + 1 > o->cap) {
		size_t nc = (o->n + n + 1) * 2;
		char *np = realloc(o->p, nc);
		if (!np)
			return 0;
		o->p = np;
		o->cap = nc;
	}
	memcpy(o->p + o->n, b, n);
	o->n += n;
	o->p[o->n] = '\0';
	return 1;
}

static const struct policy_section *const net_sections[] = { &network_policy_section };

static struct flow_identity *identity_of(const struct sflow *f)
{
	struct flow_identity *id = flow_identity_new();
	if (!id || !(id->binary_path = strdup(f->path)))
		goto fail;
	memcpy(id->sha256, f->sha, sizeof(id->sha256));
	for (size_t i = 0; i < f->n_anc; i++)
		if (flow_identity_add_ancestor(id, f->anc[i], 0, f->anc_sha[i]) < 0)
			goto fail;
	return id;
fail:
	flow_identity_free(id);
	return NULL;
}

/* Does np allow f by a rule (not by audit or learn mode)? -ENOMEM. */
static int allows(const struct network_policy *np, const struct sflow *f)
{
	struct flow_identity *id = identity_of(f);
	if (!id)
		return -ENOMEM;
	struct netpolicy_decision dd = netpolicy_decide_flow(np, id, f->host, (uint16_t)f->port,
							    f->has_ip ? &f->ip : NULL,
							    f->raw ? NETPOLICY_FLOW_RAW : NETPOLICY_FLOW_HTTP);
	flow_identity_free(id);
	return dd.reason == REASON_ALLOWED;
}

/* Load text as a policy, its symlinks resolved. */
static int load_resolved(const char *name, const char *text, size_t len, const struct suggest_opts *o,
			 struct policy **out, struct policy_diag *diag)
{
	int r = policy_load_buffer(name, text, len, net_sections, 1, out, diag);
	if (r < 0)
		return r;
	r = netpol_resolve_binaries(*out, o->rootfd, o->root_label ? o->root_label : "/");
	if (r < 0) {
		policy_free(*out);
		*out = NULL;
	}
	return r;
}

int suggest_write(struct suggest *s, const struct suggest_opts *o, char **yaml, size_t *len,
		  struct policy_diag *diag)
{
	int r = 0, root = 0, seq = 0;
	struct names nm = { 0 };
	struct policy *merge = NULL, *check = NULL;
	yaml_document_t doc;
	bool have_doc = false;
	struct buf out = { 0 };
	_cleanup_free_ struct sflow *todo = NULL;
	memset(diag, 0, sizeof(*diag));
	*yaml = NULL;
	*len = 0;
	s->st.covered = s->st.rules = 0;
	for (size_t i = 0; i < s->n_flows; i++)
		s->flows[i].covered = false;

	if (o->merge_text) {
		if ((r = load_resolved(o->merge_name, o->merge_text, o->merge_len, o, &merge, diag)) < 0)
			goto out;
		const struct network_policy *np = policy_section_data(merge, "network");
		for (size_t i = 0; np && i < np->n_rules; i++)
			if ((r = name_add(&nm, np->rules[i].name)) < 0)
				goto out;
		for (size_t i = 0; np && i < s->n_flows; i++) {
			if ((r = allows(np, &s->flows[i])) < 0)
				goto out;
			if (r) {
				s->flows[i].covered = true;
				s->st.covered++;
			}
		}
		yaml_parser_t parser;
		if (!yaml_parser_initialize(&parser)) {
			r = -ENOMEM;
			goto out;
		}
		yaml_parser_set_input_string(&parser, (const unsigned char *)o->merge_text, o->merge_len);
		int ok = yaml_parser_load(&parser, &doc);
		yaml_parser_delete(&parser);
		if (!ok) {
			snprintf(diag->msg, sizeof(diag->msg), "%s: cannot be read again as YAML", o->merge_name);
			r = -EINVAL;
			goto out;
		}
		have_doc = true;
		root = 1; /* the root node is the first one composed */
		yaml_node_t *rn = yaml_document_get_node(&doc, root);
		if (!rn || rn->type != YAML_MAPPING_NODE) {
			snprintf(diag->msg, sizeof(diag->msg), "%s: not a mapping at the top", o->merge_name);
			r = -EINVAL;
			goto out;
		}
		int net = map_get(&doc, root, "network");
		if (!net) {
			if (!(net = yaml_document_add_mapping(&doc, NULL, YAML_BLOCK_MAPPING_STYLE)) ||
			    !pair(&doc, root, "network", net)) {
				r = -ENOMEM;
				goto out;
			}
		}
		seq = map_get(&doc, net, "policies");
		if (!seq) {
			if (!(seq = yaml_document_add_sequence(&doc, NULL, YAML_BLOCK_SEQUENCE_STYLE)) ||
			    !pair(&doc, net, "policies", seq)) {
				r = -ENOMEM;
				goto out;
			}
		}
	} else {
		if (!yaml_document_initialize(&doc, NULL, NULL, NULL, 1, 1)) {
			r = -ENOMEM;
			goto out;
		}
		have_doc = true;
		root = yaml_document_add_mapping(&doc, NULL, YAML_BLOCK_MAPPING_STYLE);
		int net = yaml_document_add_mapping(&doc, NULL, YAML_BLOCK_MAPPING_STYLE);
		seq = yaml_document_add_sequence(&doc, NULL, YAML_BLOCK_SEQUENCE_STYLE);
		if (!root || !net || !seq || !pair(&doc, root, "version", num(&doc, 1)) ||
		    !pair(&doc, root, "network", net) || !pair(&doc, net, "mode", scalar(&doc, "enforce")) ||
		    !pair(&doc, net, "policies", seq)) {
			r = -ENOMEM;
			goto out;
		}
	}

	/* one rule per path, over the flows not covered */
	qsort(s->flows, s->n_flows, sizeof(*s->flows), cmp_flow);
	todo = calloc(s->n_flows + 1, sizeof(*todo));
	if (!todo) {
		r = -ENOMEM;
		goto out;
	}
	size_t nt = 0;
	for (size_t i = 0; i < s->n_flows; i++)
		if (!s->flows[i].covered)
			todo[nt++] = s->flows[i]; /* shallow: the strings stay s's */
	for (size_t a = 0; a < nt;) {
		size_t b = a + 1;
		while (b < nt && !strcmp(todo[b].path, todo[a].path))
			b++;
		if ((r = add_rule(&doc, seq, todo, a, b, o->pin, &nm, diag)) < 0)
			goto out;
		s->st.rules++;
		a = b;
	}

	yaml_emitter_t em;
	if (!yaml_emitter_initialize(&em)) {
		r = -ENOMEM;
		goto out;
	}
	yaml_emitter_set_output(&em, buf_write, &out);
	yaml_emitter_set_unicode(&em, 1);
	yaml_emitter_set_width(&em, 100);
	int ok = yaml_emitter_open(&em) && yaml_emitter_dump(&em, &doc) && yaml_emitter_close(&em);
	have_doc = false; /* yaml_emitter_dump took it */
	yaml_emitter_delete(&em);
	if (!ok || !out.p) {
		snprintf(diag->msg, sizeof(diag->msg), "cannot write the policy as YAML");
		r = -ENOMEM;
		goto out;
	}

	/* Our own check: the project's loader reads it back and every flow
	 * is allowed by a rule. */
	if ((r = load_resolved("suggested policy", out.p, out.n, o, &check, diag)) < 0) {
		if (r == -EINVAL)
			r = -EPROTO;
		goto out;
	}
	const struct network_policy *cnp = policy_section_data(check, "network");
	for (size_t i = 0; i < s->n_flows; i++) {
		int a = cnp ? allows(cnp, &s->flows[i]) : 0;
		if (a < 0) {
			r = a;
			goto out;
		}
		if (!a) {
			snprintf(diag->msg, sizeof(diag->msg), "internal: the suggested policy does not "
				 "allow %s -> %s:%u (audit line %u)", s->flows[i].path, s->flows[i].host,
				 s->flows[i].port, s->flows[i].line);
			r = -EPROTO;
			goto out;
		}
	}
	*yaml = out.p;
	*len = out.n;
	out.p = NULL;
	r = 0;
out:
	if (have_doc)
		yaml_document_delete(&doc);
	free(out.p);
	if (merge)
		policy_free(merge);
	if (check)
		policy_free(check);
	for (size_t i = 0; i < nm.n; i++)
		free(nm.v[i]);
	free(nm.v);
	return r;
}
