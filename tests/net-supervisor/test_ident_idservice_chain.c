/* The identity service's pinned chains (identity/chain.h) must never answer
 * for a process whose facts changed. As root, on loopback: this process is
 * the anchor (a child subreaper, as the proc-supervisor is) and runs the
 * real identity service; its tree is M (recorded as the entrypoint) -> L
 * (learnt as born in the tree), L holding a connection to a listener the
 * test owns. The delegated strategy asks through the real channel. Each
 * case asks twice (the second answer must be re-proved from the pinned
 * chain: stats.chain_subject_hits), changes one fact, and checks the next
 * answer reflects it and was walked:
 *   - L execs another binary keeping the socket       -> that binary named;
 *   - M (the ancestor) execs another binary            -> the ancestor renamed;
 *   - M exits (L reparented to the anchor)             -> walked (recorded lineage);
 *   - L exits                                          -> refused;
 *   - the flow recorded at connect time (registry), then L execs -> walked,
 *     the connect-time binary is not given the new image's hash;
 *   - M forks a new child that connects               -> its chain reused
 *     from L's (chain_parent_hits), its own pid and image;
 *   - a service started with no_chain_cache           -> never a hit. */
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

#include "common/kernel.h"
#include "common/util.h"
#include "common_test.h"
#include "cmd_tree.h"
#include "identity/cookies.h"
#include "identity/members.h"
#include "identity/procref.h"
#include "identity/sockdiag.h"
#include "net-supervisor/identity_delegated.h"
#include "proc-supervisor/idservice.h"
#include "tests/common/loopback.h"

static char g_self_sha[65];
static struct kernel_caps g_caps;

struct svc {
	uv_loop_t *loop;
	struct members *mem;
	struct cookie_registry *reg;
	struct idservice *ids;
	struct identity_strategy *st;
	char sockp[160];
	bool anchored, stopped;
};

static void on_anchor(struct identity_strategy *s, bool a, void *d)
{
	(void)s;
	if (a)
		((struct svc *)d)->anchored = true;
}

static void stop_done(void *u) { ((struct svc *)u)->stopped = true; }

static int svc_start(struct svc *v, uv_loop_t *loop, const char *dir, const char *name, bool no_cache,
		     struct sign_key *prov, const struct pub_key *prov_pub)
{
	memset(v, 0, sizeof(*v));
	v->loop = loop;
	struct procref me;
	if (procref_open(&g_caps, getpid(), &me) < 0)
		return -1;
	struct members_config mc = { .mode = MEMBERSHIP_LINEAGE };
	int r = members_create(&g_caps, &me, &mc, &v->mem);
	procref_close(&me);
	if (r < 0)
		return -1;
	v->reg = cookie_registry_new(64);
	snprintf(v->sockp, sizeof(v->sockp), "%s/%s.sock", dir, name);
	char ep[200];
	snprintf(ep, sizeof(ep), "unix:%s", v->sockp);
	struct idservice_opts io = { .endpoint = ep, .caps = &g_caps, .members = v->mem, .cookies = v->reg,
				     .provisioning = prov, .topology = PROTO_TOPOLOGY_SPLIT,
				     .no_chain_cache = no_cache };
	if (idservice_start(loop, &io, &v->ids) < 0)
		return -1;
	struct identity_delegated_config dc = { .endpoint = ep, .pinned = prov_pub, .n_pinned = 1,
						.backoff_min_ms = 50, .backoff_max_ms = 200 };
	if (identity_delegated_new(loop, &dc, &v->st) < 0 || !v->st)
		return -1;
	v->st->on_anchor = on_anchor;
	v->st->on_anchor_data = v;
	return run_until(loop, &v->anchored, 3000) ? 0 : -1;
}

static void svc_stop(struct svc *v)
{
	if (v->st)
		identity_strategy_destroy(v->st);
	if (v->ids) {
		idservice_stop(v->ids, stop_done, v);
		run_until(v->loop, &v->stopped, 3000);
	}
	cookie_registry_free(v->reg);
	members_free(v->mem);
	unlink(v->sockp);
}

/* Record M as the anchor's entrypoint and learn pid (born in the tree). */
static bool record(struct svc *v, pid_t m, pid_t l)
{
	struct procref ref;
	int pfd = sys_pidfd_open(m, 0);
	bool ok = pfd >= 0 && procref_from_pidfd(&g_caps, pfd, &ref) == 0;
	if (ok) {
		ok = members_add_spawned(v->mem, &ref, MEMBER_ENTRYPOINT) == 0;
		procref_close(&ref);
	}
	if (pfd >= 0)
		close(pfd);
	enum reason why;
	return ok && members_learn(v->mem, l, &why, NULL) == 0;
}

static enum reason ask(struct svc *v, const struct proxy_flow *f, struct box *b)
{
	return resolve_within(v->loop, v->st, f, 2000, b);
}

static struct idservice_stats stats(struct svc *v)
{
	struct idservice_stats s;
	idservice_get_stats(v->ids, &s);
	return s;
}

