/* The identity feed's reader (net-supervisor/identity_feed.c) and wire
 * format (identity/idfeed.c), with this process as its own anchor (the
 * feed's peer must have the anchor's process key: here, ours):
 *   - records, refusals and announcements land in the table; a lookup
 *     answers, falls back, or says "wait";
 *   - more records than the table holds: the oldest are forgotten, the
 *     newest all found (the index stays consistent through evictions);
 *   - a wait is answered by the record's arrival, or runs out;
 *   - a malformed line closes the feed and forgets every record;
 *   - a peer that is not the anchor is never read;
 *   - a view (another worker's loop, on its own thread) shares the owner's
 *     table: its waits are answered when their record arrives, run out, or
 *     end at once when the owner's connection goes; a view whose own anchor
 *     differs falls back;
 *   - the decoder refuses what the format does not allow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <stdatomic.h>
#include <time.h>
#include <uv.h>

#include "common/kernel.h"
#include "identity/idfeed.h"
#include "identity/procref.h"
#include "net-supervisor/identity_feed.h"

static struct kernel_caps caps;
static char self_key[PROCREF_KEY_MAX];
static const char *SHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct rig {
	uv_loop_t loop;
	char path[108];
	int lfd, sfd; /* listener, the accepted (server) end */
	struct idfeed_client *c;
};

static void rig_up(struct rig *r, const char *anchor_key)
{
	uv_loop_init(&r->loop);
	snprintf(r->path, sizeof(r->path), "/tmp/tether-idfeed-test-%d.sock", (int)getpid());
	unlink(r->path);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, r->path);
	r->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(r->lfd >= 0);
	assert_int_equal(bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(r->lfd, 4), 0);
	assert_int_equal(idfeed_client_new(&r->loop, &caps, r->path, 50, 2000, &r->c), 0);
	idfeed_client_set_anchor(r->c, anchor_key); /* connects at once */
	r->sfd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(r->sfd >= 0);
}

static void done_cb(void *arg) { *(bool *)arg = true; }

static void rig_down(struct rig *r)
{
	bool done = false;
	idfeed_client_close(r->c, done_cb, &done);
	while (!done)
		uv_run(&r->loop, UV_RUN_ONCE);
	close(r->sfd);
	close(r->lfd);
	unlink(r->path);
	assert_int_equal(uv_loop_close(&r->loop), 0);
}

static void send_line(struct rig *r, const char *line, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(r->sfd, line + off, len - off);
		assert_true(n > 0);
		off += (size_t)n;
	}
}

static void send_id(struct rig *r, uint64_t cookie, const char *path)
{
	struct flow_identity *id = flow_identity_new();
	id->pid = 42;
	id->binary_path = strdup(path);
	id->process_key = strdup("boot:1");
	memcpy(id->sha256, SHA, 65);
	assert_int_equal(flow_identity_add_ancestor(id, "/bin/sh", 41, ""), 0);
	char *l;
	size_t n;
	assert_int_equal(idfeed_encode_id(cookie, id, &l, &n), 0);
	send_line(r, l, n);
	free(l);
	flow_identity_free(id);
}

/* Run the loop until the client has read `records` records (bounded). */
static void pump(struct rig *r, uint64_t records)
{
	for (int i = 0; i < 20000; i++) {
		struct idfeed_client_stats st;
		idfeed_client_stats(r->c, &st);
		if (st.records + st.refusals + st.dues >= records || !idfeed_client_active(r->c))
			return;
		uv_run(&r->loop, UV_RUN_NOWAIT);
		usleep(100);
	}
	fail_msg("the feed did not deliver %llu messages", (unsigned long long)records);
}

static void test_records_refusals_dues(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, self_key);
	assert_true(idfeed_client_active(r.c));
	send_id(&r, 1001, "/usr/bin/curl");
	char *l;
	size_t n;
	assert_int_equal(idfeed_encode_no(1002, REASON_PROCESS_VANISHED, &l, &n), 0);
	send_line(&r, l, n);
	free(l);
	assert_int_equal(idfeed_encode_due(1003, &l, &n), 0);
	send_line(&r, l, n);
	free(l);
	pump(&r, 3);
	struct flow_identity *id = NULL;
	assert_int_equal(idfeed_client_lookup(r.c, 1001, &id), 1);
	assert_string_equal(id->binary_path, "/usr/bin/curl");
	assert_string_equal(id->sha256, SHA);
	assert_int_equal(id->pid, 42);
	assert_int_equal(id->source, FLOW_SOURCE_LOCAL_PROCFS);
	assert_int_equal(id->n_ancestors, 1);
	assert_string_equal(id->ancestors[0].path, "/bin/sh");
	flow_identity_free(id);
	assert_int_equal(idfeed_client_lookup(r.c, 1002, &id), 0);           /* refused: fall back */
	assert_int_equal(idfeed_client_lookup(r.c, 1003, &id), -EINPROGRESS); /* announced */
	assert_int_equal(idfeed_client_lookup(r.c, 1004, &id), -EINPROGRESS); /* never mentioned */
	rig_down(&r);
}

