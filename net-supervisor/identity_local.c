/* The local strategy: procfs identity in the anchor's PID namespace. */
#include "net-supervisor/identity_local.h"

#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/netns.h"
#include "common/util.h"
#include "identity/exe.h"
#include "identity/members.h"
#include "identity/procref.h"
#include "identity/sockdiag.h"
#include "identity/verify.h"
#include "net-supervisor/identity_feed.h"

#define LOCAL_HASH_CACHE 1024
/* What the loop may spend answering a flow itself: the processes of the
 * tree and the fd links it reads. Anything bigger goes to the pool: a
 * workload cannot stall every flow by opening many fds. */
static const struct verify_budget loop_budget = { .max_candidates = 8, .max_links = 128 };

struct local_strategy {
	struct identity_strategy base; /* first */
	struct kernel_caps caps_own;
	const struct kernel_caps *caps;
	pid_t anchor_pid_cfg;
	char *anchor_socket;
	char expected[65];
	char *sandbox_cgroup;
	uint64_t retry_ms;
	bool inline_off; /* every flow to the pool (tests force it) */
	void (*on_refused)(enum reason, const char *, void *);
	void *data;

	/* Shared with the thread pool: the verifier's anchor is set on the
	 * loop and changed only when no job is outstanding (jobs hold a
	 * reference through `jobs`). One verification context per thread-pool
	 * thread, all in the workload's netns; a job borrows one. */
	struct flow_verifier *verifier;
	struct members *table;             /* anchor only, live-chain; thread-safe */
	struct procref anchor;             /* recorded copy */
	int anchor_pidfd;                  /* owned, watched by anchor_poll */

	uv_poll_t anchor_poll;
	bool poll_active;
	uv_timer_t retry_timer;
	bool establishing;
	unsigned jobs; /* outstanding uv_work items */
	unsigned handles_open;
	bool destroying;
	char anchor_error[192];
	struct identity_local_stats stats;
	/* Connect-time identity (identity_feed.h): the anchor's feed, read on
	 * the loop, and a sock_diag handle in the workload's netns for the
	 * client socket's cookie. NULL: no feed. */
	struct idfeed_client *feed;
	struct sockdiag *feed_sd;
};

/* The counters are read by the main loop's /metrics while this strategy's
 * worker loop (--workers, context.h) counts: relaxed atomics. */
#define STAT_ADD(f, v) __atomic_fetch_add(&(f), (v), __ATOMIC_RELAXED)
#define STAT_GET(f) __atomic_load_n(&(f), __ATOMIC_RELAXED)

/* ---------- helpers (thread-pool safe: no loop state) ---------- */

/* Clock ticks since boot now, comparable with stat field 22 (both shifted
 * the same way by our time namespace). */
static uint64_t boot_ticks_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		hz = 100;
	return (uint64_t)ts.tv_sec * (uint64_t)hz + (uint64_t)ts.tv_nsec / (1000000000ull / (uint64_t)hz);
}

static bool hex_equal(const char *a, const char *b)
{
	return strlen(a) == 64 && strlen(b) == 64 && strcasecmp(a, b) == 0;
}

/* ---------- anchor establishment ---------- */

struct anchor_job {
	uv_work_t work;
	struct local_strategy *s;
	enum reason why;
	char detail[192];
	struct procref ref; /* owns its pidfd on success */
};

