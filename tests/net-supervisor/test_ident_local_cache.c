/* The local strategy's verified-flow cache must never answer for a flow
 * whose facts changed. As root, on loopback: the test forks an anchor A
 * (this binary's image, so its hash is known) -> mid M -> leaf L; L holds a
 * TCP connection to a listener the test owns. Each case resolves the flow
 * twice (the second answer must come from the cache: stats.fast_hits),
 * changes one fact, and checks that the next answer reflects it:
 *   - L execs another binary keeping the socket      -> that binary named;
 *   - L execs another binary that connects anew      -> that binary named (the
 *     holder search does not take L for its pinned self);
 *   - L forks a child that execs another binary      -> ambiguous_socket_owner;
 *   - M (the ancestor) execs another binary          -> the ancestor renamed;
 *   - L exits                                        -> identity_unavailable;
 *   - M exits (L reparented away from the anchor)    -> not attributed;
 *   - an unrelated fork on the host                  -> still a (re-proved) hit;
 *   - L opens a second connection                    -> its chain re-proved
 *     from the first flow's entry (a hit), and after M execs, a third
 *     connection's ancestor is the new binary (the reused chain is dropped);
 *   - L opens 300 more fds, then a connection         -> still named, but by
 *     the pool: more fd links than the loop may read itself.
 * The cheap answers (a cached flow, a known process's new socket) come from
 * the loop itself (stats.inline_answers); --pool-only runs every case with
 * the strategy's pool_only, where none may. The loop answers only while no
 * process forked on the host since the tree was listed (a fork can hand the
 * socket to a new holder): those checks apply when the host stayed quiet
 * since the case's first resolve, and are reported as skipped otherwise
 * (another build or test running beside this one).
 * Every process is in A's process group and killed by it at the end.
 * With --bench N it prints latencies of new flows and of repeated flows. */
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
#include "cmd_tree.h"
#include "common/util.h"
#include "identity/procfs.h"
#include "net-supervisor/identity_local.h"

static char g_self_sha[65];
static bool g_pool_only;
static uint64_t g_forks_at_first; /* host fork count before the case's first resolve */

/* "processes" of /proc/stat: forks on the whole host since boot. */
static uint64_t host_forks_now(void)
{
	static char buf[65536];
	return read_file_at(AT_FDCWD, "/proc/stat", buf, sizeof(buf)) > 0 ? procfs_parse_forks(buf) : 0;
}

/* The loop may answer: nothing forked on the host since the first resolve. */
static bool host_quiet(const char *what)
{
	bool quiet = g_forks_at_first && host_forks_now() == g_forks_at_first;
	if (!quiet)
		fprintf(stderr, "note: %s: the host forked meanwhile, the on-the-loop check is skipped\n", what);
	return quiet;
}

static enum reason resolve(uv_loop_t *loop, struct identity_strategy *s, const struct proxy_flow *t,
			   struct box *b)
{
	return resolve_within(loop, s, t, 3000, b);
}

static void on_anchor(struct identity_strategy *s, bool anchored, void *data)
{
	(void)s;
	if (anchored)
		*(bool *)data = true;
}

/* L's second socket: attributed through the first flow's cached chain (a
 * hit). Then M execs and L's third socket must name the new ancestor, not
 * the cached one; the caller then resolves the first flow, whose entry is
 * stale too. *st: the stats before that. False when a step could not be
 * set up. */
