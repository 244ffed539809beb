/* proxy_bench: throughput and short-request latency, direct or through an
 * HTTP proxy, against an upstream this program runs itself on 127.0.0.1
 * (a fixed set of server threads: no thread is created per connection).
 *
 *   proxy_bench bulk  [--proxy HOST:PORT] [--bytes N]          CONNECT tunnel, upstream sends N bytes
 *   proxy_bench short [--proxy HOST:PORT] [--requests N] [--concurrency C]
 *                                                              absolute-form GET, one request per connection
 *
 * Prints one line of key=value results. Loopback only. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* user + system time of the whole process (every thread) */
static uint64_t cpu_self_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

static struct {
	int mode_bulk;
	uint64_t bytes;
	int listen_fd;
	int port;
} up;

static void *serve_one(void *arg)
{
	int fd = (int)(intptr_t)arg;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (up.mode_bulk) {
		static char buf[256 * 1024];
		uint64_t left = up.bytes;
		while (left > 0) {
			size_t n = left < sizeof(buf) ? (size_t)left : sizeof(buf);
			ssize_t w = write(fd, buf, n);
			if (w <= 0)
				break;
			left -= (uint64_t)w;
		}
	} else {
		char req[4096];
		size_t len = 0;
		while (len < sizeof(req) - 1) {
			ssize_t n = read(fd, req + len, sizeof(req) - 1 - len);
			if (n <= 0)
				break;
			len += (size_t)n;
			req[len] = '\0';
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
		if (write(fd, resp, sizeof(resp) - 1) < 0)
			perror("write");
	}
	close(fd);
	return NULL;
}

/* The upstream: a fixed set of threads, each accepting and serving one
 * connection at a time. No thread per connection: the client may be a
 * supervised workload, and a thread created per request would be a fork in
 * its tree (and on the host's fork counter) at every flow, which no real
 * client's upstream causes. */
static void *upstream(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(up.listen_fd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		serve_one((void *)(intptr_t)fd);
	}
}

static int tcp_connect(const char *ip, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, ip, &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static const char *proxy_ip;
static int proxy_port;
static int relay_port; /* --relay PORT: a plain TCP relay on 127.0.0.1 (HAProxy's TCP mode) to the upstream */

/* Connect to the upstream, directly, through a TCP relay or through a
 * CONNECT tunnel. */
static int open_tunnel(void)
{
	if (relay_port)
		return tcp_connect("127.0.0.1", relay_port);
	if (!proxy_ip)
		return tcp_connect("127.0.0.1", up.port);
	int fd = tcp_connect(proxy_ip, proxy_port);
	if (fd < 0)
		return -1;
	char req[128];
	int n = snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n",
			 up.port, up.port);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	char resp[1024];
	size_t len = 0;
	while (len < sizeof(resp) - 1) {
		ssize_t r = read(fd, resp + len, 1); /* byte by byte: no tunnel bytes swallowed */
		if (r <= 0) {
			close(fd);
			return -1;
		}
		len++;
		resp[len] = '\0';
		if (len >= 4 && memcmp(resp + len - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	if (strncmp(resp, "HTTP/1.1 200", 12) != 0 && strncmp(resp, "HTTP/1.0 200", 12) != 0) {
		fprintf(stderr, "proxy refused: %s\n", resp);
		close(fd);
		return -1;
	}
	return fd;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct shortjob {
	int n;
	uint64_t *ttfb;
	int failures;
};

static void *short_worker(void *arg)
{
	struct shortjob *j = arg;
	char req[256], buf[4096];
	for (int i = 0; i < j->n; i++) {
		uint64_t t0 = now_ns();
		int fd = proxy_ip ? tcp_connect(proxy_ip, proxy_port) : tcp_connect("127.0.0.1", up.port);
		if (fd < 0) {
			j->failures++;
			j->ttfb[i] = 0;
			continue;
		}
		int n = proxy_ip ? snprintf(req, sizeof(req), "GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n",
					    up.port, up.port)
				 : snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", up.port);
		if (write(fd, req, (size_t)n) != n) {
			j->failures++;
			close(fd);
			continue;
		}
		ssize_t r = read(fd, buf, sizeof(buf));
		j->ttfb[i] = now_ns() - t0;
		if (r <= 0 || (strncmp(buf, "HTTP/1.1 200", 12) != 0 && strncmp(buf, "HTTP/1.0 200", 12) != 0))
			j->failures++;
		while (r > 0)
			r = read(fd, buf, sizeof(buf));
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || (strcmp(argv[1], "bulk") && strcmp(argv[1], "short"))) {
		fprintf(stderr, "usage: proxy_bench bulk|short [--proxy IP:PORT] [--relay PORT (bulk: a TCP relay to the upstream)] [--bytes N] [--requests N] [--concurrency C] [--port P] [--label L]\n");
		return 2;
	}
	up.mode_bulk = strcmp(argv[1], "bulk") == 0;
	up.bytes = 1ull << 30;
	int requests = 2000, conc = 1;
	const char *label = "direct";
	static char pbuf[64];
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--proxy")) {
			snprintf(pbuf, sizeof(pbuf), "%s", argv[i + 1]);
			char *c = strrchr(pbuf, ':');
			if (!c)
				return 2;
			*c = '\0';
			proxy_ip = pbuf;
			proxy_port = atoi(c + 1);
		} else if (!strcmp(argv[i], "--bytes")) {
			up.bytes = strtoull(argv[i + 1], NULL, 10);
		} else if (!strcmp(argv[i], "--requests")) {
			requests = atoi(argv[i + 1]);
		} else if (!strcmp(argv[i], "--concurrency")) {
			conc = atoi(argv[i + 1]);
		} else if (!strcmp(argv[i], "--relay")) {
			relay_port = atoi(argv[i + 1]);
		} else if (!strcmp(argv[i], "--port")) {
			up.port = atoi(argv[i + 1]);
		} else if (!strcmp(argv[i], "--label")) {
			label = argv[i + 1];
		} else {
			return 2;
		}
	}
	up.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(up.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)up.port) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	socklen_t sl = sizeof(sa);
	if (bind(up.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(up.listen_fd, 1024) < 0 ||
	    getsockname(up.listen_fd, (struct sockaddr *)&sa, &sl) < 0) {
		perror("upstream");
		return 1;
	}
	up.port = ntohs(sa.sin_port);
	/* one server thread per client thread, and one spare */
	for (int i = 0; i < (up.mode_bulk ? 1 : conc) + 1; i++) {
		pthread_t ut;
		pthread_create(&ut, NULL, upstream, NULL);
		pthread_detach(ut);
	}

	if (up.mode_bulk) {
		int fd = open_tunnel();
		if (fd < 0) {
			fprintf(stderr, "cannot open the tunnel\n");
			return 1;
		}
		static char buf[256 * 1024];
		uint64_t got = 0, t0 = now_ns(), c0 = cpu_self_ns();
		for (;;) {
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n <= 0)
				break;
			got += (uint64_t)n;
		}
		uint64_t dt = now_ns() - t0, dc = cpu_self_ns() - c0;
		close(fd);
		/* bench_cpu: this process (the client and the upstream sender, both
		 * ends of a direct flow) per GiB moved, so a proxy's own CPU per GiB
		 * can be read beside what the flow itself costs. */
		printf("mode=bulk path=%s bytes=%llu seconds=%.3f MiB_per_s=%.0f Gbit_per_s=%.2f bench_cpu_s_per_GiB=%.3f\n",
		       label, (unsigned long long)got, dt / 1e9, got / (dt / 1e9) / 1048576.0,
		       got * 8 / (dt / 1e9) / 1e9, got ? dc / 1e9 / (got / 1073741824.0) : 0.0);
		return got == up.bytes ? 0 : 1;
	}
	uint64_t *ttfb = calloc((size_t)requests, sizeof(uint64_t));
	struct shortjob *jobs = calloc((size_t)conc, sizeof(*jobs));
	pthread_t *th = calloc((size_t)conc, sizeof(pthread_t));
	int per = requests / conc;
	uint64_t t0 = now_ns();
	for (int i = 0; i < conc; i++) {
		jobs[i].n = per;
		jobs[i].ttfb = ttfb + i * per;
		pthread_create(&th[i], NULL, short_worker, &jobs[i]);
	}
	int failures = 0;
	for (int i = 0; i < conc; i++) {
		pthread_join(th[i], NULL);
		failures += jobs[i].failures;
	}
	uint64_t dt = now_ns() - t0;
	int total = per * conc;
	qsort(ttfb, (size_t)total, sizeof(uint64_t), cmp_u64);
	printf("mode=short path=%s requests=%d concurrency=%d failures=%d conn_per_s=%.0f ttfb_p50_us=%.0f ttfb_p99_us=%.0f\n",
	       label, total, conc, failures, total / (dt / 1e9), ttfb[total / 2] / 1e3,
	       ttfb[(size_t)(total * 0.99)] / 1e3);
	return failures ? 1 : 0;
}
