/* The `delegated` strategy against the real proc-side identity service
 * (proc-supervisor/idservice.c, in this process: the test is the anchor).
 * A workload spawned by the test (recorded as its entrypoint) forks a child
 * that connects to a loopback listener; the child is learnt as born in the
 * tree, and the strategy must get its signed identity through the channel.
 * A process the test forks but never records is refused. As root.
 * The same flow recorded in the connect-time registry (as the notifier
 * records it) is answered from there. With --bench N it prints identity
 * latency percentiles and CPU per identity for both paths. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/util.h"
#include "common_test.h"
#include "identity/members.h"
#include "identity/cookies.h"
#include "identity/procref.h"
#include "identity/sockdiag.h"
#include "proc-supervisor/idservice.h"
#include "net-supervisor/identity_delegated.h"

static enum reason ask(uv_loop_t *loop, struct identity_strategy *st, const struct proxy_flow *t,
		       struct box *b)
{
	return resolve_within(loop, st, t, 2000, b);
}

static bool g_anch;
static void on_anchor(struct identity_strategy *s, bool a, void *d)
{
	(void)s;
	(void)d;
	g_anch = a;
}

static bool stopped;
static void stop_done(void *u)
{
	(void)u;
	stopped = true;
}

/* --bench: n identities of one flow, latency and CPU (both sides run in
 * this process: its CPU time per answer is the cost of one identity,
 * whatever else loads the machine). */