static bool new_flows(uv_loop_t *loop, struct identity_strategy *s, int lfd, struct tree *t,
		      struct identity_local_stats *st)
{
	struct proxy_flow f2, f3;
	if (write(t->cmd_l, "c", 1) != 1)
		return false;
	int c2 = accept_within(lfd, 5000, &f2);
	if (c2 < 0)
		return false;
	struct identity_local_stats a, b;
	identity_local_stats(s, &a);
	struct box bx;
	enum reason r = resolve(loop, s, &f2, &bx);
	identity_local_stats(s, &b);
	CHECK(r == REASON_OK, "new flows: second socket: %s", answer_word(r));
	CHECK(b.fast_hits == a.fast_hits + 1, "new flows: second socket's chain not reused");
	CHECK((!g_pool_only && !host_quiet("new flows")) || b.inline_answers == a.inline_answers + !g_pool_only,
	      "new flows: second socket %s on the loop", g_pool_only ? "answered" : "not answered");
	CHECK(b.pinned_holders == a.pinned_holders + 1, "new flows: second socket's holder not the pinned process");
	CHECK(r != REASON_OK || (bx.id->n_ancestors == 1 && bx.id->ancestors[0].pid == t->m),
	      "new flows: second socket's chain");
	flow_identity_free(bx.id);
	bool ok = write(t->cmd_m, "x", 1) == 1 && wait_exe(t->m, "/sleep") && write(t->cmd_l, "c", 1) == 1;
	int c3 = ok ? accept_within(lfd, 5000, &f3) : -1;
	if (c3 >= 0) {
		identity_local_stats(s, &a);
		r = resolve(loop, s, &f3, &bx);
		identity_local_stats(s, &b);
		CHECK(r == REASON_OK, "new flows: third socket: %s", answer_word(r));
		CHECK(r != REASON_OK ||
			      (bx.id->n_ancestors == 1 && ends_with(bx.id->ancestors[0].path, "/sleep")),
		      "new flows: third socket's ancestor %s",
		      r == REASON_OK && bx.id->n_ancestors ? bx.id->ancestors[0].path : "-");
		CHECK(b.fast_hits == a.fast_hits, "new flows: third socket answered from a stale chain");
		flow_identity_free(bx.id);
		close(c3);
	}
	close(c2);
	identity_local_stats(s, st); /* before the caller's last resolve */
	return c3 >= 0;
}

/* The many-fds tree's next flow: the loop, having run past its budget
 * for this very set of processes, does not search it again, and the pool
 * answers. */
static void many_fds_again(uv_loop_t *loop, struct identity_strategy *s, int lfd, struct tree *t,
			   const struct identity_local_stats *before, bool tried_before)
{
	struct proxy_flow f;
	int c = write(t->cmd_l, "c", 1) == 1 ? accept_within(lfd, 5000, &f) : -1;
	CHECK(c >= 0, "many fds: second connection");
	if (c < 0)
		return;
	struct box bx;
	enum reason r = resolve(loop, s, &f, &bx);
	struct identity_local_stats st;
	identity_local_stats(s, &st);
	CHECK(r == REASON_OK && bx.id->pid == t->l, "many fds: second connection: %s", answer_word(r));
	/* Judged only when the first flow's loop attempt did run into the
	 * budget: on a busy host (forks elsewhere) the loop may have passed
	 * the first flow to the pool without trying, and then this is its
	 * first search of the tree, rightly. */
	CHECK(!tried_before || st.inline_over_budget == before->inline_over_budget,
	      "many fds: the loop searched the same over-budget tree again");
	CHECK(st.inline_answers == before->inline_answers, "many fds: second connection answered on the loop");
	flow_identity_free(bx.id);
	close(c);
}

enum change { CH_LEAF_EXEC, CH_LEAF_EXEC_CONNECT, CH_LEAF_FORK, CH_MID_EXEC, CH_LEAF_EXIT, CH_MID_EXIT, CH_HOST_FORK,
	      CH_NEW_FLOWS, CH_MANY_FDS };

static const char *change_name(enum change c)
{
	static const char *const n[] = { "leaf exec", "leaf exec+connect", "leaf fork", "mid exec", "leaf exit", "mid exit",
					 "host fork", "new flows", "many fds" };
	return n[c];
}