/* Put L's flow in the connect-time registry, as the notifier would. */
static bool record_connect(struct svc *v, const struct tree *t)
{
	struct flow_tuple tup;
	struct sockdiag_result sr;
	struct procref ref;
	struct sockdiag *sd = sockdiag_open();
	bool ok = sd && flow_tuple_from_sockaddr(&tup, IPPROTO_TCP, (const struct sockaddr *)&t->flow.client,
						 (const struct sockaddr *)&t->flow.proxy) == 0 &&
		  sockdiag_lookup(sd, &tup, &sr) == 0 && procref_open(&g_caps, t->l, &ref) == 0;
	if (sd)
		sockdiag_close(sd);
	if (!ok)
		return false;
	ok = cookie_registry_put(v->reg, sr.cookie, &ref) == 0;
	procref_close(&ref);
	return ok;
}

enum change { CH_LEAF_EXEC, CH_MID_EXEC, CH_MID_EXIT, CH_LEAF_EXIT, CH_REGISTRY_EXEC, CH_NEW_CHILD };

static const char *change_name(enum change c)
{
	static const char *const n[] = { "leaf exec", "mid exec", "mid exit", "leaf exit", "registry exec",
					 "new child" };
	return n[c];
}

static void one_case(struct svc *v, int lfd, int port, enum change ch)
{
	const char *nm = change_name(ch);
	struct tree t;
	if (tree_start(&t, lfd, port, true) < 0 || !record(v, t.m, t.l)) {
		CHECK(0, "%s: tree setup", nm);
		tree_stop(&t);
		return;
	}
	if (ch == CH_REGISTRY_EXEC)
		CHECK(record_connect(v, &t), "%s: record the connect", nm);
	struct box b;
	enum reason rr = ask(v, &t.flow, &b);
	CHECK(rr == REASON_OK, "%s: first answer: %s", nm, answer_word(rr));
	if (rr == REASON_OK) {
		CHECK(b.id->pid == t.l && b.id->n_ancestors == 1 && b.id->ancestors[0].pid == t.m, "%s: chain",
		      nm);
		CHECK(strcmp(b.id->sha256, g_self_sha) == 0, "%s: subject sha", nm);
	}
	flow_identity_free(b.id);
	struct idservice_stats s0 = stats(v);
	rr = ask(v, &t.flow, &b);
	struct idservice_stats s1 = stats(v);
	CHECK(rr == REASON_OK, "%s: second answer: %s", nm, answer_word(rr));
	CHECK(s1.chain_subject_hits == s0.chain_subject_hits + 1, "%s: second answer not re-proved (%llu -> %llu)",
	      nm, (unsigned long long)s0.chain_subject_hits, (unsigned long long)s1.chain_subject_hits);
	if (rr == REASON_OK)
		CHECK(b.id->pid == t.l && b.id->n_ancestors == 1 && b.id->ancestors[0].pid == t.m &&
			      strcmp(b.id->sha256, g_self_sha) == 0,
		      "%s: the re-proved answer differs", nm);
	flow_identity_free(b.id);

	bool changed = false;
	struct proxy_flow kf;
	int kc = -1;
	pid_t k = 0;
	switch (ch) {
	case CH_LEAF_EXEC:
	case CH_REGISTRY_EXEC:
		changed = tree_exec_sleep(&t, false);
		break;
	case CH_MID_EXEC:
		changed = tree_exec_sleep(&t, true);
		break;
	case CH_MID_EXIT:
		changed = tree_exit(&t, true);
		/* reap it: L is then our child (we are its subreaper) */
		changed = changed && waitpid(t.m, NULL, 0) == t.m;
		break;
	case CH_LEAF_EXIT:
		changed = tree_exit(&t, false);
		break;
	case CH_NEW_CHILD:
		changed = write(t.cmd_m, "k", 1) == 1 && (kc = accept_within(lfd, 5000, &kf)) >= 0 &&
			  (k = wait_other_child(t.m, t.l)) > 0;
		if (changed) {
			enum reason why;
			changed = members_learn(v->mem, k, &why, NULL) == 0;
		}
		break;
	}
	CHECK(changed, "%s: the change did not happen", nm);
	s0 = stats(v);
	rr = ask(v, ch == CH_NEW_CHILD ? &kf : &t.flow, &b);
	s1 = stats(v);
	bool subject_hit = s1.chain_subject_hits != s0.chain_subject_hits;
	bool parent_hit = s1.chain_parent_hits != s0.chain_parent_hits;
	switch (ch) {
	case CH_LEAF_EXEC:
		CHECK(rr == REASON_OK, "%s: %s", nm, answer_word(rr));
		if (rr == REASON_OK) {
			CHECK(ends_with(b.id->binary_path, "/sleep"), "%s: binary %s", nm, b.id->binary_path);
			CHECK(strcmp(b.id->sha256, g_self_sha) != 0, "%s: stale sha", nm);
		}
		CHECK(!subject_hit && !parent_hit, "%s: answered from a pinned chain", nm);
		break;
	case CH_REGISTRY_EXEC:
		/* The registry names the binary as of connect; the image now is
		 * another, so it must not carry the cached (or any) hash of the
		 * connect-time binary's name. */
		CHECK(rr != REASON_OK || strcmp(b.id->sha256, g_self_sha) != 0, "%s: stale sha", nm);
		CHECK(!subject_hit && !parent_hit, "%s: answered from a pinned chain", nm);
		break;
	case CH_MID_EXEC:
		CHECK(rr == REASON_OK, "%s: %s", nm, answer_word(rr));
		if (rr == REASON_OK)
			CHECK(b.id->n_ancestors == 1 && ends_with(b.id->ancestors[0].path, "/sleep"),
			      "%s: ancestor %s", nm, b.id->n_ancestors ? b.id->ancestors[0].path : "-");
		CHECK(!subject_hit && !parent_hit, "%s: answered from a pinned chain", nm);
		break;
	case CH_MID_EXIT:
		/* L is now our child; its recorded lineage still runs through
		 * the exited M: whatever the walk says, it said it. */
		CHECK(rr == REASON_OK || rr == REASON_ANCESTRY_NOT_ANCHORED || rr == REASON_FOREIGN_PROCESS,
		      "%s: %s", nm, answer_word(rr));
		CHECK(!subject_hit && !parent_hit, "%s: answered from a pinned chain", nm);
		break;
	case CH_LEAF_EXIT:
		CHECK(rr != REASON_OK && rr != REASON__COUNT, "%s: %s", nm, answer_word(rr));
		break;
	case CH_NEW_CHILD:
		CHECK(rr == REASON_OK, "%s: %s", nm, answer_word(rr));
		if (rr == REASON_OK)
			CHECK(b.id->pid == k && b.id->n_ancestors == 1 && b.id->ancestors[0].pid == t.m &&
				      strcmp(b.id->sha256, g_self_sha) == 0,
			      "%s: identity pid %d (want %d)", nm, (int)b.id->pid, (int)k);
		CHECK(parent_hit && !subject_hit, "%s: the parent's pinned chain was not reused", nm);
		break;
	}
	flow_identity_free(b.id);
	if (kc >= 0)
		close(kc);
	pid_t l = t.l;
	tree_stop(&t); /* kills M's process group, L still in it */
	if (ch == CH_MID_EXIT)
		waitpid(l, NULL, 0); /* our child since M exited */
}

