/* verify: see verify.h. */
#include "identity/verify.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "identity/ancestry.h"
#include "identity/attribute.h"
#include "identity/chain.h"
#include "identity/exe.h"
#include "identity/procfs.h"

struct flow_verifier {
	const struct kernel_caps *caps;
	enum flow_candidates candidates;
	struct cookie_registry *cookies;
	bool strict_socket_owner, no_chain_cache;
	size_t max_candidates;
	bool measure_cpu;
	struct exe_hash_cache *cache; /* thread-safe */
	/* Set only while no verification runs (flow_verifier_set_anchor). */
	struct procref anchor;        /* recorded copy */
	int anchor_pidfd;             /* the caller's; -1: no anchor */
	struct members *table;        /* the caller's; thread-safe */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct verify_ctx *all; /* every context made (next_all) */
	struct verify_ctx *free_ctxs;
};

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

/* ---------- the answer ---------- */

/* Forget the identity (not the accounting): a result that did not hold. */
static void vf_clear(struct verified_flow *f)
{
	free(f->binary_path);
	free(f->process_key);
	for (size_t i = 0; i < f->n_hops; i++)
		free(f->hops[i].path);
	free(f->hops);
	f->binary_path = f->process_key = NULL;
	f->hops = NULL;
	f->n_hops = 0;
	f->pid = 0;
	f->sha256[0] = '\0';
}

void verified_flow_release(struct verified_flow *f)
{
	if (!f)
		return;
	vf_clear(f);
	free(f->ancestors);
	memset(f, 0, sizeof(*f));
}

/* The subject, room for n_hops ancestors. -ENOMEM (f cleared). */
static int vf_subject(struct verified_flow *f, int pid, const char *sha_hex, const char *path,
		      const char *key, size_t n_hops)
{
	vf_clear(f);
	f->pid = pid;
	strscpy(f->sha256, sha_hex, sizeof(f->sha256));
	f->binary_path = strdup(path);
	f->process_key = strdup(key);
	f->hops = n_hops ? calloc(n_hops, sizeof(*f->hops)) : NULL;
	if (!f->binary_path || !f->process_key || (n_hops && !f->hops)) {
		vf_clear(f);
		return -ENOMEM;
	}
	return 0;
}

/* Append an ancestor (nearest first) into the room vf_subject made. */
static int vf_add_hop(struct verified_flow *f, const char *path, int pid, const char *sha_hex)
{
	struct verified_hop *h = &f->hops[f->n_hops];
	if (!(h->path = strdup(path)))
		return -ENOMEM;
	h->pid = pid;
	strscpy(h->sha256, sha_hex, sizeof(h->sha256));
	f->n_hops++;
	return 0;
}

/* ---------- worker contexts and their one cache ----------
 *
 * Each thread-pool job borrows one worker context: its own sock_diag handle
 * and attribution context (holder cache) in the workload's netns — no lock
 * is held across netlink or procfs I/O, unlike one shared handle behind a
 * mutex. A context also keeps one small cache of what it verified, the
 * same for both candidate sources (struct pin_entry): a subject pinned by
 * its pidfd with its exe tuple and hash, and the chain below the anchor
 * it was proved with (identity/chain.h: each hop pinned, with its exe
 * tuple, and — DESCENDANTS — its hash). The members source finds an entry
 * by subject or by the chain's first hop (see "pinned chains" below); the
 * descendants source also records the flow it verified and finds the
 * entry by socket cookie:
 *
 *   cookie -> the subject's fd slot holding the socket, the member-set
 *             fingerprint and the host fork count of the scan that found
 *             the holder.
 *
 * A flow hit is never trusted as is; it re-proves every fact the slow path
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

#define PIN_ENTRIES 8
#define STAT_BUF 32768

/* One entry of a context's cache (see above). */
struct pin_entry {
	bool used;
	struct procref subj;              /* pidfd owned; exe as read then, hashed */
	struct pinned_chain chain;        /* hops below the anchor, parent first */
	char hop_sha[CHAIN_MAX_HOPS][65]; /* DESCENDANTS: chain.hops[i]'s hash */
	char anchor_key[PROCREF_KEY_MAX];
	unsigned stamp;                   /* LRU */
	/* The flow (DESCENDANTS only; false: a subject and its chain). */
	bool flow;
	uint64_t cookie;
	uint32_t inode;
	int fd;                   /* the subject's fd slot holding the socket */
	uint64_t forks;           /* host fork count before the holder scan (0: unknown) */
	uint64_t members_hash;
	size_t members_n;
};

struct verify_ctx {
	struct attribute_ctx *attr;
	struct sockdiag *sd;
	int proc_fd;
	int stat_fd;
	char *stat_buf;
	struct pin_entry pins[PIN_ENTRIES];
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
	struct verify_ctx *next_free, *next_all;
};

/* The host's fork count ("processes" in /proc/stat), 0 when unknown. */
static uint64_t host_forks(struct verify_ctx *w)
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
static bool desc_current(const struct flow_verifier *v, const struct verify_ctx *w, uint64_t forks)
{
	return forks != 0 && w->desc && forks == w->desc_forks && strcmp(w->desc_anchor, v->anchor.key) == 0;
}

/* The anchor's descendants for a holder search: the listing made at fork
 * count `forks` when there is one (see struct verify_ctx), else a fresh
 * one, remembered. *cached says which; the list belongs to w. */