struct waited {
	bool called;
	struct flow_identity *id;
};
static void on_wait(void *arg, struct flow_identity *id)
{
	struct waited *w = arg;
	w->called = true;
	w->id = id;
}

static void test_wait_answered_and_timeout(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, self_key);
	struct waited a = { 0 }, b = { 0 };
	assert_int_equal(idfeed_client_wait(r.c, 7, on_wait, &a), 0);
	assert_int_equal(idfeed_client_wait(r.c, 8, on_wait, &b), 0);
	send_id(&r, 7, "/usr/bin/git");
	for (int i = 0; i < 20000 && !(a.called && b.called); i++) {
		uv_run(&r.loop, UV_RUN_NOWAIT);
		usleep(100);
	}
	assert_true(a.called);
	assert_non_null(a.id);
	assert_string_equal(a.id->binary_path, "/usr/bin/git");
	flow_identity_free(a.id);
	assert_true(b.called); /* 50 ms later: ran out */
	assert_null(b.id);
	struct idfeed_client_stats st;
	idfeed_client_stats(r.c, &st);
	assert_int_equal(st.waited_hits, 1);
	assert_int_equal(st.wait_timeouts, 1);
	rig_down(&r);
}

static void test_eviction_keeps_index(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, self_key);
	const uint64_t total = IDFEED_TABLE + IDFEED_TABLE / 2;
	/* cookies spread like the kernel's (monotonic, gaps) */
	for (uint64_t i = 0; i < total; i++) {
		send_id(&r, 1000 + i * 7, "/usr/bin/x");
		if (i % 64 == 63)
			pump(&r, i + 1);
	}
	pump(&r, total);
	struct flow_identity *id;
	size_t found_old = 0;
	for (uint64_t i = 0; i < total - IDFEED_TABLE; i++) {
		id = NULL;
		if (idfeed_client_lookup(r.c, 1000 + i * 7, &id) == 1) {
			found_old++;
			flow_identity_free(id);
		}
	}
	assert_int_equal(found_old, 0);
	for (uint64_t i = total - IDFEED_TABLE; i < total; i++) {
		id = NULL;
		assert_int_equal(idfeed_client_lookup(r.c, 1000 + i * 7, &id), 1);
		flow_identity_free(id);
	}
	rig_down(&r);
}

static void test_malformed_closes(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, self_key);
	send_id(&r, 5, "/usr/bin/curl");
	pump(&r, 1);
	const char bad[] = "{\"id\":6,\"pid\":1,\"key\":\"k\",\"path\":\"/p\",\"sha256\":\"xyz\",\"anc\":[]}\n";
	send_line(&r, bad, sizeof(bad) - 1);
	for (int i = 0; i < 20000 && idfeed_client_active(r.c); i++) {
		uv_run(&r.loop, UV_RUN_NOWAIT);
		usleep(100);
	}
	assert_false(idfeed_client_active(r.c));
	struct flow_identity *id = NULL;
	assert_int_equal(idfeed_client_lookup(r.c, 5, &id), 0); /* forgotten: fall back */
	rig_down(&r);
}

static void test_not_the_anchor(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, "00000000-0000-0000-0000-000000000000:1"); /* someone else's key */
	/* what a forger would send (the client has already hung up) */
	const char rec[] = "{\"id\":9,\"pid\":42,\"key\":\"boot:1\",\"path\":\"/usr/bin/curl\",\"sha256\":"
			   "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",\"anc\":[]}\n";
	(void)send(r.sfd, rec, sizeof(rec) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	for (int i = 0; i < 50; i++) {
		uv_run(&r.loop, UV_RUN_NOWAIT);
		usleep(1000);
	}
	assert_false(idfeed_client_active(r.c));
	struct idfeed_client_stats st;
	idfeed_client_stats(r.c, &st);
	assert_int_equal(st.rejected, 1);
	assert_int_equal(st.records, 0);
	struct flow_identity *id = NULL;
	assert_int_equal(idfeed_client_lookup(r.c, 9, &id), 0);
	rig_down(&r);
}

/* ---------- a view on another thread ---------- */

struct vwaited {
	atomic_bool called;
	struct flow_identity *id; /* written before called is set */
};
static void on_vwait(void *arg, struct flow_identity *id)
{
	struct vwaited *w = arg;
	w->id = id;
	atomic_store(&w->called, true);
}

