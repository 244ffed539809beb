#include "net-supervisor/policystore.h"

#include "policy/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

/* A watched directory (canonical path) and an inotify watch on it. */
struct watch {
	int wd;
	char *dir;
};

/* A name whose complete arrival in dir means "reload": a policy file, the
 * file a symlinked policy path points to, or a Kubernetes ConfigMap's
 * `..data` link (swapped by rename when the ConfigMap changes). */
struct target {
	char dir[PATH_MAX];
	char name[NAME_MAX + 1];
};

/* A loaded policy and the views (workers) still deciding with it: freed
 * by the last one to let it go, on whichever thread that is. */
struct polref {
	atomic_uint refs;
	struct policy *p;
};

static void polref_put(struct polref *r)
{
	if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
		policy_free(r->p);
		free(r);
	}
}

struct policystore {
	uv_loop_t *loop;
	/* The policy in force: `policy` is ref->p. The main store changes
	 * them (with generation) under lock; a view (source set) copies them
	 * from its source under the source's lock. */
	struct polref *ref;
	struct policystore *source;
	pthread_mutex_t lock;
	char **files;
	enum policy_layer *layers; /* of each file */
	size_t n_files;
	struct policy *policy;
	uint64_t generation;
	char *root;  /* where symlinked binary paths resolve (NULL: "/") */
	bool learn;
	policystore_cb cb;
	void *data;
	uv_signal_t sighup;
	uv_timer_t debounce;
	int ino_fd; /* inotify, -1 when unavailable */
	uv_poll_t ino_poll;
	struct watch *watches;
	size_t n_watches;
	struct target *targets;
	size_t n_targets;
	bool watching;
	/* reload state */
	uv_work_t work;
	bool reloading, again;
	struct policy *next;
	struct policy_diag diag;
	int result;
	int open_handles;
	bool closing;
	bool free_pending; /* handles closed while a reload was running */
};

static void ps_free(struct policystore *ps)
{
	polref_put(ps->ref);
	if (!ps->source)
		pthread_mutex_destroy(&ps->lock);
	for (size_t i = 0; i < ps->n_files; i++)
		free(ps->files[i]);
	free(ps->files);
	free(ps->root);
	free(ps->layers);
	for (size_t i = 0; i < ps->n_watches; i++)
		free(ps->watches[i].dir);
	free(ps->watches);
	free(ps->targets);
	if (ps->ino_fd >= 0)
		close(ps->ino_fd);
	free(ps);
}

static const struct policy_section *const sections[] = { &network_policy_section, &credentials_section };

/* Load, then resolve symlinked binary paths in the workload's root (at
 * every load, so a reload sees a re-pointed link), then learn mode. */
static int load(const struct policystore *ps, struct policy **out, struct policy_diag *diag)
{
	struct policy_loader *l;
	int r = policy_loader_new(sections, sizeof(sections) / sizeof(sections[0]), &l, diag);
	if (r < 0)
		return r;
	/* the environment's files are the workload's, maybe not visible here */
	policy_loader_skip_workload_files(l);
	for (size_t i = 0; i < ps->n_files; i++) {
		enum policy_layer layer = ps->layers ? ps->layers[i] : POLICY_LAYER_COMMAND;
		r = policy_loader_add_file(l, layer, ps->files[i], layer < POLICY_LAYER_COMMAND, diag);
		if (r < 0) {
			policy_loader_free(l);
			return r;
		}
	}
	if ((r = policy_loader_finish(l, out)) < 0)
		return r;
	const char *root = ps->root ? ps->root : "/";
	int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		log_warn("cannot open the workload's root %s: %m; symlinked binary paths match nothing", root);
	r = netpol_resolve_binaries(*out, rootfd, root);
	if (rootfd >= 0)
		close(rootfd);
	struct network_policy *np = policy_section_data(*out, "network");
	if (np)
		np->learn = ps->learn;
	if (r < 0) {
		policy_free(*out);
		*out = NULL;
	}
	return r;
}

int policystore_set_root(struct policystore *ps, const char *root)
{
	free(ps->root);
	ps->root = root ? strdup(root) : NULL;
	return root && !ps->root ? -ENOMEM : 0;
}

void policystore_set_learn(struct policystore *ps, bool learn) { ps->learn = learn; }

