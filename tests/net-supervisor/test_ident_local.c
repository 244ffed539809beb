/* The `local` identity strategy end to end, as root, on loopback.
 *
 * A stand-in anchor (ident_anchor, whose image hash the test computes)
 * spawns a workload (ident_workload -> child) that connects to a listener
 * the test owns; the strategy, given the anchor's pid (or its Unix socket),
 * must attribute the accepted connection to the workload binary with the
 * chain up to the anchor. Also: a process outside the anchor's tree, a
 * wrong expected hash, a workload that exits before resolution, the anchor
 * exiting. With --bench N it prints identity and policy latency percentiles.
 * Run it again with TETHER_FORCE_FALLBACK=all for the pre-6.9 paths. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common_test.h"
#include "tests/common/loopback.h"
#include "net-supervisor/identity_local.h"
#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"
#include "launcher/netns.h"

static char g_dir[256], g_anchor_bin[600], g_workload_bin[600];
static char g_anchor_sha[65], g_workload_sha[65];

static pid_t spawn_anchor(const char *sock, int port, const char *mode)
{
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(g_anchor_bin, g_anchor_bin, sock, g_workload_bin, ps, mode, (char *)NULL);
		_exit(127);
	}
	kids_track(p);
	return p;
}

static enum reason resolve(uv_loop_t *loop, struct identity_strategy *s, const struct proxy_flow *t,
			   struct box *b)
{
	return resolve_within(loop, s, t, 3000, b);
}

struct watch {
	bool anchored, lost;
	int refusals;
	enum reason last_refusal;
};

static void on_anchor(struct identity_strategy *s, bool anchored, void *data)
{
	(void)s;
	struct watch *w = data;
	if (anchored)
		w->anchored = true;
	else
		w->lost = true;
}

static void on_refused(enum reason why, const char *detail, void *data)
{
	struct watch *w = data;
	(void)detail;
	w->refusals++;
	w->last_refusal = why;
}

static struct identity_strategy *make(uv_loop_t *loop, pid_t anchor, const char *sock,
				      const char *expected, struct watch *w)
{
	memset(w, 0, sizeof(*w));
	struct identity_local_config cfg = {
		.anchor_pid = anchor,
		.anchor_socket = sock,
		.expected_sha256 = expected,
		.retry_ms = 100,
		.measure_cpu = true, /* the benches print worker CPU */
		.on_anchor_refused = on_refused,
		.data = w,
	};
	struct identity_strategy *s = NULL;
	int r = identity_local_new(loop, &cfg, &s);
	CHECK(r == 0, "identity_local_new: %s", strerror(-r));
	if (s) {
		s->on_anchor = on_anchor;
		s->on_anchor_data = w;
	}
	return s;
}

static void destroy(uv_loop_t *loop, struct identity_strategy *s)
{
	identity_strategy_destroy(s);
	bool never = false;
	run_until(loop, &never, 200);
}

static int write_str(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, v, strlen(v));
	int e = n < 0 ? -errno : 0;
	close(fd);
	return e;
}

static pid_t parent_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *rp = strrchr(buf, ')');
	int ppid = 0;
	if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* --sandbox-cgroup: a subject outside the sandbox cgroup is foreign; moved
 * into it, it resolves. Uses a top-level cgroup of our own, removed after
 * (the subject is moved back first). Skipped without a writable cgroup v2
 * root. */
