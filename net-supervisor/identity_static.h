/* TEST-ONLY identity strategy: every flow "comes from" one configured
 * binary. It exists so the proxy, policy engine and benchmarks can be
 * exercised without the identity library; it verifies NOTHING about the
 * real client. Audit records identity_source "static_test", and the daemon
 * warns loudly at start. Never a default. */
#pragma once

#include "net-supervisor/identity_strategy.h"

struct identity_static_config {
	const char *binary_path;     /* required */
	const char *sha256;          /* NULL: hash binary_path at creation (if readable) */
	const char *const *ancestors; /* ancestor paths, nearest first */
	size_t n_ancestors;
	uint64_t delay_ms;           /* simulated resolution latency (tests of timeouts) */
	uint64_t anchor_delay_ms;    /* anchor established after this long (readiness tests) */
	bool never_anchor;           /* never establish an anchor (not-ready tests) */
};

int identity_static_new(uv_loop_t *loop, const struct identity_static_config *cfg,
			struct identity_strategy **out);
