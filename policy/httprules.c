#include "policy/httprules.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "policy/network.h"

void netpol_http_rules_free(struct netpol_http_rules *r)
{
	for (size_t i = 0; r && i < r->n; i++) {
		free(r->rules[i].name);
		free(r->rules[i].method);
		free(r->rules[i].path);
	}
	if (r) {
		free(r->rules);
		r->rules = NULL;
		r->n = 0;
	}
}

int netpol_http_path(const char *target, char *out, size_t size)
{
	const char *p = target;
	if (strncasecmp(p, "http://", 7) == 0 || strncasecmp(p, "https://", 8) == 0) {
		p = strstr(p, "://") + 3;
		p = strchr(p, '/');
		if (!p)
			p = "/";
	}
	if (p[0] != '/')
		return -EINVAL;
	size_t n = strcspn(p, "?#");
	if (n >= size)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char ch = p[i];
		if (ch == '\\' || (unsigned char)ch < 0x21 || (unsigned char)ch >= 0x7f)
			return -EINVAL;
		if (ch == '%') {
			/* an encoded separator, dot, backslash or percent could
			 * mean a different path to the server than to the glob */
			if (i + 2 >= n)
				return -EINVAL;
			char h[3] = { p[i + 1], p[i + 2], 0 };
			if (strcasecmp(h, "2f") == 0 || strcasecmp(h, "2e") == 0 || strcasecmp(h, "5c") == 0 ||
			    strcasecmp(h, "25") == 0)
				return -EINVAL;
		}
		if (ch == '/' && i > 0 && p[i - 1] == '/')
			return -EINVAL; /* empty segment */
		if (ch == '.' && p[i - 1] == '/') {
			size_t k = i + 1;
			if (k < n && p[k] == '.')
				k++;
			if (k == n || p[k] == '/')
				return -EINVAL; /* "." or ".." segment */
		}
	}
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

struct netpol_http_decision netpol_http_decide(const struct netpol_http_rules *rules, const char *method,
					       const char *target, bool websocket)
{
	struct netpol_http_decision d = { .allow = true, .reason = REASON_ALLOWED };
	if (!rules || rules->n == 0)
		return d;
	char path[8192];
	const struct netpol_http_rule *allow = NULL, *deny = NULL, *ws_only = NULL;
	if (netpol_http_path(target, path, sizeof(path)) < 0) {
		d.allow = false;
		d.reason = REASON_HTTP_PATH_NOT_CANONICAL;
	} else {
		for (size_t i = 0; i < rules->n; i++) {
			const struct netpol_http_rule *r = &rules->rules[i];
			if (!netpol_path_match(r->method, method) || !netpol_path_match(r->path, path))
				continue;
			if (r->deny) {
				if (!deny)
					deny = r;
			} else if (websocket && !r->websocket) {
				if (!ws_only)
					ws_only = r;
			} else if (!allow) {
				allow = r;
			}
		}
		if (deny) {
			d.allow = false;
			d.reason = REASON_HTTP_RULE_DENY;
			d.rule = deny->name;
		} else if (allow) {
			d.rule = allow->name;
		} else {
			d.allow = false;
			d.reason = ws_only ? REASON_WEBSOCKET_NOT_ALLOWED : REASON_HTTP_NO_MATCHING_RULE;
			d.rule = ws_only ? ws_only->name : NULL;
		}
	}
	if (!d.allow && rules->audit) {
		d.allow = true;
		d.audit_mode = true;
	}
	return d;
}
