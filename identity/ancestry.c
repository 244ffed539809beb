/* The ancestry walk. See ancestry.h for the rules; comments here say why a
 * step is where it is. */
#include "identity/ancestry.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

/* A ppid that changes under us (the parent exited, the hop was reparented)
 * is re-read this many times per hop before giving up as vanished. */
#define ANCESTRY_REPARENT_TRIES 3

struct walk {
	const struct kernel_caps *caps;
	struct members *table;
	const struct ancestry_opts *opts;
	struct ancestry_result *res;
	unsigned max_depth;
	unsigned open_flags; /* procref_open_ex flags for hops */
	bool anchor_is_self; /* opts->anchor_is_self, checked against getpid() */
	size_t cap;
};

/* The hop being looked at: a live ref (own pidfd) and/or its record. */
struct cursor {
	struct procref ref; /* pidfd >= 0 when live and unrecorded-or-confirmed */
	bool live;
	bool recorded;
	struct member_entry e; /* valid when recorded */
};

static int fail(struct walk *w, enum reason r, pid_t pid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(struct walk *w, enum reason r, pid_t pid, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->res->detail, sizeof(w->res->detail), fmt, ap);
	va_end(ap);
	w->res->reason = r;
	w->res->failed_pid = pid;
	w->res->anchored = false;
	switch (r) {
	case REASON_PROCESS_VANISHED:
		return -ESRCH;
	case REASON_PID_REUSED:
		return -ESTALE;
	case REASON_DEPTH_EXCEEDED:
		return -ELOOP;
	case REASON_INTERNAL_ERROR:
		return -ENOMEM;
	default:
		return -EPERM;
	}
}

static void note_open(struct walk *w, pid_t pid)
{
	if (w->opts && w->opts->on_open)
		w->opts->on_open(pid, w->opts->userdata);
}

static int push(struct walk *w, const struct cursor *c)
{
	struct ancestry_result *res = w->res;
	if (res->n >= w->max_depth)
		return fail(w, REASON_DEPTH_EXCEEDED, c->ref.pid,
			    "more than %u hops without reaching the anchor", w->max_depth);
	if (res->n == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 8;
		struct ancestry_hop *h = realloc(res->hops, nc * sizeof(*h));
		if (!h)
			return fail(w, REASON_INTERNAL_ERROR, 0, "out of memory");
		res->hops = h;
		w->cap = nc;
	}
	struct ancestry_hop *h = &res->hops[res->n++];
	procref_copy_recorded(&h->ref, &c->ref);
	h->ref.pidfd = -1;
	h->live = c->live;
	h->recorded = c->recorded;
	h->join = c->recorded ? c->e.join : 0;
	return 0;
}

static void cursor_close(struct cursor *c)
{
	if (c->ref.pidfd >= 0)
		procref_close(&c->ref);
	c->ref.pidfd = -1;
}

/* Open the live process at pid as c; confirm the table knows it or not. */
static int open_live(struct walk *w, pid_t pid, struct cursor *c)
{
	memset(c, 0, sizeof(*c));
	c->ref.pidfd = -1;
	note_open(w, pid);
	int r = procref_open_ex(w->caps, pid, w->open_flags, &c->ref);
	if (r < 0) {
		c->ref.pidfd = -1;
		return r;
	}
	c->live = true;
	if (w->table && members_lookup_key(w->table, c->ref.key, &c->e) == 0)
		c->recorded = true;
	return 0;
}

/* A recorded entry as a hop: alive if the process at its pid is still it.
 * A dead (or pid-reused) recorded hop is kept as a record — the newcomer at
 * its pid is never looked at again. */
static void establish_recorded(struct walk *w, const struct member_entry *e, struct cursor *c)
{
	memset(c, 0, sizeof(*c));
	c->e = *e;
	c->recorded = true;
	c->ref = e->ref;
	c->ref.pidfd = -1;
	/* Never open PID 1 (unless it is the anchor, which is not handled
	 * here): a recorded hop there is taken as recorded. */
	if (e->exited || e->ref.pid == 1)
		return;
	struct procref live;
	note_open(w, e->ref.pid);
	if (procref_open_ex(w->caps, e->ref.pid, w->open_flags, &live) < 0)
		return;
	if (!procref_same(&live, &e->ref)) {
		procref_close(&live);
		return;
	}
	if (w->open_flags & PROCREF_NO_EXE) {
		/* The caller asked for the recorded exe (cheaper). */
		live.exe = e->ref.exe;
		live.exe_err = e->ref.exe_err;
	}
	c->ref = live; /* fresh ppid, own pidfd */
	c->live = true;
}

