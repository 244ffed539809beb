/* Two ways to the audit file.
 *
 * The queue: bounded, drained by its own writer thread, so the relay never
 * waits on the audit file (a slow disk, a full pipe) for events nobody is
 * answered on (anchor, policy, egress_error). Producers (the loop) hand
 * over a json_t; the writer calls audit_emit(). When the queue is full the
 * event is dropped, counted, and a line goes to stderr for the first drop
 * of every burst: never silent.
 *
 * The batch: decisions. A client must never see an answer whose decision
 * is not in the file (a SIGKILL right after the answer would lose it), so
 * the loop stages each decision's line with a waiter, the loop writes the
 * staged lines together once per iteration (auditq_flush: one write(2)
 * for all), and only then does each waiter's callback send its answer,
 * told whether its line is in the file. Loop thread only: each worker's
 * loop has its own batch (auditq_new_child). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/audit.h"

struct auditq;

/* capacity 0 = 8192 events. The log stays owned by the caller and must
 * outlive the queue. */
int auditq_new(struct audit_log *log, size_t capacity, struct auditq **out);
/* Another worker's loop (context.h): a queue with a decision batch of its
 * own (stage/flush on that loop's thread) whose pushes, counters and file
 * are the parent's. Lines stay whole: each flush is whole lines in one
 * write under the log's lock. Free it (auditq_free: flushes) before the
 * parent. */
int auditq_new_child(struct auditq *parent, struct auditq **out);
/* Takes ownership of fields (decref'd after writing or dropping).
 * Thread-safe. */
void auditq_push(struct auditq *q, const char *event, json_t *fields);
/* Write everything still queued, stop the thread, free. */
void auditq_free(struct auditq *q);
uint64_t auditq_dropped(const struct auditq *q);

struct auditq_waiter;
/* Called once, from auditq_flush(), never from auditq_stage(). */
typedef void (*auditq_recorded_cb)(struct auditq_waiter *w, bool recorded);
struct auditq_waiter {
	auditq_recorded_cb cb;
	struct auditq_waiter *next; /* private */
	size_t end;                 /* private: its line's end in the batch */
	bool failed;                /* private: the line could not be made */
};
/* Stage a line (takes fields). w may be NULL (nobody waits); else w->cb
 * must be set and w stay valid until it is called. */
void auditq_stage(struct auditq *q, const char *event, json_t *fields, struct auditq_waiter *w);
bool auditq_staged(const struct auditq *q);
/* Write the staged lines, then call their waiters in staging order. A
 * waiter's callback may stage again: that goes into the next flush. */
void auditq_flush(struct auditq *q);
uint64_t auditq_write_failures(const struct auditq *q);
bool auditq_writable(const struct auditq *q);
uint64_t auditq_failure_episodes(const struct auditq *q);
