#include "net-supervisor/policystore.h"

#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

struct watch {
	uv_fs_event_t ev;
	struct policystore *ps;
};

struct policystore {
	uv_loop_t *loop;
	char **files;
	size_t n_files;
	struct policy *policy;
	uint64_t generation;
	policystore_cb cb;
	void *data;
	uv_signal_t sighup;
	uv_timer_t debounce;
	struct watch *watches;
	size_t n_watches;
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
	if (ps->policy)
		policy_free(ps->policy);
	for (size_t i = 0; i < ps->n_files; i++)
		free(ps->files[i]);
	free(ps->files);
	free(ps->watches);
	free(ps);
}

static const struct policy_section *const sections[] = { &network_policy_section };

static int load(char **files, size_t n, struct policy **out, struct policy_diag *diag)
{
	struct policy_loader *l;
	int r = policy_loader_new(sections, 1, &l, diag);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		r = policy_loader_add_file(l, POLICY_LAYER_COMMAND, files[i], false, diag);
		if (r < 0) {
			policy_loader_free(l);
			return r;
		}
	}
	return policy_loader_finish(l, out);
}

int policystore_new(uv_loop_t *loop, const char *const *files, size_t n_files,
		    policystore_cb cb, void *data, struct policystore **out)
{
	struct policystore *ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->loop = loop;
	ps->cb = cb;
	ps->data = data;
	ps->files = calloc(n_files + 1, sizeof(char *));
	if (!ps->files) {
		free(ps);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_files; i++) {
		ps->files[i] = realpath(files[i], NULL);
		if (!ps->files[i])
			ps->files[i] = strdup(files[i]);
		if (!ps->files[i])
			return -ENOMEM;
		ps->n_files++;
	}
	ps->work.data = ps;
	*out = ps;
	return 0;
}

static void swap_in(struct policystore *ps, struct policy *p)
{
	struct policy *old = ps->policy;
	ps->policy = p;
	ps->generation++;
	/* Decisions are taken synchronously on this thread, so nobody holds a
	 * pointer into the old policy past this point. */
	if (old)
		policy_free(old);
}

int policystore_load_now(struct policystore *ps, struct policy_diag *diag)
{
	struct policy *p = NULL;
	int r = load(ps->files, ps->n_files, &p, diag);
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
	ps->result = load(ps->files, ps->n_files, &ps->next, &ps->diag);
}

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

static void on_fs(uv_fs_event_t *ev, const char *filename, int events, int status)
{
	struct watch *w = ev->data;
	struct policystore *ps = w->ps;
	if (status < 0 || !filename)
		return;
	char dirbuf[4096];
	size_t dl = sizeof(dirbuf);
	if (uv_fs_event_getpath(ev, dirbuf, &dl) < 0)
		return;
	/* Only our files: editors write temp files next to them. */
	for (size_t i = 0; i < ps->n_files; i++) {
		const char *f = ps->files[i];
		const char *slash = strrchr(f, '/');
		if (slash && strcmp(slash + 1, filename) == 0 &&
		    (size_t)(slash - f) == strlen(dirbuf) && strncmp(f, dirbuf, (size_t)(slash - f)) == 0) {
			uv_timer_start(&ps->debounce, on_debounce, 100, 0);
			return;
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
	ps->watches = calloc(ps->n_files ? ps->n_files : 1, sizeof(*ps->watches));
	if (!ps->watches)
		return -ENOMEM;
	ps->watching = true;
	for (size_t i = 0; i < ps->n_files; i++) {
		/* Watch the directory: an editor's rename-over replaces the inode. */
		_cleanup_free_ char *copy = strdup(ps->files[i]);
		if (!copy)
			return -ENOMEM;
		const char *dir = dirname(copy);
		bool dup = false;
		for (size_t j = 0; j < ps->n_watches; j++) {
			char p[4096];
			size_t pl = sizeof(p);
			if (uv_fs_event_getpath(&ps->watches[j].ev, p, &pl) == 0 && strcmp(p, dir) == 0)
				dup = true;
		}
		if (dup)
			continue;
		struct watch *w = &ps->watches[ps->n_watches];
		w->ps = ps;
		uv_fs_event_init(ps->loop, &w->ev);
		w->ev.data = w;
		ps->open_handles++;
		ps->n_watches++;
		r = uv_fs_event_start(&w->ev, on_fs, dir, 0);
		if (r < 0)
			log_warn("cannot watch %s for policy changes (%s); SIGHUP still reloads", dir,
				 uv_strerror(r));
	}
	return 0;
}

static void handle_closed(uv_handle_t *h)
{
	struct policystore *ps = h->data;
	if (h->type == UV_FS_EVENT)
		ps = ((struct watch *)h->data)->ps;
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
	for (size_t i = 0; i < ps->n_watches; i++)
		uv_close((uv_handle_t *)&ps->watches[i].ev, handle_closed);
}

const struct network_policy *policystore_network(const struct policystore *ps)
{
	/* Loaded without a `network:` section: an empty policy, deny all. */
	static const struct network_policy empty = { .mode = NETPOL_ENFORCE };
	if (!ps->policy)
		return NULL;
	const struct network_policy *np = policy_section_data(ps->policy, "network");
	return np ? np : &empty;
}

bool policystore_loaded(const struct policystore *ps) { return ps->policy != NULL; }
uint64_t policystore_generation(const struct policystore *ps) { return ps->generation; }