static void test_cgroup(uv_loop_t *loop, pid_t anchor, const struct proxy_flow *t, pid_t subject)
{
	char cg[400], cgrel[64], procs[420], orig[512] = "", back[1000], rootprocs[300];
	struct kernel_caps caps;
	if (kernel_caps_probe(&caps) < 0 || !caps.cgroup_v2) {
		printf("SKIP cgroup case: no cgroup v2\n");
		return;
	}
	snprintf(cgrel, sizeof(cgrel), "/tether-ident-%d", (int)getpid());
	snprintf(cg, sizeof(cg), "%s%s", caps.cgroup_root, cgrel);
	snprintf(rootprocs, sizeof(rootprocs), "%s/cgroup.procs", caps.cgroup_root);
	if (access(rootprocs, W_OK) != 0 || mkdir(cg, 0755) < 0) {
		printf("SKIP cgroup case: no writable cgroup v2 root\n");
		return;
	}
	char pcg[64], buf[600];
	snprintf(pcg, sizeof(pcg), "/proc/%d/cgroup", (int)subject);
	int fd = open(pcg, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n > 3) {
		buf[n] = '\0';
		char *l = strstr(buf, "0::");
		if (l) {
			snprintf(orig, sizeof(orig), "%s", l + 3);
			orig[strcspn(orig, "\n")] = '\0';
		}
	}
	struct watch w;
	memset(&w, 0, sizeof(w));
	struct identity_local_config cfg = { .anchor_pid = anchor, .expected_sha256 = g_anchor_sha,
					     .sandbox_cgroup = cgrel };
	struct identity_strategy *s = NULL;
	CHECK(identity_local_new(loop, &cfg, &s) == 0, "strategy with a sandbox cgroup");
	if (s) {
		s->on_anchor = on_anchor;
		s->on_anchor_data = &w;
		CHECK(run_until(loop, &w.anchored, 5000), "never anchored");
		struct box b;
		enum reason r = resolve(loop, s, t, &b);
		CHECK(r == REASON_FOREIGN_PROCESS, "outside the sandbox cgroup: %s",
		      answer_word(r));
		flow_identity_free(b.id);
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg);
		char pid[16];
		snprintf(pid, sizeof(pid), "%d", (int)subject);
		/* Every live hop below the anchor must be inside the sandbox
		 * cgroup, as the proc-supervisor's workload tree is: move the
		 * subject's ancestors below the anchor too. */
		pid_t chain[8];
		size_t n_chain = 0;
		for (pid_t p = subject; p > 1 && p != anchor && n_chain < 8; p = parent_of(p))
			chain[n_chain++] = p;
		if (n_chain > 1) {
			/* The subject alone inside, a hop between it and the anchor
			 * outside (how an nsenter'd process's child would look). */
			CHECK(write_str(procs, pid) == 0, "move the subject into %s", cg);
			r = resolve(loop, s, t, &b);
			CHECK(r == REASON_FOREIGN_PROCESS, "a hop outside the sandbox cgroup: %s",
			      answer_word(r));
			flow_identity_free(b.id);
		}
		for (size_t i = 0; i < n_chain; i++) {
			char one[16];
			snprintf(one, sizeof(one), "%d", (int)chain[i]);
			CHECK(write_str(procs, one) == 0, "move pid %s into %s", one, cg);
		}
		r = resolve(loop, s, t, &b);
		CHECK(r == REASON_OK, "inside the sandbox cgroup: %s", answer_word(r));
		flow_identity_free(b.id);
		destroy(loop, s);
		snprintf(back, sizeof(back), "%s%s/cgroup.procs", caps.cgroup_root,
			 strcmp(orig, "/") ? orig : "");
		for (size_t i = 0; i < n_chain; i++) {
			char one[16];
			snprintf(one, sizeof(one), "%d", (int)chain[i]);
			if (write_str(back, one) < 0)
				kill(chain[i], SIGKILL);
		}
	}
	for (int i = 0; i < 50 && rmdir(cg) < 0; i++)
		usleep(20000);
}

