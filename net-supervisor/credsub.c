#include "net-supervisor/credsub.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#define PFX_LEN (sizeof(CREDSUB_PREFIX) - 1)
#define SECRET_MAX 8192

bool credsub_secret_ok(const char *s, size_t len)
{
	if (len == 0 || len > SECRET_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
			return false;
	return true;
}

static bool name_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
	       c == '.' || c == '-';
}

/* A header name: RFC 9110 token characters only. */
static bool token(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!name_char(s[i]) && (s[i] == '\0' || !strchr("!#$%&'*+^`|~", s[i])))
			return false;
	return true;
}

static bool strcasestr_n(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	for (size_t i = 0; i + k <= n; i++)
		if (strncasecmp(s + i, needle, k) == 0)
			return true;
	return false;
}

struct buf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

/* Substitute every placeholder of s[0..n) into out. CREDSUB_OK or
 * CREDSUB_REFUSED (res->refused set). */
static int swap(const char *s, size_t n, const struct credsub_cred *creds, size_t n_creds,
		credsub_permitted_fn permitted, void *ctx, struct buf *out, struct credsub_result *res)
{
	size_t i = 0;
	while (i < n) {
		const char *hit = NULL;
		for (size_t k = i; k + PFX_LEN <= n; k++)
			if (memcmp(s + k, CREDSUB_PREFIX, PFX_LEN) == 0) {
				hit = s + k;
				break;
			}
		if (!hit) {
			put(out, s + i, n - i);
			return CREDSUB_OK;
		}
		put(out, s + i, (size_t)(hit - (s + i)));
		size_t at = (size_t)(hit - s) + PFX_LEN, nl = 0;
		while (at + nl < n && name_char(s[at + nl]))
			nl++;
		const struct credsub_cred *c = NULL;
		for (size_t j = 0; j < n_creds && nl; j++)
			if (strlen(creds[j].name) == nl && memcmp(creds[j].name, s + at, nl) == 0)
				c = &creds[j];
		if (!c || !permitted(ctx, c)) {
			size_t m = nl < CREDSUB_NAME_MAX ? nl : CREDSUB_NAME_MAX;
			memcpy(res->refused, s + at, m);
			res->refused[m] = '\0';
			res->refused_unknown = c == NULL;
			return CREDSUB_REFUSED;
		}
		put(out, c->secret, strlen(c->secret));
		res->n_swapped++;
		i = at + nl;
	}
	return CREDSUB_OK;
}

/* An `Authorization: Basic B64` value whose decoded USER:PASSWORD holds a
 * placeholder: substituted there and encoded again. 1 when handled, 0 when
 * the value is not such a one. */
