#include "net-supervisor/auditq.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

struct item {
	const char *event; /* string literals only */
	json_t *fields;
};

struct auditq {
	struct audit_log *log;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct item *ring;
	size_t cap, head, count;
	bool stop;
	bool waiting;  /* the writer sleeps on cond: a push must wake it */
	bool dropping; /* inside a burst of drops: reported once */
	atomic_uint_fast64_t dropped;
	/* the decision batch being staged (loop thread only) */
	char *batch;
	size_t batch_len, batch_cap;
	struct auditq_waiter *wfirst, *wlast;
	/* With a notifier: the batch handed to the writer (under lock). One at
	 * a time; what is staged meanwhile goes when it comes back. */
	auditq_notify_fn notify;
	void *notify_data;
	char *fl;                     /* the buffer handed over */
	size_t fl_len, fl_cap, fl_recorded;
	struct auditq_waiter *fl_first;
	bool fl_busy;                 /* handed over, not yet completed on the loop */
	bool fl_pending;              /* the writer has yet to take it */
	bool fl_written;              /* the writer is done with it */
};

static void batch_call(struct auditq_waiter *w, size_t recorded)
{
	while (w) {
		struct auditq_waiter *next = w->next; /* the callback may free w */
		w->cb(w, !w->failed && w->end <= recorded);
		w = next;
	}
}