/* The anchor must be alive: a chain to a dead anchor is anchored nowhere. */
static int confirm_anchor(struct walk *w, const struct procref *anchor)
{
	if (w->anchor_is_self)
		return 0;
	note_open(w, anchor->pid);
	int r = procref_match_pid(w->caps, anchor, anchor->pid);
	if (r < 0)
		return fail(w, REASON_ANCESTRY_NOT_ANCHORED, anchor->pid,
			    "the anchor (pid %d) is no longer alive", (int)anchor->pid);
	return 0;
}

/* cur is live and unrecorded: find its parent through the live ppid.
 * Returns 1 when the parent is the anchor (done), 0 with *next set, or a
 * negative failure. `anchored` false = the unanchored display walk. */
static int live_parent(struct walk *w, struct cursor *cur, const struct procref *anchor,
		       struct cursor *next)
{
	for (int tries = 0;; tries++) {
		pid_t ppid = cur->ref.ppid;
		if (ppid <= 0)
			return anchor ? fail(w, REASON_REACHED_NAMESPACE_INIT, cur->ref.pid,
					     "pid %d has no parent in this PID namespace",
					     (int)cur->ref.pid)
				      : 1;
		if (anchor && ppid == anchor->pid) {
			if (!members_live_chain(w->table))
				return fail(w, REASON_FOREIGN_PROCESS, cur->ref.pid,
					    "pid %d is the anchor's child but was neither spawned "
					    "by it nor seen born in its tree",
					    (int)cur->ref.pid);
			return 1;
		}
		/* Nothing at or above the anchor is opened: not PID 1 (a VM's
		 * init), not the anchor's own parent. */
		if (ppid == 1)
			return anchor ? fail(w, REASON_REACHED_NAMESPACE_INIT, cur->ref.pid,
					     "reached PID 1 without meeting the anchor")
				      : 1;
		if (anchor && ppid == anchor->ppid)
			return fail(w, REASON_ANCESTRY_NOT_ANCHORED, cur->ref.pid,
				    "pid %d is a sibling of the anchor, not below it",
				    (int)cur->ref.pid);

		int r = open_live(w, ppid, next);
		if (r < 0 && r != -ESRCH)
			return fail(w, REASON_IDENTITY_UNAVAILABLE, ppid, "cannot open pid %d: %s",
				    (int)ppid, strerror(-r));
		if (r == 0 && members_younger_than(&next->ref, &cur->ref)) {
			/* A parent cannot start after its child: whatever lives
			 * at ppid now is a newcomer at a reused pid. */
			pid_t bad = next->ref.pid;
			cursor_close(next);
			return fail(w, REASON_PID_REUSED, bad,
				    "pid %d started after its child %d: the pid was reused",
				    (int)bad, (int)cur->ref.pid);
		}
		/* cur's ppid was read before the parent was opened: confirm it
		 * still names this parent (and that cur is alive). A parent
		 * that exited meanwhile (-ESRCH) means cur was reparented:
		 * follow the new ppid. */
		struct procref again;
		int a = procref_from_pidfd_ex(w->caps, cur->ref.pidfd, PROCREF_NO_EXE, &again);
		if (a < 0) {
			cursor_close(next);
			return fail(w, REASON_PROCESS_VANISHED, cur->ref.pid,
				    "pid %d exited during the walk", (int)cur->ref.pid);
		}
		pid_t now_ppid = again.ppid;
		procref_close(&again);
		if (r == 0 && now_ppid == ppid)
			return 0;
		cursor_close(next);
		if (tries + 1 >= ANCESTRY_REPARENT_TRIES)
			return fail(w, REASON_PROCESS_VANISHED, ppid,
				    "the parent (pid %d) of pid %d exited during the walk", (int)ppid,
				    (int)cur->ref.pid);
		cur->ref.ppid = now_ppid;
	}
}

