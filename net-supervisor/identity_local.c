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
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/netns.h"
#include "common/util.h"
#include "identity/ancestry.h"
#include "identity/attribute.h"
#include "identity/chain.h"
#include "identity/exe.h"
#include "identity/members.h"
#include "identity/procfs.h"
#include "identity/procref.h"
#include "identity/sockdiag.h"

#define LOCAL_HASH_CACHE 1024
#define LOCAL_MAX_WORKERS 16
/* What the loop may spend answering a flow itself (resolve_run): the
 * processes of the tree and the fd links it reads. Anything bigger goes
 * to the pool: a workload cannot stall every flow by opening many fds. */
#define INLINE_MAX_CANDIDATES 8
#define INLINE_MAX_LINKS 128

struct worker_ctx;

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
	bool measure_cpu;
	bool inline_off; /* every flow to the pool (tests force it) */
	void (*on_refused)(enum reason, const char *, void *);
	void *data;

	/* Shared with the thread pool: set on the loop before any resolve job
	 * is queued and changed only when no job is outstanding (jobs hold a
	 * reference through `jobs`). */
	struct exe_hash_cache *cache;      /* thread-safe */
	/* One worker context per thread-pool thread (sock_diag handle,
	 * attribution context and verified-flow cache each, all in the
	 * workload's netns); a job borrows one from the free list. */
	pthread_mutex_t workers_lock;
	pthread_cond_t workers_cond;
	struct worker_ctx *workers[LOCAL_MAX_WORKERS];
	size_t n_workers;
	struct worker_ctx *free_workers;
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

/* ---------- worker contexts and the verified-flow cache ----------
 *
 * Each thread-pool job borrows one worker context: its own sock_diag handle
 * and attribution context (holder cache) in the workload's netns — no lock
 * is held across netlink or procfs I/O, unlike one shared handle behind a
 * mutex. A context also keeps a small cache of flows it verified:
 *
 *   cookie -> subject (pidfd, the fd slot holding the socket, exe tuple and
 *             hash), the chain's hops (pidfd, exe tuple and hash each),
 *             the member-set fingerprint and the host fork count of the
 *             scan that found the holder.
 *
 * A hit is never trusted as is; it re-proves every fact the slow path
 * establishes, with the processes pinned by the cached pidfds:
 *   - the socket is still the one (sock_diag: same inode and cookie — the
 *     kernel never reuses a cookie);
 *   - nobody else can hold it: no process was created on the host since
 *     the holder scan (the `processes` fork counter of /proc/stat is
 *     unchanged; only fork can hand an fd to a new process, and the kernel
 *     counts a fork under the same tasklist_lock section that links the
 *     child into its parent's children list — after its fd table was
 *     copied; we rely on the count's store being visible no earlier than
 *     that link, as on x86), or — when something forked — a descendant
 *     listing gives the same member set;
 *   - the subject still holds the socket in the same fd slot, every process
 *     still runs the same exe file version under the same path (else its
 *     cached hash is not its hash: an exec, or an exe swapped in place),
 *     the live ppid chain is still subject -> hops -> anchor (each ppid read
 *     before the parent's pidfd is confirmed alive: a pidfd alive now was
 *     alive, at that pid, when the child named it), cgroup membership when
 *     configured, and the anchor is alive;
 *   - every /proc/<pid> read is followed by a liveness check of that
 *     process's pidfd, so a pid reused meanwhile is never read as ours.
 * Any mismatch drops the entry and takes the slow path (full attribution
 * and ancestry walk), which may re-populate it. What a hit cannot see is
 * what the holder cache cannot see either (holders.h): an fd handed over
 * by SCM_RIGHTS or pidfd_getfd without any fork. */

#define FC_ENTRIES 8
#define FC_MAX_HOPS CHAIN_MAX_HOPS
#define STAT_BUF 32768

struct fc_proc {
	struct procref ref; /* ref.pidfd owned by the entry */
	char sha[65];
};