/* The main case: attributed to the workload, chain to the anchor. */
static void test_resolves(uv_loop_t *loop, int lfd, int port, bool via_socket, int bench)
{
	char sock[300];
	snprintf(sock, sizeof(sock), "%s/anchor.sock", g_dir);
	pid_t a = spawn_anchor(via_socket ? sock : "-", port, "hold");
	struct proxy_flow t;
	int c = accept_within(lfd, 5000, &t);
	CHECK(c >= 0, "the workload did not connect");
	struct watch w;
	struct identity_strategy *s = make(loop, via_socket ? 0 : a, via_socket ? sock : NULL,
					   g_anchor_sha, &w);
	if (!s || c < 0)
		goto out;
	CHECK(run_until(loop, &w.anchored, 5000), "never anchored (%s)", identity_local_anchor_error(s));
	struct box b;
	enum reason r = resolve(loop, s, &t, &b);
	CHECK(r == REASON_OK, "resolve (%s): %s", via_socket ? "socket" : "pid",
	      answer_word(r));
	if (r == REASON_OK) {
		CHECK(ends_with(b.id->binary_path, "/ident_workload"), "binary %s", b.id->binary_path);
		CHECK(strcmp(b.id->sha256, g_workload_sha) == 0, "sha256 %s", b.id->sha256);
		CHECK(b.id->source == FLOW_SOURCE_LOCAL_PROCFS, "source");
		CHECK(b.id->n_ancestors == 1, "ancestors %zu", b.id->n_ancestors);
		if (b.id->n_ancestors >= 1) {
			CHECK(ends_with(b.id->ancestors[0].path, "/ident_workload"), "ancestor %s",
			      b.id->ancestors[0].path);
			CHECK(strcmp(b.id->ancestors[0].sha256, g_workload_sha) == 0, "ancestor sha");
		}
		CHECK(b.id->process_key && strchr(b.id->process_key, ':'), "key");
		CHECK(b.id->pid > 0 && b.id->pid != a, "pid %d", b.id->pid);
	}
	if (bench > 0 && r == REASON_OK) {
		/* Identity: the same held flow resolved again and again (warm
		 * hash and holder caches, the steady state of a busy proxy). */
		uint64_t *lat = calloc((size_t)bench, sizeof(*lat));
		size_t n = 0;
		for (int i = 0; i < bench; i++) {
			struct box bb;
			if (resolve(loop, s, &t, &bb) == REASON_OK) {
				lat[n++] = bb.latency_ns;
				flow_identity_free(bb.id);
			}
		}
		CHECK(n == (size_t)bench, "bench: %zu/%d resolved", n, bench);
		/* Policy: the pure decision on that identity. */
		static const struct policy_section *const secs[] = { &network_policy_section };
		char yaml[1024];
		snprintf(yaml, sizeof(yaml),
			 "version: 1\nnetwork:\n  mode: enforce\n  policies:\n    - name: w\n"
			 "      binaries:\n        - path: %s\n          sha256: \"%s\"\n"
			 "      endpoints:\n        - host: api.example.com\n          ports: [443]\n",
			 b.id->binary_path, g_workload_sha);
		struct policy *p = NULL;
		struct policy_diag d;
		memset(&d, 0, sizeof(d));
		int lr = policy_load_buffer("bench.yaml", yaml, strlen(yaml), secs, 1, &p, &d);
		CHECK(lr == 0, "policy load");
		uint64_t *pl = calloc((size_t)bench, sizeof(*pl));
		if (lr == 0) {
			const struct network_policy *np = policy_section_data(p, "network");
			struct netaddr ip;
			netaddr_parse("203.0.113.10", &ip);
			for (int i = 0; i < bench; i++) {
				uint64_t t0 = (uint64_t)uv_hrtime();
				struct netpolicy_decision dd = netpolicy_decide(np, b.id, "api.example.com", 443, &ip);
				pl[i] = (uint64_t)uv_hrtime() - t0;
				CHECK(dd.allow, "policy allows");
			}
			policy_free(p);
		}
		struct identity_local_stats st;
		identity_local_stats(s, &st);
		printf("BENCH local (%s, fallback=%s): identity p50 %.1f us p99 %.1f us; policy p50 %.2f us "
		       "p99 %.2f us; mean split attribute %.1f / walk %.1f / hash %.1f us, worker CPU %.1f us (n=%d)\n",
		       via_socket ? "anchor-socket" : "anchor-pid",
		       getenv("TETHER_FORCE_FALLBACK") ? getenv("TETHER_FORCE_FALLBACK") : "none",
		       (double)pct(lat, n, 0.5) / 1e3, (double)pct(lat, n, 0.99) / 1e3,
		       (double)pct(pl, (size_t)bench, 0.5) / 1e3, (double)pct(pl, (size_t)bench, 0.99) / 1e3,
		       (double)st.attribute_ns / (double)st.resolved / 1e3,
		       (double)st.walk_ns / (double)st.resolved / 1e3,
		       (double)st.hash_ns / (double)st.resolved / 1e3,
		       (double)st.cpu_ns / (double)st.resolved / 1e3, bench);
		free(lat);
		free(pl);
	}
	if (!via_socket && r == REASON_OK && b.id)
		test_cgroup(loop, a, &t, b.id->pid);
	flow_identity_free(b.id);

	/* A process outside the anchor's tree connecting: never attributed. */
	pid_t f = kids_spawn_holder(port);
	struct proxy_flow ft;
	int fc = accept_within(lfd, 5000, &ft);
	CHECK(fc >= 0, "foreign did not connect");
	if (fc >= 0) {
		r = resolve(loop, s, &ft, &b);
		CHECK(r == REASON_IDENTITY_UNAVAILABLE, "foreign: %s",
		      answer_word(r));
		flow_identity_free(b.id);
		close(fc);
	}
	kids_kill(f);

	/* The anchor exits: not anchored any more, flows are not_ready. */
	if (!via_socket) {
		kids_kill(a);
		CHECK(run_until(loop, &w.lost, 3000), "anchor exit not noticed");
		CHECK(!s->anchored, "still anchored");
		r = resolve(loop, s, &t, &b);
		CHECK(r == REASON_NOT_READY, "after anchor exit: %s",
		      answer_word(r));
		flow_identity_free(b.id);
	}
out:
	if (c >= 0)
		close(c);
	if (s)
		destroy(loop, s);
	kids_kill(a);
}