static bool g_no_chain;
static void bench_phase(uv_loop_t *loop, struct identity_strategy *st, const struct proxy_flow *t, int n,
			const char *path)
{
	uint64_t *lat = calloc((size_t)n, sizeof(*lat));
	size_t k = 0;
	struct box b;
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	for (int i = 0; i < n; i++) {
		if (ask(loop, st, t, &b) == REASON_OK)
			lat[k++] = b.latency_ns;
		flow_identity_free(b.id);
	}
	getrusage(RUSAGE_SELF, &r1);
	double cpu_us = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1e6 +
			(double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
	printf("BENCH delegated vs real idservice (unix socket, same host, %s%s, fallback=%s): identity p50 %.1f us "
	       "p99 %.1f us (n=%zu); CPU per identity (both sides) %.1f us\n",
	       path, g_no_chain ? ", chains walked" : ", pinned chains", getenv("TETHER_FORCE_FALLBACK") ? getenv("TETHER_FORCE_FALLBACK") : "none",
	       (double)pct(lat, k, 0.5) / 1e3, (double)pct(lat, k, 0.99) / 1e3, k, k ? cpu_us / (double)k : 0.0);
	free(lat);
}

int main(int argc, char **argv)
{
	int bench = argc >= 3 && strcmp(argv[1], "--bench") == 0 ? atoi(argv[2]) : 0;
	/* --bench N --no-chain-cache: every answer walked (for the ratio) */
	bool no_chain = argc >= 4 && strcmp(argv[3], "--no-chain-cache") == 0;
	g_no_chain = no_chain;
	if (geteuid() != 0) {
		printf("SKIP: needs root\n");
		return 77;
	}
	alarm(50);
	atexit(kids_kill_all);
	if (proto_crypto_init() < 0)
		return 1;
	char self[600];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 40);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	char wbin[700];
	snprintf(wbin, sizeof(wbin), "%s/ident_workload", self);
	char dir[] = "/tmp/tether-ident-ids.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char ep[128], sockp[100];
	snprintf(sockp, sizeof(sockp), "%s/ctl.sock", dir);
	snprintf(ep, sizeof(ep), "unix:%s", sockp);

	struct kernel_caps caps;
	if (kernel_caps_probe(&caps) < 0)
		return 1;
	struct procref me;
	if (procref_open(&caps, getpid(), &me) < 0)
		return 1;
	struct members *mem = NULL;
	struct members_config mc = { .mode = MEMBERSHIP_LINEAGE };
	if (members_create(&caps, &me, &mc, &mem) < 0)
		return 1;
	procref_close(&me);
	struct sign_key *prov = NULL;
	sign_key_generate(&prov);
	struct pub_key prov_pub;
	sign_key_public(prov, &prov_pub);

	uv_loop_t loop;
	uv_loop_init(&loop);
	struct idservice *ids = NULL;
	/* The connect-time registry, empty until the test records the flow
	 * as the proc-supervisor's notifier would. */
	struct cookie_registry *reg = cookie_registry_new(64);
	struct idservice_opts io = { .endpoint = ep, .caps = &caps, .members = mem, .cookies = reg,
				     .provisioning = prov, .topology = PROTO_TOPOLOGY_SPLIT,
				     .no_chain_cache = no_chain };
	int r = idservice_start(&loop, &io, &ids);
	CHECK(r == 0, "idservice_start: %s", strerror(-r));
	if (r < 0)
		return 1;

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	socklen_t sl = sizeof(sa);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
		return 1;
	char port[16];
	snprintf(port, sizeof(port), "%d", ntohs(sa.sin_port));

	/* The entrypoint, recorded as spawned by the anchor (this process). */
	pid_t w = fork();
	if (w == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(wbin, wbin, port, "hold", (char *)NULL);
		_exit(127);
	}
	kids_track(w);
	int pfd = sys_pidfd_open(w, 0);
	struct procref wref;
	CHECK(pfd >= 0 && procref_from_pidfd(&caps, pfd, &wref) == 0, "open the workload");
	CHECK(members_add_spawned(mem, &wref, MEMBER_ENTRYPOINT) == 0, "record the workload");
	procref_close(&wref);
	if (pfd >= 0)
		close(pfd);
	struct proxy_flow t;
	memset(&t, 0, sizeof(t));
	int c = accept_within(lfd, 5000, &t);
	CHECK(c >= 0, "the workload did not connect");
	/* Learn the connecting child (born in the tree), as the supervisor's
	 * process tracking would. */
	char kp[64], kb[64] = "";
	snprintf(kp, sizeof(kp), "/proc/%d/task/%d/children", (int)w, (int)w);
	read_file_at(AT_FDCWD, kp, kb, sizeof(kb));
	pid_t gchild = (pid_t)atoi(kb);
	enum reason why = REASON_OK;
	CHECK(gchild > 0 && members_learn(mem, gchild, &why, NULL) == 0, "learn pid %d: %s", (int)gchild,
	      reason_word(why));

	struct identity_delegated_config dc = { .endpoint = ep, .pinned = &prov_pub, .n_pinned = 1,
						.backoff_min_ms = 50, .backoff_max_ms = 200 };
	struct identity_strategy *st = NULL;
	CHECK(identity_delegated_new(&loop, &dc, &st) == 0, "strategy");
	if (!st)
		return 1;
	st->on_anchor = on_anchor;
	CHECK(run_until(&loop, &g_anch, 3000), "never anchored to the real identity service");
	struct box b;
	enum reason rr = ask(&loop, st, &t, &b);
	CHECK(rr == REASON_OK, "real service: %s", answer_word(rr));
	if (rr == REASON_OK) {
		size_t bl = strlen(b.id->binary_path);
		CHECK(bl > 15 && strcmp(b.id->binary_path + bl - 15, "/ident_workload") == 0, "binary %s",
		      b.id->binary_path);
		CHECK(b.id->pid == gchild, "pid %d want %d", b.id->pid, (int)gchild);
		CHECK(b.id->n_ancestors == 1 && b.id->ancestors[0].pid == w, "ancestors %zu", b.id->n_ancestors);
		/* protocol 1.2: MAC'd, the signature follows (context_request_id) */
		CHECK(b.id->sha256[0] && (b.id->signed_context_len > 0 || b.id->context_request_id), "hash and context");
		CHECK(b.id->source == FLOW_SOURCE_DELEGATED, "source");
	}
	flow_identity_free(b.id);
	if (bench > 0 && rr == REASON_OK)
		bench_phase(&loop, st, &t, bench, "holder search");

	/* The flow recorded at connect time (cookie -> the connector), as
	 * the notifier does in production: the answer comes from the
	 * registry, still verified against the live process and walked. */
	struct flow_tuple tup;
	struct sockdiag_result sr;
	struct sockdiag *sd = sockdiag_open();
	struct procref gref;
	bool recorded = sd && flow_tuple_from_sockaddr(&tup, IPPROTO_TCP, (struct sockaddr *)&t.client,
							(struct sockaddr *)&t.proxy) == 0 &&
			sockdiag_lookup(sd, &tup, &sr) == 0 && procref_open(&caps, gchild, &gref) == 0;
	CHECK(recorded, "look up and open the connector");
	if (recorded) {
		CHECK(cookie_registry_put(reg, sr.cookie, &gref) == 0, "record the flow");
		procref_close(&gref);
		rr = ask(&loop, st, &t, &b);
		CHECK(rr == REASON_OK, "registry hit: %s", answer_word(rr));
		CHECK(rr != REASON_OK || (b.id->pid == gchild && b.id->n_ancestors == 1 && b.id->ancestors[0].pid == w &&
					  b.id->sha256[0]),
		      "registry hit: the connector, its parent and its hash");
		flow_identity_free(b.id);
		if (bench > 0 && rr == REASON_OK)
			bench_phase(&loop, st, &t, bench, "registry");
	}
	if (sd)
		sockdiag_close(sd);

	/* A child of the anchor that it never recorded: refused. */
	kids_spawn_holder(ntohs(sa.sin_port));
	struct proxy_flow ft;
	int fc = accept_within(lfd, 5000, &ft);
	CHECK(fc >= 0, "foreign connect");
	rr = ask(&loop, st, &ft, &b);
	CHECK(rr == REASON_IDENTITY_UNAVAILABLE || rr == REASON_FOREIGN_PROCESS, "unrecorded child: %s", answer_word(rr));
	flow_identity_free(b.id);
	if (fc >= 0)
		close(fc);

	identity_strategy_destroy(st);
	idservice_stop(ids, stop_done, NULL);
	run_until(&loop, &stopped, 3000);
	cookie_registry_free(reg);
	if (c >= 0)
		close(c);
	close(lfd);
	kids_kill_all();
	members_free(mem);
	sign_key_free(prov);
	unlink(sockp);
	rmdir(dir);
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
	printf("%s (%d failure%s)\n", failures ? "FAILED" : "ok", failures, failures == 1 ? "" : "s");
	return failures ? 1 : 0;
}