struct vrig {
	uv_loop_t loop;
	struct idfeed_client *v;
	struct vwaited a, b, c;
	atomic_int waiting; /* the view's waits are registered */
};

static void view_start(uv_timer_t *t)
{
	struct vrig *v = t->data;
	struct flow_identity *id = NULL;
	assert_int_equal(idfeed_client_lookup(v->v, 21, &id), -EINPROGRESS);
	assert_int_equal(idfeed_client_wait(v->v, 21, on_vwait, &v->a), 0); /* its record comes */
	assert_int_equal(idfeed_client_wait(v->v, 22, on_vwait, &v->b), 0); /* never mentioned: 50 ms */
	assert_int_equal(idfeed_client_wait(v->v, 23, on_vwait, &v->c), 0); /* due: 2 s, unless the feed goes */
	atomic_store(&v->waiting, 1);
}

static void view_thread(void *arg)
{
	struct vrig *v = arg;
	uv_timer_t t;
	uv_timer_init(&v->loop, &t);
	t.data = v;
	uv_timer_start(&t, view_start, 0, 0);
	for (int i = 0; i < 50000 && !(atomic_load(&v->a.called) && atomic_load(&v->b.called) &&
				       atomic_load(&v->c.called)); i++) {
		uv_run(&v->loop, UV_RUN_NOWAIT);
		usleep(100);
	}
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&v->loop, UV_RUN_NOWAIT);
}

static uint64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void test_view_on_another_thread(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, self_key);
	struct vrig *v = calloc(1, sizeof(*v));
	assert_non_null(v);
	uv_loop_init(&v->loop);
	assert_int_equal(idfeed_client_new_view(r.c, &v->loop, &v->v), 0);
	assert_false(idfeed_client_active(v->v)); /* no anchor of its own yet */
	idfeed_client_set_anchor(v->v, self_key);
	assert_true(idfeed_client_active(v->v));
	send_id(&r, 20, "/usr/bin/ssh");
	char *l;
	size_t n;
	assert_int_equal(idfeed_encode_due(23, &l, &n), 0);
	send_line(&r, l, n);
	free(l);
	pump(&r, 2);
	struct flow_identity *id = NULL;
	assert_int_equal(idfeed_client_lookup(v->v, 20, &id), 1); /* the owner read it; the view finds it */
	assert_string_equal(id->binary_path, "/usr/bin/ssh");
	flow_identity_free(id);

	uv_thread_t th;
	assert_int_equal(uv_thread_create(&th, view_thread, v), 0);
	for (int i = 0; i < 50000 && !atomic_load(&v->waiting); i++)
		usleep(100);
	assert_true(atomic_load(&v->waiting));
	send_id(&r, 99, "/usr/bin/nobody-waits");
	send_id(&r, 21, "/usr/bin/git");
	for (int i = 0; i < 50000 && !(atomic_load(&v->a.called) && atomic_load(&v->b.called)); i++) {
		uv_run(&r.loop, UV_RUN_NOWAIT);
		usleep(100);
	}
	assert_true(atomic_load(&v->a.called));
	assert_non_null(v->a.id);
	assert_string_equal(v->a.id->binary_path, "/usr/bin/git");
	flow_identity_free(v->a.id);
	assert_true(atomic_load(&v->b.called)); /* ran out */
	assert_null(v->b.id);
	assert_false(atomic_load(&v->c.called)); /* announced: waits on */
	/* the owner's connection goes: the view's pending wait ends at once */
	uint64_t t0 = ms_now();
	const char bad[] = "not json\n";
	send_line(&r, bad, sizeof(bad) - 1);
	for (int i = 0; i < 50000 && !atomic_load(&v->c.called); i++) {
		uv_run(&r.loop, UV_RUN_NOWAIT);
		usleep(100);
	}
	assert_true(atomic_load(&v->c.called));
	assert_null(v->c.id);
	assert_true(ms_now() - t0 < 1500); /* well before its 2 s */
	uv_thread_join(&th);
	assert_false(idfeed_client_active(v->v));
	struct idfeed_client_stats st;
	idfeed_client_stats(v->v, &st);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.waited_hits, 1);
	assert_int_equal(st.wait_timeouts, 1);
	assert_int_equal(st.fallbacks, 2);
	assert_int_equal(st.records, 3); /* the shared connection's */
	assert_int_equal(st.wakeups, 2); /* 21's record, the disconnect: never for 99 */
	idfeed_client_stats(r.c, &st);
	assert_int_equal(st.hits + st.waited_hits, 0); /* the owner's lookups: none */
	bool done = false;
	idfeed_client_close(v->v, done_cb, &done);
	while (!done)
		uv_run(&v->loop, UV_RUN_ONCE);
	assert_int_equal(uv_loop_close(&v->loop), 0);
	free(v);
	rig_down(&r);
}

