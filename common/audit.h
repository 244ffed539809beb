/* Audit log: JSONL, one event object a line (docs/net-supervisor.md "Audit",
 * docs/proc-supervisor.md "Audit events").
 *
 * audit_emit() adds `ts` (RFC 3339 UTC, ms), `event` and `topology`, then
 * writes the line on an O_APPEND fd under the log's lock, so concurrent
 * writers of one process never interleave within a line.
 *
 * The file never keeps a partial line. A write that fails part-way (ENOSPC,
 * EFBIG, EIO) is cut back (ftruncate) to the end of the last whole line it
 * wrote; when the file cannot be cut (a pipe, or another process wrote after
 * it) the fragment is ended with a newline before the next line, so it never
 * merges with one. Lines that did not make it are counted (audit_failures).
 * A failure starts an episode: one warning on stderr naming the error
 * (`ENOSPC (No space left on device)`), audit_writable() false, then, at
 * the first write that works again, an `audit_resumed` event in the file
 * ({unrecorded_events, since, error}) and one line on stderr.
 * The log is thread-safe. A NULL log drops nothing: it writes to stderr. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct audit_log;

/* path "-" means stdout. -errno on failure. */
int audit_open(const char *path, const char *topology, struct audit_log **out);
/* A log on an fd the caller keeps (not closed by audit_close); for tests and
 * for callers that opened the file themselves. */
int audit_open_fd(int fd, const char *topology, struct audit_log **out);
void audit_close(struct audit_log *log);
/* Log rotation: open the path again (the old file was renamed away) and put
 * it in place of the old one on the same descriptor (dup3), so a writer
 * racing with it writes whole lines to one file or the other, never loses
 * one. 0, or -errno with the old file kept; stdout is left as it is. */
int audit_reopen(struct audit_log *log);
/* Takes a reference to `fields` (the caller keeps its own). 0 when the line
 * is in the file (the page cache), -errno when it is not. */
int audit_emit(struct audit_log *log, const char *event, json_t *fields);
/* The line audit_emit() would write, newline included, malloc'd (*len
 * without the NUL). NULL on ENOMEM. */
char *audit_format(const struct audit_log *log, const char *event, json_t *fields, size_t *len);
/* The same at timestamp ts. The line is the header's keys (ts, event,
 * topology) and then fields' keys in their order; it is written by dumping
 * fields once after the header, or (reference, or a header key in fields,
 * or a header string JSON would escape) through one object holding both,
 * which gives the same bytes (tests/common/test_audit.c compares them). */
char *audit_format_at(const struct audit_log *log, const char *event, json_t *fields, const char *ts, bool reference,
		      size_t *len);
/* Write len bytes of whole lines (each ending in '\n') as one write(2) when
 * the kernel takes it. 0 when all are in the file; -errno otherwise, with
 * *recorded = the bytes of the leading whole lines that are (a line written
 * in part is cut off again, as above). Lines are counted by their '\n'. */
int audit_write_lines(struct audit_log *log, const char *buf, size_t len, size_t *recorded);
uint64_t audit_events_written(const struct audit_log *log);
/* Events that could not be written, over the process's life. */
uint64_t audit_failures(const struct audit_log *log);
/* false from a failed write until a write works again. */
bool audit_writable(const struct audit_log *log);
/* Failure episodes so far (each warned once). */
uint64_t audit_failure_episodes(const struct audit_log *log);
/* Register a secret value (common/secrets.h) as it is and as a JSON string
 * escapes it, so neither form reaches an audit line or a log line. The
 * value is a NUL-terminated UTF-8 string (invalid UTF-8: -EINVAL after the
 * raw form is registered). 0, -ENOMEM or -EINVAL. */
int audit_secret_add(const char *v);
/* Format the RFC 3339 UTC timestamp with milliseconds ("2026-12-01T19:41:43.123Z"). */
void audit_format_ts(uint64_t real_ns, char out[32]);