static int socket_peer(struct local_strategy *s, struct anchor_job *j)
{
	const char *path = s->anchor_socket;
	if (strncmp(path, "unix:", 5) == 0)
		path += 5;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(j->detail, sizeof(j->detail), "anchor socket path too long");
		return -ENAMETOOLONG;
	}
	strscpy(sa.sun_path, path, sizeof(sa.sun_path));
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	uint64_t t_connect = boot_ticks_now();
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		snprintf(j->detail, sizeof(j->detail), "cannot connect to %s: %s", path, strerror(e));
		return -e;
	}
	if (s->caps->peer_pidfd) {
		int pfd = -1;
		socklen_t l = sizeof(pfd);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &l) < 0 || pfd < 0) {
			int e = errno;
			snprintf(j->detail, sizeof(j->detail), "SO_PEERPIDFD on %s: %s", path, strerror(e));
			return -e;
		}
		int r = procref_from_pidfd(s->caps, pfd, &j->ref);
		close(pfd);
		if (r < 0)
			snprintf(j->detail, sizeof(j->detail), "the anchor socket's peer: %s", strerror(-r));
		return r;
	}
	/* Fallback: SO_PEERCRED's pid can be stale; the process there must have
	 * started no later than our connect, else it is a newcomer at a reused
	 * pid. */
	struct ucred uc;
	socklen_t l = sizeof(uc);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0)
		return -errno;
	int r = procref_open(s->caps, uc.pid, &j->ref);
	if (r < 0) {
		snprintf(j->detail, sizeof(j->detail), "the anchor socket's peer pid %d: %s", (int)uc.pid,
			 strerror(-r));
		return r;
	}
	if (j->ref.start_time > t_connect) {
		snprintf(j->detail, sizeof(j->detail), "pid %d started after our connect: pid reused",
			 (int)uc.pid);
		procref_close(&j->ref);
		j->why = REASON_PID_REUSED;
		return -ESTALE;
	}
	return 0;
}

static void anchor_work(uv_work_t *w)
{
	struct anchor_job *j = w->data;
	struct local_strategy *s = j->s;
	j->ref.pidfd = -1;
	j->why = REASON_ANCHOR_UNKNOWN;
	int r;
	if (s->anchor_pid_cfg > 0) {
		r = procref_open(s->caps, s->anchor_pid_cfg, &j->ref);
		if (r < 0) {
			snprintf(j->detail, sizeof(j->detail), "anchor pid %d: %s", (int)s->anchor_pid_cfg,
				 strerror(-r));
			return;
		}
	} else {
		r = socket_peer(s, j);
		if (r < 0) {
			if (!j->detail[0])
				snprintf(j->detail, sizeof(j->detail), "anchor socket: %s", strerror(-r));
			return;
		}
	}
	r = procref_hash_exe(&j->ref, NULL); /* pin-critical: bypass the cache */
	if (r < 0) {
		snprintf(j->detail, sizeof(j->detail), "cannot hash the anchor's image (pid %d): %s",
			 (int)j->ref.pid, strerror(-r));
		procref_close(&j->ref);
		return;
	}
	char hex[65];
	hex_encode(j->ref.exe.sha256, 32, hex);
	if (!hex_equal(hex, s->expected)) {
		snprintf(j->detail, sizeof(j->detail),
			 "anchor pid %d (%.60s) has sha256 %.16s..., expected %.16s...", (int)j->ref.pid,
			 j->ref.exe.path, hex, s->expected);
		procref_close(&j->ref);
		j->why = REASON_ANCHOR_UNKNOWN;
		return;
	}
	j->why = REASON_OK;
}

static void maybe_free(struct local_strategy *s);
static void schedule_retry(struct local_strategy *s);

static void refuse(struct local_strategy *s, enum reason why, const char *detail)
{
	strscpy(s->anchor_error, detail, sizeof(s->anchor_error));
	log_warn("local identity: no anchor (%s): %s", reason_word(why), detail);
	if (s->on_refused)
		s->on_refused(why, detail, s->data);
}

static void drop_anchor_state(struct local_strategy *s)
{
	/* Only with no resolve job outstanding (they read table/anchor).
	 * Cached flows were verified against this anchor: forget them. */
	if (s->verifier)
		flow_verifier_set_anchor(s->verifier, NULL, -1, NULL);
	members_free(s->table);
	s->table = NULL;
	if (s->anchor_pidfd >= 0)
		close(s->anchor_pidfd);
	s->anchor_pidfd = -1;
}

static void poll_closed(uv_handle_t *h)
{
	struct local_strategy *s = h->data;
	s->handles_open--;
	s->poll_active = false;
	if (!s->destroying && s->jobs == 0)
		drop_anchor_state(s);
	maybe_free(s);
}