static void *writer(void *arg)
{
	struct auditq *q = arg;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (q->count == 0 && !q->fl_pending && !q->stop) {
			q->waiting = true;
			pthread_cond_wait(&q->cond, &q->lock);
			q->waiting = false;
		}
		if (q->fl_pending) {
			/* decisions first: answers wait on them */
			q->fl_pending = false;
			pthread_mutex_unlock(&q->lock);
			size_t recorded = 0;
			(void)audit_write_lines(q->log, q->fl, q->fl_len, &recorded); /* counted by the log */
			pthread_mutex_lock(&q->lock);
			q->fl_recorded = recorded;
			q->fl_written = true;
			if (q->notify) /* under the lock: set_notify(NULL) stops it for good */
				q->notify(q->notify_data);
			continue;
		}
		if (q->count == 0 && q->stop)
			break;
		struct item it = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->count--;
		pthread_mutex_unlock(&q->lock);
		(void)audit_emit(q->log, it.event, it.fields); /* failures counted by the log */
		json_decref(it.fields);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int auditq_new(struct audit_log *log, size_t capacity, struct auditq **out)
{
	struct auditq *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->log = log;
	q->cap = capacity ? capacity : 8192;
	q->ring = calloc(q->cap, sizeof(*q->ring));
	if (!q->ring) {
		free(q);
		return -ENOMEM;
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	int r = pthread_create(&q->thread, NULL, writer, q);
	if (r != 0) {
		free(q->ring);
		free(q);
		return -r;
	}
	*out = q;
	return 0;
}

void auditq_push(struct auditq *q, const char *event, json_t *fields)
{
	pthread_mutex_lock(&q->lock);
	if (q->count == q->cap) {
		bool first = !q->dropping;
		q->dropping = true;
		uint64_t n = atomic_fetch_add(&q->dropped, 1) + 1;
		pthread_mutex_unlock(&q->lock);
		if (first)
			log_error("audit queue full (%zu events): dropping '%s' events, %llu dropped so far "
				  "(see tether_audit_dropped_total)", q->cap, event, (unsigned long long)n);
		json_decref(fields);
		return;
	}
	if (q->dropping && q->count < q->cap / 2) {
		q->dropping = false;
		log_warn("audit queue drained; %llu events were dropped in total",
			 (unsigned long long)atomic_load(&q->dropped));
	}
	q->ring[(q->head + q->count) % q->cap] = (struct item){ event, fields };
	q->count++;
	/* Wake the writer only when it sleeps, and after unlocking, so that it
	 * does not wake straight into the held lock: the loop pays no futex
	 * call while the writer is busy, one wake when it is idle. (A writer
	 * not waiting checks count under the lock before it sleeps.) */
	bool wake = q->waiting;
	pthread_mutex_unlock(&q->lock);
	if (wake)
		pthread_cond_signal(&q->cond);
}

void auditq_free(struct auditq *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	/* the writer wrote what it was handed: tell its waiters, then write
	 * and tell what is still staged, without the thread */
	auditq_set_notify(q, NULL, NULL);
	auditq_complete(q);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q->fl);
	free(q->batch);
	free(q->ring);
	free(q);
}

uint64_t auditq_dropped(const struct auditq *q) { return q ? atomic_load(&q->dropped) : 0; }
uint64_t auditq_write_failures(const struct auditq *q) { return q ? audit_failures(q->log) : 0; }
bool auditq_writable(const struct auditq *q) { return q ? audit_writable(q->log) : true; }
uint64_t auditq_failure_episodes(const struct auditq *q) { return q ? audit_failure_episodes(q->log) : 0; }

void auditq_stage(struct auditq *q, const char *event, json_t *fields, struct auditq_waiter *w)
{
	size_t len;
	char *line = audit_format(q->log, event, fields, &len);
	json_decref(fields);
	bool ok = line != NULL;
	if (ok && q->batch_len + len > q->batch_cap) {
		size_t cap = q->batch_cap ? q->batch_cap : 16384;
		while (cap < q->batch_len + len)
			cap *= 2;
		char *nb = realloc(q->batch, cap);
		if (nb) {
			q->batch = nb;
			q->batch_cap = cap;
		} else {
			ok = false;
		}
	}
	if (ok) {
		memcpy(q->batch + q->batch_len, line, len);
		q->batch_len += len;
	}
	free(line);
	if (!ok)
		log_error("audit: cannot format a '%s' event: out of memory", event);
	if (!w)
		return;
	w->next = NULL;
	w->end = q->batch_len;
	w->failed = !ok;
	if (q->wlast)
		q->wlast->next = w;
	else
		q->wfirst = w;
	q->wlast = w;
}

bool auditq_staged(const struct auditq *q) { return q->batch_len > 0 || q->wfirst; }

void auditq_set_notify(struct auditq *q, auditq_notify_fn fn, void *data)
{
	pthread_mutex_lock(&q->lock);
	q->notify = fn;
	q->notify_data = data;
	pthread_mutex_unlock(&q->lock);
}

void auditq_flush(struct auditq *q)
{
	if (!auditq_staged(q))
		return;
	if (!q->notify) {
		size_t recorded = 0;
		if (q->batch_len)
			(void)audit_write_lines(q->log, q->batch, q->batch_len, &recorded); /* counted by the log */
		q->batch_len = 0;
		struct auditq_waiter *w = q->wfirst;
		q->wfirst = q->wlast = NULL;
		batch_call(w, recorded);
		return;
	}
	if (q->fl_busy)
		return; /* goes when the one in flight comes back */
	/* swap buffers: the staging one goes to the writer */
	char *b = q->fl;
	size_t cap = q->fl_cap;
	pthread_mutex_lock(&q->lock);
	q->fl = q->batch;
	q->fl_cap = q->batch_cap;
	q->fl_len = q->batch_len;
	q->fl_first = q->wfirst;
	q->fl_recorded = 0;
	q->fl_busy = q->fl_pending = true;
	q->fl_written = false;
	bool wake = q->waiting;
	pthread_mutex_unlock(&q->lock);
	q->batch = b;
	q->batch_cap = cap;
	q->batch_len = 0;
	q->wfirst = q->wlast = NULL;
	if (wake)
		pthread_cond_signal(&q->cond);
}

void auditq_complete(struct auditq *q)
{
	pthread_mutex_lock(&q->lock);
	bool done = q->fl_busy && q->fl_written;
	struct auditq_waiter *w = done ? q->fl_first : NULL;
	size_t recorded = q->fl_recorded;
	if (done) {
		q->fl_busy = false;
		q->fl_first = NULL;
	}
	pthread_mutex_unlock(&q->lock);
	if (done)
		batch_call(w, recorded);
	auditq_flush(q); /* what was staged meanwhile */
}
