#include "common/upstream_proxy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

/* ---------- parsing ---------- */

int upstream_parse_url(const char *url, char *host, size_t host_size, uint16_t *port, char *err,
		       size_t err_size)
{
	static const char scheme[] = "http://";
	if (strncasecmp(url, scheme, sizeof(scheme) - 1) != 0)
		return err_set(err, err_size, -EINVAL, "'%s': expected http://HOST:PORT (only http:// proxies)", url);
	const char *p = url + sizeof(scheme) - 1;
	size_t n = strcspn(p, "/?#");
	if (p[n] && strcmp(p + n, "/") != 0)
		return err_set(err, err_size, -EINVAL, "'%s': no path in a proxy URL, expected http://HOST:PORT", url);
	char auth[300];
	if (n == 0 || n >= sizeof(auth))
		return err_set(err, err_size, -EINVAL, "'%s': expected http://HOST:PORT", url);
	memcpy(auth, p, n);
	auth[n] = 0;
	if (strchr(auth, '@'))
		return err_set(err, err_size, -EINVAL,
			    "'%s': no credentials in the URL (they would show in process listings); "
			    "use --upstream-proxy-auth-file", url);
	char *colon;
	char *h = auth;
	if (auth[0] == '[') {
		char *close = strchr(auth, ']');
		if (!close || close[1] != ':')
			return err_set(err, err_size, -EINVAL, "'%s': expected http://[V6ADDR]:PORT", url);
		*close = 0;
		h = auth + 1;
		colon = close + 1;
		struct netaddr a;
		if (netaddr_parse(h, &a) < 0 || a.family != AF_INET6)
			return err_set(err, err_size, -EINVAL, "'%s': '%s' is not an IPv6 address", url, h);
	} else {
		colon = strrchr(auth, ':');
		if (!colon)
			return err_set(err, err_size, -EINVAL, "'%s': the port is required (http://HOST:PORT)", url);
		*colon = 0;
		for (const char *q = h; *q; q++)
			if (!isalnum((unsigned char)*q) && *q != '-' && *q != '.' && *q != '_')
				return err_set(err, err_size, -EINVAL, "'%s': bad host name '%s'", url, h);
	}
	if (!h[0])
		return err_set(err, err_size, -EINVAL, "'%s': empty host", url);
	const char *ps = colon + 1;
	char *end;
	errno = 0;
	unsigned long v = strtoul(ps, &end, 10);
	if (!*ps || *end || errno || v == 0 || v > 65535 || !isdigit((unsigned char)ps[0]))
		return err_set(err, err_size, -EINVAL, "'%s': the port must be 1-65535", url);
	if (strlen(h) >= host_size)
		return err_set(err, err_size, -EINVAL, "'%s': host too long", url);
	strcpy(host, h);
	*port = (uint16_t)v;
	return 0;
}

static void lower_name(char *s)
{
	for (; *s; s++)
		*s = (char)tolower((unsigned char)*s);
}

/* Only characters a host name (or a request line) may carry. */
static bool name_chars_ok(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.' && *s != '_')
			return false;
	return true;
}

/* A list entry's name: those characters in non-empty dot-separated labels
 * (no leading, trailing or double dot), so it can match a name. */
static bool valid_name(const char *s)
{
	return name_chars_ok(s) && s[0] != '.' && s[strlen(s) - 1] != '.' && !strstr(s, "..");
}

int upstream_parse_bypass(struct upstream_proxy *up, const char *list, char *err, size_t err_size)
{
	const char *p = list;
	while (*p) {
		size_t skip = strspn(p, ", \t\n");
		p += skip;
		size_t n = strcspn(p, ", \t\n");
		if (n == 0)
			break;
		char e[300];
		if (n >= sizeof(e))
			return err_set(err, err_size, -EINVAL, "--no-upstream-proxy: entry too long");
		memcpy(e, p, n);
		e[n] = 0;
		p += n;
		if (up->n_bypass >= UPSTREAM_MAX_BYPASS)
			return err_set(err, err_size, -EINVAL, "--no-upstream-proxy: at most %d entries",
				    UPSTREAM_MAX_BYPASS);
		struct upstream_bypass *b = &up->bypass[up->n_bypass];
		memset(b, 0, sizeof(*b));
		/* An address or a CIDR ("[v6]" too) */
		char lit[300];
		strscpy(lit, e, sizeof(lit));
		if (lit[0] == '[') {
			size_t l = strlen(lit);
			if (lit[l - 1] != ']')
				return err_set(err, err_size, -EINVAL, "--no-upstream-proxy: bad entry '%s'", e);
			lit[l - 1] = 0;
			memmove(lit, lit + 1, l - 1);
		}
		if (strchr(lit, '/') || strchr(lit, ':') || netaddr_parse(lit, &(struct netaddr){ 0 }) == 0) {
			if (netcidr_parse(lit, &b->cidr) < 0)
				return err_set(err, err_size, -EINVAL,
					    "--no-upstream-proxy: '%s' is not an address or CIDR (host bits "
					    "must be zero)", e);
			b->is_cidr = true;
			up->n_bypass++;
			continue;
		}
		const char *name = e;
		if (strncmp(name, "*.", 2) == 0) {
			name += 2;
			b->suffix = true;
		} else if (name[0] == '.') {
			name += 1;
			b->suffix = true;
		}
		size_t nl = strlen(name);
		if (nl && name[nl - 1] == '.')
			nl--;
		if (nl == 0 || nl >= sizeof(b->name))
			return err_set(err, err_size, -EINVAL, "--no-upstream-proxy: bad entry '%s'", e);
		memcpy(b->name, name, nl);
		b->name[nl] = 0;
		if (!valid_name(b->name))
			return err_set(err, err_size, -EINVAL,
				    "--no-upstream-proxy: '%s' is not a host name, .suffix, address or CIDR", e);
		lower_name(b->name);
		up->n_bypass++;
	}
	return 0;
}