static void anchor_exited(uv_poll_t *p, int status, int events)
{
	(void)status;
	(void)events;
	struct local_strategy *s = p->data;
	uv_poll_stop(p);
	char d[96];
	snprintf(d, sizeof(d), "the anchor (pid %d) exited", (int)s->anchor.pid);
	identity_strategy_set_anchored(&s->base, false, d);
	idfeed_client_set_anchor(s->feed, NULL);
	refuse(s, REASON_ANCESTRY_NOT_ANCHORED, d);
	uv_close((uv_handle_t *)p, poll_closed);
	if (s->anchor_socket)
		schedule_retry(s);
}

static void anchor_after(uv_work_t *w, int status)
{
	struct anchor_job *j = w->data;
	struct local_strategy *s = j->s;
	s->jobs--;
	s->establishing = false;
	if (s->destroying || status < 0) {
		procref_close(&j->ref);
		free(j);
		maybe_free(s);
		return;
	}
	if (j->why != REASON_OK) {
		refuse(s, j->why, j->detail);
		free(j);
		if (s->anchor_socket)
			schedule_retry(s);
		return;
	}
	/* Any previous anchor state is gone (its poll closed) when we get
	 * here: establishment only starts when not anchored. */
	if (s->jobs > 0 || s->poll_active) {
		procref_close(&j->ref);
		free(j);
		schedule_retry(s);
		return;
	}
	drop_anchor_state(s);
	/* With a sandbox cgroup the walk itself checks that the subject and
	 * every live hop below the anchor are inside it: the live-chain table
	 * alone would take an nsenter'd orphan of the anchor as a member. */
	struct members_config mc = { .mode = MEMBERSHIP_LINEAGE, .live_chain = true };
	if (s->sandbox_cgroup) {
		mc.mode = MEMBERSHIP_CGROUP;
		mc.cgroup_path = s->sandbox_cgroup;
	}
	int r = members_create(s->caps, &j->ref, &mc, &s->table);
	if (r < 0) {
		refuse(s, REASON_INTERNAL_ERROR, "cannot create the lineage table");
		procref_close(&j->ref);
		free(j);
		return;
	}
	procref_copy_recorded(&s->anchor, &j->ref);
	s->anchor_pidfd = j->ref.pidfd;
	j->ref.pidfd = -1;
	flow_verifier_set_anchor(s->verifier, &s->anchor, s->anchor_pidfd, s->table);
	uv_poll_init(s->base.loop, &s->anchor_poll, s->anchor_pidfd);
	s->anchor_poll.data = s;
	s->handles_open++;
	s->poll_active = true;
	uv_poll_start(&s->anchor_poll, UV_READABLE, anchor_exited);
	char desc[sizeof(s->base.anchor_desc)];
	snprintf(desc, sizeof(desc), "local pid %d %.40s %.60s", (int)s->anchor.pid, s->anchor.exe.path,
		 s->anchor.key);
	s->anchor_error[0] = '\0';
	free(j);
	identity_strategy_set_instance(&s->base, s->anchor.key);
	identity_strategy_set_anchored(&s->base, true, desc);
	idfeed_client_set_anchor(s->feed, s->anchor.key);
}

static void start_establish(struct local_strategy *s)
{
	if (s->establishing || s->destroying || s->base.anchored)
		return;
	struct anchor_job *j = calloc(1, sizeof(*j));
	if (!j)
		return;
	j->s = s;
	j->ref.pidfd = -1;
	j->work.data = j;
	if (uv_queue_work(s->base.loop, &j->work, anchor_work, anchor_after) < 0) {
		free(j);
		return;
	}
	s->establishing = true;
	s->jobs++;
}

static void retry_fire(uv_timer_t *t) { start_establish(t->data); }

static void schedule_retry(struct local_strategy *s)
{
	if (!s->destroying)
		uv_timer_start(&s->retry_timer, retry_fire, s->retry_ms, 0);
}

/* ---------- per-flow resolution ---------- */

struct resolve_job {
	uv_work_t work;
	struct local_strategy *s;
	struct identity_request *req;
	struct proxy_flow tuple;
	struct verified_flow vf;
};

/* Resolve j (j->vf holds the answer): 0, or -EAGAIN when a budget was
 * given and the flow needs more (see verify.h). */