/* N distinct flows of one workload, each resolved once: the holder
 * search runs for every new socket; the hash cache is warm after the
 * first. Identity latency as the proxy sees it (queue + work + delivery). */
static void bench_distinct(uv_loop_t *loop, int lfd, int port, int n)
{
	char mode[32];
	snprintf(mode, sizeof(mode), "hold:%d", n);
	pid_t a = spawn_anchor("-", port, mode);
	int *fds = calloc((size_t)n, sizeof(*fds));
	struct proxy_flow *ts = calloc((size_t)n, sizeof(*ts));
	uint64_t *lat = calloc((size_t)n, sizeof(*lat));
	int got = 0;
	while (got < n && (fds[got] = accept_within(lfd, 5000, &ts[got])) >= 0)
		got++;
	CHECK(got == n, "bench: %d/%d connected", got, n);
	struct watch w;
	struct identity_strategy *s = make(loop, a, NULL, g_anchor_sha, &w);
	size_t ok = 0;
	if (s && run_until(loop, &w.anchored, 5000)) {
		for (int i = 0; i < got; i++) {
			struct box b;
			if (resolve(loop, s, &ts[i], &b) == REASON_OK)
				lat[ok++] = b.latency_ns;
			flow_identity_free(b.id);
		}
		CHECK(ok == (size_t)got, "bench: %zu/%d resolved", ok, got);
		struct identity_local_stats st;
		identity_local_stats(s, &st);
		printf("BENCH local distinct flows (anchor-pid, fallback=%s): identity p50 %.1f us p99 %.1f us; "
		       "mean split attribute %.1f / walk %.1f / hash %.1f us, worker CPU %.1f us (n=%zu)\n",
		       getenv("TETHER_FORCE_FALLBACK") ? getenv("TETHER_FORCE_FALLBACK") : "none",
		       (double)pct(lat, ok, 0.5) / 1e3, (double)pct(lat, ok, 0.99) / 1e3,
		       (double)st.attribute_ns / (double)(st.resolved ? st.resolved : 1) / 1e3,
		       (double)st.walk_ns / (double)(st.resolved ? st.resolved : 1) / 1e3,
		       (double)st.hash_ns / (double)(st.resolved ? st.resolved : 1) / 1e3,
		       (double)st.cpu_ns / (double)(st.resolved ? st.resolved : 1) / 1e3, ok);
	}
	if (s)
		destroy(loop, s);
	for (int i = 0; i < got; i++)
		close(fds[i]);
	kids_kill(a);
	free(fds);
	free(ts);
	free(lat);
}

