#include "common/log.h"

#include <stdio.h>

/* Process-wide logging settings: set once at startup by main(). */
static const char *program = "tether";
static enum log_level max_level = LOG_LVL_INFO;

void log_set_program(const char *name) { program = name; }
void log_set_level(enum log_level level) { max_level = level; }

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
	fprintf(stderr, "%s: %s: %s\n", program, names[level], line);
}
