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
	struct auditq *parent; /* a child (auditq_new_child): no ring, no thread */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct item *ring;
	size_t cap, head, count;
	bool stop;
	bool waiting;  /* the writer sleeps on cond: a push must wake it */
	bool dropping; /* inside a burst of drops: reported once */
	atomic_uint_fast64_t dropped;
	/* the decision batch (loop thread only) */
	char *batch;
	size_t batch_len, batch_cap;
	struct auditq_waiter *wfirst, *wlast;
};

static void *writer(void *arg)
{
	struct auditq *q = arg;
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (q->count == 0 && !q->stop) {
			q->waiting = true;
			pthread_cond_wait(&q->cond, &q->lock);
			q->waiting = false;
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

int auditq_new_child(struct auditq *parent, struct auditq **out)
{
	struct auditq *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->log = parent->log;
	q->parent = parent;
	*out = q;
	return 0;
}

void auditq_push(struct auditq *q, const char *event, json_t *fields)
{
	if (q->parent)
		q = q->parent;
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
	if (q->parent) {
		auditq_flush(q);
		free(q->batch);
		free(q);
		return;
	}
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	auditq_flush(q);
	free(q->batch);
	free(q->ring);
	free(q);
}

uint64_t auditq_dropped(const struct auditq *q)
{
	if (q && q->parent)
		q = q->parent;
	return q ? atomic_load(&q->dropped) : 0;
}
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

void auditq_flush(struct auditq *q)
{
	if (!auditq_staged(q))
		return;
	size_t recorded = 0;
	if (q->batch_len)
		(void)audit_write_lines(q->log, q->batch, q->batch_len, &recorded); /* counted by the log */
	q->batch_len = 0;
	struct auditq_waiter *w = q->wfirst;
	q->wfirst = q->wlast = NULL;
	while (w) {
		struct auditq_waiter *next = w->next; /* the callback may free w */
		w->cb(w, !w->failed && w->end <= recorded);
		w = next;
	}
}
