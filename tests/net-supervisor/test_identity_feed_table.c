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
 *   - the decoder refuses what the format does not allow;
 *   - the decoder's own reader of the encoders' shape agrees with jansson's
 *     (idfeed_decode_json) on every encoded line and on every truncation
 *     and one-byte change of them. */
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

/* 0 when a and b are the same message (or both failed the same way) */
static int msg_cmp(int ra, const struct idfeed_msg *a, int rb, const struct idfeed_msg *b)
{
	if (ra != rb)
		return 1;
	if (ra != 0)
		return 0;
	if (a->kind != b->kind || a->cookie != b->cookie || a->reason != b->reason || !a->id != !b->id)
		return 2;
	if (!a->id)
		return 0;
	const struct flow_identity *x = a->id, *y = b->id;
	if (x->pid != y->pid || x->source != y->source || strcmp(x->sha256, y->sha256) ||
	    strcmp(x->binary_path, y->binary_path) || strcmp(x->process_key, y->process_key) ||
	    x->n_ancestors != y->n_ancestors)
		return 3;
	for (size_t i = 0; i < x->n_ancestors; i++)
		if (x->ancestors[i].pid != y->ancestors[i].pid || strcmp(x->ancestors[i].path, y->ancestors[i].path) ||
		    strcmp(x->ancestors[i].sha256, y->ancestors[i].sha256))
			return 4;
	return 0;
}

static size_t agree(const char *line, size_t len)
{
	struct idfeed_msg a, b;
	int ra = idfeed_decode(line, len, &a);
	int rb = idfeed_decode_json(line, len, &b);
	int d = msg_cmp(ra, &a, rb, &b);
	if (d)
		fail_msg("decoders disagree (%d: %d vs %d) on '%.*s'", d, ra, rb, (int)len, line);
	idfeed_msg_release(&a);
	idfeed_msg_release(&b);
	return ra == 0;
}

static void test_decoder_agrees_with_jansson(void **state)
{
	(void)state;
	char *lines[16];
	size_t lens[16], n = 0;
	static const char *const paths[] = { "/usr/bin/curl", "/opt/b\xc3\xa9ta/x", "/p \"q\" \\r", "/x/\x01y" };
	for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++)
		for (size_t k = 0; k < 3; k++) {
			struct flow_identity *id = flow_identity_new();
			assert_non_null(id);
			id->pid = 4242 + (int)k;
			memcpy(id->sha256, SHA, 65);
			id->binary_path = strdup(paths[p]);
			id->process_key = strdup("6b1e0f2a-1111-2222-3333-444455556666:12345");
			for (size_t a = 0; a < k; a++)
				assert_int_equal(flow_identity_add_ancestor(id, a ? "/bin/sh" : paths[p], 100 + (int)a,
									    a == 1 ? "" : SHA), 0);
			assert_int_equal(idfeed_encode_id(18446744073709551ull * (k + 1), id, &lines[n], &lens[n]), 0);
			n++;
			flow_identity_free(id);
		}
	assert_int_equal(idfeed_encode_due(7, &lines[n], &lens[n]), 0);
	n++;
	assert_int_equal(idfeed_encode_no(123456789012345678ull, REASON_IDENTITY_UNAVAILABLE, &lines[n], &lens[n]), 0);
	n++;
	assert_int_equal(idfeed_encode_due(UINT64_MAX, &lines[n], &lens[n]), 0); /* a negative json_int_t */
	n++;
	static const char subst[] = "0019-.eE \"\\}]{[,:aAzZ\x7f\x80";
	size_t good = 0, tried = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = lens[i] - 1; /* without the '\n' */
		assert_int_equal(agree(lines[i], len), 1);
		char *buf = malloc(len + 2);
		assert_non_null(buf);
		for (size_t cut = 0; cut < len; cut++)
			good += agree(lines[i], cut), tried++;
		for (size_t at = 0; at < len; at++)
			for (size_t s = 0; s < sizeof(subst) - 1; s++) {
				memcpy(buf, lines[i], len);
				buf[at] = subst[s];
				good += agree(buf, len), tried++;
				/* and the byte inserted */
				memcpy(buf, lines[i], at);
				buf[at] = subst[s];
				memcpy(buf + at + 1, lines[i] + at, len - at);
				good += agree(buf, len + 1), tried++;
			}
		free(buf);
		free(lines[i]);
	}
	printf("decoders agree on %zu variants (%zu decoded)\n", tried, good);
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
		cmocka_unit_test(test_malformed_closes),
		cmocka_unit_test(test_not_the_anchor),
		cmocka_unit_test(test_decoder_refuses),
		cmocka_unit_test(test_decoder_agrees_with_jansson),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
