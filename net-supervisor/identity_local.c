/* The local strategy: procfs identity in the anchor's PID namespace. */
#include "net-supervisor/identity_local.h"

#include <dirent.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "identity/ancestry.h"
#include "identity/attribute.h"
#include "identity/exe.h"
#include "identity/members.h"
#include "identity/procfs.h"
#include "identity/procref.h"
#include "identity/sockdiag.h"
#include "topology/netns.h"

#define LOCAL_HASH_CACHE 1024

struct local_strategy {
	struct identity_strategy base; /* first */
	struct kernel_caps caps_own;
	const struct kernel_caps *caps;
	pid_t anchor_pid_cfg;
	char *anchor_socket;
	char expected[65];
	char *sandbox_cgroup;
	uint64_t retry_ms;
	size_t max_candidates;
	void (*on_refused)(enum reason, const char *, void *);
	void *data;

	/* Shared with the thread pool: set on the loop before any resolve job
	 * is queued and changed only when no job is outstanding (jobs hold a
	 * reference through `jobs`). */
	struct exe_hash_cache *cache;      /* thread-safe */
	pthread_mutex_t attr_lock;         /* one sock_diag handle + holder cache */
	struct attribute_ctx *attr;        /* in the workload's netns */
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
};

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

/* Every live descendant of root (not root itself, not `skip`), breadth
 * first through /proc/<pid>/task/<tid>/children. A process that exits
 * mid-scan is simply missed: the attribution then fails closed. */