static void test_wrong_hash(uv_loop_t *loop, int lfd, int port)
{
	pid_t a = spawn_anchor("-", port, "hold");
	struct proxy_flow t;
	int c = accept_within(lfd, 5000, &t);
	CHECK(c >= 0, "the workload did not connect");
	struct watch w;
	struct identity_strategy *s = make(loop, a, NULL, g_workload_sha /* not the anchor's */, &w);
	if (s) {
		bool never = false;
		run_until(loop, &never, 600);
		CHECK(!w.anchored && !s->anchored, "anchored with the wrong hash");
		CHECK(w.refusals >= 1 && w.last_refusal == REASON_ANCHOR_UNKNOWN, "refusal %d %s",
		      w.refusals, reason_word(w.last_refusal));
		CHECK(strstr(identity_local_anchor_error(s), "expected") != NULL, "error: %s",
		      identity_local_anchor_error(s));
		if (c >= 0) {
			struct box b;
			enum reason r = resolve(loop, s, &t, &b);
			CHECK(r == REASON_NOT_READY, "unanchored resolve: %s",
			      answer_word(r));
			flow_identity_free(b.id);
		}
		destroy(loop, s);
	}
	if (c >= 0)
		close(c);
	kids_kill(a);
}

static void test_exited(uv_loop_t *loop, int lfd, int port)
{
	pid_t a = spawn_anchor("-", port, "exit");
	struct proxy_flow t;
	int c = accept_within(lfd, 5000, &t);
	CHECK(c >= 0, "the workload did not connect");
	struct watch w;
	struct identity_strategy *s = make(loop, a, NULL, g_anchor_sha, &w);
	if (s && c >= 0) {
		CHECK(run_until(loop, &w.anchored, 5000), "never anchored");
		/* Wait for the workload's close (EOF), bounded. */
		struct pollfd p = { .fd = c, .events = POLLIN };
		CHECK(poll(&p, 1, 5000) == 1, "no EOF from the exiting workload");
		usleep(50 * 1000);
		struct box b;
		enum reason r = resolve(loop, s, &t, &b);
		CHECK(r == REASON_IDENTITY_UNAVAILABLE, "exited workload: %s",
		      answer_word(r));
		flow_identity_free(b.id);
	}
	if (s)
		destroy(loop, s);
	if (c >= 0)
		close(c);
	kids_kill(a);
}

/* Combined topology shape: the workload in its own netns behind a veth,
 * the proxy's listener in another one. sock_diag must run in the
 * workload's netns (/proc/<anchor>/ns/net): without it the client socket
 * is not found. Both namespaces are anonymous (gone with their fds and
 * processes); TEST-NET-2 addresses only. */
