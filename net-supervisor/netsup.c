#include "net-supervisor/netsup.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fdlimit.h"
#include "common/log.h"
#include "common/util.h"
#include "net-supervisor/admin.h"
#include "net-supervisor/dns.h"
#include "net-supervisor/transparent.h"
#include "net-supervisor/identity_delegated.h"
#include "net-supervisor/identity_local.h"
#include "net-supervisor/proxy.h"
#include "net-supervisor/revoke.h"
#include "net-supervisor/credstore.h"
#include "net-supervisor/tls_ca.h"
#include "net-supervisor/tls_inspect.h"
#include "net-supervisor/upstream.h"
#include "topology/detect.h"
#include "topology/model.h"

static void audit_flush_prepare(uv_prepare_t *h) { auditq_flush(((struct netsup *)h->data)->audit); }
static void audit_flush_check(uv_check_t *h) { auditq_flush(((struct netsup *)h->data)->audit); }

static void on_anchor(struct identity_strategy *s, bool anchored, void *data)
{
	struct netsup *ns = data;
	if (ns->worker == 0) {
		if (anchored)
			atomic_store(&ns->sh->anchor_refused_last, 0);
		json_t *o = json_object();
		json_object_set_new(o, "strategy", json_string(s->ops->name));
		json_object_set_new(o, "anchor", json_string(s->anchor_desc));
		netsup_audit(ns, anchored ? "anchor_established" : "anchor_lost", o);
	} else {
		/* the same anchor as the main loop's instance: one audit line
		 * per anchor change (the main's); each worker's own readiness
		 * and revocations still follow its instance */
		log_info("worker %u: anchor %s (%s)", ns->worker, anchored ? "established" : "lost", s->anchor_desc);
	}
	netsup_update_ready(ns);
	if (!anchored)
		revoke_after_anchor(ns);
}

/* Another anchor instance took over: what the old one vouched for goes
 * (after the grace, revoke.c). */
static void on_anchor_replaced(struct identity_strategy *s, void *data)
{
	(void)s;
	revoke_after_anchor(data);
}

/* The anchor was refused: local (wrong digest, gone, ...) or delegated
 * (a certificate the pinned keys do not vouch for, ...). */
static void audit_refused(struct netsup *ns, const char *strategy, enum reason why, const char *detail)
{
	/* Whichever worker's channel meets it first (each has its own; a
	 * clock step is seen on the channel that carries the next flow): one
	 * line per reason until an anchor is established again. */
	if (atomic_exchange(&ns->sh->anchor_refused_last, (int)why + 1) == (int)why + 1)
		return;
	json_t *o = json_object();
	if (ns->worker != 0)
		json_object_set_new(o, "worker", json_integer(ns->worker));
	json_object_set_new(o, "strategy", json_string(strategy));
	json_object_set_new(o, "reason", json_string(reason_word(why)));
	json_object_set_new(o, "detail", json_string(detail));
	netsup_audit(ns, "anchor_refused", o);
}

static void on_delegated_refused(enum reason why, const char *detail, void *data)
{
	audit_refused(data, "delegated", why, detail);
}

static void on_local_refused(enum reason why, const char *detail, void *data)
{
	audit_refused(data, "local", why, detail);
}

/* delegated: a new certificate replaced the previous instance, or the
 * same instance renewed its certificate. */
static void on_delegated_event(enum anchor_event_kind kind, const char *word, const char *desc,
			       void *data)
{
	struct netsup *ns = data;
	if (kind != ANCHOR_CHANGED && kind != ANCHOR_RENEWED)
		return; /* established/lost are audited by on_anchor */
	if (ns->worker != 0)
		return; /* one line per change: the main loop's instance (on_anchor) */
	json_t *o = json_object();
	json_object_set_new(o, "strategy", json_string("delegated"));
	json_object_set_new(o, "kind", json_string(word));
	json_object_set_new(o, "anchor", json_string(desc));
	netsup_audit(ns, word, o);
}

/* delegated, protocol 1.2: the signature over a context the MAC let
 * through; `tether verify-context` checks this line like any other with a
 * signed_context. */
static void on_context_signed(uint64_t request_id, enum reason why, const char *b64, void *data)
{
	struct netsup *ns = data;
	json_t *o = json_object();
	json_object_set_new(o, "strategy", json_string("delegated"));
	json_object_set_new(o, "context_request_id",
			    json_integer((json_int_t)netsup_context_request_id(ns, request_id)));
	json_object_set_new(o, "reason", json_string(why == REASON_OK ? "ok" : reason_word(why)));
	if (b64)
		json_object_set_new(o, "signed_context", json_string(b64));
	netsup_audit(ns, "context_signed", o);
}

