/* tether connect HOST PORT: a tunnel through the sandbox's egress proxy
 * (HTTP CONNECT), relayed over standard input and output, for clients that
 * do not speak HTTP proxies but take a command to connect with: ssh's
 * ProxyCommand (and through it git over ssh), rsync -e ssh, and the like.
 * The flow belongs to this process, so the policy names this binary (with
 * `ancestors` to scope it to ssh or git; docs/network-policy.md). */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/connect_answer.h"
#include "common/log.h"
#include "common/util.h"

enum {
	EXIT_TUNNEL_DONE = 0,
	EXIT_REFUSED = 1,     /* the proxy answered, not with 2xx */
	EXIT_USAGE = 2,
	EXIT_UNREACHABLE = 3, /* no proxy, or no valid answer from it */
};

#define HEAD_MAX 16384     /* the proxy's answer head, as its own request limit */
#define RELAY_BUF 65536

static const char *const proxy_vars[] = { "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
					  "all_proxy",   "HTTP_PROXY",  "http_proxy" };

static void usage(FILE *out)
{
	fprintf(out,
		"usage: tether connect [--proxy ADDR] [--timeout SECONDS] HOST PORT\n"
		"\n"
		"Open a tunnel to HOST:PORT through the sandbox's egress proxy (HTTP CONNECT)\n"
		"and relay it over standard input and output, for clients that do not speak\n"
		"HTTP proxies but take a command to connect with:\n"
		"\n"
		"  ssh -o ProxyCommand='tether connect %%h %%p' git@github.com\n"
		"  GIT_SSH_COMMAND=\"ssh -o ProxyCommand='tether connect %%h %%p'\" git clone git@github.com:o/r\n"
		"\n"
		"The proxy is ADDR (http://HOST:PORT, HOST:PORT or [IPV6]:PORT), else the first\n"
		"set of HTTPS_PROXY, https_proxy, ALL_PROXY, all_proxy, HTTP_PROXY, http_proxy\n"
		"(tether run sets them). The flow is this process's: a policy allows it by this\n"
		"binary's path, scoped with `ancestors` (docs/network-policy.md).\n"
		"\n"
		"--timeout: seconds to reach the proxy and get its answer (default 30).\n"
		"Exit status: 0 the tunnel ran and ended; 1 the proxy refused it (its status and\n"
		"reason on stderr); 2 usage; 3 no proxy set, or none reachable or answering.\n");
}

/* "http://host:port/", "host:port", "[v6]:port" -> host, port. The scheme
 * may be http only (the proxy is plain HTTP; https:// would need TLS). */
static int parse_proxy(const char *s, char *host, size_t host_size, char *port, size_t port_size)
{
	if (!strncasecmp(s, "http://", 7))
		s += 7;
	else if (strstr(s, "://")) {
		log_error("connect: proxy '%s': only http:// proxies are supported", s);
		return -1;
	}
	const char *at = strrchr(s, '@');
	if (at) {
		log_error("connect: proxy addresses with credentials are not supported");
		return -1;
	}
	const char *h = s, *he, *p;
	if (*s == '[') {
		h = s + 1;
		he = strchr(h, ']');
		if (!he || he[1] != ':')
			goto bad;
		p = he + 2;
	} else {
		he = strchr(s, ':');
		if (!he)
			goto bad;
		p = he + 1;
	}
	size_t hl = (size_t)(he - h), pl = strcspn(p, "/");
	if (hl == 0 || hl >= host_size || pl == 0 || pl >= port_size || (p[pl] && strcmp(p + pl, "/") != 0))
		goto bad;
	memcpy(host, h, hl);
	host[hl] = '\0';
	memcpy(port, p, pl);
	port[pl] = '\0';
	char *end;
	unsigned long v = strtoul(port, &end, 10);
	if (*end || v == 0 || v > 65535)
		goto bad;
	return 0;
bad:
	log_error("connect: proxy address '%s': expected http://HOST:PORT, HOST:PORT or [IPV6]:PORT", s);
	return -1;
}

