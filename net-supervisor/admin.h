/* The admin endpoint: GET /metrics (Prometheus text), /healthz (the process
 * is alive and its loop turns), /readyz (200 only when the source says it is
 * ready; else 503 with why). One request per connection, bounded size and
 * time. It knows nothing of what it reports on: the daemon passes a source
 * (netsup.c answers from its context), so the endpoint never reaches into
 * the proxy or the identity strategy. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

struct admin;

struct admin_source {
	/* /readyz: true when ready; else why[] (NUL-terminated, at most size
	 * bytes) is the body of the 503, ending in a newline. */
	bool (*ready)(void *data, char *why, size_t size);
	/* /metrics: malloc'd Prometheus text, *len without the NUL; NULL when
	 * out of memory. */
	char *(*metrics)(void *data, size_t *len);
	void *data;
};

/* Listen on addr ("ADDR:PORT"); src is copied. -errno, logged. */
int admin_listen(uv_loop_t *loop, const char *addr, const struct admin_source *src, struct admin **out);
void admin_close(struct admin *a);