static void one_case(uv_loop_t *loop, int lfd, int port, enum change ch)
{
	struct tree t;
	if (tree_start(&t, lfd, port, false) < 0) {
		CHECK(0, "%s: tree setup", change_name(ch));
		tree_stop(&t);
		return;
	}
	bool anchored = false;
	struct identity_local_config cfg = { .anchor_pid = t.a, .expected_sha256 = g_self_sha, .retry_ms = 100,
					     .measure_cpu = true, .pool_only = g_pool_only };
	struct identity_strategy *s = NULL;
	int r = identity_local_new(loop, &cfg, &s);
	CHECK(r == 0, "identity_local_new: %s", strerror(-r));
	if (!s) {
		tree_stop(&t);
		return;
	}
	s->on_anchor = on_anchor;
	s->on_anchor_data = &anchored;
	CHECK(run_until(loop, &anchored, 5000), "never anchored (%s)", identity_local_anchor_error(s));

	struct box b;
	struct identity_local_stats st0, st1, st2;
	g_forks_at_first = host_forks_now();
	enum reason rr = resolve(loop, s, &t.flow, &b);
	CHECK(rr == REASON_OK, "%s: first resolve: %s", change_name(ch), answer_word(rr));
	if (rr == REASON_OK) {
		CHECK(b.id->n_ancestors == 1 && b.id->ancestors[0].pid == t.m, "%s: chain", change_name(ch));
		CHECK(strcmp(b.id->sha256, g_self_sha) == 0, "%s: subject sha", change_name(ch));
	}
	flow_identity_free(b.id);
	identity_local_stats(s, &st0);
	rr = resolve(loop, s, &t.flow, &b);
	identity_local_stats(s, &st1);
	CHECK(rr == REASON_OK, "%s: second resolve: %s", change_name(ch), answer_word(rr));
	CHECK(st1.fast_hits == st0.fast_hits + 1, "%s: second resolve not from the cache (%llu -> %llu)",
	      change_name(ch), (unsigned long long)st0.fast_hits, (unsigned long long)st1.fast_hits);
	CHECK((!g_pool_only && !host_quiet(change_name(ch))) || st1.inline_answers == st0.inline_answers + !g_pool_only,
	      "%s: second resolve %s on the loop", change_name(ch), g_pool_only ? "answered" : "not answered");
	flow_identity_free(b.id);

	bool changed = false;
	struct proxy_flow nf;
	int nc = -1;
	switch (ch) {
	case CH_LEAF_EXEC_CONNECT:
		changed = write(t.cmd_l, "w", 1) == 1 && (nc = accept_within(lfd, 5000, &nf)) >= 0 &&
			  wait_exe(t.l, "/ident_workload");
		break;
	case CH_LEAF_EXEC:
		changed = tree_exec_sleep(&t, false);
		break;
	case CH_LEAF_FORK:
		changed = write(t.cmd_l, "f", 1) == 1 && wait_child_exe(t.l, "/sleep");
		break;
	case CH_MID_EXEC:
		changed = tree_exec_sleep(&t, true);
		break;
	case CH_LEAF_EXIT:
		changed = tree_exit(&t, false);
		break;
	case CH_MID_EXIT:
		changed = tree_exit(&t, true);
		break;
	case CH_HOST_FORK: {
		pid_t f = fork();
		if (f == 0)
			_exit(0);
		changed = f > 0 && waitpid(f, NULL, 0) == f;
		break;
	}
	case CH_NEW_FLOWS:
		changed = new_flows(loop, s, lfd, &t, &st1);
		break;
	case CH_MANY_FDS:
		changed = write(t.cmd_l, "d", 1) == 1 && write(t.cmd_l, "c", 1) == 1 &&
			  (nc = accept_within(lfd, 5000, &nf)) >= 0;
		break;
	}
	CHECK(changed, "%s: the change did not happen", change_name(ch));
	rr = resolve(loop, s, ch == CH_LEAF_EXEC_CONNECT || ch == CH_MANY_FDS ? &nf : &t.flow, &b);
	identity_local_stats(s, &st2);
	if (nc >= 0)
		close(nc);
	switch (ch) {
	case CH_LEAF_EXEC_CONNECT:
		CHECK(rr == REASON_OK, "leaf exec+connect: %s", answer_word(rr));
		if (rr == REASON_OK) {
			CHECK(b.id->pid == t.l && ends_with(b.id->binary_path, "/ident_workload"),
			      "leaf exec+connect: binary %s", b.id->binary_path);
			CHECK(strcmp(b.id->sha256, g_self_sha) != 0, "leaf exec+connect: stale sha");
		}
		CHECK(st2.pinned_holders == st1.pinned_holders, "leaf exec+connect: the exec'd holder taken as pinned");
		break;
	case CH_LEAF_EXEC:
		CHECK(rr == REASON_OK, "leaf exec: %s", answer_word(rr));
		if (rr == REASON_OK) {
			CHECK(ends_with(b.id->binary_path, "/sleep"), "leaf exec: binary %s", b.id->binary_path);
			CHECK(strcmp(b.id->sha256, g_self_sha) != 0, "leaf exec: stale sha");
		}
		CHECK(st2.fast_hits == st1.fast_hits, "leaf exec: answered from the cache");
		CHECK(st2.pinned_holders == st1.pinned_holders, "leaf exec: the exec'd holder taken as pinned");
		break;
	case CH_LEAF_FORK:
		CHECK(rr == REASON_AMBIGUOUS_SOCKET_OWNER, "leaf fork: %s", answer_word(rr));
		break;
	case CH_MID_EXEC:
		CHECK(rr == REASON_OK, "mid exec: %s", answer_word(rr));
		if (rr == REASON_OK) {
			CHECK(b.id->n_ancestors == 1 && ends_with(b.id->ancestors[0].path, "/sleep"),
			      "mid exec: ancestor %s", b.id->n_ancestors ? b.id->ancestors[0].path : "-");
			CHECK(b.id->n_ancestors == 1 && strcmp(b.id->ancestors[0].sha256, g_self_sha) != 0,
			      "mid exec: stale ancestor sha");
		}
		CHECK(st2.fast_hits == st1.fast_hits, "mid exec: answered from the cache");
		break;
	case CH_LEAF_EXIT:
		CHECK(rr == REASON_IDENTITY_UNAVAILABLE || rr == REASON_PROCESS_VANISHED, "leaf exit: %s",
		      answer_word(rr));
		break;
	case CH_MID_EXIT:
		CHECK(rr != REASON_OK && rr != REASON__COUNT, "mid exit: %s", answer_word(rr));
		break;
	case CH_HOST_FORK:
		CHECK(rr == REASON_OK, "host fork: %s", answer_word(rr));
		CHECK(st2.fast_hits == st1.fast_hits + 1, "host fork: not re-proved from the cache");
		break;
	case CH_NEW_FLOWS:
		CHECK(rr == REASON_OK, "new flows: first socket after the exec: %s", answer_word(rr));
		CHECK(rr != REASON_OK ||
			      (b.id->n_ancestors == 1 && ends_with(b.id->ancestors[0].path, "/sleep")),
		      "new flows: first socket's ancestor after the exec");
		/* (May be a hit: the third socket's full resolution cached the
		 * new chain, which this one may reuse.) */
		(void)st2;
		break;
	case CH_MANY_FDS:
		CHECK(rr == REASON_OK, "many fds: %s", answer_word(rr));
		CHECK(rr != REASON_OK || (b.id->pid == t.l && b.id->n_ancestors == 1 && b.id->ancestors[0].pid == t.m),
		      "many fds: wrong process named");
		CHECK(st2.inline_answers == st1.inline_answers, "many fds: answered on the loop past its link budget");
		CHECK(st2.resolved == st1.resolved + 1, "many fds: not resolved once");
		CHECK((!g_pool_only && !host_quiet("many fds")) ||
			      st2.inline_over_budget == st1.inline_over_budget + !g_pool_only,
		      "many fds: the loop's attempt did not run into its budget");
		many_fds_again(loop, s, lfd, &t, &st2, st2.inline_over_budget == st1.inline_over_budget + 1);
		break;
	}
	flow_identity_free(b.id);
	identity_strategy_destroy(s);
	bool never = false;
	run_until(loop, &never, 200);
	tree_stop(&t);
}