struct fc_entry {
	bool used;
	uint64_t cookie;
	uint32_t inode;
	int fd;                   /* the subject's fd slot holding the socket */
	uint64_t forks;           /* host fork count before the holder scan (0: unknown) */
	uint64_t members_hash;
	size_t members_n;
	char anchor_key[PROCREF_KEY_MAX];
	struct fc_proc subj;
	struct pinned_chain chain;        /* parent first, anchor excluded */
	char hop_sha[FC_MAX_HOPS][65];    /* chain.hops[i]'s hash */
	unsigned stamp;           /* LRU */
};

struct worker_ctx {
	struct attribute_ctx *attr;
	struct sockdiag *sd;
	int proc_fd;
	int stat_fd;
	char *stat_buf;
	struct fc_entry fc[FC_ENTRIES];
	unsigned clock;
	/* The anchor's descendants as last listed, and the host fork count
	 * read before that listing: while the count is unchanged no process
	 * was created, so the list is still a superset of the holders'
	 * candidates (exited ones simply hold nothing). */
	pid_t *desc;
	size_t n_desc;
	uint64_t desc_forks;
	char desc_anchor[PROCREF_KEY_MAX];
	/* The candidate set (members_pid_set_hash) whose holder search last
	 * ran past the loop's link budget: the loop does not try it again
	 * until the set changes (valid when over_budget). */
	bool over_budget;
	uint64_t over_budget_set;
	struct worker_ctx *next_free;
};

/* The host's fork count ("processes" in /proc/stat), 0 when unknown. */
static uint64_t host_forks(struct worker_ctx *w)
{
	if (w->stat_fd < 0 || !w->stat_buf)
		return 0;
	ssize_t n = pread(w->stat_fd, w->stat_buf, STAT_BUF - 1, 0);
	if (n <= 0 || n >= STAT_BUF - 1)
		return 0; /* error, or maybe truncated: unknown */
	w->stat_buf[n] = '\0';
	return procfs_parse_forks(w->stat_buf);
}

/* Is w's remembered listing of the anchor's descendants still a superset
 * of the holders' candidates at fork count `forks`? */
static bool desc_current(const struct local_strategy *s, const struct worker_ctx *w, uint64_t forks)
{
	return forks != 0 && w->desc && forks == w->desc_forks && strcmp(w->desc_anchor, s->anchor.key) == 0;
}

/* The anchor's descendants for a holder search: the listing made at fork
 * count `forks` when there is one (see struct worker_ctx), else a fresh
 * one, remembered. *cached says which; the list belongs to w. */
static int descendants(struct local_strategy *s, struct worker_ctx *w, uint64_t forks, bool fresh,
		       const pid_t **out, size_t *n_out, bool *cached)
{
	if (!fresh && desc_current(s, w, forks)) {
		*out = w->desc;
		*n_out = w->n_desc;
		*cached = true;
		return 0;
	}
	pid_t *v = NULL;
	size_t n = 0;
	int r = scan_descendants(s->anchor.pid, getpid(), s->max_candidates, &v, &n);
	if (r < 0)
		return r;
	free(w->desc);
	w->desc = v;
	w->n_desc = n;
	w->desc_forks = forks;
	strscpy(w->desc_anchor, s->anchor.key, sizeof(w->desc_anchor));
	*out = v;
	*n_out = n;
	*cached = false;
	return 0;
}

static void fc_proc_close(struct fc_proc *p)
{
	procref_close(&p->ref);
}

static void fc_drop(struct fc_entry *e)
{
	if (!e->used)
		return;
	fc_proc_close(&e->subj);
	chain_release(&e->chain);
	memset(e, 0, sizeof(*e));
}

static void fc_flush(struct worker_ctx *w)
{
	for (size_t i = 0; i < FC_ENTRIES; i++)
		fc_drop(&w->fc[i]);
	free(w->desc);
	w->desc = NULL;
	w->n_desc = 0;
}

static struct fc_entry *fc_find(struct worker_ctx *w, uint64_t cookie)
{
	for (size_t i = 0; i < FC_ENTRIES; i++)
		if (w->fc[i].used && w->fc[i].cookie == cookie)
			return &w->fc[i];
	return NULL;
}