static int identity_real_new(struct netsup *ns, uv_loop_t *loop, const struct netsup_config *cfg)
{
	if (strcmp(cfg->identity_mode, "local") == 0) {
		char expected[65], path[4096] = "";
		const char *exp = cfg->expected_anchor_sha256;
		if (!exp) {
			int r = identity_local_default_expected(expected, path, sizeof(path));
			if (r < 0) {
				log_error("local identity: no --expected-anchor-sha256 and cannot hash %s: %s",
					  path[0] ? path : "the proc-supervisor beside this executable",
					  strerror(-r));
				return r;
			}
			log_info("local identity: expecting the anchor image of %s (sha256 %s)", path, expected);
			exp = expected;
		}
		struct identity_local_config lc = {
			.anchor_pid = cfg->anchor_pid,
			.anchor_socket = cfg->anchor_socket,
			.identity_feed = cfg->identity_feed,
			.feed_wait_ms = cfg->identity_feed_wait_ms,
			/* one feed subscription per net-supervisor: the main
			 * worker's, shared by the others (made after it) */
			.feed_owner = ns->worker != 0 ? ns->main->identity : NULL,
			.expected_sha256 = exp,
			.workload_netns = cfg->workload_netns,
			.sandbox_cgroup = cfg->sandbox_cgroup,
			.on_anchor_refused = on_local_refused,
			.data = ns,
		};
		int r = identity_local_new(loop, &lc, &ns->identity);
		if (r < 0)
			log_error("local identity strategy: %s", strerror(-r));
		return r;
	}
	struct pub_key keys[4];
	for (size_t i = 0; i < cfg->n_provisioning_pubkey; i++) {
		int r = provkey_load_public(cfg->provisioning_pubkey[i], &keys[i]);
		if (r < 0) {
			log_error("cannot load provisioning public key %s: %s", cfg->provisioning_pubkey[i],
				  strerror(-r));
			return r;
		}
	}
	struct identity_delegated_config dc = {
		.endpoint = cfg->control,
		.pinned = keys,
		.n_pinned = cfg->n_provisioning_pubkey,
		.request_timeout_ms = cfg->identity_timeout_ms,
		.max_clock_skew_ns = cfg->max_clock_skew_s * 1000000000ull,
		.on_anchor_event = on_delegated_event,
		.on_anchor_refused = on_delegated_refused,
		.on_context_signed = on_context_signed,
		.no_mac = cfg->no_identity_mac,
		.data = ns,
	};
	int r = identity_delegated_new(loop, &dc, &ns->identity);
	if (r < 0)
		log_error("delegated identity strategy (%s): %s", cfg->control, strerror(-r));
	return r;
}

/* ---------- workers (--workers, context.h) ---------- */

struct netsup_worker {
	uv_loop_t loop;
	uv_thread_t thread;
	uv_async_t async;
	bool thread_started;
	atomic_bool policy_changed, stop;
};

/* Tell every other worker the main store swapped in a new policy: each
 * takes it between two of its callbacks (policystore_view_refresh), then
 * revokes its own tunnels the new one no longer allows. */
static void workers_policy_changed(struct netsup *ns)
{
	for (unsigned i = 1; i < ns->n_workers; i++) {
		struct netsup *w = ns->workers[i];
		if (!w || !w->wk || !w->wk->thread_started)
			continue; /* stopped (joined): its async handle is closed */
		atomic_store(&w->wk->policy_changed, true);
		uv_async_send(&w->wk->async);
	}
}

static void worker_stop(struct netsup *w);

static void worker_async(uv_async_t *a)
{
	struct netsup *w = a->data;
	if (atomic_exchange(&w->wk->policy_changed, false) && !w->stopping &&
	    policystore_view_refresh(w->policy)) {
		credstore_prime(w->creds, policystore_credentials(w->policy));
		netsup_update_ready(w);
		revoke_after_policy(w);
	}
	if (atomic_load(&w->wk->stop))
		worker_stop(w);
}

static void worker_thread(void *arg)
{
	struct netsup *w = arg;
	uv_run(w->loop, UV_RUN_DEFAULT);
	auditq_free(w->audit); /* its batch: flushed, the parent's queue stays */
	w->audit = NULL;
}