static int descendants(struct flow_verifier *v, struct verify_ctx *w, uint64_t forks, bool fresh,
		       const pid_t **out, size_t *n_out, bool *cached)
{
	if (!fresh && desc_current(v, w, forks)) {
		*out = w->desc;
		*n_out = w->n_desc;
		*cached = true;
		return 0;
	}
	pid_t *list = NULL;
	size_t n = 0;
	int r = scan_descendants(v->anchor.pid, getpid(), v->max_candidates, &list, &n);
	if (r < 0)
		return r;
	free(w->desc);
	w->desc = list;
	w->n_desc = n;
	w->desc_forks = forks;
	strscpy(w->desc_anchor, v->anchor.key, sizeof(w->desc_anchor));
	*out = list;
	*n_out = n;
	*cached = false;
	return 0;
}

/* ---------- the cache: one entry shape for both sources ---------- */

static void pin_drop(struct pin_entry *e)
{
	if (!e->used)
		return;
	procref_close(&e->subj);
	chain_release(&e->chain);
	memset(e, 0, sizeof(*e));
}

static void pins_flush(struct verify_ctx *w)
{
	for (size_t i = 0; i < PIN_ENTRIES; i++)
		pin_drop(&w->pins[i]);
	free(w->desc);
	w->desc = NULL;
	w->n_desc = 0;
}

/* The entry of the flow on socket `cookie` (DESCENDANTS). */
static struct pin_entry *pin_find_cookie(struct verify_ctx *w, uint64_t cookie)
{
	for (size_t i = 0; i < PIN_ENTRIES; i++)
		if (w->pins[i].used && w->pins[i].flow && w->pins[i].cookie == cookie)
			return &w->pins[i];
	return NULL;
}

/* The first entry of subject `key`, not `keep`. */
static struct pin_entry *pin_find_subject(struct verify_ctx *w, const char *key, const struct pin_entry *keep)
{
	for (size_t i = 0; i < PIN_ENTRIES; i++)
		if (w->pins[i].used && &w->pins[i] != keep && strcmp(w->pins[i].subj.key, key) == 0)
			return &w->pins[i];
	return NULL;
}

/* A slot for a new entry, emptied: `same` when given, else a free entry,
 * else the least recently used one that is not `keep`. */
static struct pin_entry *pin_slot(struct verify_ctx *w, struct pin_entry *same, const struct pin_entry *keep)
{
	struct pin_entry *e = same;
	for (size_t i = 0; !same && i < PIN_ENTRIES; i++) {
		struct pin_entry *x = &w->pins[i];
		if (x == keep)
			continue;
		if (!x->used) {
			e = x;
			break;
		}
		if (!e || x->stamp < e->stamp)
			e = x;
	}
	if (e)
		pin_drop(e);
	return e;
}

/* Pin subj (live: its pidfd is duplicated; exe: its tuple as read, hashed,
 * NULL for subj's own) into e, a slot from pin_slot; the caller then puts
 * the chain into e->chain (pin_drop releases it). -EBADF: not pinned, e
 * left empty. */
static int pin_subject(const struct flow_verifier *v, struct verify_ctx *w, struct pin_entry *e,
		       const struct procref *subj, const struct exe_tuple *exe)
{
	if (subj->pidfd < 0)
		return -EBADF;
	procref_copy_recorded(&e->subj, subj);
	if (exe)
		e->subj.exe = *exe;
	e->subj.pidfd = fcntl(subj->pidfd, F_DUPFD_CLOEXEC, 3);
	if (e->subj.pidfd < 0) {
		memset(e, 0, sizeof(*e));
		return -EBADF;
	}
	strscpy(e->anchor_key, v->anchor.key, sizeof(e->anchor_key));
	e->used = true; /* from here pin_drop releases what was taken */
	e->stamp = ++w->clock;
	return 0;
}

/* ---------- descendants candidates: the verified-flow cache ---------- */

/* Record on e the flow `at` names (one holder, its fd slot), found by a
 * holder scan over cand at fork count forks. */
static void pin_set_flow(struct pin_entry *e, const struct attribution *at, uint64_t forks, const pid_t *cand,
			 size_t n_cand)
{
	e->flow = true;
	e->cookie = at->sock.cookie;
	e->inode = at->sock.inode;
	e->fd = at->subject_fd;
	e->forks = forks;
	e->members_n = n_cand;
	e->members_hash = members_pid_set_hash(cand, n_cand);
}

static int fc_verify_chain(struct flow_verifier *v, struct verify_ctx *w, struct pin_entry *e,
			   const struct procref *sub, pid_t ppid, bool pns);
static int fc_identity(const struct pin_entry *e, const struct procref *sub, struct verified_flow *out);

/* Re-prove a cached flow (see the block comment). 0: *idp is the identity;
 * -EAGAIN: it needs the tree listed again and may_list is false. */
static int fc_verify(struct flow_verifier *v, struct verify_ctx *w, struct pin_entry *e,
		     const struct sockdiag_result *sr, bool may_list, struct verified_flow *out)
{
	if (e->inode != sr->inode || strcmp(e->anchor_key, v->anchor.key) != 0 || v->anchor_pidfd < 0)
		return -ESTALE;
	/* 1. Nobody new can hold it. */
	uint64_t forks = host_forks(w);
	if (forks == 0 || forks != e->forks) {
		if (!may_list && !desc_current(v, w, forks))
			return -EAGAIN;
		const pid_t *cand;
		size_t n_cand;
		bool cached;
		if (descendants(v, w, forks, false, &cand, &n_cand, &cached) < 0)
			return -ENOMEM;
		if (n_cand != e->members_n || members_pid_set_hash(cand, n_cand) != e->members_hash)
			return -ESTALE;
		e->forks = forks;
	}
	/* 2. The subject: same fd slot, same image, alive after the reads. */
	struct procref *sub = &e->subj;
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
	if (chain_live_ppid(v->caps, w->proc_fd, sub, &ppid, &pns) < 0)
		return -ESTALE;
	int r = fc_verify_chain(v, w, e, sub, ppid, pns);
	if (r < 0)
		return r;
	return fc_identity(e, sub, out);
}

