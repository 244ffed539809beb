/* The audit queue: events arrive in order, a stalled writer makes the queue
 * overflow into counted drops (never a blocked producer), write failures are
 * counted. */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_overflow_counts_drops),
		cmocka_unit_test(test_write_failures_counted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