static void on_policy(struct policystore *ps, bool ok, const char *msg, void *data)
{
	struct netsup *ns = data;
	json_t *o = json_object();
	json_object_set_new(o, "ok", json_boolean(ok));
	json_object_set_new(o, "policy_generation", json_integer((json_int_t)policystore_generation(ps)));
	json_t *files = json_array();
	for (size_t i = 0; i < ns->cfg.n_policy; i++)
		json_array_append_new(files, json_string(ns->cfg.policy[i]));
	json_object_set_new(o, "files", files);
	if (ok) {
		ns->sh->metrics.policy_reloads_ok++;
		/* every secret registered with the redactor before a request can carry it */
		if (ns->creds)
			credstore_prime(ns->creds, policystore_credentials(ps));
		const struct network_policy *np = policystore_network(ps);
		json_object_set_new(o, "mode", json_string(np && np->learn ? "learn"
						       : np && np->mode == NETPOL_AUDIT ? "audit" : "enforce"));
		json_object_set_new(o, "rules", json_integer(np ? (json_int_t)np->n_rules : 0));
		size_t nw;
		const char *const *w = policystore_warnings(ps, &nw);
		if (nw) {
			json_t *wa = json_array();
			for (size_t i = 0; i < nw; i++) {
				json_array_append_new(wa, json_string(w[i]));
				log_info("policy: %s", w[i]);
			}
			json_object_set_new(o, "warnings", wa);
		}
		log_info("policy loaded, generation %llu", (unsigned long long)policystore_generation(ps));
	} else {
		ns->sh->metrics.policy_reloads_failed++;
		json_object_set_new(o, "error", json_string(msg));
		log_error("policy reload rejected, keeping generation %llu: %s",
			  (unsigned long long)policystore_generation(ps), msg);
	}
	ns->sh->metrics.policy_generation = policystore_generation(ps);
	netsup_audit(ns, "policy_loaded", o);
	netsup_update_ready(ns);
	if (ok) {
		revoke_after_policy(ns);
		workers_policy_changed(ns);
	}
}

/* The proxy listeners, in cfg->listen_netns when set: the sockets stay
 * in the netns they were created in, so only this thread visits it, and
 * only while binding (no worker thread exists yet, none inherits it). */
static int open_listeners(struct netsup *ns, const struct netsup_config *cfg)
{
	_cleanup_close_ int home = -1, there = -1;
	int r = 0;
	if (cfg->listen_netns) {
		home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		there = open(cfg->listen_netns, O_RDONLY | O_CLOEXEC);
		if (home < 0 || there < 0) {
			r = -errno;
			log_error("--listen-netns %s: %s", cfg->listen_netns, strerror(-r));
			return r;
		}
		if (setns(there, CLONE_NEWNET) < 0) {
			r = -errno;
			log_error("--listen-netns %s: cannot enter it: %s", cfg->listen_netns, strerror(-r));
			return r;
		}
	}
	/* each worker its own socket on every address (SO_REUSEPORT) */
	for (unsigned k = 0; r >= 0 && k < ns->n_workers; k++) {
		struct netsup *w = ns->workers[k];
		for (size_t i = 0; i < cfg->n_listen; i++) {
			r = proxy_listen(w, cfg->listen[i], &w->listeners[w->n_listeners]);
			if (r < 0)
				break;
			w->n_listeners++;
			if (k == 0)
				log_info("proxy listening on %s%s%s%s", cfg->listen[i],
					 cfg->listen_netns ? " in netns " : "",
					 cfg->listen_netns ? cfg->listen_netns : "",
					 ns->n_workers > 1 ? " (a socket per worker, SO_REUSEPORT)" : "");
		}
		for (size_t i = 0; r >= 0 && !cfg->transparent_off && i < cfg->n_transparent_listen; i++) {
			r = transparent_listen(w, cfg->transparent_listen[i], &w->tlisteners[w->n_tlisteners]);
			if (r >= 0) {
				w->n_tlisteners++;
				if (k == 0)
					log_info("transparent capture listening on %s%s%s", cfg->transparent_listen[i],
						 cfg->listen_netns ? " in netns " : "",
						 cfg->listen_netns ? cfg->listen_netns : "");
			}
		}
	}
	for (size_t i = 0; r >= 0 && ns->dns && i < cfg->n_dns_listen; i++) {
		r = dns_listen(ns->dns, cfg->dns_listen[i]);
		if (r >= 0)
			log_info("dns resolver listening on %s (UDP, TCP)%s%s", cfg->dns_listen[i],
				 cfg->listen_netns ? " in netns " : "", cfg->listen_netns ? cfg->listen_netns : "");
	}
	if (home >= 0 && setns(home, CLONE_NEWNET) < 0) {
		/* every later socket (upstream, admin) would land in the wrong
		 * netns: refuse to run rather than misroute */
		log_error("cannot return to our own netns: %m");
		return -errno;
	}
	return r;
}

/* ---------- what the admin endpoint reports (admin.h) ---------- */

