/* Benchmark: signed identity round trips over a Unix socket between two
 * processes (net side request -> proc side build+sign -> net side verify),
 * beside the raw libsodium sign+verify rate of the same context bytes,
 * measured in the same run. Prints rates, p50/p99 latency and the ratio
 * (protocol overhead). Targets: protocol <= 2x raw sign+verify time per
 * context; >= 10 000 verified contexts/s on one core.
 *
 *   bench_identity_rtt [--quick] [-n REQUESTS]   (default 10000; --quick 2000) */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common/util.h"
#include "proto/cert.h"
#include "proto/client.h"
#include "proto/server.h"
#include "proto/signer.h"
#include "proto/verifier.h"

#define BOOT "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

struct world {
	struct sign_key *prov, *inst;
	struct pub_key prov_pub;
	struct procref subject, parent, anchor;
	struct signed_cert cert;
};

static void mkref(struct procref *r, pid_t pid, uint64_t ino, const char *path)
{
	memset(r, 0, sizeof(*r));
	r->pidfd = -1;
	strcpy(r->boot_id, BOOT);
	r->key_kind = PROCREF_KEY_PIDFS;
	r->pidfs_ino = ino;
	r->pid = pid;
	r->ppid = pid - 1;
	r->start_time = 12345;
	r->ruid = r->euid = 1000;
	r->rgid = r->egid = 1000;
	r->cgroup_id = 77;
	strcpy(r->comm, "x");
	strcpy(r->exe.path, path);
	r->exe.hashed = true;
	memset(r->exe.sha256, 0x42, 32);
	snprintf(r->key, sizeof(r->key), "%s:%llu", BOOT, (unsigned long long)ino);
}

static void world_init(struct world *w)
{
	if (sign_key_generate(&w->prov) < 0 || sign_key_generate(&w->inst) < 0)
		exit(1);
	sign_key_public(w->prov, &w->prov_pub);
	mkref(&w->subject, 300, 9003, "/usr/bin/curl");
	mkref(&w->parent, 200, 9002, "/bin/sh");
	mkref(&w->anchor, 100, 9001, "/usr/libexec/tether/proc-supervisor");
	struct pub_key ip;
	sign_key_public(w->inst, &ip);
	struct cert_input ci = { .instance = &ip, .anchor = &w->anchor, .pidns = { 4, 0xeffff },
				 .topology = PROTO_TOPOLOGY_SPLIT };
	if (cert_issue(w->prov, &ci, &w->cert) < 0)
		exit(1);
}

static double now_us(void) { return (double)now_mono_ns() / 1000.0; }

