/* Audit log: JSONL, one event object a line (INTERFACES.md "Audit events").
 *
 * audit_emit() adds `ts` (RFC 3339 UTC, ms), `event` and `topology`, then
 * writes the line with a single write() on an O_APPEND fd so concurrent
 * writers never interleave within a line. A failed or short write is counted
 * (audit_failures) and reported on stderr once per burst: never silent.
 * The log is thread-safe. A NULL log drops nothing: it writes to stderr. */
#pragma once

#include <jansson.h>
#include <stdint.h>

struct audit_log;

/* path "-" means stdout. -errno on failure. */
int audit_open(const char *path, const char *topology, struct audit_log **out);
void audit_close(struct audit_log *log);
/* Log rotation: open the path again (the old file was renamed away) and put
 * it in place of the old one on the same descriptor (dup3), so a writer
 * racing with it writes whole lines to one file or the other, never loses
 * one. 0, or -errno with the old file kept; stdout is left as it is. */
int audit_reopen(struct audit_log *log);
/* Takes a reference to `fields` (the caller keeps its own). */
int audit_emit(struct audit_log *log, const char *event, json_t *fields);
uint64_t audit_events_written(const struct audit_log *log);
uint64_t audit_failures(const struct audit_log *log);
/* Format the RFC 3339 UTC timestamp with milliseconds ("2026-12-01T19:41:43.123Z"). */
void audit_format_ts(uint64_t real_ns, char out[32]);