static int64_t now_ms(void) { return (int64_t)(now_mono_ns() / 1000000); }

static int remaining_ms(int64_t deadline)
{
	int64_t left = deadline - now_ms();
	return left < 0 ? 0 : (int)left;
}

/* Connect to the proxy, each of its addresses in turn, under the deadline.
 * The connected fd, non-blocking (the handshake and the relay poll before
 * they read or write), or -1. */
static int dial(const char *host, const char *port, int64_t deadline)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
	int r = getaddrinfo(host, port, &hints, &res);
	if (r != 0) {
		log_error("connect: proxy %s: %s", host, gai_strerror(r));
		return -1;
	}
	int fd = -1, err = ETIMEDOUT;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		int s = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s < 0) {
			err = errno;
			continue;
		}
		if (connect(s, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
			err = errno;
			close(s);
			continue;
		}
		struct pollfd p = { .fd = s, .events = POLLOUT };
		int soerr = 0;
		socklen_t len = sizeof(soerr);
		if (poll(&p, 1, remaining_ms(deadline)) != 1 || getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 ||
		    soerr) {
			err = soerr ? soerr : ETIMEDOUT;
			close(s);
			continue;
		}
		fd = s;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		log_error("connect: cannot reach the proxy at %s port %s: %s", host, port, strerror(err));
		return -1;
	}
	return fd;
}

/* Send CONNECT and read the answer head. Returns the status code (>= 100)
 * or -1; *extra gets the bytes read past the head (already tunnel data). */
static int handshake(int fd, const char *host, const char *port, int64_t deadline, struct connect_answer *a,
		     char *buf, size_t *extra_off, size_t *extra_len)
{
	char req[1200];
	bool v6 = strchr(host, ':') != NULL;
	int n = snprintf(req, sizeof(req), "CONNECT %s%s%s:%s HTTP/1.1\r\nHost: %s%s%s:%s\r\n\r\n", v6 ? "[" : "",
			 host, v6 ? "]" : "", port, v6 ? "[" : "", host, v6 ? "]" : "", port);
	/* the socket is non-blocking; a fresh connection's empty send buffer
	 * takes these few hundred bytes whole */
	if (n < 0 || (size_t)n >= sizeof(req) || write_all(fd, req, (size_t)n) < 0) {
		log_error("connect: sending the request to the proxy failed: %s", strerror(errno));
		return -1;
	}
	connect_answer_init(a);
	size_t len = 0;
	while (!a->headers_done) {
		if (len == HEAD_MAX) {
			log_error("connect: the proxy's answer head is over %d bytes", HEAD_MAX);
			return -1;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int pr = poll(&p, 1, remaining_ms(deadline));
		if (pr == 0) {
			log_error("connect: no answer from the proxy in time");
			return -1;
		}
		ssize_t got = pr < 0 ? -1 : read(fd, buf + len, HEAD_MAX - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			log_error("connect: the proxy closed the connection before answering");
			return -1;
		}
		ssize_t used = connect_answer_feed(a, buf + len, (size_t)got);
		if (used < 0) {
			log_error("connect: malformed answer from the proxy (%s)",
				  http_errno_description(HTTP_PARSER_ERRNO(&a->parser)));
			return -1;
		}
		*extra_off = len + (size_t)used;
		*extra_len = (size_t)got - (size_t)used;
		len += (size_t)got;
	}
	return a->parser.status_code;
}

/* stdin -> sock, sock -> stdout, until the far end has closed and all it
 * sent is out. The socket is non-blocking and what stdin gave is held
 * until the socket takes it, so a far end that writes without reading
 * (while we write to it) never stops us reading it: two writers waiting on
 * each other would deadlock. stdin and stdout are left as we got them
 * (they may be a terminal others share); a slow reader of our stdout
 * slows the tunnel, as it should. */
static int relay(int sock, char *down, char *up)
{
	size_t up_len = 0, up_off = 0; /* from stdin, not yet taken by the socket */
	bool in_open = true;
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = sock, .events = POLLIN | (up_len ? POLLOUT : 0) },
			{ .fd = in_open && !up_len ? 0 : -1, .events = POLLIN },
		};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(sock, down, RELAY_BUF);
			if (n == 0)
				return 0; /* the far end is done */
			if (n < 0 && errno != EINTR && errno != EAGAIN)
				return -errno;
			int r = n > 0 ? write_all(1, down, (size_t)n) : 0;
			if (r < 0)
				return r == -EPIPE ? 0 : r; /* our reader went away */
		}
		if (up_len && (p[0].revents & POLLOUT)) {
			ssize_t n = write(sock, up + up_off, up_len);
			if (n < 0 && errno != EINTR && errno != EAGAIN)
				return -errno;
			if (n > 0) {
				up_off += (size_t)n;
				up_len -= (size_t)n;
			}
		}
		if (p[1].revents) {
			ssize_t n = read(0, up, RELAY_BUF);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				in_open = false;
				shutdown(sock, SHUT_WR);
				continue;
			}
			up_len = (size_t)n;
			up_off = 0;
		}
	}
}

