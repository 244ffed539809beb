/* Benchmark: the proc-supervisor's identity service end to end over a Unix
 * control socket. The server process runs idservice (proc-supervisor/
 * idservice.c) as the anchor of a member table holding one workload child
 * with an open TCP flow to the bench; the client process asks for that
 * flow's identity through proto_client and verifies every answer (pinned
 * provisioning key). Each request does the real work: sock_diag lookup,
 * holder search among the members (cache warm after the first), exe hash
 * (cache), ancestry walk, Ed25519 signing; then verification on the net
 * side. Prints sequential p50/p99 latency and pipelined requests/s.
 *
 * By default the channel agrees a MAC key (protocol 1.2): answers are
 * MAC'd and signed after; --no-mac asks for signed answers (1.1).
 *
 *   idservice_bench [--quick] [--no-mac] [-n REQUESTS]   (default 5000; --quick 1000) */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/kernel.h"
#include "identity/members.h"
#include "identity/procref.h"
#include "proc-supervisor/idservice.h"
#include "proto/client.h"
#include "proto/keys.h"
#include "proto/verifier.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* ---- server side (a forked process: it is the anchor) ---- */

static void on_term(uv_signal_t *s, int sig)
{
	uv_stop(s->loop);
}

static int run_server(const char *endpoint, const uint8_t seed[32], int port, int ready_fd)
{
	struct kernel_caps caps;
	kernel_caps_probe(&caps);
	struct procref self;
	if (procref_open(&caps, getpid(), &self) < 0)
		return 1;
	struct members *m;
	struct members_config mc = { .mode = MEMBERSHIP_LINEAGE };
	if (members_create(&caps, &self, &mc, &m) < 0)
		return 1;
	procref_close(&self);
	/* The workload: our child, holding one connected socket. */
	pid_t w = fork();
	if (w == 0) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			_exit(1);
		pause();
		_exit(0);
	}
	struct procref wr;
	usleep(20000);
	if (procref_open(&caps, w, &wr) < 0 || members_add_spawned(m, &wr, MEMBER_EXEC_SESSION) < 0)
		return 1;
	procref_close(&wr);
	struct sign_key *prov;
	if (sign_key_from_seed(seed, &prov) < 0)
		return 1;
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct idservice *ids;
	struct idservice_opts io = { .endpoint = endpoint, .caps = &caps, .members = m, .provisioning = prov };
	if (idservice_start(&loop, &io, &ids) < 0)
		return 1;
	sign_key_free(prov);
	uv_signal_t term;
	uv_signal_init(&loop, &term);
	uv_signal_start(&term, on_term, SIGTERM);
	if (write(ready_fd, "r", 1) != 1)
		return 1;
	close(ready_fd);
	uv_run(&loop, UV_RUN_DEFAULT);
	kill(w, SIGKILL);
	waitpid(w, NULL, 0);
	return 0;
}

/* ---- client side ---- */

struct bench {
	uv_loop_t loop;
	struct proto_client *cl;
	struct proto_tuple tuple;
	size_t total, sent, done, failed, window;
	uint64_t *lat;
	uint64_t *t0;
	bool ready;
};

static void issue(struct bench *b);

static void on_result(const struct proto_identity_result *res, void *ud)
{
	struct bench *b = ud;
	size_t i = b->done++;
	if (res->reason != REASON_OK) {
		if (b->failed++ == 0)
			fprintf(stderr, "idservice_bench: %s (%s)\n", reason_word(res->reason), res->message);
	}
	b->lat[i] = now_ns() - b->t0[res->request_id % (b->total + 1)];
	issue(b);
}

static void issue(struct bench *b)
{
	while (b->sent < b->total && b->sent - b->done < b->window) {
		uint64_t id;
		uint64_t t = now_ns();
		if (proto_client_request(b->cl, &b->tuple, 0, on_result, b, &id) < 0) {
			b->failed++;
			b->done++;
			b->sent++;
			continue;
		}
		b->t0[id % (b->total + 1)] = t;
		b->sent++;
	}
}

static void on_state(struct proto_client *c, bool ready, enum reason why, void *ud)
{
	struct bench *b = ud;
	b->ready = ready;
}