static bool admin_ready(void *data, char *why, size_t size)
{
	const struct netsup *main_ns = data, *ns = main_ns;
	bool all = true;
	for (unsigned i = 0; i < main_ns->n_workers; i++)
		if (!main_ns->workers[i] || !main_ns->workers[i]->ready) {
			/* the first worker not ready says why (each worker has its
			 * own channel: one may meet a clock step before the others) */
			if (all && main_ns->workers[i])
				ns = main_ns->workers[i];
			all = false;
		}
	if (all)
		return true;
	char skew[160] = "";
	struct verifier_clock_state cs;
	if (netsup_not_ready_reason(ns) == REASON_CLOCK_SKEW && identity_delegated_clock(ns->identity, &cs))
		snprintf(skew, sizeof(skew), "clock_skew: the proc side's clock is %+.3f s from ours, past "
			 "--max-clock-skew %.0f s; ", (double)cs.skew_ns / 1e9, (double)cs.max_skew_ns / 1e9);
	snprintf(why, size, "not ready: %spolicy %s, anchor %s\n", skew,
		 ns->policy && policystore_loaded(ns->policy) ? "loaded" : "missing",
		 ns->identity && ns->identity->anchored ? "established" : "missing");
	return false;
}

static char *admin_metrics(void *data, size_t *len)
{
	struct netsup *ns = data;
	/* The counters are the workers' shared atomics (one set); the fields
	 * filled here are the main loop's alone. */
	struct metrics *m = &ns->sh->metrics;
	m->relay_held = ns->sh->relay_held;
	m->relay_memory = ns->cfg.relay_memory;
	m->n_workers = ns->n_workers;
	bool ready = true;
	uint64_t on_loop = 0, on_pool = 0, over = 0, hits = 0, fallbacks = 0;
	m->have_local = false;
	for (unsigned i = 0; i < ns->n_workers; i++) {
		const struct netsup *w = ns->workers[i];
		ready = ready && w && w->ready;
		struct identity_local_stats st;
		if (w && identity_local_stats(w->identity, &st)) {
			m->have_local = true;
			on_loop += st.inline_answers;
			on_pool += st.resolved + st.denied - st.inline_answers - st.feed_hits;
			over += st.inline_over_budget;
			hits += st.feed_hits;
			fallbacks += st.feed_fallbacks;
		}
	}
	m->ready = ready;
	m->local_on_loop = on_loop;
	m->local_on_pool = on_pool;
	m->local_over_budget = over;
	m->local_feed_hits = hits;
	m->local_feed_fallbacks = fallbacks;
	/* Each worker's control channel measures the same two clocks, each
	 * when it last could: the skew furthest from zero is reported (a step
	 * shows as soon as one channel has seen it). */
	struct verifier_clock_state cs;
	m->have_clock = false;
	m->have_push = false;
	m->push_kept = m->push_refused = m->push_hits = m->push_waited_hits = m->push_wait_timeouts =
		m->push_unused = 0;
	for (unsigned i = 0; i < ns->n_workers; i++) {
		const struct netsup *w = ns->workers[i];
		if (!w || !identity_delegated_clock(w->identity, &cs))
			continue;
		struct identity_delegated_stats ds;
		identity_delegated_stats(w->identity, &ds);
		m->have_push = true;
		m->push_kept += ds.pushes;
		m->push_refused += ds.pushes_refused;
		m->push_hits += ds.push_hits;
		m->push_waited_hits += ds.push_waited_hits;
		m->push_wait_timeouts += ds.push_wait_timeouts;
		m->push_unused += ds.pushes_unused;
		double sk = (double)cs.skew_ns / 1e9;
		if (!m->have_clock || (cs.measured && (!m->clock_measured || fabs(sk) > fabs(m->clock_skew_s)))) {
			m->clock_measured = cs.measured;
			m->clock_skew_s = sk;
		}
		m->have_clock = true;
		m->clock_skew_max_s = (double)cs.max_skew_ns / 1e9;
	}
	return metrics_render(m, ns->audit, len);
}

/* SIGUSR1: the audit file was rotated (renamed away); write a new one. */
static void on_reopen_signal(uv_signal_t *s, int signum)
{
	(void)signum;
	struct netsup *ns = s->data;
	int r = audit_reopen(ns->audit_log);
	if (r < 0)
		log_error("SIGUSR1: cannot reopen the audit file %s (still writing the old one): %s",
			  ns->cfg.audit_path, strerror(-r));
	else
		log_info("SIGUSR1: audit file %s reopened", ns->cfg.audit_path);
}

static void on_stop_signal(uv_signal_t *s, int signum)
{
	struct netsup *ns = s->data;
	if (ns->stopping)
		return;
	log_info("signal %d: shutting down", signum);
	/* the other workers first (each closes its own on its thread): what
	 * they share with us (DNS records, the audit queue) outlives them */
	for (unsigned i = 1; i < ns->n_workers; i++) {
		struct netsup *w = ns->workers[i];
		if (!w || !w->wk || !w->wk->thread_started)
			continue;
		atomic_store(&w->wk->stop, true);
		uv_async_send(&w->wk->async);
	}
	for (unsigned i = 1; i < ns->n_workers; i++) {
		struct netsup *w = ns->workers[i];
		if (w && w->wk && w->wk->thread_started) {
			uv_thread_join(&w->wk->thread);
			w->wk->thread_started = false;
		}
	}
	worker_stop(ns);
	uv_close((uv_handle_t *)&ns->sigterm, NULL);
	uv_close((uv_handle_t *)&ns->sigint, NULL);
	uv_close((uv_handle_t *)&ns->sigusr1, NULL);
}