static int fc_verify_chain(struct local_strategy *s, struct worker_ctx *w, struct fc_entry *e,
			   const struct procref *sub, pid_t ppid, bool pns);
static int fc_identity(const struct fc_entry *e, const struct procref *sub, struct flow_identity **idp);

/* Re-prove a cached flow (see the block comment). 0: *idp is the identity;
 * -EAGAIN: it needs the tree listed again and may_list is false. */
static int fc_verify(struct local_strategy *s, struct worker_ctx *w, struct fc_entry *e,
		     const struct sockdiag_result *sr, bool may_list, struct flow_identity **idp)
{
	if (e->inode != sr->inode || strcmp(e->anchor_key, s->anchor.key) != 0 || s->anchor_pidfd < 0)
		return -ESTALE;
	/* 1. Nobody new can hold it. */
	uint64_t forks = host_forks(w);
	if (forks == 0 || forks != e->forks) {
		if (!may_list && !desc_current(s, w, forks))
			return -EAGAIN;
		const pid_t *cand;
		size_t n_cand;
		bool cached;
		if (descendants(s, w, forks, false, &cand, &n_cand, &cached) < 0)
			return -ENOMEM;
		if (n_cand != e->members_n || members_pid_set_hash(cand, n_cand) != e->members_hash)
			return -ESTALE;
		e->forks = forks;
	}
	/* 2. The subject: same fd slot, same image, alive after the reads. */
	struct procref *sub = &e->subj.ref;
	char rel[48], link[64], want[32];
	snprintf(rel, sizeof(rel), "%d/fd/%d", (int)sub->procfs_pid, e->fd);
	int wl = snprintf(want, sizeof(want), "socket:[%u]", sr->inode);
	ssize_t ln = readlinkat(w->proc_fd, rel, link, sizeof(link));
	if (ln != wl || memcmp(link, want, (size_t)wl) != 0)
		return -ESTALE;
	if (chain_exe_unchanged(w->proc_fd, sub->procfs_pid, &sub->exe) < 0)
		return -ESTALE;
	pid_t ppid;
	bool pns;
	if (chain_live_ppid(s->caps, w->proc_fd, sub, &ppid, &pns) < 0)
		return -ESTALE;
	int r = fc_verify_chain(s, w, e, sub, ppid, pns);
	if (r < 0)
		return r;
	return fc_identity(e, sub, idp);
}

/* The chain of e below subject sub, whose live ppid was just read (chain.h). */
static int fc_verify_chain(struct local_strategy *s, struct worker_ctx *w, struct fc_entry *e,
			   const struct procref *sub, pid_t ppid, bool pns)
{
	if (s->anchor_pidfd < 0)
		return -ESTALE;
	return chain_verify(s->caps, w->proc_fd, s->table, &e->chain, sub, ppid, pns, &s->anchor,
			    s->anchor_pidfd);
}

/* The identity a verified entry stands for, subject `sub`. */
static int fc_identity(const struct fc_entry *e, const struct procref *sub, struct flow_identity **idp)
{
	struct flow_identity *id = flow_identity_new();
	if (!id)
		return -ENOMEM;
	id->source = FLOW_SOURCE_LOCAL_PROCFS;
	id->pid = sub->pid;
	memcpy(id->sha256, e->subj.sha, sizeof(id->sha256));
	if (!(id->binary_path = strdup(sub->exe.path)) || !(id->process_key = strdup(sub->key))) {
		flow_identity_free(id);
		return -ENOMEM;
	}
	for (size_t i = 0; i < e->chain.n; i++)
		if (flow_identity_add_ancestor(id, e->chain.hops[i].exe.path, e->chain.hops[i].pid,
					       e->hop_sha[i]) < 0) {
			flow_identity_free(id);
			return -ENOMEM;
		}
	*idp = id;
	return 0;
}

static struct fc_entry *fc_slot(struct worker_ctx *w, const struct fc_entry *keep);

/* After a slow-path success: remember the flow when every part of it can
 * be re-proved cheaply (one holder, plain images, hashes known, a short
 * chain of live hops). forks/cand are the holder scan's inputs. */