static void test_netns(uv_loop_t *loop)
{
	struct netns pa = NETNS_INIT, wb = NETNS_INIT;
	struct topology_error err = { 0 };
	char va[16], vb[16];
	snprintf(va, sizeof(va), "tia%d", (int)(getpid() % 100000));
	snprintf(vb, sizeof(vb), "tib%d", (int)(getpid() % 100000));
	int lfd = -1, c = -1;
	pid_t a = -1;
	struct identity_strategy *s = NULL;
	if (netns_create(NULL, &pa, &err) < 0 || netns_create(NULL, &wb, &err) < 0 ||
	    netns_veth_create(pa.fd, va, wb.fd, vb, &err) < 0 ||
	    netns_addr_add(pa.fd, va, "198.51.100.1/24", &err) < 0 ||
	    netns_addr_add(wb.fd, vb, "198.51.100.2/24", &err) < 0 || netns_link_up(pa.fd, va, &err) < 0 ||
	    netns_link_up(wb.fd, vb, &err) < 0) {
		CHECK(0, "netns setup: %s", err.msg);
		goto out;
	}
	lfd = netns_socket(pa.fd, AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET };
	inet_pton(AF_INET, "198.51.100.1", &sa.sin_addr);
	socklen_t l = sizeof(sa);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 8) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &l) < 0) {
		CHECK(0, "listener in the proxy netns");
		goto out;
	}
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", ntohs(sa.sin_port));
	a = fork();
	if (a == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (netns_enter(wb.fd) < 0)
			_exit(126);
		execl(g_anchor_bin, g_anchor_bin, "-", g_workload_bin, ps, "hold", "198.51.100.1", (char *)NULL);
		_exit(127);
	}
	kids_track(a);
	struct proxy_flow t;
	c = accept_within(lfd, 5000, &t);
	CHECK(c >= 0, "the workload did not connect across the veth");
	if (c < 0)
		goto out;
	/* Our own netns: the client socket is not there. */
	struct watch w;
	s = make(loop, a, NULL, g_anchor_sha, &w);
	if (!s)
		goto out;
	CHECK(run_until(loop, &w.anchored, 5000), "never anchored");
	struct box b;
	enum reason r = resolve(loop, s, &t, &b);
	CHECK(r == REASON_IDENTITY_UNAVAILABLE, "without --workload-netns: %s",
	      answer_word(r));
	flow_identity_free(b.id);
	destroy(loop, s);
	/* In the workload's netns: found. */
	char nsp[64];
	snprintf(nsp, sizeof(nsp), "/proc/%d/ns/net", (int)a);
	memset(&w, 0, sizeof(w));
	struct identity_local_config cfg = { .anchor_pid = a, .expected_sha256 = g_anchor_sha,
					     .workload_netns = nsp };
	s = NULL;
	int rr = identity_local_new(loop, &cfg, &s);
	CHECK(rr == 0, "identity_local_new with netns: %s", strerror(-rr));
	if (!s)
		goto out;
	s->on_anchor = on_anchor;
	s->on_anchor_data = &w;
	CHECK(run_until(loop, &w.anchored, 5000), "never anchored");
	r = resolve(loop, s, &t, &b);
	CHECK(r == REASON_OK, "with --workload-netns: %s", answer_word(r));
	if (r == REASON_OK)
		CHECK(ends_with(b.id->binary_path, "/ident_workload") && b.id->n_ancestors == 1, "identity %s",
		      b.id->binary_path);
	flow_identity_free(b.id);
out:
	if (s)
		destroy(loop, s);
	if (c >= 0)
		close(c);
	if (lfd >= 0)
		close(lfd);
	if (a > 0)
		kids_kill(a);
	if (pa.fd >= 0)
		netns_link_delete(pa.fd, va, NULL);
	netns_close(&pa);
	netns_close(&wb);
}

int main(int argc, char **argv)
{
	int bench = 0;
	if (argc >= 3 && strcmp(argv[1], "--bench") == 0)
		bench = atoi(argv[2]);
	if (geteuid() != 0) {
		printf("SKIP: needs root\n");
		return 77;
	}
	if (sodium_init() < 0)
		return 1;
	char self[512];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(g_anchor_bin, sizeof(g_anchor_bin), "%s/ident_anchor", self);
	snprintf(g_workload_bin, sizeof(g_workload_bin), "%s/ident_workload", self);
	if (sha256_path(g_anchor_bin, g_anchor_sha) < 0 || sha256_path(g_workload_bin, g_workload_sha) < 0) {
		fprintf(stderr, "helpers missing beside %s\n", self);
		return 1;
	}
	snprintf(g_dir, sizeof(g_dir), "/tmp/tether-ident-local.XXXXXX");
	if (!mkdtemp(g_dir))
		return 1;
	atexit(kids_kill_all);
	alarm(90);
	uv_loop_t loop;
	uv_loop_init(&loop);
	int port;
	int lfd = loopback_listen(64, &port);
	if (lfd < 0)
		return 1;

	test_resolves(&loop, lfd, port, false, bench);
	test_resolves(&loop, lfd, port, true, bench);
	test_wrong_hash(&loop, lfd, port);
	test_exited(&loop, lfd, port);
	test_netns(&loop);
	if (bench > 0)
		bench_distinct(&loop, lfd, port, bench > 400 ? 400 : bench);

	close(lfd);
	kids_kill_all();
	char sp[300];
	snprintf(sp, sizeof(sp), "%s/anchor.sock", g_dir);
	unlink(sp);
	rmdir(g_dir);
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
	printf("%s (%d failure%s)\n", failures ? "FAILED" : "ok", failures, failures == 1 ? "" : "s");
	return failures ? 1 : 0;
}