/* Close one worker's handles (on its own thread); the main's also closes
 * what only it has (admin, DNS, the policy store). */
static void worker_stop(struct netsup *ns)
{
	if (ns->stopping)
		return;
	ns->stopping = true;
	for (size_t i = 0; i < ns->n_listeners; i++)
		proxy_listener_close(ns->listeners[i]);
	ns->n_listeners = 0;
	for (size_t i = 0; i < ns->n_tlisteners; i++)
		transparent_listener_close(ns->tlisteners[i]);
	ns->n_tlisteners = 0;
	if (ns->worker == 0) {
		admin_close(ns->admin);
		ns->admin = NULL;
		dns_close(ns->dns);
	}
	ns->dns = NULL;
	auditq_flush(ns->audit); /* staged decisions are written and answered first */
	proxy_close_all(ns);
	revoke_stop(ns);
	policystore_close(ns->policy);
	ns->policy = NULL;
	if (ns->identity) {
		identity_strategy_destroy(ns->identity);
		ns->identity = NULL;
	}
	if (ns->wk)
		uv_close((uv_handle_t *)&ns->wk->async, NULL);
	if (ns->audit_handles) {
		uv_close((uv_handle_t *)&ns->audit_prepare, NULL);
		uv_close((uv_handle_t *)&ns->audit_check, NULL);
		ns->audit_handles = false;
	}
}

/* --topology X given: refuse to run where X does not describe us rather
 * than silently use a weaker or wrong identity source. The model says
 * which strategy X uses; a local anchor must share our PID namespace (or,
 * for topologies with separate ones, could not be local at all). Network
 * and mount placement are not checked here: `tether run` deliberately
 * places some daemons' netns differently (docs/topologies.md). */
static int check_topology(const struct netsup_config *cfg)
{
	if (!cfg->topology_given)
		return 0;
	const struct topology *t = topology_by_name(cfg->topology);
	if (!t) {
		char names[256];
		if (topology_names_format(names, sizeof(names), ", ") < 0)
			names[0] = '\0';
		log_error("--topology %s: unknown (one of: %s)", cfg->topology, names);
		return -EINVAL;
	}
	struct topology_channel ch;
	int r = topology_role_channel(t, TOPOLOGY_ROLE_NET_SUPERVISOR, &ch);
	if (r < 0) {
		log_error("topology %s has no net-supervisor role", t->name);
		return r;
	}
	const char *mode = cfg->identity_mode ? cfg->identity_mode : cfg->identity_test_new ? "static" : NULL;
	if (!mode || strcmp(mode, "static") == 0)
		return 0; /* none (never ready) or the test-only strategy */
	bool local = strcmp(mode, "local") == 0;
	if (local && ch.identity != TOPOLOGY_IDENTITY_LOCAL_PROCFS) {
		log_error("topology %s uses delegated identity (the proc-supervisor is in another PID "
			  "namespace): --identity local cannot work there; use --identity delegated",
			  t->name);
		return -EXDEV;
	}
	if (!local && ch.identity != TOPOLOGY_IDENTITY_DELEGATED) {
		log_error("topology %s uses local identity (--identity local); --identity %s does not "
			  "belong to it", t->name, mode);
		return -EXDEV;
	}
	if (local && cfg->anchor_pid > 0) {
		struct topology_peer peer = { .role = TOPOLOGY_ROLE_PROC_SUPERVISOR, .pid = cfg->anchor_pid,
					      .pidfd = -1 };
		struct topology_error err = { 0 };
		r = topology_check_environment(t, TOPOLOGY_ROLE_NET_SUPERVISOR, &peer, 1,
					       TOPOLOGY_DETECT_PID_ONLY, &err);
		if (r < 0) {
			log_error("%s", err.msg[0] ? err.msg : strerror(-r));
			return r;
		}
	}
	return 0;
}

/* Descriptors kept for everything but relayed connections: the 503s being
 * answered (NETSUP_MAX_REJECTING), listeners, the admin server and its 32
 * connections (admin.c), the audit
 * file, the policy watch, the control channel, libuv's own, and the procfs
 * reads and pinned pidfds of identity resolution. */
#define NETSUP_FD_RESERVE 256
/* and for each worker past the first (--workers): its epoll and wakeup
 * descriptors, its identity strategy's (anchor pidfd, sock_diag socket,
 * control channel or feed connection) */
#define NETSUP_FD_RESERVE_PER_WORKER 8