static int resolve_run(struct local_strategy *s, struct resolve_job *j, struct verify_ctx *wc,
		       const struct verify_budget *budget)
{
	struct flow_tuple ft;
	if (flow_tuple_from_sockaddr(&ft, PROXY_FLOW_PROTO(&j->tuple), (const struct sockaddr *)&j->tuple.client,
				     (const struct sockaddr *)&j->tuple.proxy) < 0) {
		verified_flow_release(&j->vf);
		j->vf.reason = REASON_IDENTITY_UNAVAILABLE;
		return 0;
	}
	return flow_verifier_verify(s->verifier, wc, &ft, budget, &j->vf);
}

/* The verified answer as the policy engine's identity (pointers moved). */
static struct flow_identity *identity_from_verified(struct verified_flow *vf)
{
	struct flow_identity *id = flow_identity_new();
	if (!id)
		return NULL;
	id->ancestors = vf->n_hops ? calloc(vf->n_hops, sizeof(*id->ancestors)) : NULL;
	if (vf->n_hops && !id->ancestors) {
		flow_identity_free(id);
		return NULL;
	}
	id->source = FLOW_SOURCE_LOCAL_PROCFS;
	id->pid = vf->pid;
	memcpy(id->sha256, vf->sha256, sizeof(id->sha256));
	id->binary_path = vf->binary_path;
	id->process_key = vf->process_key;
	vf->binary_path = vf->process_key = NULL;
	for (size_t i = 0; i < vf->n_hops; i++) {
		id->ancestors[i].path = vf->hops[i].path;
		id->ancestors[i].pid = vf->hops[i].pid;
		memcpy(id->ancestors[i].sha256, vf->hops[i].sha256, sizeof(id->ancestors[i].sha256));
		vf->hops[i].path = NULL;
	}
	id->n_ancestors = vf->n_hops;
	return id;
}

static void resolve_work(uv_work_t *w)
{
	struct resolve_job *j = w->data;
	struct verify_ctx *wc = flow_verifier_ctx_take(j->s->verifier, true);
	resolve_run(j->s, j, wc, NULL);
	flow_verifier_ctx_put(j->s->verifier, wc);
}

/* On the loop: count the answer, hand it over, free the job. */
static void resolve_finish(struct local_strategy *s, struct resolve_job *j, enum reason why)
{
	struct flow_identity *id = NULL;
	if (why == REASON_OK && !(id = identity_from_verified(&j->vf)))
		why = REASON_INTERNAL_ERROR;
	if (why == REASON_OK) {
		const struct verified_flow *vf = &j->vf;
		STAT_ADD(s->stats.resolved, 1);
		STAT_ADD(s->stats.attribute_ns, vf->t_attr);
		STAT_ADD(s->stats.walk_ns, vf->t_walk);
		STAT_ADD(s->stats.hash_ns, vf->t_hash);
		STAT_ADD(s->stats.cpu_ns, vf->t_cpu);
		if (vf->fast)
			STAT_ADD(s->stats.fast_hits, 1);
		STAT_ADD(s->stats.pinned_holders, vf->pinned);
	} else {
		STAT_ADD(s->stats.denied, 1);
	}
	identity_request_complete(j->req, why, id);
	verified_flow_release(&j->vf);
	free(j);
}

static void resolve_after(uv_work_t *w, int status)
{
	struct resolve_job *j = w->data;
	struct local_strategy *s = j->s;
	s->jobs--;
	resolve_finish(s, j, status < 0 ? REASON_IDENTITY_UNAVAILABLE : j->vf.reason);
	if (!s->poll_active && !s->destroying && s->jobs == 0)
		drop_anchor_state(s);
	maybe_free(s);
}

static int resolve_slow(struct local_strategy *s, struct resolve_job *j);

/* The feed's answer for a flow that waited for it (on the loop). */
static void feed_answer(void *arg, struct flow_identity *id)
{
	struct resolve_job *j = arg;
	struct local_strategy *s = j->s;
	s->jobs--;
	if (id) {
		STAT_ADD(s->stats.feed_hits, 1);
		STAT_ADD(s->stats.resolved, 1);
		identity_request_complete(j->req, REASON_OK, id);
		free(j);
		maybe_free(s);
		return;
	}
	STAT_ADD(s->stats.feed_fallbacks, 1);
	if (s->destroying || !s->base.anchored || !s->table) {
		identity_request_complete(j->req, REASON_NOT_READY, NULL);
		free(j);
		maybe_free(s);
		return;
	}
	if (resolve_slow(s, j) < 0) {
		identity_request_complete(j->req, REASON_IDENTITY_UNAVAILABLE, NULL);
		free(j);
	}
}