/* The chain of e below subject sub, whose live ppid was just read (chain.h). */
static int fc_verify_chain(struct flow_verifier *v, struct verify_ctx *w, struct pin_entry *e,
			   const struct procref *sub, pid_t ppid, bool pns)
{
	if (v->anchor_pidfd < 0)
		return -ESTALE;
	return chain_verify(v->caps, w->proc_fd, v->table, &e->chain, sub, ppid, pns, &v->anchor,
			    v->anchor_pidfd);
}

/* The identity a verified entry stands for, subject `sub`. */
static int fc_identity(const struct pin_entry *e, const struct procref *sub, struct verified_flow *out)
{
	char sha[65];
	hex_encode(e->subj.exe.sha256, 32, sha);
	if (vf_subject(out, sub->pid, sha, sub->exe.path, sub->key, e->chain.n) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < e->chain.n; i++)
		if (vf_add_hop(out, e->chain.hops[i].exe.path, e->chain.hops[i].pid, e->hop_sha[i]) < 0) {
			vf_clear(out);
			return -ENOMEM;
		}
	return 0;
}

/* After a slow-path success: remember the flow when every part of it can
 * be re-proved cheaply (one holder, plain images, hashes known, a short
 * chain of live hops). forks/cand are the holder scan's inputs. */
static void fc_store(struct flow_verifier *v, struct verify_ctx *w, const struct attribution *at,
		     const struct ancestry_result *res, const struct verified_flow *id,
		     uint64_t forks, const pid_t *cand, size_t n_cand)
{
	if (at->n_holders != 1 || at->subject.pidfd < 0 || !at->socket_found || at->sock.cookie == 0 ||
	    res->n == 0 || res->n - 1 > CHAIN_MAX_HOPS || res->n - 1 != id->n_hops || !id->sha256[0])
		return;
	const struct procref *sub = &at->subject;
	if (sub->exe_err < 0 || sub->exe.deleted || sub->exe.memfd || sub->exe.maps_mismatch || !sub->exe.hashed)
		return;
	for (size_t i = 0; i + 1 < res->n; i++)
		if (!id->hops[i].sha256[0])
			return; /* a hop without a hash: nothing to answer from */
	/* The fd slot the holder search saw it in; fc_verify re-reads it. */
	if (at->subject_fd < 0)
		return;
	struct pin_entry *e = pin_slot(w, pin_find_cookie(w, at->sock.cookie), NULL);
	if (!e || pin_subject(v, w, e, sub, NULL) < 0)
		return;
	if (chain_pin_walk(v->caps, res, &e->chain) < 0) {
		pin_drop(e);
		return;
	}
	pin_set_flow(e, at, forks, cand, n_cand);
	for (size_t i = 0; i < e->chain.n; i++)
		strscpy(e->hop_sha[i], id->hops[i].sha256, sizeof(e->hop_sha[i]));
}

/* A new socket of a process this context verified a flow for: its chain
 * (pinned hops) is re-proved from the live subject the holder search just
 * verified, instead of walking again. The subject's exe tuple was read by
 * that search; it must be the cached file version for the cached hash. */
static int fc_reuse_chain(struct flow_verifier *v, struct verify_ctx *w, struct pin_entry *pe,
			  const struct procref *sub, struct verified_flow *out)
{
	const struct exe_tuple *a = &sub->exe, *b = &pe->subj.exe;
	if (strcmp(pe->anchor_key, v->anchor.key) != 0 || v->anchor_pidfd < 0 || sub->pidfd < 0 ||
	    sub->exe_err < 0 || !exe_tuple_same_file(a, b) || strcmp(a->path, b->path) != 0 ||
	    a->deleted || a->memfd || a->maps_mismatch)
		return -ESTALE;
	pid_t ppid;
	bool pns;
	if (chain_live_ppid(v->caps, w->proc_fd, sub, &ppid, &pns) < 0)
		return -ESTALE;
	int r = fc_verify_chain(v, w, pe, sub, ppid, pns);
	if (r < 0)
		return r;
	if (procref_revalidate(v->caps, sub) < 0)
		return -ESTALE;
	return fc_identity(pe, sub, out);
}

/* Remember the new socket's flow with pe's chain (pidfds duplicated) and
 * hashes: its subject runs pe's exe file version (fc_reuse_chain). */
static void fc_clone(struct flow_verifier *v, struct verify_ctx *w, const struct pin_entry *pe,
		     const struct attribution *at, uint64_t forks, const pid_t *cand, size_t n_cand)
{
	if (at->n_holders != 1 || at->subject_fd < 0 || at->sock.cookie == 0)
		return;
	struct pin_entry *same = pin_find_cookie(w, at->sock.cookie);
	struct pin_entry *e = pin_slot(w, same != pe ? same : NULL, pe);
	if (!e || pin_subject(v, w, e, &at->subject, NULL) < 0)
		return;
	memcpy(e->subj.exe.sha256, pe->subj.exe.sha256, sizeof(e->subj.exe.sha256));
	e->subj.exe.hashed = true;
	if (chain_dup(&pe->chain, &e->chain) < 0) {
		pin_drop(e);
		return;
	}
	pin_set_flow(e, at, forks, cand, n_cand);
	memcpy(e->hop_sha, pe->hop_sha, sizeof(e->hop_sha));
}