/* A relayed connection holds two descriptors (client and upstream). Past
 * the descriptor limit the kernel, not the proxy, would refuse clients: an
 * accept that fails drops the backlog unanswered, an upstream socket that
 * cannot be created fails an allowed flow. So the connection limit is
 * lowered to what the descriptors can hold, and said so once. */
static int fit_connection_limit(struct netsup_config *cfg)
{
	rlim_t nofile = fdlimit_current();
	const int reserve = NETSUP_FD_RESERVE + NETSUP_FD_RESERVE_PER_WORKER * (int)(cfg->workers - 1);
	size_t cap = fdlimit_capacity(nofile, 2, reserve);
	if (cap == 0) {
		log_error("RLIMIT_NOFILE is %llu: no room for any connection (2 descriptors each, %d kept for "
			  "the daemon); raise it (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=)",
			  (unsigned long long)nofile, reserve);
		return -EMFILE;
	}
	if (cfg->max_conns > cap) {
		log_warn("RLIMIT_NOFILE is %llu: room for %zu concurrent connections (2 descriptors each, %d kept "
			 "for the daemon), not the %zu of --max-connections; serving at most %zu (raise the hard "
			 "limit: ulimit -Hn, systemd LimitNOFILE=, docker --ulimit nofile=)",
			 (unsigned long long)nofile, cap, reserve, cfg->max_conns, cap);
		cfg->max_conns = cap;
	}
	return 0;
}

/* The sandbox CA and the upstream trust store for `tls: inspect`: made
 * at every start (a P-256 key is cheap), the CA written out when asked. */
static int netsup_tls_start(struct netsup *ns)
{
	const struct netsup_config *cfg = &ns->cfg;
	int r = tls_ca_new(0, &ns->tls_ca);
	if (r < 0)
		return r;
	if (!(ns->creds = credstore_new()))
		return -ENOMEM;
	ns->tls_upstream = tls_inspect_upstream_ctx(cfg->upstream_ca);
	if (!ns->tls_upstream)
		return -EINVAL;
	if (cfg->tls_ca_out && (r = tls_ca_write(ns->tls_ca, cfg->tls_ca_out, NULL)) < 0) {
		log_error("--tls-ca-out %s: %s", cfg->tls_ca_out, strerror(-r));
		return r;
	}
	if (cfg->tls_bundle_out) {
		const char *sys = cfg->tls_system_bundle ? cfg->tls_system_bundle
							 : "/etc/ssl/certs/ca-certificates.crt";
		if ((r = tls_ca_write(ns->tls_ca, cfg->tls_bundle_out, sys)) < 0) {
			log_error("--tls-bundle-out %s (after %s): %s", cfg->tls_bundle_out, sys, strerror(-r));
			return r;
		}
	}
	return 0;
}

/* A worker's own identity strategy instance (docs/net-supervisor.md,
 * "Workers"): its anchor events are its own, and so are the tunnels they
 * revoke. */
static int worker_identity(struct netsup *ns, const struct netsup_config *cfg)
{
	uv_loop_t *loop = ns->loop;
	int r;
	if (cfg->identity_test_new) {
		r = cfg->identity_test_new(loop, cfg->identity_test_arg, &ns->identity);
		if (r < 0) {
			log_error("static identity strategy: %s", strerror(-r));
			return r;
		}
	} else if (cfg->identity_mode && strcmp(cfg->identity_mode, "static") != 0) {
		r = identity_real_new(ns, loop, cfg);
		if (r < 0)
			return r;
	} else {
		if (ns->worker == 0)
			log_warn("no identity strategy configured (--identity local|delegated): not ready, "
				 "every connection gets 503 not_ready");
		return 0;
	}
	ns->identity->on_anchor = on_anchor;
	ns->identity->on_replaced = on_anchor_replaced;
	ns->identity->on_anchor_data = ns;
	if (ns->identity->anchored)
		on_anchor(ns->identity, true, ns);
	return 0;
}

/* Worker i (1..N-1) of the main ns: its loop and everything on it, made on
 * the main thread before its thread starts (listeners: open_listeners). */