/* Cgroup membership of a live hop (no-op in lineage mode). */
static int check_hop_cgroup(struct walk *w, const struct cursor *c)
{
	if (!w->table || !c->live || c->ref.pidfd < 0)
		return 0;
	int r = members_check_cgroup(w->table, &c->ref);
	if (r == -ESRCH)
		return fail(w, REASON_PROCESS_VANISHED, c->ref.pid, "pid %d exited during the walk",
			    (int)c->ref.pid);
	if (r < 0)
		return fail(w, REASON_FOREIGN_PROCESS, c->ref.pid,
			    "pid %d is outside the sandbox cgroup", (int)c->ref.pid);
	return 0;
}

/* Is ppid the pid of a hop at index >= from? A dead recorded hop counts:
 * the ppid may have been read just before that hop exited (reparenting is
 * immediate, our read was not), and a live child's ppid never names a
 * newcomer at a reused pid. */
static bool ppid_in_chain(const struct ancestry_result *res, size_t from, pid_t ppid)
{
	for (size_t j = from; j < res->n; j++)
		if (res->hops[j].ref.pid == ppid)
			return true;
	return false;
}

/* Live recorded hops: the live ppid must be the recorded parent or, after
 * reparenting to a subreaper, some later hop. Anything else means the
 * record and the kernel disagree — do not pick either. */
static int cross_check(struct walk *w, bool check_subject, pid_t subject_pid, pid_t subject_ppid)
{
	const struct ancestry_result *res = w->res;
	if (check_subject && !ppid_in_chain(res, 0, subject_ppid))
		return fail(w, REASON_ANCESTRY_NOT_ANCHORED, subject_pid,
			    "live ppid %d of pid %d contradicts its recorded lineage",
			    (int)subject_ppid, (int)subject_pid);
	for (size_t i = 0; i < res->n; i++) {
		const struct ancestry_hop *h = &res->hops[i];
		if (!h->live || !h->recorded || h->join == MEMBER_ANCHOR)
			continue;
		if (!ppid_in_chain(res, i + 1, h->ref.ppid))
			return fail(w, REASON_ANCESTRY_NOT_ANCHORED, h->ref.pid,
				    "live ppid %d of pid %d contradicts its recorded lineage",
				    (int)h->ref.ppid, (int)h->ref.pid);
	}
	return 0;
}

static void result_init(struct ancestry_result *res)
{
	memset(res, 0, sizeof(*res));
	res->reason = REASON_INTERNAL_ERROR;
}

/* Establish the subject as a cursor: a live subject is re-read through its
 * pidfd (fresh ppid, proof it is alive); a recorded one is looked up in the
 * table, or matched against the live process at its pid. */
static int establish_subject(struct walk *w, const struct procref *subject, struct cursor *c)
{
	memset(c, 0, sizeof(*c));
	c->ref.pidfd = -1;
	int r;
	if (subject->pidfd >= 0) {
		note_open(w, subject->pid);
		/* the live ppid (and creds, cgroup) of the same pidfd's process */
		r = procref_refresh(w->caps, subject, &c->ref);
		if (r < 0) {
			c->ref.pidfd = -1;
			return fail(w, REASON_PROCESS_VANISHED, subject->pid,
				    "the subject (pid %d) exited", (int)subject->pid);
		}
		if (!procref_same(&c->ref, subject)) {
			cursor_close(c);
			return fail(w, REASON_PID_REUSED, subject->pid,
				    "the subject's pidfd no longer matches its key");
		}
		c->live = true;
		if (w->table && members_lookup_key(w->table, c->ref.key, &c->e) == 0)
			c->recorded = true;
		return 0;
	}
	struct member_entry e;
	if (w->table && members_lookup_key(w->table, subject->key, &e) == 0) {
		establish_recorded(w, &e, c);
		return 0;
	}
	/* Recorded but unknown to the table: only the live process can tell. */
	r = open_live(w, subject->pid, c);
	if (r == -ESRCH)
		return fail(w, REASON_PROCESS_VANISHED, subject->pid, "the subject (pid %d) exited",
			    (int)subject->pid);
	if (r < 0)
		return fail(w, REASON_IDENTITY_UNAVAILABLE, subject->pid, "cannot open pid %d: %s",
			    (int)subject->pid, strerror(-r));
	if (!procref_same(&c->ref, subject)) {
		cursor_close(c);
		return fail(w, REASON_PID_REUSED, subject->pid,
			    "pid %d is now another process than the recorded subject",
			    (int)subject->pid);
	}
	return 0;
}

