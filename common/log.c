#include "common/log.h"

#include <stdlib.h>

#include <poll.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/secrets.h"

/* Process-wide logging settings: set once at startup by main(). */
static const char *program = "tether";
static enum log_level max_level = LOG_LVL_INFO;
static bool never_block;
/* Lines dropped while stderr was full (any thread may log). */
static atomic_uint_fast64_t dropped;

void log_set_program(const char *name) { program = name; }
void log_set_level(enum log_level level) { max_level = level; }
void log_set_never_block(bool on) { never_block = on; }

int log_level_parse(const char *word, enum log_level *out)
{
	static const char *const words[] = { "error", "warning", "info", "debug" };
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcmp(word, words[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	if (strcmp(word, "warn") == 0) {
		*out = LOG_LVL_WARN;
		return 0;
	}
	return -EINVAL;
}

bool log_ratelimit_ok(struct log_ratelimit *rl, uint64_t now_ms, uint64_t interval_ms, uint64_t *suppressed)
{
	if (rl->started && now_ms - rl->last_ms < interval_ms) {
		rl->suppressed++;
		return false;
	}
	if (suppressed)
		*suppressed = rl->suppressed;
	rl->started = true;
	rl->last_ms = now_ms;
	rl->suppressed = 0;
	return true;
}

/* One write of a whole line; a daemon that must never block drops it
 * (counted) while stderr is full. */
static void emit(const char *out, size_t n)
{
	if (never_block) {
		struct pollfd p = { .fd = STDERR_FILENO, .events = POLLOUT };
		if (poll(&p, 1, 0) != 1 || (p.revents & (POLLOUT | POLLNVAL)) != POLLOUT) {
			atomic_fetch_add(&dropped, 1);
			return;
		}
		uint64_t d = atomic_exchange(&dropped, 0);
		if (d) {
			char note[160];
			int m = snprintf(note, sizeof(note), "%s: warning: %llu log lines dropped: stderr was not writable\n",
					 program, (unsigned long long)d);
			if (m > 0 && write(STDERR_FILENO, note, (size_t)m) < 0)
				return;
		}
	}
	/* the registered secret values never leave (common/secrets.h) */
	char *red = NULL;
	size_t rn = 0;
	int r = secrets_scrub(out, n, &red, &rn);
	if (r < 0) {
		char note[160];
		int m = snprintf(note, sizeof(note), "%s: error: a log line was dropped: out of memory redacting it\n",
				 program);
		if (m > 0)
			(void)!write(STDERR_FILENO, note, (size_t)m);
		return;
	}
	if (r > 0) {
		if (rn > 4000) { /* one write of at most PIPE_BUF bytes */
			rn = 4000;
			red[rn - 1] = '\n';
		}
		(void)!write(STDERR_FILENO, red, rn);
		free(red);
		return;
	}
	(void)!write(STDERR_FILENO, out, n);
}

void log_line(const char *fmt, ...)
{
	char out[2400];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, sizeof(out) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(out) - 1)
		n = (int)sizeof(out) - 2;
	out[n++] = '\n';
	emit(out, (size_t)n);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	if (level > max_level)
		return;
	char line[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One write of at most PIPE_BUF bytes: atomic on a pipe, and it fits
	 * whenever poll says the pipe has room. */
	char out[2400];
	int n = snprintf(out, sizeof(out), "%s: %s: %s\n", program, names[level], line);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(out)) {
		n = (int)sizeof(out) - 1;
		out[n - 1] = '\n';
	}
	emit(out, (size_t)n);
}