static int worker_new(struct netsup *ns, unsigned i)
{
	struct netsup *w = calloc(1, sizeof(*w));
	struct netsup_worker *wk = calloc(1, sizeof(*wk));
	if (!w || !wk) {
		free(w);
		free(wk);
		return -ENOMEM;
	}
	ns->workers[i] = w;
	w->wk = wk;
	int r = uv_loop_init(&wk->loop);
	if (r < 0) {
		w->wk = NULL;
		free(wk);
		return r;
	}
	w->loop = &wk->loop;
	w->cfg = ns->cfg;
	w->worker = i;
	w->main = ns;
	w->sh = ns->sh;
	w->n_workers = 0; /* only the main lists the workers */
	/* shared, read-only or locked (docs/net-supervisor.md "Workers") */
	w->audit_log = ns->audit_log;
	w->upstream = ns->upstream;
	w->tls_ca = ns->tls_ca;
	w->tls_upstream = ns->tls_upstream;
	/* its own credential store (credstore.h is single-threaded; the
	 * values it hands out are valid until its next read) */
	if (!(w->creds = credstore_new()))
		return -ENOMEM;
	w->dns = ns->dns;
	if ((r = bufpool_init(&w->pool, ns->cfg.relay_buffer, 256)) < 0)
		return r;
	if ((r = auditq_new_child(ns->audit, &w->audit)) < 0)
		return r;
	uv_prepare_init(w->loop, &w->audit_prepare);
	uv_check_init(w->loop, &w->audit_check);
	w->audit_prepare.data = w->audit_check.data = w;
	uv_prepare_start(&w->audit_prepare, audit_flush_prepare);
	uv_check_start(&w->audit_check, audit_flush_check);
	uv_unref((uv_handle_t *)&w->audit_prepare);
	uv_unref((uv_handle_t *)&w->audit_check);
	w->audit_handles = true;
	revoke_start(w);
	if ((r = policystore_view_new(ns->policy, &w->policy)) < 0)
		return r;
	credstore_prime(w->creds, policystore_credentials(w->policy));
	uv_async_init(w->loop, &wk->async, worker_async);
	wk->async.data = w;
	if ((r = worker_identity(w, &ns->cfg)) < 0)
		return r;
	netsup_update_ready(w);
	return 0;
}

static int workers_start(struct netsup *ns)
{
	for (unsigned i = 1; i < ns->n_workers; i++) {
		struct netsup *w = ns->workers[i];
		w->dns = ns->dns; /* its records (dnsrec.h, locked) for transparent flows */
		int r = uv_thread_create(&w->wk->thread, worker_thread, w);
		if (r < 0) {
			log_error("cannot start worker %u: %s", i, uv_strerror(r));
			return r;
		}
		w->wk->thread_started = true;
	}
	if (ns->n_workers > 1)
		log_info("%u workers (event loops on their own threads)", ns->n_workers);
	return 0;
}

