/* The identity seam: every request is answered exactly once, never from
 * inside identity_resolve(), timeouts deny with identity_timeout, late and
 * abandoned answers are dropped (and freed), anchor changes are announced. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/identity_static.h"
#include "net-supervisor/identity_strategy.h"

/* A strategy the test drives by hand. */
struct fake {
	struct identity_strategy base;
	int mode; /* 0 answer inside resolve, 1 hold, 2 fail to start */
	struct identity_request *held;
	int cancels;
};

static struct flow_identity *make_id(const char *path)
{
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup(path);
	id->source = FLOW_SOURCE_LOCAL_PROCFS;
	flow_identity_add_ancestor(id, "/bin/sh", 7, NULL);
	return id;
}

static int fake_resolve(struct identity_strategy *s, struct identity_request *req)
{
	struct fake *f = (struct fake *)s;
	if (f->mode == 2)
		return -EIO;
	if (f->mode == 0) {
		identity_request_complete(req, REASON_OK, make_id("/usr/bin/git"));
		return 0;
	}
	f->held = req;
	return 0;
}

static void fake_cancel(struct identity_strategy *s, struct identity_request *req) { ((struct fake *)s)->cancels++; }
static void fake_destroy(struct identity_strategy *s) {}

static const struct identity_strategy_ops fake_ops = {
	.name = "fake", .resolve = fake_resolve, .cancel = fake_cancel, .destroy = fake_destroy,
};

struct got {
	int calls;
	enum reason reason;
	struct flow_identity *id;
};

static void on_result(const struct identity_result *res, void *data)
{
	struct got *g = data;
	g->calls++;
	g->reason = res->reason;
	g->id = res->id;
}

static void run_for(uv_loop_t *loop, int ms)
{
	uint64_t end = uv_now(loop) + (uint64_t)ms;
	while (uv_now(loop) < end) {
		uv_run(loop, UV_RUN_NOWAIT);
		uv_sleep(1);
		uv_update_time(loop);
	}
}

/* One test's world: a loop, the fake strategy in a mode, one flow and the
 * answers it got. Lives on the test's stack (the fake points at the loop). */
struct seam {
	uv_loop_t loop;
	struct fake f;
	struct proxy_flow t;
	struct got g;
	struct identity_request *req;
};

static void seam_open(struct seam *s, int mode)
{
	memset(s, 0, sizeof(*s));
	uv_loop_init(&s->loop);
	s->f.base.ops = &fake_ops;
	s->f.base.loop = &s->loop;
	s->f.mode = mode;
}

static int seam_resolve(struct seam *s, uint64_t timeout_ms)
{
	return identity_resolve(&s->f.base, &s->t, timeout_ms, on_result, &s->g, &s->req);
}

/* Nothing may be left on the loop. */
static void seam_close(struct seam *s)
{
	uv_run(&s->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&s->loop), 0);
}

static void test_sync_answer_is_deferred(void **state)
{
	struct seam s;
	seam_open(&s, 0);
	assert_int_equal(seam_resolve(&s, 1000), 0);
	assert_int_equal(s.g.calls, 0); /* not from inside identity_resolve() */
	run_for(&s.loop, 20);
	assert_int_equal(s.g.calls, 1);
	assert_int_equal(s.g.reason, REASON_OK);
	assert_string_equal(s.g.id->binary_path, "/usr/bin/git");
	assert_int_equal(s.g.id->n_ancestors, 1);
	flow_identity_free(s.g.id);
	seam_close(&s);
}

static void test_timeout_then_late_answer(void **state)
{
	struct seam s;
	seam_open(&s, 1);
	assert_int_equal(seam_resolve(&s, 30), 0);
	run_for(&s.loop, 100);
	assert_int_equal(s.g.calls, 1);
	assert_int_equal(s.g.reason, REASON_IDENTITY_TIMEOUT);
	assert_null(s.g.id);
	assert_int_equal(s.f.cancels, 1);
	/* The strategy answers late: dropped, no second callback, freed. */
	identity_request_complete(s.f.held, REASON_OK, make_id("/usr/bin/late"));
	run_for(&s.loop, 20);
	assert_int_equal(s.g.calls, 1);
	seam_close(&s);
}

static void test_abandon(void **state)
{
	struct seam s;
	seam_open(&s, 1);
	assert_int_equal(seam_resolve(&s, 1000), 0);
	identity_request_abandon(s.req);
	assert_int_equal(s.f.cancels, 1);
	identity_request_complete(s.f.held, REASON_AMBIGUOUS_SOCKET_OWNER, NULL);
	run_for(&s.loop, 20);
	assert_int_equal(s.g.calls, 0);
	seam_close(&s);
}