/* holders_pinned_fn: the subject of a flow this worker verified (its
 * entry's pidfd and exe tuple), when it still runs the same exe file
 * version: the holder search then skips the full open of a process it
 * already knows (the fd link and liveness are still checked after). */
static int fc_pinned(void *userdata, pid_t pid, struct procref *out)
{
	struct verify_ctx *w = userdata;
	for (size_t i = 0; i < PIN_ENTRIES; i++) {
		const struct procref *p = &w->pins[i].subj;
		if (!w->pins[i].used || p->procfs_pid != pid || p->pidfd < 0)
			continue;
		if (pidfd_is_alive(p->pidfd) < 0 || chain_exe_unchanged(w->proc_fd, pid, &p->exe) < 0)
			return -ESTALE;
		procref_copy_recorded(out, p);
		out->pidfd = fcntl(p->pidfd, F_DUPFD_CLOEXEC, 3);
		return out->pidfd >= 0 ? 0 : -ESTALE;
	}
	return -ENOENT;
}

static struct verify_ctx *ctx_new(const struct flow_verifier *v);

struct verify_ctx *flow_verifier_ctx_take(struct flow_verifier *v, bool wait)
{
	bool members = v->candidates == FLOW_CANDIDATES_MEMBERS;
	pthread_mutex_lock(&v->lock);
	while (wait && !members && !v->free_ctxs)
		pthread_cond_wait(&v->cond, &v->lock);
	struct verify_ctx *w = v->free_ctxs;
	if (w)
		v->free_ctxs = w->next_free;
	pthread_mutex_unlock(&v->lock);
	if (w || !members)
		return w;
	if (!(w = ctx_new(v)))
		return NULL;
	pthread_mutex_lock(&v->lock);
	w->next_all = v->all;
	v->all = w;
	pthread_mutex_unlock(&v->lock);
	return w;
}

void flow_verifier_ctx_put(struct flow_verifier *v, struct verify_ctx *w)
{
	pthread_mutex_lock(&v->lock);
	w->next_free = v->free_ctxs;
	v->free_ctxs = w;
	pthread_cond_signal(&v->cond);
	pthread_mutex_unlock(&v->lock);
}

static void ctx_flush(struct verify_ctx *w)
{
	pins_flush(w);
}

