/* The audit queue: events arrive in order, a stalled writer makes the queue
 * overflow into counted drops (never a blocked producer), write failures are
 * counted. The decision batch: a waiter is told only at the flush, after
 * the write, whether its own line is in the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "net-supervisor/auditq.h"

static void *drain(void *arg)
{
	int fd = *(int *)arg;
	char buf[65536];
	size_t total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == 0)
			break;
		if (n < 0)
			continue; /* EAGAIN before the writer opened */
		total += (size_t)n;
	}
	return (void *)total;
}

static void test_overflow_counts_drops(void **state)
{
	char dir[] = "/tmp/tether-auditq-XXXXXX", fifo[64];
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
	assert_true(rfd >= 0);
	struct audit_log *log;
	assert_int_equal(audit_open(fifo, "combined", &log), 0);
	struct auditq *q;
	assert_int_equal(auditq_new(log, 16, &q), 0);
	/* Nobody reads the FIFO: the writer blocks once the pipe is full, the
	 * queue fills, and further events are dropped — the producer never
	 * waits. */
	uint64_t t0 = now_mono_ns();
	for (int i = 0; i < 20000; i++) {
		json_t *o = json_object();
		json_object_set_new(o, "i", json_integer(i));
		json_object_set_new(o, "pad", json_string("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"));
		auditq_push(q, "egress_decision", o);
	}
	assert_true(now_mono_ns() - t0 < 5000000000ull);
	assert_true(auditq_dropped(q) > 0);
	/* Now drain; free flushes what is queued. */
	int flags = fcntl(rfd, F_GETFL);
	fcntl(rfd, F_SETFL, flags & ~O_NONBLOCK);
	pthread_t t;
	pthread_create(&t, NULL, drain, &rfd);
	uint64_t dropped = auditq_dropped(q);
	auditq_free(q);
	uint64_t written = audit_events_written(log);
	audit_close(log);
	void *total;
	pthread_join(t, &total);
	assert_int_equal(written + dropped, 20000);
	assert_true((size_t)total > 0);
	close(rfd);
	unlink(fifo);
	rmdir(dir);
}

static void test_write_failures_counted(void **state)
{
	struct audit_log *log;
	assert_int_equal(audit_open("/dev/full", "combined", &log), 0);
	struct auditq *q;
	assert_int_equal(auditq_new(log, 0, &q), 0);
	for (int i = 0; i < 5; i++)
		auditq_push(q, "policy_loaded", json_object());
	auditq_free(q); /* flushes */
	assert_int_equal(audit_failures(log), 5);
	audit_close(log);
}

struct rec {
	struct auditq_waiter w;
	int calls;
	bool recorded;
	int order;
};
static int rec_seq;

static void rec_cb(struct auditq_waiter *w, bool recorded)
{
	struct rec *r = (struct rec *)w;
	r->calls++;
	r->recorded = recorded;
	r->order = ++rec_seq;
}

static void test_batch_answers_after_the_write(void **state)
{
	char path[] = "/tmp/tether-auditq-batch-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	struct audit_log *log;
	assert_int_equal(audit_open(path, "combined", &log), 0);
	struct auditq *q;
	assert_int_equal(auditq_new(log, 16, &q), 0);
	struct rec a = { .w.cb = rec_cb }, b = { .w.cb = rec_cb }, c = { .w.cb = rec_cb };
	auditq_stage(q, "egress_decision", json_pack("{s:s}", "decision", "allow"), &a.w);
	auditq_stage(q, "egress_decision", NULL, NULL); /* nobody waits */
	auditq_stage(q, "egress_decision", json_pack("{s:s}", "decision", "deny"), &b.w);
	assert_true(auditq_staged(q));
	assert_int_equal(a.calls + b.calls, 0); /* never from stage */
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 0); /* nothing written yet */
	auditq_flush(q);
	assert_false(auditq_staged(q));
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 1);
	assert_true(a.recorded && b.recorded);
	assert_true(a.order < b.order);
	assert_int_equal(audit_events_written(log), 3);
	/* the file takes one more line and a half: c's line is cut, a and b
	 * go in whole */
	assert_int_equal(stat(path, &st), 0);
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit old, rl;
	getrlimit(RLIMIT_FSIZE, &old);
	rl = old;
	rl.rlim_cur = (rlim_t)st.st_size + (rlim_t)(st.st_size / 3) * 3 / 2;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
	a = (struct rec){ .w.cb = rec_cb };
	b = (struct rec){ .w.cb = rec_cb };
	auditq_stage(q, "egress_decision", json_pack("{s:s}", "decision", "allow"), &a.w);
	auditq_stage(q, "egress_decision", json_pack("{s:s}", "decision", "deny"), &b.w);
	auditq_stage(q, "egress_decision", json_pack("{s:s}", "decision", "deny"), &c.w);
	auditq_flush(q);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	assert_true(a.recorded);
	assert_false(b.recorded);
	assert_false(c.recorded);
	assert_int_equal(a.calls + b.calls + c.calls, 3);
	assert_false(audit_writable(log));
	auditq_free(q);
	audit_close(log);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_overflow_counts_drops),
		cmocka_unit_test(test_write_failures_counted),
		cmocka_unit_test(test_batch_answers_after_the_write),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