const char *const *policystore_warnings(const struct policystore *ps, size_t *n)
{
	*n = ps->policy ? ps->policy->n_warnings : 0;
	return ps->policy ? (const char *const *)ps->policy->warnings : NULL;
}

int policystore_new(uv_loop_t *loop, const char *const *files, const enum policy_layer *layers,
		    size_t n_files, policystore_cb cb, void *data, struct policystore **out)
{
	struct policystore *ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->loop = loop;
	ps->cb = cb;
	ps->data = data;
	ps->files = calloc(n_files + 1, sizeof(char *));
	ps->layers = calloc(n_files + 1, sizeof(*ps->layers));
	if (!ps->files || !ps->layers) {
		free(ps->files);
		free(ps->layers);
		free(ps);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_files; i++)
		ps->layers[i] = layers ? layers[i] : POLICY_LAYER_COMMAND;
	ps->ino_fd = -1;
	/* Absolute, but symlinks kept: a ConfigMap mount's policy.yaml is a
	 * link through `..data`, which the kubelet points elsewhere on every
	 * update; resolving it once would pin the old version's directory. */
	char cwd[PATH_MAX];
	for (size_t i = 0; i < n_files; i++) {
		if (files[i][0] == '/' || !getcwd(cwd, sizeof(cwd))) {
			ps->files[i] = strdup(files[i]);
		} else if (asprintf(&ps->files[i], "%s/%s", cwd, files[i]) < 0) {
			ps->files[i] = NULL;
		}
		if (!ps->files[i])
			return -ENOMEM;
		ps->n_files++;
	}
	ps->work.data = ps;
	pthread_mutex_init(&ps->lock, NULL);
	*out = ps;
	return 0;
}

static void swap_in(struct policystore *ps, struct policy *p)
{
	struct polref *r = malloc(sizeof(*r));
	if (!r) {
		/* keep the old one in force rather than decide with nothing */
		log_error("policy reload: out of memory, keeping generation %llu",
			  (unsigned long long)ps->generation);
		policy_free(p);
		return;
	}
	atomic_init(&r->refs, 1);
	r->p = p;
	pthread_mutex_lock(&ps->lock);
	struct polref *old = ps->ref;
	ps->ref = r;
	ps->policy = p;
	ps->generation++;
	pthread_mutex_unlock(&ps->lock);
	/* Decisions are taken synchronously on a loop thread: nobody on this
	 * one holds a pointer into the old policy past this point, and each
	 * view (another worker) holds its own reference until it refreshes. */
	polref_put(old);
}

int policystore_view_new(struct policystore *source, struct policystore **out)
{
	struct policystore *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->source = source;
	v->learn = source->learn;
	v->ino_fd = -1;
	policystore_view_refresh(v);
	*out = v;
	return 0;
}

bool policystore_view_refresh(struct policystore *v)
{
	struct policystore *src = v->source;
	pthread_mutex_lock(&src->lock);
	struct polref *r = src->ref;
	uint64_t gen = src->generation;
	if (r && r != v->ref)
		atomic_fetch_add(&r->refs, 1);
	pthread_mutex_unlock(&src->lock);
	if (r == v->ref)
		return false;
	polref_put(v->ref);
	v->ref = r;
	v->policy = r ? r->p : NULL;
	v->generation = gen;
	return true;
}

int policystore_load_now(struct policystore *ps, struct policy_diag *diag)
{
	struct policy *p = NULL;
	int r = load(ps, &p, diag);
	if (r < 0)
		return r;
	swap_in(ps, p);
	return 0;
}

static void work_run(uv_work_t *w)
{
	struct policystore *ps = w->data;
	memset(&ps->diag, 0, sizeof(ps->diag));
	ps->next = NULL;
	ps->result = load(ps, &ps->next, &ps->diag);
}

static void watch_refresh(struct policystore *ps);