int netsup_start(struct netsup *ns, uv_loop_t *loop, const struct netsup_config *cfg)
{
	memset(ns, 0, sizeof(*ns));
	ns->loop = loop;
	ns->cfg = *cfg;
	ns->main = ns;
	ns->sh = &ns->shared_store;
	pthread_mutex_init(&ns->sh->console.lock, NULL);
	ns->workers[0] = ns;
	if (ns->cfg.workers == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		ns->cfg.workers = n < 1 ? 1 : n > NETSUP_MAX_WORKERS ? NETSUP_MAX_WORKERS : (unsigned)n;
	}
	if (ns->cfg.workers > NETSUP_MAX_WORKERS)
		ns->cfg.workers = NETSUP_MAX_WORKERS;
	ns->n_workers = ns->cfg.workers;
	cfg = &ns->cfg;
	int r = fit_connection_limit(&ns->cfg);
	if (r < 0)
		return r;
	ns->sh->metrics.conns_limit = ns->cfg.max_conns;
	r = bufpool_init(&ns->pool, cfg->relay_buffer, 256);
	if (r < 0)
		return r;
	r = check_topology(cfg);
	if (r < 0)
		return r;
	if (cfg->upstream_proxy) {
		r = upstream_load(cfg->upstream_proxy, cfg->upstream_proxy_auth_file, cfg->no_upstream_proxy,
				  cfg->n_no_upstream_proxy, cfg->upstream_proxy_connect, &ns->upstream);
		if (r < 0)
			return r;
		ns->sh->metrics.upstream_proxy = true;
		log_info("upstream connections go through the proxy %s (CONNECT names the %s%s)",
			 cfg->upstream_proxy, ns->upstream->by == UPSTREAM_BY_NAME ? "host name" : "checked address",
			 ns->upstream->auth_header ? "; with credentials" : "");
	} else if (cfg->upstream_proxy_auth_file || cfg->n_no_upstream_proxy || cfg->upstream_proxy_connect) {
		log_error("--upstream-proxy-auth-file, --no-upstream-proxy and --upstream-proxy-connect "
			  "need --upstream-proxy");
		return -EINVAL;
	}
	r = netsup_tls_start(ns);
	if (r < 0)
		return r;
	r = audit_open(cfg->audit_path, cfg->topology, &ns->audit_log);
	if (r < 0) {
		log_error("cannot open audit file %s: %s", cfg->audit_path, strerror(-r));
		return r;
	}
	r = auditq_new(ns->audit_log, cfg->audit_queue, &ns->audit);
	if (r < 0) {
		log_error("cannot start the audit writer: %s", strerror(-r));
		return r;
	}
	uv_prepare_init(loop, &ns->audit_prepare);
	uv_check_init(loop, &ns->audit_check);
	ns->audit_prepare.data = ns->audit_check.data = ns;
	uv_prepare_start(&ns->audit_prepare, audit_flush_prepare);
	uv_check_start(&ns->audit_check, audit_flush_check);
	uv_unref((uv_handle_t *)&ns->audit_prepare);
	uv_unref((uv_handle_t *)&ns->audit_check);
	ns->audit_handles = true;
	revoke_start(ns);
	r = policystore_new(loop, cfg->policy, cfg->policy_layer, cfg->n_policy, on_policy, ns, &ns->policy);
	if (r < 0)
		return r;
	/* Symlinked binary paths resolve in the workload's root: the local
	 * anchor's (the sandbox's view), else ours (the same filesystem in
	 * the split topologies, whose net side shares no PID namespace). */
	if (cfg->anchor_pid > 0) {
		char root[64];
		snprintf(root, sizeof(root), "/proc/%d/root", cfg->anchor_pid);
		if ((r = policystore_set_root(ns->policy, root)) < 0)
			return r;
	}
	policystore_set_learn(ns->policy, cfg->learn);
	if (cfg->learn)
		log_warn("LEARN MODE (--learn): nothing is enforced; every flow is allowed and recorded "
			 "in the audit with \"learn\":true and what the policy would have done");
	if (cfg->n_policy > 0 || cfg->learn) {
		struct policy_diag diag = { { 0 } };
		r = policystore_load_now(ns->policy, &diag);
		if (r < 0) {
			log_error("%s", diag.msg[0] ? diag.msg : strerror(-r));
			json_t *o = json_object();
			json_object_set_new(o, "ok", json_false());
			json_object_set_new(o, "error", json_string(diag.msg[0] ? diag.msg : strerror(-r)));
			netsup_audit(ns, "policy_loaded", o);
			return -EINVAL;
		}
		on_policy(ns->policy, true, NULL, ns);
		ns->sh->metrics.policy_reloads_ok--; /* the first load is not a reload */
		r = policystore_watch(ns->policy);
		if (r < 0)
			log_warn("policy reload on change disabled: %s", uv_strerror(r));
	} else {
		log_warn("no --policy given: not ready, every connection gets 503 not_ready");
	}
	r = worker_identity(ns, cfg);
	if (r < 0)
		return r;
	for (unsigned i = 1; i < ns->n_workers; i++)
		if ((r = worker_new(ns, i)) < 0)
			return r;
	if (cfg->n_dns_listen > 0) {
		r = dns_new(ns, "/etc/resolv.conf", &ns->dns);
		if (r < 0)
			return r;
	}
	r = open_listeners(ns, cfg);
	if (r < 0)
		return r;
	if (cfg->admin) {
		struct admin_source src = { .ready = admin_ready, .metrics = admin_metrics, .data = ns };
		r = admin_listen(loop, cfg->admin, &src, &ns->admin);
		if (r < 0)
			return r;
		log_info("admin (metrics, healthz, readyz) on %s", cfg->admin);
	}
	uv_signal_init(loop, &ns->sigterm);
	uv_signal_init(loop, &ns->sigint);
	ns->sigterm.data = ns->sigint.data = ns;
	uv_signal_start(&ns->sigterm, on_stop_signal, SIGTERM);
	uv_signal_start(&ns->sigint, on_stop_signal, SIGINT);
	uv_signal_init(loop, &ns->sigusr1);
	ns->sigusr1.data = ns;
	uv_signal_start(&ns->sigusr1, on_reopen_signal, SIGUSR1);
	signal(SIGPIPE, SIG_IGN);
	netsup_update_ready(ns);
	return workers_start(ns);
}

int netsup_run(struct netsup *ns)
{
	uv_run(ns->loop, UV_RUN_DEFAULT);
	for (unsigned i = 1; i < ns->n_workers; i++) {
		struct netsup *w = ns->workers[i];
		if (!w)
			continue;
		if (w->wk) {
			if (w->wk->thread_started)
				uv_thread_join(&w->wk->thread);
			(void)uv_loop_close(&w->wk->loop);
			free(w->wk);
		}
		auditq_free(w->audit);
		bufpool_done(&w->pool);
		credstore_free(w->creds);
		free(w);
		ns->workers[i] = NULL;
	}
	auditq_free(ns->audit);
	ns->audit = NULL;
	audit_close(ns->audit_log);
	ns->audit_log = NULL;
	bufpool_done(&ns->pool);
	upstream_free(ns->upstream);
	ns->upstream = NULL;
	tls_ca_free(ns->tls_ca);
	ns->tls_ca = NULL;
	credstore_free(ns->creds);
	ns->creds = NULL;
	SSL_CTX_free(ns->tls_upstream);
	ns->tls_upstream = NULL;
	return 0;
}