bool upstream_bypassed(const struct upstream_proxy *up, const char *host, const struct netaddr *addr)
{
	char name[256] = "";
	if (host) {
		strscpy(name, host, sizeof(name));
		size_t l = strlen(name);
		if (l && name[l - 1] == '.')
			name[l - 1] = 0;
		lower_name(name);
	}
	size_t nl = strlen(name);
	for (size_t i = 0; i < up->n_bypass; i++) {
		const struct upstream_bypass *b = &up->bypass[i];
		if (b->is_cidr) {
			if (addr && netcidr_contains(&b->cidr, addr))
				return true;
			continue;
		}
		if (!nl)
			continue;
		if (!b->suffix) {
			if (strcmp(name, b->name) == 0)
				return true;
			continue;
		}
		size_t bl = strlen(b->name);
		if (nl > bl + 1 && name[nl - bl - 1] == '.' && strcmp(name + nl - bl, b->name) == 0)
			return true;
	}
	return false;
}

int upstream_read_auth_file(const char *path, char **header, char *err, size_t err_size)
{
	*header = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0)
		return err_set(err, err_size, -errno, "--upstream-proxy-auth-file %s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return err_set(err, err_size, -e, "--upstream-proxy-auth-file %s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(err, err_size, -EINVAL, "--upstream-proxy-auth-file %s: not a regular file", path);
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		close(fd);
		return err_set(err, err_size, -EPERM,
			    "--upstream-proxy-auth-file %s: mode %04o gives group or others access; "
			    "chmod 600 it (and keep it outside the sandbox)", path,
			    (unsigned)(st.st_mode & 07777));
	}
	char buf[UPSTREAM_AUTH_FILE_MAX + 1];
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return err_set(err, err_size, -EIO, "--upstream-proxy-auth-file %s: %s", path, strerror(errno));
	if ((size_t)n > UPSTREAM_AUTH_FILE_MAX) {
		sodium_memzero(buf, sizeof(buf));
		return err_set(err, err_size, -EINVAL, "--upstream-proxy-auth-file %s: longer than %d bytes",
			    path, UPSTREAM_AUTH_FILE_MAX);
	}
	buf[n] = 0;
	if (n && buf[n - 1] == '\n')
		buf[--n] = 0;
	if (n && buf[n - 1] == '\r')
		buf[--n] = 0;
	const char *colon = strchr(buf, ':');
	if (!colon || colon == buf || strpbrk(buf, "\r\n")) {
		sodium_memzero(buf, sizeof(buf));
		return err_set(err, err_size, -EINVAL,
			    "--upstream-proxy-auth-file %s: expected one line USER:PASSWORD", path);
	}
	size_t b64 = sodium_base64_encoded_len((size_t)n, sodium_base64_VARIANT_ORIGINAL);
	static const char pre[] = "Proxy-Authorization: Basic ";
	size_t cap = sizeof(pre) + b64 + 2;
	char *h = malloc(cap);
	if (!h) {
		sodium_memzero(buf, sizeof(buf));
		return -ENOMEM;
	}
	memcpy(h, pre, sizeof(pre) - 1);
	sodium_bin2base64(h + sizeof(pre) - 1, b64, (const unsigned char *)buf, (size_t)n,
			  sodium_base64_VARIANT_ORIGINAL);
	strcat(h, "\r\n");
	sodium_memzero(buf, sizeof(buf));
	*header = h;
	return 0;
}