static void ctx_free(struct verify_ctx *w)
{
	if (!w)
		return;
	ctx_flush(w);
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

/* In the netns whose sockets are asked about (see flow_verifier_new). */
static struct verify_ctx *ctx_new(const struct flow_verifier *v)
{
	struct verify_ctx *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->proc_fd = w->stat_fd = -1;
	if (v->candidates == FLOW_CANDIDATES_MEMBERS) {
		w->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		w->attr = attribute_ctx_new(v->caps, v->cookies);
		if (!w->attr || w->proc_fd < 0) {
			int e = errno;
			ctx_free(w);
			errno = e;
			return NULL;
		}
		attribute_ctx_set_registry_holder_check(w->attr, v->strict_socket_owner);
		/* A registry hit's liveness is proved by hash_subject's re-open or
		 * a pinned chain, not by a separate open of its own. */
		attribute_ctx_set_check_alive(w->attr, false);
		return w;
	}
	w->attr = attribute_ctx_new(v->caps, NULL);
	w->sd = w->attr ? sockdiag_open() : NULL;
	w->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	w->stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	w->stat_buf = malloc(STAT_BUF);
	if (!w->attr || !w->sd || w->proc_fd < 0) {
		int e = errno ? errno : ENOMEM;
		ctx_free(w);
		errno = e;
		return NULL;
	}
	attribute_ctx_set_pinned(w->attr, fc_pinned, w);
	return w;
}

/* ---------- the verifier ---------- */

int flow_verifier_new(const struct flow_verifier_config *cfg, struct flow_verifier **out)
{
	if (!cfg || !cfg->caps || cfg->n_contexts > VERIFY_MAX_CONTEXTS ||
	    (cfg->n_contexts < 1) != (cfg->candidates == FLOW_CANDIDATES_MEMBERS))
		return -EINVAL;
	struct flow_verifier *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->caps = cfg->caps;
	v->candidates = cfg->candidates;
	v->cookies = cfg->cookies;
	v->strict_socket_owner = cfg->strict_socket_owner;
	v->no_chain_cache = cfg->no_chain_cache;
	v->max_candidates = cfg->max_candidates ? cfg->max_candidates : 65536;
	v->measure_cpu = cfg->measure_cpu;
	v->anchor.pidfd = -1;
	v->anchor_pidfd = -1;
	pthread_mutex_init(&v->lock, NULL);
	pthread_cond_init(&v->cond, NULL);
	v->cache = exe_hash_cache_new(cfg->hash_cache_entries ? cfg->hash_cache_entries : 1024);
	if (!v->cache) {
		flow_verifier_free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < cfg->n_contexts; i++) {
		struct verify_ctx *w = ctx_new(v);
		if (!w) {
			int e = errno ? -errno : -ENOMEM;
			flow_verifier_free(v);
			return e;
		}
		w->next_all = v->all;
		v->all = w;
		w->next_free = v->free_ctxs;
		v->free_ctxs = w;
	}
	*out = v;
	return 0;
}

void flow_verifier_free(struct flow_verifier *v)
{
	if (!v)
		return;
	while (v->all) {
		struct verify_ctx *w = v->all;
		v->all = w->next_all;
		ctx_free(w);
	}
	exe_hash_cache_free(v->cache);
	pthread_mutex_destroy(&v->lock);
	pthread_cond_destroy(&v->cond);
	free(v);
}

void flow_verifier_set_anchor(struct flow_verifier *v, const struct procref *anchor, int anchor_pidfd,
			 struct members *table)
{
	/* Cached flows were verified against the previous anchor: forget them. */
	for (struct verify_ctx *w = v->all; w; w = w->next_all)
		ctx_flush(w);
	if (anchor) {
		procref_copy_recorded(&v->anchor, anchor);
		v->anchor_pidfd = anchor_pidfd;
		v->table = table;
	} else {
		memset(&v->anchor, 0, sizeof(v->anchor));
		v->anchor.pidfd = -1;
		v->anchor_pidfd = -1;
		v->table = NULL;
	}
}

/* ---------- one flow ---------- */

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

/* ---------- members candidates ---------- */

/* Hash the subject's running image; a registry hit is a recorded ref, so
 * the live process is re-opened and must be the same one — and then stays
 * open as the subject, so the walk starts from the live process instead
 * of opening it once more. *live_exe is the tuple read from the live
 * process (hashed when the hash is known). */
static void hash_subject(struct flow_verifier *v, struct attribution *a, struct exe_tuple *live_exe)
{
	memset(live_exe, 0, sizeof(*live_exe));
	if (a->subject.pidfd >= 0) {
		/* The tuple was just read from the live holder (the walk and
		 * its final liveness check follow). */
		(void)procref_hash_exe_read(&a->subject, v->cache);
		*live_exe = a->subject.exe;
		return;
	}
	/* (Not gated on the attribution's liveness check, which the service
	 * turns off: this open is that check.) */
	struct procref live;
	if (procref_open(v->caps, a->subject.pid, &live) < 0)
		return;
	if (!strcmp(live.key, a->subject.key) && procref_hash_exe_read(&live, v->cache) == 0 &&
	    live.exe.dev == a->subject.exe.dev && live.exe.ino == a->subject.exe.ino) {
		a->subject.exe.hashed = true;
		memcpy(a->subject.exe.sha256, live.exe.sha256, sizeof(live.exe.sha256));
		a->subject.pidfd = live.pidfd; /* released with the attribution */
		live.pidfd = -1;
		*live_exe = live.exe;
	}
	procref_close(&live);
}

/* ---------- pinned chains (identity/chain.h) ----------
 *
 * A successful walk whose hops are all live pins the subject and its hops
 * with pidfds in the worker. A later request is answered from that entry
 * only after everything the walk proves is proved again:
 *   - the subject's membership record (not adopted; recorded parent = the
 *     chain's first hop, or the anchor for a chain of none; an unrecorded
 *     child of the anchor is left to the walk), its cgroup when the table
 *     uses one;
 *   - its live ppid names the first pinned hop, every hop runs the same
 *     exe file version and is alive after its child named it, the last
 *     hop's parent is us (the anchor), and the subject is alive at the end.
 * Same subject again (by key): its exe, as recorded by the registry or
 * just read by the holder search, and as it is now, must be the pinned file
 * version, so the pinned hash is its hash. A new subject whose parent is
 * the first hop of a pinned chain reuses that chain with its own freshly
 * read and hashed image. Any failure drops to the full walk. */

static bool plain_exe(const struct exe_tuple *x)
{
	return x->path[0] && !x->deleted && !x->memfd && !x->maps_mismatch;
}

/* c below subj (live), whose live ppid was just read (ppid, pns). */
static int chain_prove(struct flow_verifier *v, struct verify_ctx *w, const struct procref *subj,
		       const struct pinned_chain *c, pid_t ppid, bool pns)
{
	struct member_entry me;
	if (members_lookup_key(v->table, subj->key, &me) == 0) {
		const char *parent = c->n ? c->hops[0].key : v->anchor.key;
		if (me.join == MEMBER_ADOPTED || me.join == MEMBER_ANCHOR || strcmp(me.parent_key, parent) != 0)
			return -ESTALE;
	} else if (c->n == 0) {
		return -ESTALE; /* an unrecorded child of the anchor: the walk decides */
	}
	if (chain_verify(v->caps, w->proc_fd, v->table, c, subj, ppid, pns, &v->anchor, -1) < 0)
		return -ESTALE;
	return pidfd_is_alive(subj->pidfd) == 0 ? 0 : -ESTALE;
}

/* The same subject again: the entry proved, or NULL (a failed entry is dropped). */
static struct pin_entry *chain_subject_hit(struct flow_verifier *v, struct verify_ctx *w,
					   const struct attribution *a)
{
	struct pin_entry *e = pin_find_subject(w, a->subject.key, NULL);
	if (!e)
		return NULL;
	const struct exe_tuple *x = &a->subject.exe;
	pid_t ppid;
	bool pns;
	if (plain_exe(x) && exe_tuple_same_file(x, &e->subj.exe) && !strcmp(x->path, e->subj.exe.path) &&
	    chain_exe_unchanged(w->proc_fd, e->subj.procfs_pid, &e->subj.exe) == 0 &&
	    chain_live_ppid(v->caps, w->proc_fd, &e->subj, &ppid, &pns) == 0 &&
	    chain_prove(v, w, &e->subj, &e->chain, ppid, pns) == 0) {
		e->stamp = ++w->clock;
		return e;
	}
	pin_drop(e);
	return NULL;
}

/* A new subject (live, hashed) under the first hop of a pinned chain. */
static struct pin_entry *chain_parent_hit(struct flow_verifier *v, struct verify_ctx *w,
					  const struct procref *subj)
{
	pid_t ppid;
	bool pns;
	if (subj->pidfd < 0 || chain_live_ppid(v->caps, w->proc_fd, subj, &ppid, &pns) < 0)
		return NULL;
	for (size_t i = 0; i < PIN_ENTRIES; i++) {
		struct pin_entry *e = &w->pins[i];
		if (!e->used || e->chain.n == 0 || !chain_ppid_is(ppid, pns, &e->chain.hops[0]))
			continue;
		if (chain_prove(v, w, subj, &e->chain, ppid, pns) < 0)
			return NULL; /* the subject's or the chain's: the walk decides */
		e->stamp = ++w->clock;
		return e;
	}
	return NULL;
}

/* Remember subj (live, exe as read now and hashed) with chain c (moved in:
 * c is left empty), in place of an entry of the same subject. */
static void chain_store(const struct flow_verifier *v, struct verify_ctx *w, const struct procref *subj,
			const struct exe_tuple *exe, struct pinned_chain *c, const struct pin_entry *keep)
{
	if (subj->pidfd < 0 || !exe->hashed || !plain_exe(exe)) {
		chain_release(c);
		return;
	}
	struct pin_entry *e = pin_slot(w, pin_find_subject(w, subj->key, keep), keep);
	if (!e || pin_subject(v, w, e, subj, exe) < 0) {
		chain_release(c);
		return;
	}
	e->chain = *c;
	c->n = 0; /* the pidfds moved into the entry */
}

static int verify_members_attributed(struct flow_verifier *v, struct verify_ctx *w, struct attribution *ap,
				     int r, struct verified_flow *out);

/* The members source (see verify.h): job_work of the identity service. */
static int verify_members(struct flow_verifier *v, struct verify_ctx *w, const struct flow_tuple *ft,
			  struct verified_flow *out)
{
	size_t cap = 256;
	pid_t *pids = NULL;
	size_t n;
	for (;;) {
		pid_t *np = realloc(pids, cap * sizeof(*pids));
		if (!np) {
			free(pids);
			snprintf(out->detail, sizeof(out->detail), "out of memory");
			return 0;
		}
		pids = np;
		n = members_live_pids(v->table, pids, cap);
		if (n <= cap)
			break;
		cap = n + 64;
	}
	struct attribution a;
	int r = attribute_flow(w->attr, ft, pids, n, &a);
	free(pids);
	return verify_members_attributed(v, w, &a, r, out);
}

/* The rest of the members source, from an attribution (r: its result). */
static int verify_members_attributed(struct flow_verifier *v, struct verify_ctx *w, struct attribution *ap,
				     int r, struct verified_flow *out)
{
	struct attribution a = *ap;
	out->source = a.source;
	struct ancestry_result anc;
	memset(&anc, 0, sizeof(anc));
	if (r < 0) {
		out->reason = a.reason != REASON_OK ? a.reason : REASON_IDENTITY_UNAVAILABLE;
		snprintf(out->detail, sizeof(out->detail), "%s",
			 r == -ENOENT   ? "no socket for this flow"
			 : r == -ESRCH  ? "no process of the tree holds the socket"
			 : r == -ENOTUNIQ ? "the socket is held by different binaries"
					  : strerror(-r));
		goto done;
	}

	const struct pinned_chain *chain = NULL; /* the ancestors, when re-proved */
	struct pin_entry *hit = v->no_chain_cache ? NULL : chain_subject_hit(v, w, &a);
	struct exe_tuple live_exe;
	live_exe.hashed = false;
	if (hit) {
		a.subject.exe.hashed = true;
		memcpy(a.subject.exe.sha256, hit->subj.exe.sha256, sizeof(a.subject.exe.sha256));
		chain = &hit->chain;
		out->chain = FLOW_CHAIN_SUBJECT_HIT;
	} else {
		hash_subject(v, &a, &live_exe);
		hit = v->no_chain_cache || !live_exe.hashed ? NULL : chain_parent_hit(v, w, &a.subject);
		if (hit) {
			struct pinned_chain copy;
			if (chain_dup(&hit->chain, &copy) == 0)
				chain_store(v, w, &a.subject, &live_exe, &copy, hit);
			chain = &hit->chain; /* chain_store never evicts `hit` */
			out->chain = FLOW_CHAIN_PARENT_HIT;
		}
	}
	procref_copy_recorded(&out->subject, &a.subject);
	out->have_subject = true;

	size_t na;
	const struct procref *ancestors;
	const struct ancestry_hop *hops = NULL;
	if (chain) {
		na = chain->n;
		ancestors = chain->hops;
	} else {
		/* we are the anchor: alive while we answer, no need to re-open */
		struct ancestry_opts ao = { .anchor_is_self = true };
		r = ancestry_walk(v->caps, v->table, &a.subject, &ao, &anc);
		if (r < 0 || !anc.anchored || anc.n == 0) {
			out->reason = anc.reason != REASON_OK ? anc.reason : REASON_ANCESTRY_NOT_ANCHORED;
			snprintf(out->detail, sizeof(out->detail), "%s", anc.detail[0] ? anc.detail : "not anchored");
			goto done;
		}
		/* hops [0..n-2] are the ancestors below the anchor (parent first). */
		na = anc.n - 1;
		ancestors = NULL;
		hops = anc.hops;
		if (!v->no_chain_cache && live_exe.hashed) {
			struct pinned_chain pc;
			if (chain_pin_walk(v->caps, &anc, &pc) == 0)
				chain_store(v, w, &a.subject, &live_exe, &pc, NULL);
		}
	}
	out->ancestors = na ? calloc(na, sizeof(*out->ancestors)) : NULL;
	if (na && !out->ancestors) {
		snprintf(out->detail, sizeof(out->detail), "out of memory");
		goto done;
	}
	for (size_t i = 0; i < na; i++)
		procref_copy_recorded(&out->ancestors[i], hops ? &hops[i].ref : &ancestors[i]);
	out->n_ancestors = na;
	out->socket_found = a.socket_found;
	out->socket_cookie = a.socket_found ? a.sock.cookie : 0;
	out->reason = REASON_OK;
done:
	ancestry_result_free(&anc);
	attribution_release(&a);
	return 0;
}

/* With a budget (the caller's loop) only the cases whose work is small and
 * bounded are answered: a flow of a process this context already verified,
 * in a tree listed since the last fork, found within budget->max_candidates
 * processes and budget->max_links fd links (a set of processes that once
 * needed more is not tried again until it changes). Anything more (listing
 * the tree, an ancestry walk, hashing an image) returns -EAGAIN having
 * decided nothing; the unbounded call that follows starts over. */
int flow_verifier_verify(struct flow_verifier *v, struct verify_ctx *wc, const struct flow_tuple *ftp,
		    const struct verify_budget *budget, struct verified_flow *out)
{
	bool on_loop = budget != NULL;
	bool cpu = v->measure_cpu;
	uint64_t t0 = now_mono_ns(), c0 = cpu ? thread_cpu_ns() : 0, t2 = t0;
	int bail = 0;
	/* From a clean result: the unbounded run may follow the bounded one. */
	verified_flow_release(out);
	out->reason = REASON_IDENTITY_UNAVAILABLE;
	if (v->candidates == FLOW_CANDIDATES_MEMBERS)
		return on_loop ? -EAGAIN : verify_members(v, wc, ftp, out);
	const struct flow_tuple ft = *ftp;

	/* Fast path: a flow this context verified before, re-proved. */
	struct sockdiag_result sr;
	bool have_sock = sockdiag_lookup(wc->sd, &ft, &sr) == 0;
	if (have_sock) {
		struct pin_entry *e = pin_find_cookie(wc, sr.cookie);
		if (e) {
			int r = fc_verify(v, wc, e, &sr, !on_loop, out);
			if (r == 0) {
				e->stamp = ++wc->clock;
				out->reason = REASON_OK;
				out->fast = true;
				out->t_attr = now_mono_ns() - t0;
				out->t_cpu = cpu ? thread_cpu_ns() - c0 : 0;
				return 0;
			}
			if (r == -EAGAIN)
				return -EAGAIN;
			pin_drop(e);
		}
	}

	uint64_t forks = host_forks(wc); /* before the listing: see fc_verify */
	const pid_t *cand = NULL;
	size_t n_cand = 0;
	bool cached = false;
	if (on_loop && !desc_current(v, wc, forks))
		return -EAGAIN;
	if (descendants(v, wc, forks, false, &cand, &n_cand, &cached) < 0)
		return 0;
	uint64_t set_hash = on_loop ? members_pid_set_hash(cand, n_cand) : 0;
	if (on_loop && (n_cand > budget->max_candidates || (wc->over_budget && wc->over_budget_set == set_hash)))
		return -EAGAIN;
	struct attribution at;
	memset(&at, 0, sizeof(at));
	at.subject.pidfd = -1;
	/* The socket as just looked up (a miss there is attribute_flow's to
	 * report, with its reason). */
	attribute_ctx_set_link_budget(wc->attr, on_loop ? budget->max_links : 0);
	int r = have_sock ? attribute_flow_sock(wc->attr, &sr, cand, n_cand, &at)
			  : attribute_flow(wc->attr, &ft, cand, n_cand, &at);
	attribute_ctx_set_link_budget(wc->attr, 0);
	if (on_loop && (r == -E2BIG || r == -ESRCH)) { /* (the loop's listing is always the cached one) */
		if (r == -E2BIG) {
			wc->over_budget = true;
			wc->over_budget_set = set_hash;
			out->over_budget = true;
		}
		attribution_release(&at);
		return -EAGAIN;
	}
	if (r == -ESRCH && cached) {
		/* Nobody in the remembered listing holds it: list afresh before
		 * denying (a process adopted into the tree without a fork). */
		attribution_release(&at);
		if (descendants(v, wc, forks, true, &cand, &n_cand, &cached) < 0)
			return 0;
		r = have_sock ? attribute_flow_sock(wc->attr, &sr, cand, n_cand, &at)
			      : attribute_flow(wc->attr, &ft, cand, n_cand, &at);
	}
	out->t_attr = now_mono_ns() - t0;
	out->pinned = at.n_pinned;
	struct ancestry_result res;
	memset(&res, 0, sizeof(res));
	if (r < 0) {
		out->reason = at.reason != REASON_OK ? at.reason : REASON_IDENTITY_UNAVAILABLE;
		goto done;
	}

	/* A new socket of a process verified before: re-prove that chain. */
	struct pin_entry *pe = pin_find_subject(wc, at.subject.key, NULL);
	if (pe) {
		if (fc_reuse_chain(v, wc, pe, &at.subject, out) == 0) {
			pe->stamp = ++wc->clock;
			fc_clone(v, wc, pe, &at, forks, cand, n_cand);
			out->reason = REASON_OK;
			out->fast = true;
			t2 = now_mono_ns();
			goto done;
		}
		vf_clear(out);
		pin_drop(pe); /* that chain no longer holds */
	}
	if (on_loop) {
		/* A walk (and maybe hashing) ahead: the unbounded caller's. */
		bail = -EAGAIN;
		goto done;
	}

	uint64_t t1 = now_mono_ns();
	r = ancestry_walk(v->caps, v->table, &at.subject, NULL, &res);
	if (r < 0 || !res.anchored) {
		out->reason = res.reason != REASON_OK ? res.reason : REASON_ANCESTRY_NOT_ANCHORED;
		goto done;
	}
	out->t_walk = now_mono_ns() - t1;

	t2 = now_mono_ns();
	if (at.subject.exe_err < 0 || at.subject.exe.maps_mismatch) {
		/* No image, or one whose exe link does not match its main
		 * mapping (PR_SET_MM_MAP): nothing trustworthy to name. */
		out->reason = REASON_IDENTITY_UNAVAILABLE;
		goto done;
	}
	/* The subject's exe tuple was read from the live process during
	 * attribution; a cache hit for that tuple is its hash without opening
	 * the image again. A miss hashes the running image. */
	r = procref_hash_exe_read(&at.subject, v->cache);
	if (r < 0) {
		out->reason = hash_error_reason(r);
		goto done;
	}
	char subj_hex[65];
	hex_encode(at.subject.exe.sha256, 32, subj_hex);
	/* hops[n-1] is the anchor: not an ancestor for policy. */
	if (vf_subject(out, at.subject.pid, subj_hex, at.subject.exe.path, at.subject.key,
		       res.n ? res.n - 1 : 0) < 0) {
		out->reason = REASON_INTERNAL_ERROR;
		goto done;
	}
	for (size_t i = 0; i + 1 < res.n; i++) {
		struct procref *h = &res.hops[i].ref;
		char hex[65] = "";
		uint8_t hh[32];
		if (h->exe_err == 0 && exe_hash_cache_get(v->cache, &h->exe, hh) == 1) {
			/* The walk read this tuple from the live hop. */
			hex_encode(hh, 32, hex);
		} else if (res.hops[i].live && h->exe_err == 0) {
			char dir[32];
			snprintf(dir, sizeof(dir), "/proc/%d", h->procfs_pid ? (int)h->procfs_pid : (int)h->pid);
			_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			/* The image must still be the tuple the walk read, and the
			 * pid still that process, for the hash to be its. */
			if (dfd >= 0 && exe_tuple_hash(dfd, &h->exe, v->cache) == 0 &&
			    procref_match_pid(v->caps, h, h->pid) == 0)
				hex_encode(h->exe.sha256, 32, hex);
		}
		if (vf_add_hop(out, h->exe.path[0] ? h->exe.path : h->comm, h->pid, hex) < 0) {
			vf_clear(out);
			out->reason = REASON_INTERNAL_ERROR;
			goto done;
		}
	}
	/* The subject must still be the process that held the socket. */
	if (procref_revalidate(v->caps, &at.subject) < 0) {
		vf_clear(out);
		out->reason = REASON_PROCESS_VANISHED;
		goto done;
	}
	out->reason = REASON_OK;
	fc_store(v, wc, &at, &res, out, forks, cand, n_cand);
done:
	out->t_hash = now_mono_ns() - t2;
	out->t_cpu = cpu ? thread_cpu_ns() - c0 : 0;
	ancestry_result_free(&res);
	attribution_release(&at);
	return bail;
}

int flow_verifier_hash_hop(struct flow_verifier *v, struct procref *h)
{
	if (h->exe.hashed)
		return 0;
	if (h->exe_err != 0)
		return -ENOENT;
	uint8_t hh[32];
	if (exe_hash_cache_get(v->cache, &h->exe, hh) == 1) {
		memcpy(h->exe.sha256, hh, sizeof(hh));
		h->exe.hashed = true;
		return 0;
	}
	char dir[32];
	snprintf(dir, sizeof(dir), "/proc/%d", h->procfs_pid ? (int)h->procfs_pid : (int)h->pid);
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int r = exe_tuple_hash(dfd, &h->exe, v->cache);
	if (r < 0) {
		h->exe.hashed = false;
		return r;
	}
	/* the pid must still be that process for the hash to be its */
	if (procref_match_pid(v->caps, h, h->pid) < 0) {
		h->exe.hashed = false;
		return -ESRCH;
	}
	return 0;
}

int flow_verifier_verify_cookie(struct flow_verifier *v, struct verify_ctx *w, uint64_t cookie,
				struct verified_flow *out)
{
	verified_flow_release(out);
	out->reason = REASON_IDENTITY_UNAVAILABLE;
	if (v->candidates != FLOW_CANDIDATES_MEMBERS || !v->cookies || !v->table)
		return -EINVAL;
	struct attribution a;
	memset(&a, 0, sizeof(a));
	a.subject.pidfd = -1;
	a.subject_fd = -1;
	a.socket_found = true;
	a.sock.cookie = cookie;
	int r = cookie_registry_get(v->cookies, cookie, &a.subject);
	if (r < 0) {
		a.subject.pidfd = -1;
		a.reason = REASON_IDENTITY_UNAVAILABLE;
		r = -ESRCH;
	} else {
		a.source = ATTRIBUTION_SOURCE_REGISTRY;
		a.reason = REASON_OK;
	}
	return verify_members_attributed(v, w, &a, r, out);
}

int flow_verifier_ctx_cookie(struct verify_ctx *w, const struct flow_tuple *ft, uint64_t *cookie)
{
	if (!w->sd)
		return -EINVAL;
	struct sockdiag_result sr;
	int r = sockdiag_lookup(w->sd, ft, &sr);
	if (r < 0)
		return r;
	*cookie = sr.cookie;
	return 0;
}