/* Connect-time identity: 0 answered (or waiting), 1 not answered (take
 * the verifier's path). */
static int resolve_feed(struct local_strategy *s, struct resolve_job *j)
{
	if (!idfeed_client_active(s->feed))
		return 1;
	struct flow_tuple ft;
	struct sockdiag_result sr;
	uint64_t t0 = now_mono_ns();
	if (flow_tuple_from_sockaddr(&ft, PROXY_FLOW_PROTO(&j->tuple), (const struct sockaddr *)&j->tuple.client,
				     (const struct sockaddr *)&j->tuple.proxy) < 0 ||
	    sockdiag_lookup(s->feed_sd, &ft, &sr) < 0)
		return 1; /* the verifier reports the missing socket with its reason */
	struct flow_identity *id = NULL;
	int r = idfeed_client_lookup(s->feed, sr.cookie, &id);
	if (r == 1) {
		STAT_ADD(s->stats.feed_hits, 1);
		STAT_ADD(s->stats.resolved, 1);
		STAT_ADD(s->stats.attribute_ns, now_mono_ns() - t0);
		identity_request_complete(j->req, REASON_OK, id);
		free(j);
		return 0;
	}
	if (r == -EINPROGRESS && idfeed_client_wait(s->feed, sr.cookie, feed_answer, j) == 0) {
		s->jobs++;
		return 0;
	}
	STAT_ADD(s->stats.feed_fallbacks, 1);
	return 1;
}

static int local_resolve(struct identity_strategy *base, struct identity_request *req)
{
	struct local_strategy *s = (struct local_strategy *)base;
	if (!base->anchored || !s->table) {
		identity_request_complete(req, REASON_NOT_READY, NULL);
		return 0;
	}
	struct resolve_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->s = s;
	j->req = req;
	j->tuple = *identity_request_tuple(req);
	j->work.data = j;
	if (resolve_feed(s, j) == 0)
		return 0;
	int r = resolve_slow(s, j);
	if (r < 0)
		free(j);
	return r;
}

/* Today's path: on the loop within its budget, else the pool. -errno
 * (j not consumed) when it cannot start. */
static int resolve_slow(struct local_strategy *s, struct resolve_job *j)
{
	struct identity_strategy *base = &s->base;
	/* The cheap, bounded case on the loop itself (two thread hand-offs
	 * saved); when a context is busy or the flow needs more, the pool. */
	struct verify_ctx *wc = s->inline_off ? NULL : flow_verifier_ctx_take(s->verifier, false);
	if (wc) {
		int r = resolve_run(s, j, wc, &loop_budget);
		flow_verifier_ctx_put(s->verifier, wc);
		if (j->vf.over_budget)
			STAT_ADD(s->stats.inline_over_budget, 1); /* on the loop: no lock needed */
		if (r == 0) {
			STAT_ADD(s->stats.inline_answers, 1);
			resolve_finish(s, j, j->vf.reason);
			return 0;
		}
	}
	int r = uv_queue_work(base->loop, &j->work, resolve_work, resolve_after);
	if (r < 0)
		return r;
	s->jobs++;
	return 0;
}

/* ---------- lifecycle ---------- */

static void maybe_free(struct local_strategy *s)
{
	if (!s->destroying || s->jobs > 0 || s->handles_open > 0)
		return;
	drop_anchor_state(s);
	flow_verifier_free(s->verifier);
	if (s->feed_sd)
		sockdiag_close(s->feed_sd);
	free(s->anchor_socket);
	free(s->sandbox_cgroup);
	free(s);
}

static void timer_closed(uv_handle_t *h)
{
	struct local_strategy *s = h->data;
	s->handles_open--;
	maybe_free(s);
}