/* --bench N: identity latency of N *new* flows of one small process (L
 * opens one connection at a time, closing the previous one, so its fd
 * table stays small): the full path with the chain re-proved from the
 * first flow's entry. Also the same flow again (the verified-flow hit). */
static void bench(uv_loop_t *loop, int lfd, int port, int n)
{
	struct tree t;
	if (tree_start(&t, lfd, port, false) < 0) {
		CHECK(0, "bench: tree setup");
		tree_stop(&t);
		return;
	}
	bool anchored = false;
	struct identity_local_config cfg = { .anchor_pid = t.a, .expected_sha256 = g_self_sha, .retry_ms = 100,
					     .measure_cpu = true };
	struct identity_strategy *s = NULL;
	if (identity_local_new(loop, &cfg, &s) < 0 || !s) {
		CHECK(0, "bench: identity_local_new");
		tree_stop(&t);
		return;
	}
	s->on_anchor = on_anchor;
	s->on_anchor_data = &anchored;
	CHECK(run_until(loop, &anchored, 5000), "bench: never anchored");
	uint64_t *lat_new = calloc((size_t)n, sizeof(uint64_t)), *lat_same = calloc((size_t)n, sizeof(uint64_t));
	struct box b;
	uint64_t cold = 0;
	if (resolve(loop, s, &t.flow, &b) == REASON_OK)
		cold = b.latency_ns;
	flow_identity_free(b.id);
	size_t nn = 0, ns = 0;
	int prev = -1;
	struct identity_local_stats s0, s1;
	identity_local_stats(s, &s0);
	for (int i = 0; i < n; i++) {
		struct proxy_flow f;
		if (write(t.cmd_l, "n", 1) != 1)
			break;
		int c = accept_within(lfd, 5000, &f);
		if (c < 0)
			break;
		if (prev >= 0)
			close(prev);
		prev = c;
		if (resolve(loop, s, &f, &b) == REASON_OK)
			lat_new[nn++] = b.latency_ns;
		flow_identity_free(b.id);
	}
	if (prev >= 0)
		close(prev);
	/* Worker CPU per new flow: the cost, whatever else loads the machine. */
	identity_local_stats(s, &s1);
	double cpu_new = nn ? (double)(s1.cpu_ns - s0.cpu_ns) / 1e3 / (double)(s1.resolved - s0.resolved) : 0;
	for (int i = 0; i < n; i++) {
		if (resolve(loop, s, &t.flow, &b) == REASON_OK)
			lat_same[ns++] = b.latency_ns;
		flow_identity_free(b.id);
	}
	CHECK(nn == (size_t)n && ns == (size_t)n, "bench: %zu + %zu of %d resolved", nn, ns, n);
	struct identity_local_stats st;
	identity_local_stats(s, &st);
	printf("BENCH local cache (fallback=%s): first flow (cold) %.1f us; new flows of a known process "
	       "p50 %.1f us p99 %.1f us (worker CPU %.1f us each); same flow again p50 %.1f us p99 %.1f us; hits %llu of %llu (n=%d)\n",
	       getenv("TETHER_FORCE_FALLBACK") ? getenv("TETHER_FORCE_FALLBACK") : "none", (double)cold / 1e3,
	       (double)pct(lat_new, nn, 0.5) / 1e3, (double)pct(lat_new, nn, 0.99) / 1e3, cpu_new,
	       (double)pct(lat_same, ns, 0.5) / 1e3, (double)pct(lat_same, ns, 0.99) / 1e3,
	       (unsigned long long)st.fast_hits, (unsigned long long)st.resolved, n);
	free(lat_new);
	free(lat_same);
	identity_strategy_destroy(s);
	bool never = false;
	run_until(loop, &never, 200);
	tree_stop(&t);
}

int main(int argc, char **argv)
{
	int nbench = argc == 3 && strcmp(argv[1], "--bench") == 0 ? atoi(argv[2]) : 0;
	g_pool_only = argc == 2 && strcmp(argv[1], "--pool-only") == 0;
	if (geteuid() != 0) {
		printf("SKIP: needs root\n");
		return 77;
	}
	if (sodium_init() < 0 || sha256_path("/proc/self/exe", g_self_sha) < 0)
		return 1;
	if (access("/bin/sleep", X_OK) != 0) {
		printf("SKIP: no /bin/sleep\n");
		return 77;
	}
	int port;
	int lfd = loopback_listen(16, &port);
	if (lfd < 0)
		return 1;
	uv_loop_t loop;
	uv_loop_init(&loop);
	if (nbench > 0)
		bench(&loop, lfd, port, nbench);
	else
		for (enum change c = CH_LEAF_EXEC; c <= CH_MANY_FDS; c++)
			one_case(&loop, lfd, port, c);
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
	close(lfd);
	printf("%s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures ? 1 : 0;
}