static int swap_basic(const char *v, size_t vn, const struct credsub_cred *creds, size_t n_creds,
		      credsub_permitted_fn permitted, void *ctx, struct buf *out, struct credsub_result *res,
		      int *rc)
{
	if (vn < 6 || strncasecmp(v, "Basic ", 6) != 0)
		return 0;
	const char *b64 = v + 6;
	size_t bn = vn - 6;
	while (bn && (b64[bn - 1] == ' ' || b64[bn - 1] == '\t'))
		bn--;
	unsigned char dec[SECRET_MAX];
	size_t dn = 0;
	if (bn == 0 || bn > sizeof(dec) ||
	    sodium_base642bin(dec, sizeof(dec), b64, bn, NULL, &dn, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    !memmem(dec, dn, CREDSUB_PREFIX, PFX_LEN))
		return 0;
	struct buf plain = { 0 };
	*rc = swap((const char *)dec, dn, creds, n_creds, permitted, ctx, &plain, res);
	sodium_memzero(dec, sizeof(dec));
	if (*rc == CREDSUB_OK && !plain.oom) {
		size_t el = sodium_base64_encoded_len(plain.len, sodium_base64_VARIANT_ORIGINAL);
		char *enc = malloc(el);
		if (!enc) {
			out->oom = true;
		} else {
			sodium_bin2base64(enc, el, (const unsigned char *)(plain.p ? plain.p : ""), plain.len,
					  sodium_base64_VARIANT_ORIGINAL);
			put(out, "Basic ", 6);
			put(out, enc, strlen(enc));
			sodium_memzero(enc, el);
			free(enc);
		}
	}
	out->oom |= plain.oom;
	if (plain.p)
		sodium_memzero(plain.p, plain.cap);
	free(plain.p);
	return 1;
}

int credsub_head(const char *head, size_t len, const struct credsub_cred *creds, size_t n_creds,
		 credsub_permitted_fn permitted, void *ctx, struct credsub_result *res)
{
	memset(res, 0, sizeof(*res));
	if (len < 4 || memcmp(head + len - 4, "\r\n\r\n", 4) != 0)
		return -EINVAL;
	/* the credentials the proxy sets on this request (at most 64 do) */
	bool inject[64] = { false };
	bool any_inject = false;
	for (size_t j = 0; j < n_creds && j < 64; j++)
		if (creds[j].header && permitted(ctx, &creds[j]))
			any_inject = inject[j] = true;
	if (!any_inject && !memmem(head, len, CREDSUB_PREFIX, PFX_LEN) &&
	    !strcasestr_n(head, len, "\nauthorization:"))
		return CREDSUB_OK; /* the common case: nothing to do */
	const char *eol = memmem(head, len, "\r\n", 2);
	struct buf out = { 0 };
	size_t line_end = (size_t)(eol - head) + 2;
	put(&out, head, line_end); /* the request line, unchanged */
	size_t i = line_end;
	int rc = CREDSUB_OK;
	while (i < len - 2 && rc == CREDSUB_OK) {
		const char *e = memmem(head + i, len - i, "\r\n", 2);
		size_t ln = (size_t)(e - (head + i));
		const char *line = head + i;
		if (memchr(line, '\r', ln) || memchr(line, '\n', ln) || memchr(line, '\0', ln)) {
			rc = -EINVAL; /* a bare CR, LF or NUL: not a header line we can rewrite */
			break;
		}
		const char *colon = memchr(line, ':', ln);
		if (!colon || colon == line || !token(line, (size_t)(colon - line))) {
			rc = -EINVAL;
			break;
		}
		size_t vstart = (size_t)(colon - line) + 1;
		while (vstart < ln && (line[vstart] == ' ' || line[vstart] == '\t'))
			vstart++;
		bool ours = false;
		for (size_t j = 0; j < n_creds && j < 64 && !ours; j++)
			ours = inject[j] && strlen(creds[j].header) == (size_t)(colon - line) &&
			       strncasecmp(creds[j].header, line, (size_t)(colon - line)) == 0;
		if (ours) { /* the proxy's value replaces the client's */
			i += ln + 2;
			continue;
		}
		put(&out, line, vstart);
		bool authz = (size_t)(colon - line) == 13 && strncasecmp(line, "Authorization", 13) == 0;
		if (!(authz && swap_basic(line + vstart, ln - vstart, creds, n_creds, permitted, ctx, &out, res, &rc)))
			rc = swap(line + vstart, ln - vstart, creds, n_creds, permitted, ctx, &out, res);
		put(&out, "\r\n", 2);
		i += ln + 2;
	}
	for (size_t j = 0; rc == CREDSUB_OK && j < n_creds && j < 64; j++) {
		if (!inject[j])
			continue;
		const char *f = creds[j].format ? creds[j].format : "{}", *at = strstr(f, "{}");
		put(&out, creds[j].header, strlen(creds[j].header));
		put(&out, ": ", 2);
		if (!at) {
			rc = -EINVAL; /* the policy guarantees one */
			break;
		}
		put(&out, f, (size_t)(at - f));
		put(&out, creds[j].secret, strlen(creds[j].secret));
		put(&out, at + 2, strlen(at + 2));
		put(&out, "\r\n", 2);
		res->n_swapped++;
	}
	if (rc == CREDSUB_OK)
		put(&out, "\r\n", 2);
	if (out.oom)
		rc = -ENOMEM;
	if (rc != CREDSUB_OK || res->n_swapped == 0) {
		if (out.p)
			sodium_memzero(out.p, out.cap);
		free(out.p);
		res->n_swapped = rc == CREDSUB_OK ? 0 : res->n_swapped;
		return rc;
	}
	res->head = out.p;
	res->head_len = out.len;
	return CREDSUB_OK;
}

void credsub_result_done(struct credsub_result *res)
{
	if (res->head) {
		sodium_memzero(res->head, res->head_len);
		free(res->head);
	}
	res->head = NULL;
}