int cmd_connect(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "proxy", required_argument, NULL, 'p' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *proxy = NULL;
	long timeout_s = 30;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': proxy = optarg; break;
		case 't': {
			char *end;
			timeout_s = strtol(optarg, &end, 10);
			if (*end || timeout_s <= 0 || timeout_s > 3600) {
				log_error("connect: --timeout: expected 1 to 3600 seconds, got '%s'", optarg);
				return EXIT_USAGE;
			}
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *host = argv[optind], *port = argv[optind + 1];
	char *end;
	unsigned long pv = strtoul(port, &end, 10);
	if (!*host || strlen(host) > 253 || strpbrk(host, " \t\r\n/@[]") || *end || pv == 0 || pv > 65535) {
		log_error("connect: expected HOST PORT, got '%s' '%s'", host, port);
		return EXIT_USAGE;
	}
	const char *from = "--proxy";
	for (size_t i = 0; !proxy && i < sizeof(proxy_vars) / sizeof(proxy_vars[0]); i++) {
		const char *v = getenv(proxy_vars[i]);
		if (v && *v) {
			proxy = v;
			from = proxy_vars[i];
		}
	}
	if (!proxy) {
		log_error("connect: no proxy: give --proxy, or run inside 'tether run' (it sets HTTPS_PROXY)");
		return EXIT_UNREACHABLE;
	}
	char phost[256], pport[8];
	if (parse_proxy(proxy, phost, sizeof(phost), pport, sizeof(pport)) < 0) {
		log_error("connect: (the proxy came from %s)", from);
		return EXIT_USAGE;
	}
	signal(SIGPIPE, SIG_IGN);
	int64_t deadline = now_ms() + timeout_s * 1000;
	int fd = dial(phost, pport, deadline);
	if (fd < 0)
		return EXIT_UNREACHABLE;
	static char buf[HEAD_MAX > RELAY_BUF ? HEAD_MAX : RELAY_BUF];
	struct connect_answer a;
	size_t extra_off = 0, extra_len = 0;
	int status = handshake(fd, host, port, deadline, &a, buf, &extra_off, &extra_len);
	if (status < 0) {
		close(fd);
		return EXIT_UNREACHABLE;
	}
	if (status < 200 || status > 299) {
		log_error("connect: the proxy refused %s:%s: %d %s (reason: %s)", host, port, status,
			  http_status_str((enum http_status)status), a.reason[0] ? a.reason : "none given");
		close(fd);
		return EXIT_REFUSED;
	}
	if (extra_len > 0 && write_all(1, buf + extra_off, extra_len) < 0) {
		close(fd);
		return EXIT_TUNNEL_DONE;
	}
	static char up[RELAY_BUF];
	int r = relay(fd, buf, up);
	close(fd);
	if (r < 0) {
		log_error("connect: tunnel to %s:%s: %s", host, port, strerror(-r));
		return EXIT_UNREACHABLE;
	}
	return EXIT_TUNNEL_DONE;
}