char *upstream_connect_request(const struct upstream_proxy *up, const char *host,
			       const struct netaddr *addr, uint16_t port, size_t *len)
{
	char target[300];
	if (up->by == UPSTREAM_BY_NAME && host && host[0]) {
		struct netaddr lit;
		bool v6 = netaddr_parse(host, &lit) == 0 && lit.family == AF_INET6;
		if (!v6 && !name_chars_ok(host))
			return NULL;
		if (v6) {
			char ip[INET6_ADDRSTRLEN];
			snprintf(target, sizeof(target), "[%s]", netaddr_format(&lit, ip, sizeof(ip)));
		} else {
			if (strlen(host) > 253)
				return NULL;
			strscpy(target, host, sizeof(target));
		}
	} else {
		if (!addr)
			return NULL;
		char ip[INET6_ADDRSTRLEN];
		netaddr_format(addr, ip, sizeof(ip));
		snprintf(target, sizeof(target), addr->family == AF_INET6 ? "[%s]" : "%s", ip);
	}
	const char *auth = up->auth_header ? up->auth_header : "";
	size_t cap = 2 * strlen(target) + strlen(auth) + 128;
	char *r = malloc(cap);
	if (!r)
		return NULL;
	int n = snprintf(r, cap, "CONNECT %s:%u HTTP/1.1\r\nHost: %s:%u\r\n%s\r\n", target, port, target,
			 port, auth);
	*len = (size_t)n;
	return r;
}

int upstream_parse_reply(const char *buf, size_t len, int *status, size_t *head_len)
{
	size_t check = len < 12 ? len : 12;
	if (check >= 5 && memcmp(buf, "HTTP/", 5) != 0)
		return -EPROTO;
	if (check < 5 && memcmp(buf, "HTTP/", check) != 0)
		return -EPROTO;
	const char *end = NULL;
	for (size_t i = 0; i + 3 < len; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
			end = buf + i + 4;
			break;
		}
	if (!end)
		return len >= UPSTREAM_REPLY_MAX ? -EPROTO : 0;
	/* HTTP/1.x SSS */
	if (len < 12 || buf[5] != '1' || buf[6] != '.' || !isdigit((unsigned char)buf[7]) || buf[8] != ' ' ||
	    !isdigit((unsigned char)buf[9]) || !isdigit((unsigned char)buf[10]) ||
	    !isdigit((unsigned char)buf[11]))
		return -EPROTO;
	int st = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	if (st < 100 || (len > 12 && buf[12] != ' ' && buf[12] != '\r'))
		return -EPROTO;
	*status = st;
	*head_len = (size_t)(end - buf);
	return 1;
}

enum reason upstream_reason_for_status(int status, int *our_status)
{
	if (status == 407 || status == 401) {
		*our_status = 502;
		return REASON_UPSTREAM_PROXY_AUTH_REQUIRED;
	}
	*our_status = status == 403 ? 403 : 502;
	return REASON_UPSTREAM_PROXY_REFUSED;
}

int upstream_load(const char *url, const char *auth_file, const char *const *bypass, size_t n_bypass,
		  const char *connect_by, struct upstream_proxy **out)
{
	*out = NULL;
	char err[512];
	struct upstream_proxy *up = calloc(1, sizeof(*up));
	if (!up)
		return -ENOMEM;
	int r = upstream_parse_url(url, up->host, sizeof(up->host), &up->port, err, sizeof(err));
	if (r < 0)
		goto bad;
	for (size_t i = 0; i < n_bypass; i++)
		if ((r = upstream_parse_bypass(up, bypass[i], err, sizeof(err))) < 0)
			goto bad;
	if (!connect_by || !strcmp(connect_by, "address"))
		up->by = UPSTREAM_BY_ADDRESS;
	else if (!strcmp(connect_by, "name"))
		up->by = UPSTREAM_BY_NAME;
	else {
		r = err_set(err, sizeof(err), -EINVAL, "--upstream-proxy-connect must be address or name");
		goto bad;
	}
	if (auth_file && (r = upstream_read_auth_file(auth_file, &up->auth_header, err, sizeof(err))) < 0)
		goto bad;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG };
	struct addrinfo *res = NULL;
	char ps[8];
	snprintf(ps, sizeof(ps), "%u", up->port);
	int g = getaddrinfo(up->host, ps, &hints, &res);
	if (g != 0 || !res) {
		r = err_set(err, sizeof(err), -EHOSTUNREACH, "--upstream-proxy %s: cannot resolve: %s", up->host,
			 gai_strerror(g));
		goto bad;
	}
	memcpy(&up->addr, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	*out = up;
	return 0;
bad:
	log_error("%s", err);
	upstream_free(up);
	return r;
}

void upstream_free(struct upstream_proxy *up)
{
	if (!up)
		return;
	if (up->auth_header) {
		sodium_memzero(up->auth_header, strlen(up->auth_header));
		free(up->auth_header);
	}
	free(up);
}