static void test_view_other_anchor(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, self_key);
	uv_loop_t loop2;
	uv_loop_init(&loop2);
	struct idfeed_client *v;
	assert_int_equal(idfeed_client_new_view(r.c, &loop2, &v), 0);
	idfeed_client_set_anchor(v, "00000000-0000-0000-0000-000000000000:1"); /* its worker verified another */
	send_id(&r, 30, "/usr/bin/curl");
	pump(&r, 1);
	struct flow_identity *id = NULL;
	assert_false(idfeed_client_active(v));
	assert_int_equal(idfeed_client_lookup(v, 30, &id), 0); /* falls back */
	assert_int_equal(idfeed_client_lookup(r.c, 30, &id), 1);
	flow_identity_free(id);
	/* the owner closes first: the view still answers (falls back) */
	bool done = false, vdone = false;
	idfeed_client_close(r.c, done_cb, &done);
	while (!done)
		uv_run(&r.loop, UV_RUN_ONCE);
	idfeed_client_set_anchor(v, self_key);
	assert_int_equal(idfeed_client_lookup(v, 30, &id), 0);
	idfeed_client_close(v, done_cb, &vdone);
	while (!vdone)
		uv_run(&loop2, UV_RUN_ONCE);
	assert_int_equal(uv_loop_close(&loop2), 0);
	close(r.sfd);
	close(r.lfd);
	unlink(r.path);
	assert_int_equal(uv_loop_close(&r.loop), 0);
}

static void test_decoder_refuses(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"", "[]", "{}", "{\"due\":\"1\"}", "{\"due\":1,\"x\":2}",
		"{\"no\":1}", "{\"no\":1,\"reason\":\"ok\",\"extra\":1}",
		"{\"id\":1,\"pid\":0,\"key\":\"k\",\"path\":\"/p\",\"sha256\":\"%s\",\"anc\":[]}",
		"{\"id\":1,\"pid\":1,\"key\":\"\",\"path\":\"/p\",\"sha256\":\"%s\",\"anc\":[]}",
		"{\"id\":1,\"pid\":1,\"key\":\"k\",\"path\":\"/p\",\"sha256\":\"%s\",\"anc\":{}}",
		"{\"id\":1,\"pid\":1,\"key\":\"k\",\"path\":\"/p\",\"sha256\":\"%s\",\"anc\":[{\"path\":\"/a\",\"pid\":2,\"sha256\":\"zz\"}]}",
		"{\"id\":1,\"pid\":1,\"key\":\"k\",\"path\":\"/p\",\"sha256\":\"ABCDEF\",\"anc\":[]}",
		"{\"id\":1,\"id\":2,\"pid\":1,\"key\":\"k\",\"path\":\"/p\",\"sha256\":\"%s\",\"anc\":[]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char line[1024];
		const char *at = strstr(bad[i], "%s");
		if (at)
			snprintf(line, sizeof(line), "%.*s%s%s", (int)(at - bad[i]), bad[i], SHA, at + 2);
		else
			snprintf(line, sizeof(line), "%s", bad[i]);
		struct idfeed_msg m;
		assert_int_equal(idfeed_decode(line, strlen(line), &m), -EINVAL);
	}
	/* an unknown reason word is a refusal all the same, never "ok" */
	struct idfeed_msg m;
	const char *no = "{\"no\":3,\"reason\":\"no_such_word\"}";
	assert_int_equal(idfeed_decode(no, strlen(no), &m), 0);
	assert_int_equal(m.kind, IDFEED_NO);
	assert_int_equal(m.reason, REASON_IDENTITY_UNAVAILABLE);
}

int main(void)
{
	if (kernel_caps_probe(&caps) < 0 || !caps.peer_pidfd) {
		printf("SKIP: no SO_PEERPIDFD\n");
		return 77;
	}
	struct procref self;
	if (procref_open(&caps, getpid(), &self) < 0)
		return 1;
	strcpy(self_key, self.key);
	procref_close(&self);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records_refusals_dues),
		cmocka_unit_test(test_wait_answered_and_timeout),
		cmocka_unit_test(test_eviction_keeps_index),
		cmocka_unit_test(test_view_on_another_thread),
		cmocka_unit_test(test_view_other_anchor),
		cmocka_unit_test(test_malformed_closes),
		cmocka_unit_test(test_not_the_anchor),
		cmocka_unit_test(test_decoder_refuses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