static double cpu_s(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* ---- proc side (child) ---- */

static struct world *srv_world;

static void on_identity(struct proto_server *s, struct proto_request *req, void *ud)
{
	struct context_input in = {
		.topology = PROTO_TOPOLOGY_SPLIT, .source = IDENTITY_SOURCE_DELEGATED,
		.subject = &srv_world->subject, .ancestors = &srv_world->parent, .n_ancestors = 1,
		.anchor = &srv_world->anchor, .tuple = &req->tuple, .socket_cookie = req->socket_cookie,
		.nonce = req->nonce, .request_id = req->request_id,
	};
	struct signed_context sc;
	if (context_sign(srv_world->inst, &in, &sc) < 0) {
		proto_request_fail(req, REASON_INTERNAL_ERROR, "sign");
		return;
	}
	proto_request_reply(req, &sc);
	signed_context_clear(&sc);
}

static void run_server(struct world *w, const char *ep, int ready_fd)
{
	uv_loop_t loop;
	uv_loop_init(&loop);
	srv_world = w;
	struct proto_server_opts o = { .endpoint = ep, .cert = &w->cert, .on_identity = on_identity,
				       .max_inflight = 8192 };
	struct proto_server *s;
	if (proto_server_start(&loop, &o, &s) < 0)
		_exit(1);
	if (write(ready_fd, "r", 1) != 1)
		_exit(1);
	close(ready_fd);
	uv_run(&loop, UV_RUN_DEFAULT);
	_exit(0);
}

/* ---- net side (parent) ---- */

struct bench {
	uv_loop_t loop;
	struct verifier *v;
	struct proto_client *c;
	int ready;
	long target, issued, done, failed;
	int window;
	double *lat;
	double *start;
	struct proto_tuple tuple;
};

static void on_state(struct proto_client *c, bool ready, enum reason why, void *ud)
{
	((struct bench *)ud)->ready = ready;
}

static void issue(struct bench *b);

static void got(const struct proto_identity_result *res, void *ud)
{
	struct bench *b = ud;
	long i = (long)(res->request_id % (uint64_t)b->target);
	if (res->reason != REASON_OK)
		b->failed++;
	if (b->lat)
		b->lat[b->done] = now_us() - b->start[i];
	b->done++;
	issue(b);
}

static void issue(struct bench *b)
{
	while (b->issued < b->target && b->issued - b->done < b->window) {
		uint64_t id;
		b->tuple.sport = (uint16_t)(1024 + b->issued % 60000);
		double t = now_us();
		if (proto_client_request(b->c, &b->tuple, 1, got, b, &id) < 0)
			exit(1);
		b->start[id % (uint64_t)b->target] = t;
		b->issued++;
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double run_phase(struct bench *b, long n, int window, bool record)
{
	b->target = n;
	b->issued = b->done = b->failed = 0;
	b->window = window;
	b->start = calloc((size_t)n, sizeof(double));
	b->lat = record ? calloc((size_t)n, sizeof(double)) : NULL;
	double t0 = now_us();
	issue(b);
	while (b->done < n)
		uv_run(&b->loop, UV_RUN_ONCE);
	double el = now_us() - t0;
	free(b->start);
	if (b->failed) {
		fprintf(stderr, "identity_rtt: %ld of %ld requests failed\n", b->failed, n);
		exit(1);
	}
	return el;
}

/* Per-context raw sign+verify of the same context bytes the protocol
 * sends: *mean and *p50 in microseconds (the median resists preemption on
 * a loaded machine). */
static void raw_sign_verify_us(const struct world *w, long n, double *mean, double *p50)
{
	uint8_t nonce[32] = { 1 };
	struct proto_tuple t;
	proto_tuple_from_strings(&t, IPPROTO_TCP, "192.0.2.10", 40000, "198.51.100.7", 443);
	struct context_input in = { .topology = PROTO_TOPOLOGY_SPLIT, .source = IDENTITY_SOURCE_DELEGATED,
		.subject = &w->subject, .ancestors = &w->parent, .n_ancestors = 1, .anchor = &w->anchor,
		.tuple = &t, .nonce = nonce };
	uint8_t *buf;
	size_t len;
	if (context_encode(&in, &buf, &len) < 0)
		exit(1);
	uint8_t sig[64];
	struct pub_key ip;
	sign_key_public(w->inst, &ip);
	double *lat = calloc((size_t)n, sizeof(double));
	double sum = 0;
	for (long i = 0; i < n; i++) {
		buf[len - 1] ^= (uint8_t)i; /* different bytes each time */
		double t0 = now_us();
		sign_detached(w->inst, SIGN_DOMAIN_CONTEXT, buf, len, sig);
		if (!verify_detached(&ip, SIGN_DOMAIN_CONTEXT, buf, len, sig))
			exit(1);
		lat[i] = now_us() - t0;
		sum += lat[i];
	}
	qsort(lat, (size_t)n, sizeof(double), cmp_d);
	*mean = sum / (double)n;
	*p50 = lat[n / 2];
	free(lat);
	free(buf);
}

static pid_t start_server(struct world *w, const char *ep, int cpu)
{
	int p[2];
	if (pipe(p) < 0)
		exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (cpu >= 0) {
			cpu_set_t set;
			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			sched_setaffinity(0, sizeof(set), &set);
		}
		run_server(w, ep, p[1]);
	}
	close(p[1]);
	char c;
	if (read(p[0], &c, 1) != 1) {
		fprintf(stderr, "identity_rtt: server did not start\n");
		exit(1);
	}
	close(p[0]);
	return pid;
}

static void stop_server(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

static void connect_client(struct bench *b, struct world *w, const char *ep)
{
	memset(b, 0, sizeof(*b));
	uv_loop_init(&b->loop);
	if (verifier_new(&w->prov_pub, 1, NULL, &b->v) < 0)
		exit(1);
	struct proto_client_opts o = { .endpoint = ep, .verifier = b->v, .on_state = on_state,
				       .userdata = b, .request_timeout_ms = 10000 };
	if (proto_client_start(&b->loop, &o, &b->c) < 0)
		exit(1);
	while (!b->ready)
		uv_run(&b->loop, UV_RUN_ONCE);
	proto_tuple_from_strings(&b->tuple, IPPROTO_TCP, "192.0.2.10", 40000, "198.51.100.7", 443);
}

static void close_client(struct bench *b)
{
	proto_client_stop(b->c, NULL, NULL);
	uv_run(&b->loop, UV_RUN_DEFAULT);
	uv_loop_close(&b->loop);
	verifier_free(b->v);
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

int main(int argc, char **argv)
{
	long n = 10000;
	int opt;
	static const struct option lopts[] = { { "quick", no_argument, NULL, 'q' }, { 0 } };
	while ((opt = getopt_long(argc, argv, "n:", lopts, NULL)) != -1) {
		if (opt == 'n')
			n = atol(optarg);
		else if (opt == 'q')
			n = 2000;
		else {
			fprintf(stderr, "usage: bench_identity_rtt [--quick] [-n REQUESTS]\n");
			return 2;
		}
	}
	if (n < 100)
		n = 100;
	signal(SIGPIPE, SIG_IGN);
	struct world w;
	world_init(&w);
	char dir[] = "/tmp/tether-bench-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char ep[160], path[128];
	snprintf(path, sizeof(path), "%s/proc.sock", dir);
	snprintf(ep, sizeof(ep), "unix:%s", path);

	/* 1. two processes, each free to use its own core */
	double raw, raw_p50;
	raw_sign_verify_us(&w, n, &raw, &raw_p50);
	pid_t srv = start_server(&w, ep, -1);
	struct bench b;
	connect_client(&b, &w, ep);
	run_phase(&b, n / 10, 1, false); /* warm-up */
	run_phase(&b, n, 1, true);
	double *lat = b.lat;
	qsort(lat, (size_t)n, sizeof(double), cmp_d);
	double sum = 0;
	for (long i = 0; i < n; i++)
		sum += lat[i];
	double mean = sum / (double)n, p50 = lat[n / 2], p99 = lat[(long)((double)n * 0.99)];
	free(lat);
	close_client(&b);
	stop_server(srv);

	/* 2. pipelined, with a fresh server so the CPU time of both
	 * processes is (almost) only this phase: contexts per CPU-second is
	 * what one dedicated core sustains, independent of machine load */
	double child0 = cpu_s(RUSAGE_CHILDREN);
	srv = start_server(&w, ep, -1);
	connect_client(&b, &w, ep);
	double self0 = cpu_s(RUSAGE_SELF);
	double el = run_phase(&b, n, 64, false);
	double self_cpu = cpu_s(RUSAGE_SELF) - self0;
	double pipelined = (double)n / (el / 1e6);
	close_client(&b);
	stop_server(srv);
	double child_cpu = cpu_s(RUSAGE_CHILDREN) - child0;
	double per_cpu_s = (double)n / (self_cpu + child_cpu);

	/* 3. both processes on one core (cpu 0): everything a context costs,
	 * signing included, on a single core */
	pin(0);
	double raw1, raw1_p50;
	raw_sign_verify_us(&w, n, &raw1, &raw1_p50);
	srv = start_server(&w, ep, 0);
	connect_client(&b, &w, ep);
	run_phase(&b, n / 10, 64, false);
	el = run_phase(&b, n, 64, false);
	double one_core = (double)n / (el / 1e6);
	close_client(&b);
	stop_server(srv);
	unlink(path);
	rmdir(dir);

	printf("identity_rtt: raw libsodium sign+verify: p50 %.1f us, mean %.1f us (%.0f/s); pinned to cpu 0: p50 %.1f us, mean %.1f us\n",
	       raw_p50, raw, 1e6 / raw, raw1_p50, raw1);
	printf("identity_rtt: sequential round trip over unix socket: p50 %.1f us, p99 %.1f us, mean %.1f us (%.0f/s)\n",
	       p50, p99, mean, 1e6 / mean);
	printf("identity_rtt: pipelined (64 in flight, 2 processes): %.0f verified contexts/s (%.1f us each)\n",
	       pipelined, 1e6 / pipelined);
	printf("identity_rtt: CPU cost: %.1f us net side + %.1f us proc side per context = %.0f verified contexts "
	       "per CPU-second (target >= 10000 on one core)\n", self_cpu * 1e6 / (double)n,
	       child_cpu * 1e6 / (double)n, per_cpu_s);
	printf("identity_rtt: one core wall clock (both processes on cpu 0, 64 in flight): %.0f verified contexts/s\n",
	       one_core);
	printf("identity_rtt: protocol overhead per context (target <= 2x): round trip p50 / raw p50 %.2fx, "
	       "mean / mean %.2fx, CPU per context / raw p50 %.2fx\n", p50 / raw_p50, mean / raw,
	       (1e6 / per_cpu_s) / raw_p50);
	sign_key_free(w.prov);
	sign_key_free(w.inst);
	signed_cert_clear(&w.cert);
	return 0;
}
