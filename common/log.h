/* Diagnostics to stderr for daemons and the CLI: "prog: level: message".
 * Audit events are not logs; they go through the audit writer. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_program(const char *name);
void log_set_level(enum log_level level);
/* Daemons: a line stderr cannot take right now (a pipe whose reader fell
 * behind) is dropped and counted, and the count is reported with the next
 * line that goes out, instead of blocking the caller (an event loop) in
 * write(2). The CLI keeps the default: it waits. */
void log_set_never_block(bool on);
/* "error", "warning" (or "warn"), "info", "debug" → *out; -EINVAL else. */
int log_level_parse(const char *word, enum log_level *out);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line for the person at the terminal, as it is (no "prog: level:"
 * prefix, no level filter), written like log_msg's lines: whole, and
 * dropped rather than blocking when log_set_never_block is on. */
void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

/* One line per interval for an event a client can repeat at will (a
 * denial, a failed accept): stderr is often a pipe, and a daemon writing a
 * line per event blocks on it once the reader falls behind. Zero it to
 * start. */
struct log_ratelimit {
	uint64_t last_ms;    /* when the last line went out */
	uint64_t suppressed; /* events since then without a line */
	bool started;
};

/* true: log this event now, with *suppressed (may be NULL) = how many were
 * held back since the previous line; false: count it and stay quiet. */
bool log_ratelimit_ok(struct log_ratelimit *rl, uint64_t now_ms, uint64_t interval_ms, uint64_t *suppressed);