static void feed_closed(void *arg)
{
	struct local_strategy *s = arg;
	s->handles_open--;
	maybe_free(s);
}

static void local_destroy(struct identity_strategy *base)
{
	struct local_strategy *s = (struct local_strategy *)base;
	s->destroying = true;
	if (s->feed) {
		struct idfeed_client *f = s->feed;
		struct idfeed_client_stats fs;
		idfeed_client_stats(f, &fs);
		log_info("identity feed: %llu flows answered from it (%llu after waiting for their record), %llu "
			 "by the holder search while it was connected; %llu records, %llu refusals read (by the "
			 "main worker); %llu wake-ups from it",
			 (unsigned long long)s->stats.feed_hits, (unsigned long long)fs.waited_hits,
			 (unsigned long long)s->stats.feed_fallbacks, (unsigned long long)fs.records,
			 (unsigned long long)fs.refusals, (unsigned long long)fs.wakeups);
		s->feed = NULL;
		s->handles_open++;
		idfeed_client_close(f, feed_closed, s);
	}
	uv_timer_stop(&s->retry_timer);
	uv_close((uv_handle_t *)&s->retry_timer, timer_closed);
	if (s->poll_active && !uv_is_closing((uv_handle_t *)&s->anchor_poll)) {
		uv_poll_stop(&s->anchor_poll);
		uv_close((uv_handle_t *)&s->anchor_poll, poll_closed);
	}
	maybe_free(s);
}

static const struct identity_strategy_ops local_ops = {
	.name = "local",
	.resolve = local_resolve,
	.cancel = NULL, /* a job in the pool cannot be stopped; it is short */
	.destroy = local_destroy,
};

struct verifier_job {
	const struct flow_verifier_config *cfg;
	struct flow_verifier **out;
	struct sockdiag **feed_sd; /* NULL: no feed */
};

static int verifier_in_netns(void *arg)
{
	struct verifier_job *a = arg;
	if (a->feed_sd && !(*a->feed_sd = sockdiag_open()))
		return errno ? -errno : -ENOMEM;
	int r = flow_verifier_new(a->cfg, a->out);
	if (r < 0 && a->feed_sd) {
		sockdiag_close(*a->feed_sd);
		*a->feed_sd = NULL;
	}
	return r;
}

/* As many verification contexts as the libuv thread pool has threads
 * (its UV_THREADPOOL_SIZE, default 4), at most VERIFY_MAX_CONTEXTS: more
 * jobs than contexts wait for one. */
static size_t worker_count(void)
{
	const char *v = getenv("UV_THREADPOOL_SIZE");
	long n = v && *v ? strtol(v, NULL, 10) : 4;
	if (n < 1)
		n = 4;
	return n > VERIFY_MAX_CONTEXTS ? VERIFY_MAX_CONTEXTS : (size_t)n;
}

