/* Shared bits of the identity strategy tests: a bounded loop runner, a
 * checker that counts failures, and latency percentiles. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static int g_failures;
#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
			fprintf(stderr, __VA_ARGS__);                                     \
			fprintf(stderr, "\n");                                            \
			g_failures++;                                                     \
		}                                                                         \
	} while (0)

static void tick_cb(uv_timer_t *t) { (void)t; }

/* Run the loop until *flag (or *anchored == want) or timeout. */
static bool run_until(uv_loop_t *loop, const bool *flag, uint64_t timeout_ms)
{
	uv_timer_t t;
	uv_timer_init(loop, &t);
	uv_timer_start(&t, tick_cb, 10, 10);
	uint64_t end = uv_now(loop) + timeout_ms;
	while (!*flag && uv_now(loop) < end) {
		uv_run(loop, UV_RUN_ONCE);
		uv_update_time(loop);
	}
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
	return *flag;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i];
}
