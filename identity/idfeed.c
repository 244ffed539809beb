/* idfeed: see idfeed.h. */
#include "identity/idfeed.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int dump_line(json_t *o, char **out, size_t *len)
{
	if (!o)
		return -ENOMEM;
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	size_t n = strlen(s);
	if (n + 1 > IDFEED_LINE_MAX) {
		free(s);
		return -E2BIG;
	}
	char *l = realloc(s, n + 2);
	if (!l) {
		free(s);
		return -ENOMEM;
	}
	l[n] = '\n';
	l[n + 1] = '\0';
	*out = l;
	*len = n + 1;
	return 0;
}

int idfeed_encode_due(uint64_t cookie, char **out, size_t *len)
{
	return dump_line(json_pack("{s:I}", "due", (json_int_t)cookie), out, len);
}

int idfeed_encode_no(uint64_t cookie, enum reason why, char **out, size_t *len)
{
	return dump_line(json_pack("{s:I,s:s}", "no", (json_int_t)cookie, "reason", reason_word(why)), out, len);
}

int idfeed_encode_id(uint64_t cookie, const struct flow_identity *id, char **out, size_t *len)
{
	json_t *anc = json_array();
	if (!anc)
		return -ENOMEM;
	for (size_t i = 0; i < id->n_ancestors; i++) {
		const struct flow_ancestor *a = &id->ancestors[i];
		if (json_array_append_new(anc, json_pack("{s:s,s:i,s:s}", "path", a->path ? a->path : "", "pid",
							 a->pid, "sha256", a->sha256)) < 0) {
			json_decref(anc);
			return -ENOMEM;
		}
	}
	return dump_line(json_pack("{s:I,s:i,s:s,s:s,s:s,s:o}", "id", (json_int_t)cookie, "pid", id->pid, "key",
				   id->process_key ? id->process_key : "", "path",
				   id->binary_path ? id->binary_path : "", "sha256", id->sha256, "anc", anc),
			 out, len);
}

static bool sha_ok(const char *s, bool empty_ok)
{
	size_t n = strlen(s);
	if (n == 0)
		return empty_ok;
	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* ---------- the encoders' own shape, read without building a JSON tree ----------
 *
 * Every worker of the net-supervisor reads every line of the feed (each has
 * its own subscription), so the reader is paid once per flow per worker.
 * fast_decode takes only a line of exactly the shape idfeed_encode_* write
 * (compact, keys in their order, strings of printable ASCII without escapes,
 * integers without sign, leading zero, fraction or exponent, short enough
 * not to overflow): for such a line jansson's reading (decode_json, the
 * authority) gives the same message, which the tests check. Anything else
 * (another key order, escapes, non-ASCII, whitespace, a malformed line) is
 * left to decode_json. Returns 1 (decoded, *out filled), 0 (not this shape;
 * *out untouched), -EINVAL (this shape, but a value the format refuses,
 * exactly as decode_json refuses it) or -ENOMEM. */
struct cur {
	const char *p, *e;
};

static bool lit(struct cur *c, const char *s, size_t n)
{
	if ((size_t)(c->e - c->p) < n || memcmp(c->p, s, n) != 0)
		return false;
	c->p += n;
	return true;
}
#define LIT(c, s) lit(c, s, sizeof(s) - 1)

static bool uint_tok(struct cur *c, size_t maxdig, uint64_t *v)
{
	const char *s = c->p;
	uint64_t x = 0;
	while (c->p < c->e && *c->p >= '0' && *c->p <= '9' && (size_t)(c->p - s) < maxdig)
		x = x * 10 + (uint64_t)(*c->p++ - '0');
	size_t n = (size_t)(c->p - s);
	if (n == 0 || (n > 1 && *s == '0') || (c->p < c->e && *c->p >= '0' && *c->p <= '9'))
		return false;
	*v = x;
	return true;
}

static bool str_tok(struct cur *c, const char **s, size_t *n)
{
	if (c->p >= c->e || *c->p != '"')
		return false;
	const char *b = ++c->p;
	while (c->p < c->e && *c->p != '"') {
		unsigned char ch = (unsigned char)*c->p;
		if (ch < 0x20 || ch > 0x7e || ch == '\\')
			return false;
		c->p++;
	}
	if (c->p >= c->e)
		return false;
	*s = b;
	*n = (size_t)(c->p++ - b);
	return true;
}

