/* YAML → struct pnode with libyaml's event API, plus the typed accessors
 * every section parser uses. Only the YAML subset a policy needs is
 * accepted: one document, maps, sequences, scalars; no aliases (no
 * billion-laughs), no anchors, no tags. Sizes and depth are bounded so the
 * parser is safe on hostile input. */
#include "policy/policy_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "common/util.h"

enum policy_layer pctx_layer(const struct pctx *ctx) { return ctx->layer; }
const char *pctx_file(const struct pctx *ctx) { return ctx->file; }
bool pctx_immutable(const struct pctx *ctx) { return ctx->immutable; }

__attribute__((format(printf, 6, 0)))
static void vformat_at(char *out, size_t size, const char *file, unsigned line, unsigned col,
		       const char *fmt, va_list ap)
{
	int n = snprintf(out, size, "%s:%u:%u: ", file, line, col);
	if (n < 0 || (size_t)n >= size)
		return;
	vsnprintf(out + n, size - (size_t)n, fmt, ap);
}

int pnode_error(struct pctx *ctx, const struct pnode *node, const char *fmt, ...)
{
	if (ctx->diag && !ctx->diag->msg[0]) {
		va_list ap;
		va_start(ap, fmt);
		vformat_at(ctx->diag->msg, sizeof(ctx->diag->msg), ctx->file,
			   node ? node->line : 1, node ? node->col : 1, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

void pnode_warn(struct pctx *ctx, const struct pnode *node, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vformat_at(msg, sizeof(msg), ctx->file, node ? node->line : 1, node ? node->col : 1, fmt, ap);
	va_end(ap);
	if (ctx->policy)
		(void)policy_add_warning(ctx->policy, msg);
}

void pnode_printable(const char *s, size_t len, char *out, size_t size)
{
	size_t o = 0;
	for (size_t i = 0; i < len && o + 4 < size; i++) {
		if (o >= 64) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		unsigned char c = (unsigned char)s[i];
		out[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	out[o] = '\0';
}

void pnode_free(struct pnode *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n; i++) {
		if (n->keys)
			pnode_free(n->keys[i]);
		pnode_free(n->vals[i]);
	}
	free(n->keys);
	free(n->vals);
	free(n->str);
	free(n);
}

static const char *kind_name(enum pnode_kind k)
{
	switch (k) {
	case PNODE_MAP:
		return "a mapping";
	case PNODE_SEQ:
		return "a sequence";
	default:
		return "a scalar";
	}
}

/* ── tree building ───────────────────────────────────────────────────────── */

struct frame {
	struct pnode *node;
	struct pnode *pending_key; /* map: key seen, value not yet */
	size_t cap;
};

static struct pnode *node_new(enum pnode_kind kind, const yaml_mark_t *m)
{
	struct pnode *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->kind = kind;
	n->line = (unsigned)m->line + 1;
	n->col = (unsigned)m->column + 1;
	return n;
}

static int append(struct frame *f, struct pnode *key, struct pnode *val)
{
	struct pnode *p = f->node;
	if (p->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 4;
		struct pnode **v = realloc(p->vals, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		p->vals = v;
		if (p->kind == PNODE_MAP) {
			struct pnode **k = realloc(p->keys, cap * sizeof(*k));
			if (!k)
				return -ENOMEM;
			p->keys = k;
		}
		f->cap = cap;
	}
	if (p->kind == PNODE_MAP)
		p->keys[p->n] = key;
	p->vals[p->n++] = val;
	return 0;
}

/* Attach a new node to the open container (or make it the root). On error
 * the node is freed. */
static int attach(struct pctx *ctx, struct frame *stack, size_t depth, struct pnode **root,
		  struct pnode *n)
{
	if (depth == 0) {
		*root = n;
		return 0;
	}
	struct frame *f = &stack[depth - 1];
	if (f->node->kind == PNODE_SEQ) {
		if (append(f, NULL, n) < 0) {
			pnode_free(n);
			return -ENOMEM;
		}
		return 0;
	}
	if (!f->pending_key) {
		if (n->kind != PNODE_SCALAR) {
			int r = pnode_error(ctx, n, "mapping keys must be scalars, not %s",
					    kind_name(n->kind));
			pnode_free(n);
			return r;
		}
		if (f->node->n >= POLICY_MAX_MAP_KEYS) {
			int r = pnode_error(ctx, n, "too many keys in one mapping (limit %u)",
					    POLICY_MAX_MAP_KEYS);
			pnode_free(n);
			return r;
		}
		for (size_t i = 0; i < f->node->n; i++) {
			const struct pnode *k = f->node->keys[i];
			if (k->len == n->len && memcmp(k->str, n->str, n->len) == 0) {
				char pk[80];
				pnode_printable(n->str, n->len, pk, sizeof(pk));
				int r = pnode_error(ctx, n, "duplicate key '%s' (first at line %u, column %u)",
						    pk, k->line, k->col);
				pnode_free(n);
				return r;
			}
		}
		f->pending_key = n;
		return 0;
	}
	struct pnode *key = f->pending_key;
	f->pending_key = NULL;
	if (append(f, key, n) < 0) {
		pnode_free(key);
		pnode_free(n);
		return -ENOMEM;
	}
	return 0;
}

static int syntax_error(struct pctx *ctx, const yaml_parser_t *p)
{
	if (p->error == YAML_MEMORY_ERROR) {
		if (ctx->diag && !ctx->diag->msg[0])
			snprintf(ctx->diag->msg, sizeof(ctx->diag->msg), "%s:1:1: out of memory",
				 ctx->file);
		return -ENOMEM;
	}
	struct pnode at = { .line = (unsigned)p->problem_mark.line + 1,
			    .col = (unsigned)p->problem_mark.column + 1 };
	if (p->context)
		return pnode_error(ctx, &at, "YAML syntax error: %s %s",
				   p->problem ? p->problem : "invalid input", p->context);
	return pnode_error(ctx, &at, "YAML syntax error: %s", p->problem ? p->problem : "invalid input");
}

int pnode_parse(struct pctx *ctx, const char *buf, size_t len, struct pnode **out)
{
	*out = NULL;
	if (len > POLICY_MAX_FILE_SIZE)
		return pnode_error(ctx, NULL, "policy file too large (%zu bytes, limit %u)", len,
				   POLICY_MAX_FILE_SIZE);
	yaml_parser_t p;
	if (!yaml_parser_initialize(&p))
		return -ENOMEM;
	yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);

	struct frame stack[POLICY_MAX_DEPTH];
	size_t depth = 0, nodes = 0;
	unsigned docs = 0;
	struct pnode *root = NULL;
	int r = 0;
	bool done = false;

	while (!done && r == 0) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&p, &ev)) {
			r = syntax_error(ctx, &p);
			break;
		}
		struct pnode at = { .line = (unsigned)ev.start_mark.line + 1,
				    .col = (unsigned)ev.start_mark.column + 1 };
		struct pnode *n = NULL;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++docs > 1)
				r = pnode_error(ctx, &at, "only one YAML document is allowed in a policy file");
			break;
		case YAML_ALIAS_EVENT:
			r = pnode_error(ctx, &at, "YAML aliases are not supported in policy files");
			break;
		case YAML_SCALAR_EVENT:
			if (ev.data.scalar.anchor) {
				r = pnode_error(ctx, &at, "YAML anchors are not supported in policy files");
				break;
			}
			if (ev.data.scalar.tag && !ev.data.scalar.plain_implicit &&
			    !ev.data.scalar.quoted_implicit) {
				r = pnode_error(ctx, &at, "YAML tags are not supported in policy files");
				break;
			}
			if (++nodes > POLICY_MAX_NODES) {
				r = pnode_error(ctx, &at, "too many nodes (limit %u)", POLICY_MAX_NODES);
				break;
			}
			n = node_new(PNODE_SCALAR, &ev.start_mark);
			if (n)
				n->str = malloc(ev.data.scalar.length + 1);
			if (!n || !n->str) {
				pnode_free(n);
				r = -ENOMEM;
				break;
			}
			memcpy(n->str, ev.data.scalar.value, ev.data.scalar.length);
			n->str[ev.data.scalar.length] = '\0';
			n->len = ev.data.scalar.length;
			n->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
			r = attach(ctx, stack, depth, &root, n);
			break;
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT: {
			bool map = ev.type == YAML_MAPPING_START_EVENT;
			const yaml_char_t *anchor = map ? ev.data.mapping_start.anchor
							: ev.data.sequence_start.anchor;
			const yaml_char_t *tag = map ? ev.data.mapping_start.tag : ev.data.sequence_start.tag;
			int implicit = map ? ev.data.mapping_start.implicit : ev.data.sequence_start.implicit;
			if (anchor) {
				r = pnode_error(ctx, &at, "YAML anchors are not supported in policy files");
				break;
			}
			if (tag && !implicit) {
				r = pnode_error(ctx, &at, "YAML tags are not supported in policy files");
				break;
			}
			if (depth >= POLICY_MAX_DEPTH) {
				r = pnode_error(ctx, &at, "nesting too deep (limit %u)", POLICY_MAX_DEPTH);
				break;
			}
			if (++nodes > POLICY_MAX_NODES) {
				r = pnode_error(ctx, &at, "too many nodes (limit %u)", POLICY_MAX_NODES);
				break;
			}
			n = node_new(map ? PNODE_MAP : PNODE_SEQ, &ev.start_mark);
			if (!n) {
				r = -ENOMEM;
				break;
			}
			r = attach(ctx, stack, depth, &root, n);
			if (r == 0)
				stack[depth++] = (struct frame){ .node = n };
			break;
		}
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			/* libyaml guarantees balance; the check keeps a bug from
			 * becoming an out-of-bounds read. */
			if (depth == 0)
				r = pnode_error(ctx, &at, "unbalanced YAML structure");
			else
				depth--;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	/* Pending keys of still-open maps (only on error) are not yet owned by
	 * the tree. */
	for (size_t i = 0; i < depth; i++)
		pnode_free(stack[i].pending_key);
	yaml_parser_delete(&p);
	if (r < 0) {
		pnode_free(root);
		if (r == -ENOMEM && ctx->diag && !ctx->diag->msg[0])
			snprintf(ctx->diag->msg, sizeof(ctx->diag->msg), "%s:1:1: out of memory", ctx->file);
		return r;
	}
	*out = root;
	return 0;
}

/* ── accessors ───────────────────────────────────────────────────────────── */

const struct pnode *pmap_get(const struct pnode *map, const char *key)
{
	if (!map || map->kind != PNODE_MAP)
		return NULL;
	size_t kl = strlen(key);
	for (size_t i = 0; i < map->n; i++)
		if (map->keys[i]->len == kl && memcmp(map->keys[i]->str, key, kl) == 0)
			return map->vals[i];
	return NULL;
}

int pmap_check_keys(struct pctx *ctx, const struct pnode *map, const char *what,
		    const char *const *allowed)
{
	if (!map || map->kind != PNODE_MAP)
		return 0;
	for (size_t i = 0; i < map->n; i++) {
		const struct pnode *k = map->keys[i];
		bool ok = false;
		for (size_t j = 0; allowed[j]; j++)
			if (strlen(allowed[j]) == k->len && memcmp(allowed[j], k->str, k->len) == 0)
				ok = true;
		if (ok)
			continue;
		char list[512] = "", pk[80];
		size_t o = 0;
		for (size_t j = 0; allowed[j] && o < sizeof(list); j++) {
			int w = snprintf(list + o, sizeof(list) - o, "%s%s", j ? ", " : "", allowed[j]);
			if (w < 0)
				break;
			o += (size_t)w;
		}
		pnode_printable(k->str, k->len, pk, sizeof(pk));
		return pnode_error(ctx, k, "unknown key '%s' in %s (expected one of: %s)", pk, what, list);
	}
	return 0;
}

static int expect_kind(struct pctx *ctx, const struct pnode *n, const char *what,
		       enum pnode_kind kind)
{
	if (n->kind == kind)
		return 0;
	return pnode_error(ctx, n, "%s: expected %s, got %s", what, kind_name(kind), kind_name(n->kind));
}

int pnode_expect_map(struct pctx *ctx, const struct pnode *n, const char *what)
{
	return expect_kind(ctx, n, what, PNODE_MAP);
}

int pnode_expect_seq(struct pctx *ctx, const struct pnode *n, const char *what)
{
	return expect_kind(ctx, n, what, PNODE_SEQ);
}

static bool plain_is(const struct pnode *n, const char *const *words)
{
	if (!n->plain)
		return false;
	for (size_t i = 0; words[i]; i++)
		if (strcmp(n->str, words[i]) == 0 && strlen(words[i]) == n->len)
			return true;
	return false;
}

static const char *const null_words[] = { "", "~", "null", "Null", "NULL", NULL };
static const char *const true_words[] = { "true", "True", "TRUE", NULL };
static const char *const false_words[] = { "false", "False", "FALSE", NULL };

int pnode_expect_string(struct pctx *ctx, const struct pnode *n, const char *what, const char **out)
{
	int r = expect_kind(ctx, n, what, PNODE_SCALAR);
	if (r < 0)
		return r;
	if (plain_is(n, null_words))
		return pnode_error(ctx, n, "%s: expected a string, got null", what);
	if (plain_is(n, true_words) || plain_is(n, false_words))
		return pnode_error(ctx, n, "%s: expected a string, got a boolean (quote it if you mean the word)",
				   what);
	if (memchr(n->str, '\0', n->len))
		return pnode_error(ctx, n, "%s: NUL byte in string", what);
	*out = n->str;
	return 0;
}

int pnode_expect_bool(struct pctx *ctx, const struct pnode *n, const char *what, bool *out)
{
	int r = expect_kind(ctx, n, what, PNODE_SCALAR);
	if (r < 0)
		return r;
	if (plain_is(n, true_words))
		*out = true;
	else if (plain_is(n, false_words))
		*out = false;
	else
		return pnode_error(ctx, n, "%s: expected true or false", what);
	return 0;
}

int pnode_expect_uint(struct pctx *ctx, const struct pnode *n, const char *what, uint64_t max,
		      uint64_t *out)
{
	int r = expect_kind(ctx, n, what, PNODE_SCALAR);
	if (r < 0)
		return r;
	if (!n->plain || n->len == 0 || n->len > 20)
		return pnode_error(ctx, n, "%s: expected an unsigned integer", what);
	uint64_t v = 0;
	for (size_t i = 0; i < n->len; i++) {
		char c = n->str[i];
		if (c < '0' || c > '9')
			return pnode_error(ctx, n, "%s: expected an unsigned integer", what);
		unsigned d = (unsigned)(c - '0');
		if (v > (UINT64_MAX - d) / 10)
			return pnode_error(ctx, n, "%s: integer out of range (max %llu)", what,
					   (unsigned long long)max);
		v = v * 10 + d;
	}
	if (v > max)
		return pnode_error(ctx, n, "%s: %llu is out of range (max %llu)", what,
				   (unsigned long long)v, (unsigned long long)max);
	*out = v;
	return 0;
}

int pnode_expect_enum(struct pctx *ctx, const struct pnode *n, const char *what,
		      const char *const *words, int *out)
{
	const char *s;
	int r = pnode_expect_string(ctx, n, what, &s);
	if (r < 0)
		return r;
	for (int i = 0; words[i]; i++)
		if (strcmp(words[i], s) == 0) {
			*out = i;
			return 0;
		}
	char list[512] = "", ps[80];
	size_t o = 0;
	for (size_t j = 0; words[j] && o < sizeof(list); j++) {
		int w = snprintf(list + o, sizeof(list) - o, "%s%s", j ? ", " : "", words[j]);
		if (w < 0)
			break;
		o += (size_t)w;
	}
	pnode_printable(n->str, n->len, ps, sizeof(ps));
	return pnode_error(ctx, n, "%s: unknown value '%s' (expected one of: %s)", what, ps, list);
}

int pnode_expect_abspath(struct pctx *ctx, const struct pnode *n, const char *what, const char **out)
{
	const char *s;
	int r = pnode_expect_string(ctx, n, what, &s);
	if (r < 0)
		return r;
	if (s[0] != '/')
		return pnode_error(ctx, n, "%s: expected an absolute path", what);
	for (const char *c = s; *c; c++) {
		if (c[0] == '.' && c[1] == '.' && (c == s || c[-1] == '/') && (c[2] == '/' || c[2] == 0))
			return pnode_error(ctx, n, "%s: '..' is not allowed in paths", what);
		if ((unsigned char)*c < 0x20)
			return pnode_error(ctx, n, "%s: control character in path", what);
	}
	if (n->len >= 4096)
		return pnode_error(ctx, n, "%s: path too long", what);
	*out = s;
	return 0;
}

char *pnode_strdup(struct pctx *ctx, const struct pnode *n)
{
	char *s = malloc(n->len + 1);
	if (!s) {
		if (ctx->diag && !ctx->diag->msg[0])
			snprintf(ctx->diag->msg, sizeof(ctx->diag->msg), "%s:%u:%u: out of memory",
				 ctx->file, n->line, n->col);
		return NULL;
	}
	memcpy(s, n->str, n->len);
	s[n->len] = '\0';
	return s;
}
