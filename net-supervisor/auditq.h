/* A bounded audit queue drained by its own writer thread, so the relay
 * never waits on the audit file (a slow disk, a full pipe). Producers (the
 * loop) hand over a json_t; the writer calls audit_emit(). When the queue is
 * full the event is dropped, counted, and a line goes to stderr for the first
 * drop of every burst: never silent. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "common/audit.h"

struct auditq;

/* capacity 0 = 8192 events. The log stays owned by the caller and must
 * outlive the queue. */
int auditq_new(struct audit_log *log, size_t capacity, struct auditq **out);
/* Takes ownership of fields (decref'd after writing or dropping). */
void auditq_push(struct auditq *q, const char *event, json_t *fields);
/* Write everything still queued, stop the thread, free. */
void auditq_free(struct auditq *q);
uint64_t auditq_dropped(const struct auditq *q);
uint64_t auditq_write_failures(const struct auditq *q);