/* a 64-hex (or, empty_ok, empty) digest into sha[65]: false otherwise */
static bool sha_tok(const char *s, size_t n, bool empty_ok, char sha[65])
{
	if (n != 64 && !(n == 0 && empty_ok))
		return false;
	memcpy(sha, s, n);
	sha[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

#define COOKIE_DIGITS 18 /* < 2^63: what json_int_t reads the same */
#define PID_DIGITS 9     /* fits an int */

struct anc_tok {
	const char *path, *sha;
	size_t pl, sl;
	uint64_t pid;
};

/* {"path":"...","pid":N,"sha256":"..."} */
static bool anc_tok(struct cur *c, struct anc_tok *t)
{
	return LIT(c, "{\"path\":") && str_tok(c, &t->path, &t->pl) && LIT(c, ",\"pid\":") &&
	       uint_tok(c, PID_DIGITS, &t->pid) && LIT(c, ",\"sha256\":") && str_tok(c, &t->sha, &t->sl) &&
	       LIT(c, "}");
}

static int fast_id(struct cur *c, uint64_t cookie, struct idfeed_msg *out)
{
	uint64_t pid;
	const char *key, *path, *sha;
	size_t kl, pl, sl;
	char hex[65];
	if (!LIT(c, ",\"pid\":") || !uint_tok(c, PID_DIGITS, &pid) || !LIT(c, ",\"key\":") || !str_tok(c, &key, &kl) ||
	    !LIT(c, ",\"path\":") || !str_tok(c, &path, &pl) || !LIT(c, ",\"sha256\":") || !str_tok(c, &sha, &sl) ||
	    !LIT(c, ",\"anc\":["))
		return 0;
	/* the ancestors' shape first: nothing allocated for a line left to jansson */
	struct cur a = *c;
	size_t n_anc = 0;
	bool anc_ok = true;
	if (!LIT(&a, "]")) {
		do {
			struct anc_tok t;
			if (!anc_tok(&a, &t))
				return 0;
			anc_ok = anc_ok && sha_tok(t.sha, t.sl, true, hex);
			n_anc++;
		} while (LIT(&a, ","));
		if (!LIT(&a, "]"))
			return 0;
	}
	if (!LIT(&a, "}") || a.p != a.e)
		return 0;
	/* the shape is the encoders': the values' checks, as decode_json's */
	if (!anc_ok || !sha_tok(sha, sl, false, hex) || kl == 0 || pl == 0 || pid == 0)
		return -EINVAL;
	struct flow_identity *id = flow_identity_new();
	if (!id)
		return -ENOMEM;
	id->source = FLOW_SOURCE_LOCAL_PROCFS;
	id->pid = (int)pid;
	memcpy(id->sha256, hex, 65);
	if (!(id->binary_path = strndup(path, pl)) || !(id->process_key = strndup(key, kl)))
		goto oom;
	if (n_anc && !(id->ancestors = calloc(n_anc, sizeof(*id->ancestors))))
		goto oom;
	if (n_anc) {
		do {
			struct anc_tok t;
			if (!anc_tok(c, &t) || id->n_ancestors == n_anc) { /* read whole above: never */
				flow_identity_free(id);
				return -EINVAL;
			}
			struct flow_ancestor *an = &id->ancestors[id->n_ancestors];
			if (!(an->path = strndup(t.path, t.pl)))
				goto oom;
			an->pid = (int)t.pid;
			(void)sha_tok(t.sha, t.sl, true, an->sha256);
			id->n_ancestors++;
		} while (LIT(c, ","));
	}
	out->kind = IDFEED_ID;
	out->cookie = cookie;
	out->id = id;
	return 1;
oom:
	flow_identity_free(id);
	return -ENOMEM;
}

static int fast_decode(const char *line, size_t len, struct idfeed_msg *out)
{
	struct cur c = { line, line + len };
	uint64_t cookie;
	if (LIT(&c, "{\"due\":")) {
		if (!uint_tok(&c, COOKIE_DIGITS, &cookie) || !LIT(&c, "}") || c.p != c.e)
			return 0;
		out->kind = IDFEED_DUE;
		out->cookie = cookie;
		return 1;
	}
	if (LIT(&c, "{\"no\":")) {
		const char *w;
		size_t wl;
		char word[64];
		if (!uint_tok(&c, COOKIE_DIGITS, &cookie) || !LIT(&c, ",\"reason\":") || !str_tok(&c, &w, &wl) ||
		    !LIT(&c, "}") || c.p != c.e || wl >= sizeof(word))
			return 0;
		memcpy(word, w, wl);
		word[wl] = '\0';
		out->kind = IDFEED_NO;
		out->cookie = cookie;
		out->reason = reason_from_word(word);
		if (out->reason == REASON_OK || out->reason >= REASON__COUNT)
			out->reason = REASON_IDENTITY_UNAVAILABLE;
		return 1;
	}
	if (LIT(&c, "{\"id\":")) {
		if (!uint_tok(&c, COOKIE_DIGITS, &cookie))
			return 0;
		return fast_id(&c, cookie, out);
	}
	return 0;
}

int idfeed_decode(const char *line, size_t len, struct idfeed_msg *out)
{
	memset(out, 0, sizeof(*out));
	int r = fast_decode(line, len, out);
	if (r == 1)
		return 0;
	if (r < 0)
		return r;
	return idfeed_decode_json(line, len, out);
}

int idfeed_decode_json(const char *line, size_t len, struct idfeed_msg *out)
{
	memset(out, 0, sizeof(*out));
	json_error_t err;
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
	if (!o || !json_is_object(o)) {
		json_decref(o);
		return -EINVAL;
	}
	int r = -EINVAL;
	json_t *v;
	json_int_t c;
	if ((v = json_object_get(o, "due"))) {
		if (json_object_size(o) != 1 || !json_is_integer(v))
			goto done;
		out->kind = IDFEED_DUE;
		out->cookie = (uint64_t)json_integer_value(v);
		r = 0;
	} else if ((v = json_object_get(o, "no"))) {
		const char *word;
		if (json_unpack(o, "{s:I,s:s!}", "no", &c, "reason", &word) < 0)
			goto done;
		out->kind = IDFEED_NO;
		out->cookie = (uint64_t)c;
		out->reason = reason_from_word(word);
		if (out->reason == REASON_OK || out->reason >= REASON__COUNT)
			out->reason = REASON_IDENTITY_UNAVAILABLE;
		r = 0;
	} else if ((v = json_object_get(o, "id"))) {
		int pid;
		const char *key, *path, *sha;
		json_t *anc;
		if (json_unpack(o, "{s:I,s:i,s:s,s:s,s:s,s:o!}", "id", &c, "pid", &pid, "key", &key, "path", &path,
				"sha256", &sha, "anc", &anc) < 0 ||
		    !json_is_array(anc) || !sha_ok(sha, false) || !key[0] || !path[0] || pid <= 0)
			goto done;
		struct flow_identity *id = flow_identity_new();
		if (!id) {
			r = -ENOMEM;
			goto done;
		}
		id->source = FLOW_SOURCE_LOCAL_PROCFS;
		id->pid = pid;
		memcpy(id->sha256, sha, 65);
		id->binary_path = strdup(path);
		id->process_key = strdup(key);
		if (!id->binary_path || !id->process_key) {
			flow_identity_free(id);
			r = -ENOMEM;
			goto done;
		}
		size_t i;
		json_t *a;
		json_array_foreach(anc, i, a) {
			const char *ap, *ash;
			int apid;
			if (json_unpack(a, "{s:s,s:i,s:s!}", "path", &ap, "pid", &apid, "sha256", &ash) < 0 ||
			    !sha_ok(ash, true) || flow_identity_add_ancestor(id, ap, apid, ash) < 0) {
				flow_identity_free(id);
				goto done;
			}
		}
		out->kind = IDFEED_ID;
		out->cookie = (uint64_t)c;
		out->id = id;
		r = 0;
	}
done:
	json_decref(o);
	return r;
}

void idfeed_msg_release(struct idfeed_msg *m)
{
	if (m && m->id) {
		flow_identity_free(m->id);
		m->id = NULL;
	}
}