static void fc_store(struct local_strategy *s, struct worker_ctx *w, const struct attribution *at,
		     const struct ancestry_result *res, const struct flow_identity *id,
		     uint64_t forks, const pid_t *cand, size_t n_cand)
{
	if (at->n_holders != 1 || at->subject.pidfd < 0 || !at->socket_found || at->sock.cookie == 0 ||
	    res->n == 0 || res->n - 1 > FC_MAX_HOPS || res->n - 1 != id->n_ancestors || !id->sha256[0])
		return;
	const struct procref *sub = &at->subject;
	if (sub->exe_err < 0 || sub->exe.deleted || sub->exe.memfd || sub->exe.maps_mismatch)
		return;
	for (size_t i = 0; i + 1 < res->n; i++)
		if (!id->ancestors[i].sha256[0])
			return; /* a hop without a hash: nothing to answer from */
	/* The fd slot the holder search saw it in; fc_verify re-reads it. */
	int slot_fd = at->subject_fd;
	if (slot_fd < 0)
		return;
	struct fc_entry *e = fc_find(w, at->sock.cookie);
	if (!e)
		e = fc_slot(w, NULL);
	fc_drop(e);
	e->cookie = at->sock.cookie;
	e->inode = at->sock.inode;
	e->fd = slot_fd;
	e->forks = forks;
	e->members_n = n_cand;
	e->members_hash = members_pid_set_hash(cand, n_cand);
	strscpy(e->anchor_key, s->anchor.key, sizeof(e->anchor_key));
	procref_copy_recorded(&e->subj.ref, sub);
	e->subj.ref.pidfd = fcntl(sub->pidfd, F_DUPFD_CLOEXEC, 3);
	memcpy(e->subj.sha, id->sha256, sizeof(e->subj.sha));
	e->used = true; /* from here fc_drop releases what was taken */
	if (e->subj.ref.pidfd < 0 || chain_pin_walk(s->caps, res, &e->chain) < 0) {
		fc_drop(e);
		return;
	}
	for (size_t i = 0; i < e->chain.n; i++)
		strscpy(e->hop_sha[i], id->ancestors[i].sha256, sizeof(e->hop_sha[i]));
	e->stamp = ++w->clock;
}

/* A slot for a new entry: a free one, else the least recently used one
 * that is not `keep`. */
static struct fc_entry *fc_slot(struct worker_ctx *w, const struct fc_entry *keep)
{
	struct fc_entry *e = NULL;
	for (size_t i = 0; i < FC_ENTRIES; i++) {
		struct fc_entry *x = &w->fc[i];
		if (x == keep)
			continue;
		if (!x->used)
			return x;
		if (!e || x->stamp < e->stamp)
			e = x;
	}
	return e;
}

/* A new socket of a process this context verified a flow for: its chain
 * (pinned hops) is re-proved from the live subject the holder search just
 * verified, instead of walking again. The subject's exe tuple was read by
 * that search; it must be the cached file version for the cached hash. */
static int fc_reuse_chain(struct local_strategy *s, struct worker_ctx *w, struct fc_entry *pe,
			  const struct procref *sub, struct flow_identity **idp)
{
	const struct exe_tuple *a = &sub->exe, *b = &pe->subj.ref.exe;
	if (strcmp(pe->anchor_key, s->anchor.key) != 0 || s->anchor_pidfd < 0 || sub->pidfd < 0 ||
	    sub->exe_err < 0 || !exe_tuple_same_file(a, b) || strcmp(a->path, b->path) != 0 ||
	    a->deleted || a->memfd || a->maps_mismatch)
		return -ESTALE;
	pid_t ppid;
	bool pns;
	if (chain_live_ppid(s->caps, w->proc_fd, sub, &ppid, &pns) < 0)
		return -ESTALE;
	int r = fc_verify_chain(s, w, pe, sub, ppid, pns);
	if (r < 0)
		return r;
	if (procref_revalidate(s->caps, sub) < 0)
		return -ESTALE;
	return fc_identity(pe, sub, idp);
}

