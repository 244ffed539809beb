/* Shared bits of the identity strategy tests: a bounded loop runner, the
 * checker that counts failures (tests/common/check.h), the children a test
 * started (killed at the end), one resolution with a bounded wait,
 * loopback accept, an image's sha256, and latency percentiles. */
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common/reason.h"
#include "net-supervisor/identity_strategy.h"
#include "tests/common/check.h"

/* The children this test started; each is SIGKILLed and reaped by
 * kids_kill / kids_kill_all (the tests also run kids_kill_all atexit). */
#define KIDS_MAX 64
static struct {
	pid_t pid[KIDS_MAX];
	size_t n;
} g_kids __attribute__((unused));

static inline void kids_track(pid_t p)
{
	if (p > 0 && g_kids.n < KIDS_MAX)
		g_kids.pid[g_kids.n++] = p;
}

static inline void kids_kill(pid_t p)
{
	for (size_t i = 0; i < g_kids.n; i++)
		if (g_kids.pid[i] == p) {
			kill(p, SIGKILL);
			waitpid(p, NULL, 0);
			g_kids.pid[i] = -1;
		}
}

static inline void kids_kill_all(void)
{
	for (size_t i = 0; i < g_kids.n; i++)
		if (g_kids.pid[i] > 0) {
			kill(g_kids.pid[i], SIGKILL);
			waitpid(g_kids.pid[i], NULL, 0);
		}
	g_kids.n = 0;
}

/* A tracked child that connects to 127.0.0.1:port and holds the
 * connection until the other end closes it (10 s at most): a process the
 * strategy under test must not attribute to the anchor. Its pid. */
static inline pid_t kids_spawn_holder(int port)
{
	pid_t f = fork();
	if (f == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(10);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			_exit(1);
		char x;
		while (read(fd, &x, 1) > 0)
			;
		_exit(0);
	}
	kids_track(f);
	return f;
}

static inline void tick_cb(uv_timer_t *t) { (void)t; }

/* Run the loop until *flag (or *anchored == want) or timeout. */
static inline bool run_until(uv_loop_t *loop, const bool *flag, uint64_t timeout_ms)
{
	uv_timer_t t;
	uv_timer_init(loop, &t);
	uv_timer_start(&t, tick_cb, 10, 10);
	uint64_t end = uv_now(loop) + timeout_ms;
	while (!*flag && uv_now(loop) < end) {
		uv_run(loop, UV_RUN_ONCE);
		uv_update_time(loop);
	}
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
	return *flag;
}

static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static inline uint64_t pct(uint64_t *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i];
}

/* One answer of a strategy, as its identity_cb delivered it. */
struct box {
	bool done;
	enum reason reason;
	struct flow_identity *id;
	uint64_t latency_ns;
};

static inline void box_cb(const struct identity_result *r, void *data)
{
	struct box *b = data;
	b->done = true;
	b->reason = r->reason;
	b->id = r->id;
	b->latency_ns = r->latency_ns;
}

/* Resolve flow t with the given request timeout, running the loop for at
 * most 2 s more than that. The reason, or REASON__COUNT when resolve
 * refused the request or no answer came. b->id is the caller's to free. */
static inline enum reason resolve_within(uv_loop_t *loop, struct identity_strategy *s,
					 const struct proxy_flow *t, uint64_t timeout_ms, struct box *b)
{
	memset(b, 0, sizeof(*b));
	struct identity_request *req;
	if (identity_resolve(s, t, timeout_ms, box_cb, b, &req) < 0)
		return REASON__COUNT;
	run_until(loop, &b->done, timeout_ms + 2000);
	return b->done ? b->reason : REASON__COUNT;
}

/* resolve_within's reason as a word, "no answer" for REASON__COUNT. */
static inline const char *answer_word(enum reason r)
{
	return r < REASON__COUNT ? reason_word(r) : "no answer";
}

static inline bool ends_with(const char *s, const char *suffix)
{
	size_t a = s ? strlen(s) : 0, b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The sha256 of the file at path as 64 hex digits; 0 or -1. */
static inline int sha256_path(const char *path, char out[65])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	crypto_hash_sha256_state st;
	crypto_hash_sha256_init(&st);
	unsigned char buf[65536];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
	close(fd);
	unsigned char h[32];
	crypto_hash_sha256_final(&st, h);
	sodium_bin2hex(out, 65, h, 32);
	return 0;
}

/* Accept one connection on lfd within ms; *t is its flow as the proxy sees
 * it (client = the peer, proxy = our end). The fd or -1. */
static inline int accept_within(int lfd, int ms, struct proxy_flow *t)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	if (poll(&p, 1, ms) <= 0)
		return -1;
	int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		return -1;
	socklen_t l = sizeof(t->client);
	getpeername(c, (struct sockaddr *)&t->client, &l);
	l = sizeof(t->proxy);
	getsockname(c, (struct sockaddr *)&t->proxy, &l);
	return c;
}