int ancestry_walk(const struct kernel_caps *caps, struct members *table,
		  const struct procref *subject, const struct ancestry_opts *opts,
		  struct ancestry_result *res)
{
	if (!res)
		return -EINVAL;
	result_init(res);
	if (!caps || !table || !subject)
		return -EINVAL;
	struct walk w = { .caps = caps, .table = table, .opts = opts, .res = res };
	w.max_depth = opts && opts->max_depth ? opts->max_depth : ANCESTRY_DEFAULT_DEPTH;
	w.open_flags = opts && opts->skip_exe ? PROCREF_NO_EXE : 0;
	struct procref anchor;
	members_anchor(table, &anchor);
	w.anchor_is_self = opts && opts->anchor_is_self && anchor.pid == getpid();

	if (procref_same(subject, &anchor)) {
		int r = confirm_anchor(&w, &anchor);
		if (r == 0) {
			res->reason = REASON_OK;
			res->anchored = true;
			snprintf(res->detail, sizeof(res->detail), "the subject is the anchor");
		}
		return r;
	}

	struct cursor cur, next;
	int r = establish_subject(&w, subject, &cur);
	if (r < 0)
		return r;
	r = check_hop_cgroup(&w, &cur);
	if (r < 0) {
		cursor_close(&cur);
		return r;
	}
	pid_t subject_pid = cur.ref.pid, subject_ppid = cur.ref.ppid;
	bool subject_check = cur.live && cur.recorded;
	int subject_pidfd = subject->pidfd;
	memset(&next, 0, sizeof(next));
	next.ref.pidfd = -1;

	for (unsigned hop = 0;; hop++) {
		if (opts && opts->between_hops)
			opts->between_hops(hop, &cur.ref, opts->userdata);
		if (cur.recorded) {
			if (cur.e.join == MEMBER_ADOPTED) {
				r = fail(&w, REASON_FOREIGN_PROCESS, cur.ref.pid,
					 "pid %d was adopted by the anchor from outside its tree",
					 (int)cur.ref.pid);
				break;
			}
			struct member_entry pe;
			if (!cur.e.parent_key[0] || members_lookup_key(table, cur.e.parent_key, &pe) < 0) {
				r = fail(&w, REASON_ANCESTRY_NOT_ANCHORED, cur.ref.pid,
					 "the recorded parent of pid %d is unknown", (int)cur.ref.pid);
				break;
			}
			if (members_younger_than(&pe.ref, &cur.ref)) {
				r = fail(&w, REASON_PID_REUSED, pe.ref.pid,
					 "recorded parent pid %d started after its child %d",
					 (int)pe.ref.pid, (int)cur.ref.pid);
				break;
			}
			if (pe.join == MEMBER_ANCHOR) {
				cursor_close(&cur);
				memset(&cur, 0, sizeof(cur));
				cur.ref = anchor;
				cur.ref.pidfd = -1;
				cur.recorded = true;
				cur.live = true; /* confirmed below */
				cur.e = pe;
				r = push(&w, &cur);
				if (r == 0)
					r = confirm_anchor(&w, &anchor);
				break;
			}
			establish_recorded(&w, &pe, &next);
		} else {
			r = live_parent(&w, &cur, &anchor, &next);
			if (r == 1) {
				cursor_close(&cur);
				memset(&cur, 0, sizeof(cur));
				cur.ref = anchor;
				cur.ref.pidfd = -1;
				cur.live = true;
				cur.recorded = members_lookup_key(table, anchor.key, &cur.e) == 0;
				r = push(&w, &cur);
				if (r == 0)
					r = confirm_anchor(&w, &anchor);
				break;
			}
			if (r < 0)
				break;
			if (procref_same(&next.ref, &anchor)) {
				/* The anchor seen under another pid would be a
				 * namespace confusion; its pid was checked above. */
				cursor_close(&next);
				r = fail(&w, REASON_ANCESTRY_NOT_ANCHORED, cur.ref.pid,
					 "the anchor appeared at an unexpected pid");
				break;
			}
		}
		cursor_close(&cur);
		cur = next;
		memset(&next, 0, sizeof(next));
		next.ref.pidfd = -1;
		r = check_hop_cgroup(&w, &cur);
		if (r < 0)
			break;
		r = push(&w, &cur);
		if (r < 0)
			break;
	}
	cursor_close(&cur);
	cursor_close(&next);
	if (r < 0)
		return r;