int identity_local_new(uv_loop_t *loop, const struct identity_local_config *cfg,
		       struct identity_strategy **out)
{
	if (!cfg || !cfg->expected_sha256 || strlen(cfg->expected_sha256) != 64 ||
	    (cfg->anchor_pid <= 0) == (cfg->anchor_socket == NULL))
		return -EINVAL;
	for (const char *p = cfg->expected_sha256; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
			return -EINVAL;
	struct local_strategy *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &local_ops;
	s->base.loop = loop;
	s->anchor_pidfd = -1;
	s->anchor.pidfd = -1;
	int r = 0;
	if (cfg->caps) {
		s->caps = cfg->caps;
	} else {
		r = kernel_caps_probe(&s->caps_own);
		if (r < 0)
			goto fail;
		s->caps = &s->caps_own;
	}
	s->anchor_pid_cfg = cfg->anchor_pid;
	strscpy(s->expected, cfg->expected_sha256, sizeof(s->expected));
	s->retry_ms = cfg->retry_ms ? cfg->retry_ms : 500;
	s->inline_off = cfg->pool_only || getenv("TETHER_LOCAL_POOL_ONLY") != NULL;
	s->on_refused = cfg->on_anchor_refused;
	s->data = cfg->data;
	if ((cfg->anchor_socket && !(s->anchor_socket = strdup(cfg->anchor_socket))) ||
	    (cfg->sandbox_cgroup && *cfg->sandbox_cgroup && !(s->sandbox_cgroup = strdup(cfg->sandbox_cgroup)))) {
		r = -ENOMEM;
		goto fail;
	}
	struct flow_verifier_config vc = {
		.caps = s->caps,
		.n_contexts = worker_count(),
		.max_candidates = cfg->max_candidates,
		.hash_cache_entries = LOCAL_HASH_CACHE,
		.measure_cpu = cfg->measure_cpu,
	};
	struct verifier_job aj = { .cfg = &vc, .out = &s->verifier, .feed_sd = cfg->identity_feed ? &s->feed_sd : NULL };
	if (cfg->workload_netns) {
		_cleanup_close_ int nsfd = open(cfg->workload_netns, O_RDONLY | O_CLOEXEC);
		if (nsfd < 0) {
			r = -errno;
			log_error("local identity: cannot open workload netns %s: %s", cfg->workload_netns,
				  strerror(-r));
			goto fail;
		}
		r = netns_run(nsfd, verifier_in_netns, &aj);
	} else {
		r = verifier_in_netns(&aj);
	}
	if (r < 0)
		goto fail;
	const struct local_strategy *fo = (const struct local_strategy *)cfg->feed_owner;
	if (fo && (fo->base.ops != &local_ops || !fo->feed))
		fo = NULL;
	if (cfg->identity_feed && fo)
		r = idfeed_client_new_view(fo->feed, loop, &s->feed);
	else if (cfg->identity_feed)
		r = idfeed_client_new(loop, s->caps, cfg->identity_feed, cfg->feed_wait_ms, 0, &s->feed);
	if (cfg->identity_feed && r < 0) {
		log_error("local identity: --identity-feed %s: %s", cfg->identity_feed, strerror(-r));
		flow_verifier_free(s->verifier);
		sockdiag_close(s->feed_sd);
		goto fail;
	}
	uv_timer_init(loop, &s->retry_timer);
	s->retry_timer.data = s;
	s->handles_open = 1;
	strscpy(s->base.anchor_desc, "local: anchor not established", sizeof(s->base.anchor_desc));
	start_establish(s);
	*out = &s->base;
	return 0;
fail:
	free(s->anchor_socket);
	free(s->sandbox_cgroup);
	free(s);
	return r;
}

int identity_local_default_expected(char out[65], char *path, size_t path_size)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -errno;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/proc-supervisor", self);
	if (path)
		strscpy(path, p, path_size);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint8_t h[32];
	int r = exe_hash_fd(fd, h);
	if (r < 0)
		return r;
	hex_encode(h, 32, out);
	return 0;
}

const char *identity_local_anchor_error(const struct identity_strategy *base)
{
	if (!base || base->ops != &local_ops)
		return "";
	return ((const struct local_strategy *)base)->anchor_error;
}

bool identity_local_feed_stats(const struct identity_strategy *base, struct idfeed_client_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!base || base->ops != &local_ops)
		return false;
	const struct local_strategy *s = (const struct local_strategy *)base;
	if (!s->feed)
		return false;
	idfeed_client_stats(s->feed, out);
	return true;
}

bool identity_local_stats(const struct identity_strategy *base, struct identity_local_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!base || base->ops != &local_ops)
		return false;
	const struct identity_local_stats *st = &((const struct local_strategy *)base)->stats;
	*out = (struct identity_local_stats){
		.resolved = STAT_GET(st->resolved), .denied = STAT_GET(st->denied),
		.attribute_ns = STAT_GET(st->attribute_ns), .walk_ns = STAT_GET(st->walk_ns),
		.hash_ns = STAT_GET(st->hash_ns), .cpu_ns = STAT_GET(st->cpu_ns),
		.fast_hits = STAT_GET(st->fast_hits), .pinned_holders = STAT_GET(st->pinned_holders),
		.inline_answers = STAT_GET(st->inline_answers),
		.inline_over_budget = STAT_GET(st->inline_over_budget),
		.feed_hits = STAT_GET(st->feed_hits), .feed_fallbacks = STAT_GET(st->feed_fallbacks),
	};
	return true;
}