/* Remember the new socket's flow with pe's chain (pidfds duplicated). */
static void fc_clone(struct local_strategy *s, struct worker_ctx *w, const struct fc_entry *pe,
		     const struct attribution *at, uint64_t forks, const pid_t *cand, size_t n_cand)
{
	if (at->n_holders != 1 || at->subject_fd < 0 || at->sock.cookie == 0)
		return;
	struct fc_entry *e = fc_slot(w, pe);
	if (!e)
		return;
	fc_drop(e);
	e->cookie = at->sock.cookie;
	e->inode = at->sock.inode;
	e->fd = at->subject_fd;
	e->forks = forks;
	e->members_n = n_cand;
	e->members_hash = members_pid_set_hash(cand, n_cand);
	strscpy(e->anchor_key, s->anchor.key, sizeof(e->anchor_key));
	procref_copy_recorded(&e->subj.ref, &at->subject);
	e->subj.ref.pidfd = fcntl(at->subject.pidfd, F_DUPFD_CLOEXEC, 3);
	memcpy(e->subj.sha, pe->subj.sha, sizeof(e->subj.sha));
	e->used = true;
	if (e->subj.ref.pidfd < 0) {
		fc_drop(e);
		return;
	}
	if (chain_dup(&pe->chain, &e->chain) < 0) {
		fc_drop(e);
		return;
	}
	memcpy(e->hop_sha, pe->hop_sha, sizeof(e->hop_sha));
	e->stamp = ++w->clock;
}

/* holders_pinned_fn: the subject of a flow this worker verified (its
 * entry's pidfd and exe tuple), when it still runs the same exe file
 * version: the holder search then skips the full open of a process it
 * already knows (the fd link and liveness are still checked after). */
static int fc_pinned(void *userdata, pid_t pid, struct procref *out)
{
	struct worker_ctx *w = userdata;
	for (size_t i = 0; i < FC_ENTRIES; i++) {
		const struct procref *p = &w->fc[i].subj.ref;
		if (!w->fc[i].used || p->procfs_pid != pid || p->pidfd < 0)
			continue;
		if (pidfd_is_alive(p->pidfd) < 0 || chain_exe_unchanged(w->proc_fd, pid, &p->exe) < 0)
			return -ESTALE;
		procref_copy_recorded(out, p);
		out->pidfd = fcntl(p->pidfd, F_DUPFD_CLOEXEC, 3);
		return out->pidfd >= 0 ? 0 : -ESTALE;
	}
	return -ENOENT;
}

/* A free context; with wait, the caller (a pool thread) sleeps until one
 * is put back, else NULL when none is free (the loop never waits). */
static struct worker_ctx *worker_take(struct local_strategy *s, bool wait)
{
	pthread_mutex_lock(&s->workers_lock);
	while (wait && !s->free_workers)
		pthread_cond_wait(&s->workers_cond, &s->workers_lock);
	struct worker_ctx *w = s->free_workers;
	if (w)
		s->free_workers = w->next_free;
	pthread_mutex_unlock(&s->workers_lock);
	return w;
}

static void worker_put(struct local_strategy *s, struct worker_ctx *w)
{
	pthread_mutex_lock(&s->workers_lock);
	w->next_free = s->free_workers;
	s->free_workers = w;
	pthread_cond_signal(&s->workers_cond);
	pthread_mutex_unlock(&s->workers_lock);
}

static void worker_free(struct worker_ctx *w)
{
	if (!w)
		return;
	fc_flush(w);
	free(w->desc);
	attribute_ctx_free(w->attr);
	sockdiag_close(w->sd);
	if (w->proc_fd >= 0)
		close(w->proc_fd);
	if (w->stat_fd >= 0)
		close(w->stat_fd);
	free(w->stat_buf);
	free(w);
}

/* In the workload's netns (netlink sockets answer for the netns they were
 * opened in; /proc is the same either way). */