	r = cross_check(&w, subject_check, subject_pid, subject_ppid);
	if (r < 0)
		return r;
	/* The subject must still be there at the end: a chain for a process
	 * that is gone proves nothing about a live socket. */
	if (subject_pidfd >= 0 && pidfd_is_alive(subject_pidfd) < 0)
		return fail(&w, REASON_PROCESS_VANISHED, subject_pid,
			    "the subject (pid %d) exited during the walk", (int)subject_pid);
	res->reason = REASON_OK;
	res->anchored = true;
	res->failed_pid = 0;
	snprintf(res->detail, sizeof(res->detail), "%zu hop(s) to the anchor (pid %d)", res->n,
		 (int)anchor.pid);
	return 0;
}

int ancestry_walk_unanchored(const struct kernel_caps *caps, const struct procref *subject,
			     const struct ancestry_opts *opts, struct ancestry_result *res)
{
	if (!res)
		return -EINVAL;
	result_init(res);
	if (!caps || !subject)
		return -EINVAL;
	struct walk w = { .caps = caps, .opts = opts, .res = res };
	w.max_depth = opts && opts->max_depth ? opts->max_depth : ANCESTRY_DEFAULT_DEPTH;
	w.open_flags = opts && opts->skip_exe ? PROCREF_NO_EXE : 0;
	struct cursor cur, next;
	int r = establish_subject(&w, subject, &cur);
	if (r < 0)
		return r;
	pid_t subject_pid = cur.ref.pid;
	memset(&next, 0, sizeof(next));
	next.ref.pidfd = -1;
	for (unsigned hop = 0;; hop++) {
		if (opts && opts->between_hops)
			opts->between_hops(hop, &cur.ref, opts->userdata);
		if (cur.ref.pid == 1) {
			r = 1;
			break;
		}
		r = live_parent(&w, &cur, NULL, &next);
		if (r != 0)
			break;
		cursor_close(&cur);
		cur = next;
		memset(&next, 0, sizeof(next));
		next.ref.pidfd = -1;
		r = push(&w, &cur);
		if (r < 0)
			break;
	}
	cursor_close(&cur);
	cursor_close(&next);
	if (r < 0)
		return r;
	if (subject->pidfd >= 0 && pidfd_is_alive(subject->pidfd) < 0)
		return fail(&w, REASON_PROCESS_VANISHED, subject_pid,
			    "the subject (pid %d) exited during the walk", (int)subject_pid);
	res->reason = REASON_OK;
	res->anchored = false;
	snprintf(res->detail, sizeof(res->detail),
		 "no anchor given: live ppid chain up to (not including) PID 1");
	return 0;
}

void ancestry_result_free(struct ancestry_result *res)
{
	if (!res)
		return;
	free(res->hops);
	res->hops = NULL;
	res->n = 0;
}

json_t *ancestry_chain_to_json(const struct ancestry_result *res)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < res->n; i++) {
		const struct ancestry_hop *h = &res->hops[i];
		json_t *o = json_pack("{s:i, s:s, s:s, s:I, s:s, s:b, s:b, s:o}", "pid",
				      (int)h->ref.pid, "key", h->ref.key, "comm", h->ref.comm,
				      "start_time", (json_int_t)h->ref.start_time, "exe",
				      h->ref.exe.path, "live", h->live, "recorded", h->recorded,
				      "join", h->recorded ? json_string(member_join_word(h->join))
							  : json_null());
		if (!o || json_array_append_new(a, o) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}