static void work_done(uv_work_t *w, int status)
{
	struct policystore *ps = w->data;
	ps->reloading = false;
	if (ps->closing) {
		if (ps->next)
			policy_free(ps->next);
		ps->next = NULL;
		if (ps->free_pending)
			ps_free(ps);
		return;
	}
	if (status == 0 && ps->result == 0 && ps->next) {
		swap_in(ps, ps->next);
		ps->next = NULL;
		if (ps->cb)
			ps->cb(ps, true, NULL, ps->data);
	} else {
		if (ps->next)
			policy_free(ps->next);
		ps->next = NULL;
		const char *msg = ps->diag.msg[0] ? ps->diag.msg : strerror(ps->result ? -ps->result : ECANCELED);
		if (ps->cb)
			ps->cb(ps, false, msg, ps->data);
	}
	watch_refresh(ps);
	if (ps->again) {
		ps->again = false;
		policystore_reload(ps);
	}
}

void policystore_reload(struct policystore *ps)
{
	if (ps->closing)
		return;
	if (ps->reloading) {
		ps->again = true;
		return;
	}
	ps->reloading = true;
	int r = uv_queue_work(ps->loop, &ps->work, work_run, work_done);
	if (r < 0) {
		ps->reloading = false;
		if (ps->cb)
			ps->cb(ps, false, uv_strerror(r), ps->data);
	}
}

static void on_sighup(uv_signal_t *s, int signum)
{
	struct policystore *ps = s->data;
	log_info("SIGHUP: reloading the policy");
	policystore_reload(ps);
}

static void on_debounce(uv_timer_t *t) { policystore_reload(t->data); }

/* Split path into its canonical directory and its name. */
static bool target_of(const char *path, struct target *t)
{
	_cleanup_free_ char *a = strdup(path), *b = strdup(path);
	if (!a || !b)
		return false;
	const char *base = basename(a);
	if (!realpath(dirname(b), t->dir) || strlen(base) > NAME_MAX)
		return false;
	strscpy(t->name, base, sizeof(t->name));
	return true;
}

static void target_add(struct policystore *ps, const struct target *t)
{
	for (size_t i = 0; i < ps->n_targets; i++)
		if (strcmp(ps->targets[i].dir, t->dir) == 0 && strcmp(ps->targets[i].name, t->name) == 0)
			return;
	struct target *v = realloc(ps->targets, (ps->n_targets + 1) * sizeof(*v));
	if (!v)
		return;
	ps->targets = v;
	ps->targets[ps->n_targets++] = *t;
}

#define WATCH_MASK (IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE)

static void watch_dir(struct policystore *ps, const char *dir)
{
	for (size_t i = 0; i < ps->n_watches; i++)
		if (strcmp(ps->watches[i].dir, dir) == 0)
			return;
	int wd = inotify_add_watch(ps->ino_fd, dir, WATCH_MASK);
	if (wd < 0) {
		log_warn("cannot watch %s for policy changes (%m); SIGHUP still reloads", dir);
		return;
	}
	struct watch *v = realloc(ps->watches, (ps->n_watches + 1) * sizeof(*v));
	char *d = strdup(dir);
	if (!v || !d) {
		free(d);
		if (v)
			ps->watches = v;
		inotify_rm_watch(ps->ino_fd, wd);
		return;
	}
	ps->watches = v;
	ps->watches[ps->n_watches++] = (struct watch){ .wd = wd, .dir = d };
}

/* What to watch now: each file's own directory (its name and `..data`),
 * and, when the path is a symlink, the directory of what it points to
 * today (an in-place write of the target). Recomputed after every reload:
 * a swapped link points somewhere new. */
static void watch_refresh(struct policystore *ps)
{
	if (ps->ino_fd < 0 || ps->closing)
		return;
	ps->n_targets = 0;
	for (size_t i = 0; i < ps->n_files; i++) {
		struct target t;
		if (target_of(ps->files[i], &t)) {
			target_add(ps, &t);
			strscpy(t.name, "..data", sizeof(t.name));
			target_add(ps, &t);
		}
		_cleanup_free_ char *real = realpath(ps->files[i], NULL);
		if (real && target_of(real, &t))
			target_add(ps, &t);
	}
	for (size_t i = 0; i < ps->n_targets; i++)
		watch_dir(ps, ps->targets[i].dir);
}

static bool is_symlink(const char *dir, const char *name)
{
	char p[PATH_MAX + NAME_MAX + 2];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
}

/* Reload only once a file is complete: closed after writing
 * (IN_CLOSE_WRITE) or renamed into place (IN_MOVED_TO), or a symlink
 * created at the name (it is complete at birth). A bare IN_MODIFY is a
 * writer in the middle of its work: loading then could enforce a prefix
 * of the new file (a valid policy missing the rules or pins after it). */