static int scan_descendants(pid_t root, pid_t skip, size_t max, pid_t **out, size_t *n_out)
{
	size_t cap = 64, n = 0, head = 0;
	pid_t *v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	pid_t cur = root;
	for (;;) {
		char dir[64];
		snprintf(dir, sizeof(dir), "/proc/%d/task", (int)cur);
		DIR *d = opendir(dir);
		if (d) {
			struct dirent *de;
			while ((de = readdir(d))) {
				if (de->d_name[0] == '.')
					continue;
				char path[64 + 256 + 16];
				snprintf(path, sizeof(path), "%s/%.255s/children", dir, de->d_name);
				char buf[8192];
				ssize_t len = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
				if (len <= 0)
					continue;
				char *save = NULL;
				for (char *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
					long p = strtol(tok, NULL, 10);
					if (p <= 0 || (pid_t)p == skip)
						continue;
					if (n >= max)
						break;
					if (n == cap) {
						pid_t *nv = realloc(v, 2 * cap * sizeof(*v));
						if (!nv) {
							closedir(d);
							free(v);
							return -ENOMEM;
						}
						v = nv;
						cap *= 2;
					}
					v[n++] = (pid_t)p;
				}
			}
			closedir(d);
		}
		if (head >= n)
			break;
		cur = v[head++];
	}
	*out = v;
	*n_out = n;
	return 0;
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
	/* Only with no resolve job outstanding (they read table/anchor). */
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
	identity_strategy_set_anchored(&s->base, true, desc);
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
	enum reason why;
	struct flow_identity *id;
	uint64_t t_attr, t_walk, t_hash, t_cpu;
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static enum reason hash_error_reason(int r)
{
	return r == -ESRCH || r == -ESTALE ? REASON_PROCESS_VANISHED : REASON_IDENTITY_UNAVAILABLE;
}

static void resolve_work(uv_work_t *w)
{
	struct resolve_job *j = w->data;
	struct local_strategy *s = j->s;
	uint64_t t0 = now_mono_ns(), c0 = thread_cpu_ns();
	j->why = REASON_IDENTITY_UNAVAILABLE;

	struct flow_tuple ft;
	if (flow_tuple_from_sockaddr(&ft, IPPROTO_TCP, (const struct sockaddr *)&j->tuple.client,
				     (const struct sockaddr *)&j->tuple.proxy) < 0)
		return;
	_cleanup_free_ pid_t *cand = NULL;
	size_t n_cand = 0;
	if (scan_descendants(s->anchor.pid, getpid(), s->max_candidates, &cand, &n_cand) < 0)
		return;
	struct attribution at;
	memset(&at, 0, sizeof(at));
	at.subject.pidfd = -1;
	pthread_mutex_lock(&s->attr_lock);
	int r = attribute_flow(s->attr, &ft, cand, n_cand, &at);
	pthread_mutex_unlock(&s->attr_lock);
	j->t_attr = now_mono_ns() - t0;
	if (r < 0) {
		j->why = at.reason != REASON_OK ? at.reason : REASON_IDENTITY_UNAVAILABLE;
		attribution_release(&at);
		return;
	}

	uint64_t t1 = now_mono_ns();
	struct ancestry_result res;
	r = ancestry_walk(s->caps, s->table, &at.subject, NULL, &res);
	if (r < 0 || !res.anchored) {
		j->why = res.reason != REASON_OK ? res.reason : REASON_ANCESTRY_NOT_ANCHORED;
		ancestry_result_free(&res);
		attribution_release(&at);
		return;
	}
	j->t_walk = now_mono_ns() - t1;

	uint64_t t2 = now_mono_ns();
	if (at.subject.exe_err < 0 || at.subject.exe.maps_mismatch) {
		/* No image, or one whose exe link does not match its main
		 * mapping (PR_SET_MM_MAP): nothing trustworthy to name. */
		j->why = REASON_IDENTITY_UNAVAILABLE;
		goto out;
	}
	/* The subject's exe tuple was read from the live process during
	 * attribution; a cache hit for that tuple is its hash without opening
	 * the image again. A miss hashes the running image. */
	if (exe_hash_cache_get(s->cache, &at.subject.exe, at.subject.exe.sha256) == 1) {
		at.subject.exe.hashed = true;
	} else {
		r = procref_hash_exe(&at.subject, s->cache);
		if (r < 0) {
			j->why = hash_error_reason(r);
			goto out;
		}
	}
	struct flow_identity *id = flow_identity_new();
	if (!id) {
		j->why = REASON_INTERNAL_ERROR;
		goto out;
	}
	id->source = FLOW_SOURCE_LOCAL_PROCFS;
	id->pid = at.subject.pid;
	hex_encode(at.subject.exe.sha256, 32, id->sha256);
	if (!(id->binary_path = strdup(at.subject.exe.path)) || !(id->process_key = strdup(at.subject.key))) {
		flow_identity_free(id);
		j->why = REASON_INTERNAL_ERROR;
		goto out;
	}
	/* hops[n-1] is the anchor: not an ancestor for policy. */
	for (size_t i = 0; i + 1 < res.n; i++) {
		struct procref *h = &res.hops[i].ref;
		char hex[65] = "";
		uint8_t hh[32];
		if (h->exe_err == 0 && exe_hash_cache_get(s->cache, &h->exe, hh) == 1) {
			/* The walk read this tuple from the live hop. */
			hex_encode(hh, 32, hex);
		} else if (res.hops[i].live && h->exe_err == 0) {
			char dir[32];
			snprintf(dir, sizeof(dir), "/proc/%d", h->procfs_pid ? (int)h->procfs_pid : (int)h->pid);
			_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			/* The image must still be the tuple the walk read, and the
			 * pid still that process, for the hash to be its. */
			if (dfd >= 0 && exe_tuple_hash(dfd, &h->exe, s->cache) == 0 &&
			    procref_match_pid(s->caps, h, h->pid) == 0)
				hex_encode(h->exe.sha256, 32, hex);
		}
		if (flow_identity_add_ancestor(id, h->exe.path[0] ? h->exe.path : h->comm, h->pid, hex) < 0) {
			flow_identity_free(id);
			j->why = REASON_INTERNAL_ERROR;
			goto out;
		}
	}
	/* The subject must still be the process that held the socket. */
	if (procref_revalidate(s->caps, &at.subject) < 0) {
		flow_identity_free(id);
		j->why = REASON_PROCESS_VANISHED;
		goto out;
	}
	j->id = id;
	j->why = REASON_OK;
out:
	j->t_hash = now_mono_ns() - t2;
	j->t_cpu = thread_cpu_ns() - c0;
	ancestry_result_free(&res);
	attribution_release(&at);
}

static void resolve_after(uv_work_t *w, int status)
{
	struct resolve_job *j = w->data;
	struct local_strategy *s = j->s;
	s->jobs--;
	enum reason why = status < 0 ? REASON_IDENTITY_UNAVAILABLE : j->why;
	if (why == REASON_OK) {
		s->stats.resolved++;
		s->stats.attribute_ns += j->t_attr;
		s->stats.walk_ns += j->t_walk;
		s->stats.hash_ns += j->t_hash;
		s->stats.cpu_ns += j->t_cpu;
	} else {
		s->stats.denied++;
	}
	identity_request_complete(j->req, why, why == REASON_OK ? j->id : NULL);
	if (why != REASON_OK)
		flow_identity_free(j->id);
	free(j);
	if (!s->poll_active && !s->destroying && s->jobs == 0)
		drop_anchor_state(s);
	maybe_free(s);
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
	int r = uv_queue_work(base->loop, &j->work, resolve_work, resolve_after);
	if (r < 0) {
		free(j);
		return r;
	}
	s->jobs++;
	return 0;
}

/* ---------- lifecycle ---------- */

static void maybe_free(struct local_strategy *s)
{
	if (!s->destroying || s->jobs > 0 || s->handles_open > 0)
		return;
	drop_anchor_state(s);
	attribute_ctx_free(s->attr);
	exe_hash_cache_free(s->cache);
	pthread_mutex_destroy(&s->attr_lock);
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

static void local_destroy(struct identity_strategy *base)
{
	struct local_strategy *s = (struct local_strategy *)base;
	s->destroying = true;
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

struct attr_job {
	const struct kernel_caps *caps;
	struct attribute_ctx *ctx;
};

static int attr_in_netns(void *arg)
{
	struct attr_job *a = arg;
	a->ctx = attribute_ctx_new(a->caps, NULL);
	return a->ctx ? 0 : -errno;
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
	pthread_mutex_init(&s->attr_lock, NULL);
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
	s->max_candidates = cfg->max_candidates ? cfg->max_candidates : 65536;
	s->on_refused = cfg->on_anchor_refused;
	s->data = cfg->data;
	if ((cfg->anchor_socket && !(s->anchor_socket = strdup(cfg->anchor_socket))) ||
	    (cfg->sandbox_cgroup && *cfg->sandbox_cgroup && !(s->sandbox_cgroup = strdup(cfg->sandbox_cgroup))) ||
	    !(s->cache = exe_hash_cache_new(LOCAL_HASH_CACHE))) {
		r = -ENOMEM;
		goto fail;
	}
	struct attr_job aj = { .caps = s->caps };
	if (cfg->workload_netns) {
		_cleanup_close_ int nsfd = open(cfg->workload_netns, O_RDONLY | O_CLOEXEC);
		if (nsfd < 0) {
			r = -errno;
			log_error("local identity: cannot open workload netns %s: %s", cfg->workload_netns,
				  strerror(-r));
			goto fail;
		}
		r = netns_run(nsfd, attr_in_netns, &aj);
	} else {
		r = attr_in_netns(&aj);
	}
	if (r < 0)
		goto fail;
	s->attr = aj.ctx;
	uv_timer_init(loop, &s->retry_timer);
	s->retry_timer.data = s;
	s->handles_open = 1;
	strscpy(s->base.anchor_desc, "local: anchor not established", sizeof(s->base.anchor_desc));
	start_establish(s);
	*out = &s->base;
	return 0;
fail:
	exe_hash_cache_free(s->cache);
	pthread_mutex_destroy(&s->attr_lock);
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

void identity_local_stats(const struct identity_strategy *base, struct identity_local_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (base && base->ops == &local_ops)
		*out = ((const struct local_strategy *)base)->stats;
}