static void test_reason_passes_through_and_start_failure(void **state)
{
	struct seam s;
	seam_open(&s, 1);
	seam_resolve(&s, 1000);
	identity_request_complete(s.f.held, REASON_AMBIGUOUS_SOCKET_OWNER, NULL);
	assert_int_equal(s.g.calls, 1);
	assert_int_equal(s.g.reason, REASON_AMBIGUOUS_SOCKET_OWNER);
	/* OK without an identity is not OK. */
	s.g.calls = 0;
	seam_resolve(&s, 1000);
	identity_request_complete(s.f.held, REASON_OK, NULL);
	assert_int_equal(s.g.calls, 1);
	assert_int_equal(s.g.reason, REASON_IDENTITY_UNAVAILABLE);
	s.f.mode = 2;
	s.g.calls = 0;
	seam_resolve(&s, 1000);
	assert_int_equal(s.g.calls, 0);
	run_for(&s.loop, 20);
	assert_int_equal(s.g.calls, 1);
	assert_int_equal(s.g.reason, REASON_IDENTITY_UNAVAILABLE);
	seam_close(&s);
}

static int anchors;
static void on_anchor(struct identity_strategy *s, bool anchored, void *data) { anchors += anchored ? 1 : -100; }

static void test_static_strategy(void **state)
{
	uv_loop_t loop;
	uv_loop_init(&loop);
	const char *anc[] = { "/bin/sh" };
	struct identity_static_config cfg = { .binary_path = "/usr/bin/curl", .sha256 = NULL,
					      .ancestors = anc, .n_ancestors = 1, .delay_ms = 10,
					      .anchor_delay_ms = 30 };
	struct identity_strategy *s;
	assert_int_equal(identity_static_new(&loop, &cfg, &s), 0);
	s->on_anchor = on_anchor;
	assert_false(s->anchored);
	struct proxy_flow t = { 0 };
	struct got g = { 0 };
	struct identity_request *req;
	identity_resolve(s, &t, 1000, on_result, &g, &req);
	run_for(&loop, 60);
	assert_true(s->anchored);
	assert_int_equal(anchors, 1);
	assert_int_equal(g.calls, 1);
	assert_int_equal(g.reason, REASON_OK);
	assert_int_equal(g.id->source, FLOW_SOURCE_STATIC_TEST);
	assert_string_equal(g.id->binary_path, "/usr/bin/curl");
	assert_int_equal(strlen(g.id->sha256), 64); /* hashed the file */
	assert_string_equal(g.id->ancestors[0].path, "/bin/sh");
	flow_identity_free(g.id);
	/* A request still pending at destroy is completed (and dropped). */
	identity_resolve(s, &t, 1000, on_result, &g, &req);
	identity_request_abandon(req);
	identity_strategy_destroy(s);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}


static void count_replaced(struct identity_strategy *st, void *data)
{
	(void)st;
	(*(int *)data)++;
}

/* The anchor epoch: a new instance moves it (and is announced once it
 * replaces a previous one), the same instance again does not; an identity
 * carries the epoch its request started under, even when the answer comes
 * after a replacement (the proxy then revokes it: revoke.h). */
static void test_anchor_epoch(void **state)
{
	(void)state;
	struct seam s;
	int replaced = 0;
	seam_open(&s, 1);
	s.f.base.on_replaced = count_replaced;
	s.f.base.on_anchor_data = &replaced;
	identity_strategy_set_instance(&s.f.base, "boot:100");
	assert_int_equal(s.f.base.anchor_epoch, 1);
	assert_int_equal(replaced, 0); /* the first one replaces nothing */
	identity_strategy_set_instance(&s.f.base, "boot:100");
	assert_int_equal(s.f.base.anchor_epoch, 1);
	assert_int_equal(seam_resolve(&s, 1000), 0);
	identity_strategy_set_instance(&s.f.base, "boot:200");
	assert_int_equal(s.f.base.anchor_epoch, 2);
	assert_int_equal(replaced, 1);
	identity_request_complete(s.f.held, REASON_OK, make_id("/usr/bin/git"));
	run_for(&s.loop, 20);
	assert_int_equal(s.g.calls, 1);
	assert_int_equal(s.g.id->anchor_epoch, 1);
	struct flow_identity *dup = flow_identity_dup(s.g.id);
	assert_int_equal(dup->anchor_epoch, 1);
	flow_identity_free(dup);
	flow_identity_free(s.g.id);
	seam_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sync_answer_is_deferred),
		cmocka_unit_test(test_timeout_then_late_answer),
		cmocka_unit_test(test_abandon),
		cmocka_unit_test(test_reason_passes_through_and_start_failure),
		cmocka_unit_test(test_static_strategy),
		cmocka_unit_test(test_anchor_epoch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