/* no_chain_cache: three answers of one flow, none re-proved. */
static void no_cache_case(struct svc *v, int lfd, int port)
{
	struct tree t;
	if (tree_start(&t, lfd, port, true) < 0 || !record(v, t.m, t.l)) {
		CHECK(0, "no cache: tree setup");
		tree_stop(&t);
		return;
	}
	for (int i = 0; i < 3; i++) {
		struct box b;
		enum reason rr = ask(v, &t.flow, &b);
		CHECK(rr == REASON_OK, "no cache: answer %d: %s", i, answer_word(rr));
		flow_identity_free(b.id);
	}
	struct idservice_stats s = stats(v);
	CHECK(s.chain_subject_hits == 0 && s.chain_parent_hits == 0, "no cache: %llu + %llu hits",
	      (unsigned long long)s.chain_subject_hits, (unsigned long long)s.chain_parent_hits);
	tree_stop(&t);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP: needs root\n");
		return 77;
	}
	if (access("/bin/sleep", X_OK) != 0) {
		printf("SKIP: no /bin/sleep\n");
		return 77;
	}
	alarm(55);
	if (proto_crypto_init() < 0 || sodium_init() < 0 || sha256_path("/proc/self/exe", g_self_sha) < 0 ||
	    kernel_caps_probe(&g_caps) < 0)
		return 1;
	/* As the proc-supervisor: orphans of the tree come to us. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	signal(SIGPIPE, SIG_IGN);
	char dir[] = "/tmp/tether-ids-chain.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	struct sign_key *prov = NULL;
	sign_key_generate(&prov);
	struct pub_key prov_pub;
	sign_key_public(prov, &prov_pub);
	int port;
	int lfd = loopback_listen(16, &port);
	if (lfd < 0)
		return 1;
	uv_loop_t loop;
	uv_loop_init(&loop);

	struct svc v;
	if (svc_start(&v, &loop, dir, "ctl", false, prov, &prov_pub) == 0) {
		for (enum change c = CH_LEAF_EXEC; c <= CH_NEW_CHILD; c++)
			one_case(&v, lfd, port, c);
	} else {
		CHECK(0, "service and strategy");
	}
	svc_stop(&v);
	struct svc nv;
	if (svc_start(&nv, &loop, dir, "ctl-nocache", true, prov, &prov_pub) == 0)
		no_cache_case(&nv, lfd, port);
	else
		CHECK(0, "no-cache service and strategy");
	svc_stop(&nv);

	close(lfd);
	sign_key_free(prov);
	rmdir(dir);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
	printf("%s (%d failure%s)\n", failures ? "FAILED" : "ok", failures, failures == 1 ? "" : "s");
	return failures ? 1 : 0;
}