static void on_event(struct policystore *ps, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		log_warn("policy watch: inotify queue overflowed, a change may have been missed; "
			 "send SIGHUP to reload");
		return;
	}
	const char *dir = NULL;
	size_t wi = 0;
	for (; wi < ps->n_watches; wi++)
		if (ps->watches[wi].wd == ev->wd) {
			dir = ps->watches[wi].dir;
			break;
		}
	if (!dir)
		return;
	if (ev->mask & IN_IGNORED) { /* the directory is gone */
		free(ps->watches[wi].dir);
		ps->watches[wi] = ps->watches[--ps->n_watches];
		return;
	}
	if (!ev->len)
		return;
	bool complete = (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) ||
			((ev->mask & IN_CREATE) && is_symlink(dir, ev->name));
	if (!complete)
		return;
	for (size_t i = 0; i < ps->n_targets; i++)
		if (strcmp(ps->targets[i].name, ev->name) == 0 && strcmp(ps->targets[i].dir, dir) == 0) {
			uv_timer_start(&ps->debounce, on_debounce, 100, 0);
			return;
		}
}

static void on_inotify(uv_poll_t *h, int status, int events)
{
	(void)events;
	struct policystore *ps = h->data;
	if (status < 0)
		return;
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	for (;;) {
		ssize_t n = read(ps->ino_fd, buf, sizeof(buf));
		if (n <= 0)
			return; /* EAGAIN: drained */
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			on_event(ps, ev);
			p += sizeof(*ev) + ev->len;
		}
	}
}

int policystore_watch(struct policystore *ps)
{
	uv_signal_init(ps->loop, &ps->sighup);
	ps->sighup.data = ps;
	ps->open_handles++;
	int r = uv_signal_start(&ps->sighup, on_sighup, SIGHUP);
	if (r < 0)
		return r;
	uv_timer_init(ps->loop, &ps->debounce);
	ps->debounce.data = ps;
	ps->open_handles++;
	ps->watching = true;
	ps->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (ps->ino_fd < 0) {
		log_warn("policy reload on change disabled: inotify: %m; SIGHUP still reloads");
		return 0;
	}
	r = uv_poll_init(ps->loop, &ps->ino_poll, ps->ino_fd);
	if (r < 0) {
		close(ps->ino_fd);
		ps->ino_fd = -1;
		return r;
	}
	ps->ino_poll.data = ps;
	ps->open_handles++;
	watch_refresh(ps);
	return uv_poll_start(&ps->ino_poll, UV_READABLE, on_inotify);
}

static void handle_closed(uv_handle_t *h)
{
	struct policystore *ps = h->data;
	if (--ps->open_handles > 0)
		return;
	if (ps->reloading)
		ps->free_pending = true; /* work_done frees */
	else
		ps_free(ps);
}

void policystore_close(struct policystore *ps)
{
	if (!ps)
		return;
	if (ps->source) {
		ps_free(ps);
		return;
	}
	ps->closing = true;
	if (ps->open_handles == 0) {
		if (ps->reloading)
			ps->free_pending = true;
		else
			ps_free(ps);
		return;
	}
	uv_close((uv_handle_t *)&ps->sighup, handle_closed);
	uv_close((uv_handle_t *)&ps->debounce, handle_closed);
	if (ps->ino_fd >= 0)
		uv_close((uv_handle_t *)&ps->ino_poll, handle_closed);
}

const struct credential_set *policystore_credentials(const struct policystore *ps)
{
	return ps->policy ? policy_section_data(ps->policy, "credentials") : NULL;
}

const struct network_policy *policystore_network(const struct policystore *ps)
{
	/* Loaded without a `network:` section: an empty policy, deny all. */
	static const struct network_policy empty = { .mode = NETPOL_ENFORCE };
	static const struct network_policy empty_learn = { .mode = NETPOL_ENFORCE, .learn = true };
	if (!ps->policy)
		return NULL;
	const struct network_policy *np = policy_section_data(ps->policy, "network");
	return np ? np : ps->learn ? &empty_learn : &empty;
}

bool policystore_loaded(const struct policystore *ps) { return ps->policy != NULL; }
uint64_t policystore_generation(const struct policystore *ps) { return ps->generation; }