static int run_round(struct bench *b, size_t n, size_t window, double *p50, double *p99, double *rate)
{
	b->total = n;
	b->sent = b->done = b->failed = 0;
	b->window = window;
	b->lat = calloc(n, sizeof(uint64_t));
	b->t0 = calloc(n + 1, sizeof(uint64_t));
	uint64_t start = now_ns();
	issue(b);
	uint64_t deadline = start + 60ull * 1000000000ull;
	while (b->done < n && now_ns() < deadline)
		uv_run(&b->loop, UV_RUN_ONCE);
	uint64_t el = now_ns() - start;
	if (b->done < n || b->failed) {
		fprintf(stderr, "idservice_bench: %zu/%zu done, %zu failed\n", b->done, n, b->failed);
		return -1;
	}
	qsort(b->lat, n, sizeof(uint64_t), cmp_u64);
	*p50 = b->lat[n / 2] / 1000.0;
	*p99 = b->lat[(n * 99) / 100] / 1000.0;
	*rate = n / (el / 1e9);
	free(b->lat);
	free(b->t0);
	return 0;
}

static void on_tick(uv_timer_t *t)
{
}

int main(int argc, char **argv)
{
	size_t n = 5000;
	bool no_mac = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			n = 1000;
		else if (!strcmp(argv[i], "--no-mac"))
			no_mac = true;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = (size_t)atol(argv[++i]);
	}
	signal(SIGPIPE, SIG_IGN);
	if (proto_crypto_init() < 0)
		return 1;
	uint8_t seed[32];
	for (int i = 0; i < 32; i++)
		seed[i] = (uint8_t)(i * 7 + 3);
	struct sign_key *prov;
	sign_key_from_seed(seed, &prov);
	struct pub_key pin;
	sign_key_public(prov, &pin);
	sign_key_free(prov);

	char endpoint[128];
	snprintf(endpoint, sizeof(endpoint), "unix:/tmp/tether-idbench-%d.sock", (int)getpid());
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4) < 0)
		return 1;
	getsockname(lfd, (struct sockaddr *)&a, &al);
	int pfd[2];
	if (pipe(pfd) < 0)
		return 1;
	pid_t srv = fork();
	if (srv == 0) {
		close(pfd[0]);
		close(lfd);
		_exit(run_server(endpoint, seed, ntohs(a.sin_port), pfd[1]));
	}
	close(pfd[1]);
	char c;
	int cfd = accept(lfd, NULL, NULL);
	if (read(pfd[0], &c, 1) != 1 || cfd < 0) {
		fprintf(stderr, "idservice_bench: server did not start\n");
		kill(srv, SIGKILL);
		waitpid(srv, NULL, 0);
		return 1;
	}
	struct sockaddr_in peer, local;
	socklen_t pl = sizeof(peer), ll = sizeof(local);
	getpeername(cfd, (struct sockaddr *)&peer, &pl);
	getsockname(cfd, (struct sockaddr *)&local, &ll);
	struct bench b = { 0 };
	proto_tuple_from_strings(&b.tuple, IPPROTO_TCP, "127.0.0.1", ntohs(peer.sin_port), "127.0.0.1",
				 ntohs(local.sin_port));
	uv_loop_init(&b.loop);
	uv_timer_t tick;
	uv_timer_init(&b.loop, &tick);
	uv_timer_start(&tick, on_tick, 20, 20);
	struct verifier *v;
	struct verifier_opts vo = { .max_replay = 1u << 22 };
	verifier_new(&pin, 1, &vo, &v);
	struct proto_client_opts co = { .endpoint = endpoint, .verifier = v, .on_state = on_state,
					.no_mac = no_mac, .userdata = &b };
	proto_client_start(&b.loop, &co, &b.cl);
	uint64_t end = now_ns() + 5000000000ull;
	while (!b.ready && now_ns() < end)
		uv_run(&b.loop, UV_RUN_ONCE);
	int rc = 1;
	double p50, p99, rate, pp50, pp99, prate;
	if (b.ready && run_round(&b, n / 10 + 1, 1, &p50, &p99, &rate) == 0 && /* warm-up */
	    run_round(&b, n, 1, &p50, &p99, &rate) == 0 && run_round(&b, n, 64, &pp50, &pp99, &prate) == 0) {
		const char *how = no_mac ? "sign+verify" : "MAC, signature after";
		printf("idservice: sequential identity requests over unix socket (attribute+ancestry+%s): "
		       "p50 %.1f us, p99 %.1f us (%.0f/s)\n", how, p50, p99, rate);
		printf("idservice: pipelined (64 in flight, %s): %.0f verified identities/s, p50 %.1f us, p99 %.1f us\n",
		       how, prate, pp50, pp99);
		rc = 0;
	}
	proto_client_stop(b.cl, NULL, NULL);
	uv_close((uv_handle_t *)&tick, NULL);
	end = now_ns() + 1000000000ull;
	while (uv_run(&b.loop, UV_RUN_NOWAIT) && now_ns() < end)
		;
	(void)uv_loop_close(&b.loop);
	verifier_free(v);
	kill(srv, SIGTERM);
	waitpid(srv, NULL, 0);
	unlink(endpoint + 5);
	close(cfd);
	close(lfd);
	return rc;
}