static struct worker_ctx *worker_new(const struct kernel_caps *caps)
{
	struct worker_ctx *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->proc_fd = w->stat_fd = -1;
	w->attr = attribute_ctx_new(caps, NULL);
	w->sd = w->attr ? sockdiag_open() : NULL;
	w->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	w->stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	w->stat_buf = malloc(STAT_BUF);
	if (!w->attr || !w->sd || w->proc_fd < 0) {
		int e = errno ? errno : ENOMEM;
		worker_free(w);
		errno = e;
		return NULL;
	}
	attribute_ctx_set_pinned(w->attr, fc_pinned, w);
	return w;
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
	for (size_t i = 0; i < s->n_workers; i++)
		fc_flush(s->workers[i]);
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
	identity_strategy_set_instance(&s->base, s->anchor.key);
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
	bool fast; /* answered by the verified-flow cache */
	size_t pinned; /* holders verified from a pinned process */
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

/* Resolve j with worker context wc. On the loop (on_loop) only the cases
 * whose work is small and bounded are answered: a flow of a process this
 * context already verified, in a tree listed since the last fork, found
 * within INLINE_MAX_CANDIDATES processes and INLINE_MAX_LINKS fd links
 * (a set of processes that once needed more is not tried again until it
 * changes).
 * Anything more (listing the tree, an ancestry walk, hashing an image)
 * returns -EAGAIN having decided nothing, and the job goes to the pool,
 * which starts over. 0: j->why (and j->id) hold the answer. */
static int resolve_run(struct local_strategy *s, struct resolve_job *j, struct worker_ctx *wc, bool on_loop)
{
	bool cpu = s->measure_cpu;
	uint64_t t0 = now_mono_ns(), c0 = cpu ? thread_cpu_ns() : 0, t2 = t0;
	int bail = 0;
	/* From a clean result: the pool's run may follow the loop's. */
	flow_identity_free(j->id);
	j->id = NULL;
	j->fast = false;
	j->pinned = 0;
	j->t_attr = j->t_walk = j->t_hash = j->t_cpu = 0;
	j->why = REASON_IDENTITY_UNAVAILABLE;

	struct flow_tuple ft;
	if (flow_tuple_from_sockaddr(&ft, IPPROTO_TCP, (const struct sockaddr *)&j->tuple.client,
				     (const struct sockaddr *)&j->tuple.proxy) < 0)
		return 0;

	/* Fast path: a flow this context verified before, re-proved. */
	struct sockdiag_result sr;
	bool have_sock = sockdiag_lookup(wc->sd, &ft, &sr) == 0;
	if (have_sock) {
		struct fc_entry *e = fc_find(wc, sr.cookie);
		if (e) {
			struct flow_identity *id = NULL;
			int r = fc_verify(s, wc, e, &sr, !on_loop, &id);
			if (r == 0) {
				e->stamp = ++wc->clock;
				j->id = id;
				j->why = REASON_OK;
				j->fast = true;
				j->t_attr = now_mono_ns() - t0;
				j->t_cpu = cpu ? thread_cpu_ns() - c0 : 0;
				return 0;
			}
			if (r == -EAGAIN)
				return -EAGAIN;
			fc_drop(e);
		}
	}

	uint64_t forks = host_forks(wc); /* before the listing: see fc_verify */
	const pid_t *cand = NULL;
	size_t n_cand = 0;
	bool cached = false;
	if (on_loop && !desc_current(s, wc, forks))
		return -EAGAIN;
	if (descendants(s, wc, forks, false, &cand, &n_cand, &cached) < 0)
		return 0;
	uint64_t set_hash = on_loop ? members_pid_set_hash(cand, n_cand) : 0;
	if (on_loop && (n_cand > INLINE_MAX_CANDIDATES || (wc->over_budget && wc->over_budget_set == set_hash)))
		return -EAGAIN;
	struct attribution at;
	memset(&at, 0, sizeof(at));
	at.subject.pidfd = -1;
	/* The socket as just looked up (a miss there is attribute_flow's to
	 * report, with its reason). */
	attribute_ctx_set_link_budget(wc->attr, on_loop ? INLINE_MAX_LINKS : 0);
	int r = have_sock ? attribute_flow_sock(wc->attr, &sr, cand, n_cand, &at)
			  : attribute_flow(wc->attr, &ft, cand, n_cand, &at);
	attribute_ctx_set_link_budget(wc->attr, 0);
	if (on_loop && (r == -E2BIG || r == -ESRCH)) { /* (the loop's listing is always the cached one) */
		if (r == -E2BIG) {
			wc->over_budget = true;
			wc->over_budget_set = set_hash;
			s->stats.inline_over_budget++; /* on the loop: no lock needed */
		}
		attribution_release(&at);
		return -EAGAIN;
	}
	if (r == -ESRCH && cached) {
		/* Nobody in the remembered listing holds it: list afresh before
		 * denying (a process adopted into the tree without a fork). */
		attribution_release(&at);
		if (descendants(s, wc, forks, true, &cand, &n_cand, &cached) < 0)
			return 0;
		r = have_sock ? attribute_flow_sock(wc->attr, &sr, cand, n_cand, &at)
			      : attribute_flow(wc->attr, &ft, cand, n_cand, &at);
	}
	j->t_attr = now_mono_ns() - t0;
	j->pinned = at.n_pinned;
	struct ancestry_result res;
	memset(&res, 0, sizeof(res));
	if (r < 0) {
		j->why = at.reason != REASON_OK ? at.reason : REASON_IDENTITY_UNAVAILABLE;
		goto out;
	}

	/* A new socket of a process verified before: re-prove that chain. */
	for (size_t i = 0; i < FC_ENTRIES; i++) {
		struct fc_entry *pe = &wc->fc[i];
		if (!pe->used || strcmp(pe->subj.ref.key, at.subject.key) != 0)
			continue;
		struct flow_identity *rid = NULL;
		if (fc_reuse_chain(s, wc, pe, &at.subject, &rid) == 0) {
			pe->stamp = ++wc->clock;
			fc_clone(s, wc, pe, &at, forks, cand, n_cand);
			j->id = rid;
			j->why = REASON_OK;
			j->fast = true;
			t2 = now_mono_ns();
			goto out;
		}
		fc_drop(pe); /* that chain no longer holds */
		break;
	}
	if (on_loop) {
		/* A walk (and maybe hashing) ahead: the pool's. */
		bail = -EAGAIN;
		goto out;
	}

	uint64_t t1 = now_mono_ns();
	r = ancestry_walk(s->caps, s->table, &at.subject, NULL, &res);
	if (r < 0 || !res.anchored) {
		j->why = res.reason != REASON_OK ? res.reason : REASON_ANCESTRY_NOT_ANCHORED;
		goto out;
	}
	j->t_walk = now_mono_ns() - t1;

	t2 = now_mono_ns();
	if (at.subject.exe_err < 0 || at.subject.exe.maps_mismatch) {
		/* No image, or one whose exe link does not match its main
		 * mapping (PR_SET_MM_MAP): nothing trustworthy to name. */
		j->why = REASON_IDENTITY_UNAVAILABLE;
		goto out;
	}
	/* The subject's exe tuple was read from the live process during
	 * attribution; a cache hit for that tuple is its hash without opening
	 * the image again. A miss hashes the running image. */
	r = procref_hash_exe_read(&at.subject, s->cache);
	if (r < 0) {
		j->why = hash_error_reason(r);
		goto out;
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
	fc_store(s, wc, &at, &res, id, forks, cand, n_cand);
out:
	j->t_hash = now_mono_ns() - t2;
	j->t_cpu = cpu ? thread_cpu_ns() - c0 : 0;
	ancestry_result_free(&res);
	attribution_release(&at);
	return bail;
}

static void resolve_work(uv_work_t *w)
{
	struct resolve_job *j = w->data;
	struct worker_ctx *wc = worker_take(j->s, true);
	resolve_run(j->s, j, wc, false);
	worker_put(j->s, wc);
}

/* On the loop: count the answer, hand it over, free the job. */
static void resolve_finish(struct local_strategy *s, struct resolve_job *j, enum reason why)
{
	if (why == REASON_OK) {
		s->stats.resolved++;
		s->stats.attribute_ns += j->t_attr;
		s->stats.walk_ns += j->t_walk;
		s->stats.hash_ns += j->t_hash;
		s->stats.cpu_ns += j->t_cpu;
		if (j->fast)
			s->stats.fast_hits++;
		s->stats.pinned_holders += j->pinned;
	} else {
		s->stats.denied++;
	}
	identity_request_complete(j->req, why, why == REASON_OK ? j->id : NULL);
	if (why != REASON_OK)
		flow_identity_free(j->id);
	free(j);
}

static void resolve_after(uv_work_t *w, int status)
{
	struct resolve_job *j = w->data;
	struct local_strategy *s = j->s;
	s->jobs--;
	resolve_finish(s, j, status < 0 ? REASON_IDENTITY_UNAVAILABLE : j->why);
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
	/* The cheap, bounded case on the loop itself (two thread hand-offs
	 * saved); when a context is busy or the flow needs more, the pool. */
	struct worker_ctx *wc = s->inline_off ? NULL : worker_take(s, false);
	if (wc) {
		int r = resolve_run(s, j, wc, true);
		worker_put(s, wc);
		if (r == 0) {
			s->stats.inline_answers++;
			resolve_finish(s, j, j->why);
			return 0;
		}
	}
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
	for (size_t i = 0; i < s->n_workers; i++)
		worker_free(s->workers[i]);
	exe_hash_cache_free(s->cache);
	pthread_mutex_destroy(&s->workers_lock);
	pthread_cond_destroy(&s->workers_cond);
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
	struct worker_ctx **out;
	size_t n;
};

static int attr_in_netns(void *arg)
{
	struct attr_job *a = arg;
	for (size_t i = 0; i < a->n; i++) {
		a->out[i] = worker_new(a->caps);
		if (!a->out[i]) {
			int e = -errno;
			for (size_t k = 0; k < i; k++) {
				worker_free(a->out[k]);
				a->out[k] = NULL;
			}
			return e < 0 ? e : -ENOMEM;
		}
	}
	return 0;
}

/* As many worker contexts as the libuv thread pool has threads (its
 * UV_THREADPOOL_SIZE, default 4), at most LOCAL_MAX_WORKERS: more jobs
 * than contexts wait for one. */
static size_t worker_count(void)
{
	const char *v = getenv("UV_THREADPOOL_SIZE");
	long n = v && *v ? strtol(v, NULL, 10) : 4;
	if (n < 1)
		n = 4;
	return n > LOCAL_MAX_WORKERS ? LOCAL_MAX_WORKERS : (size_t)n;
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
	pthread_mutex_init(&s->workers_lock, NULL);
	pthread_cond_init(&s->workers_cond, NULL);
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
	s->measure_cpu = cfg->measure_cpu;
	s->inline_off = cfg->pool_only || getenv("TETHER_LOCAL_POOL_ONLY") != NULL;
	s->on_refused = cfg->on_anchor_refused;
	s->data = cfg->data;
	if ((cfg->anchor_socket && !(s->anchor_socket = strdup(cfg->anchor_socket))) ||
	    (cfg->sandbox_cgroup && *cfg->sandbox_cgroup && !(s->sandbox_cgroup = strdup(cfg->sandbox_cgroup))) ||
	    !(s->cache = exe_hash_cache_new(LOCAL_HASH_CACHE))) {
		r = -ENOMEM;
		goto fail;
	}
	struct attr_job aj = { .caps = s->caps, .out = s->workers, .n = worker_count() };
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
	s->n_workers = aj.n;
	for (size_t i = 0; i < s->n_workers; i++) {
		s->workers[i]->next_free = s->free_workers;
		s->free_workers = s->workers[i];
	}
	uv_timer_init(loop, &s->retry_timer);
	s->retry_timer.data = s;
	s->handles_open = 1;
	strscpy(s->base.anchor_desc, "local: anchor not established", sizeof(s->base.anchor_desc));
	start_establish(s);
	*out = &s->base;
	return 0;
fail:
	exe_hash_cache_free(s->cache);
	pthread_mutex_destroy(&s->workers_lock);
	pthread_cond_destroy(&s->workers_cond);
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

bool identity_local_stats(const struct identity_strategy *base, struct identity_local_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!base || base->ops != &local_ops)
		return false;
	*out = ((const struct local_strategy *)base)->stats;
	return true;
}
