#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/audit.h"
#include "common/util.h"

static void ts_format(void **state)
{
	char ts[32];
	audit_format_ts(1764618103123456789ull, ts);
	assert_string_equal(ts, "2025-12-01T19:41:43.123Z");
}

static void lines_are_json_with_required_fields(void **state)
{
	char path[] = "/tmp/tether-audit-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	struct audit_log *log;
	assert_int_equal(audit_open(path, "combined", &log), 0);
	json_t *f = json_pack("{s:s, s:i, s:s}", "decision", "deny", "pid", 42, "event", "spoofed");
	assert_int_equal(audit_emit(log, "egress_decision", f), 0);
	assert_int_equal(audit_emit(log, "policy_loaded", NULL), 0);
	json_decref(f);
	assert_int_equal(audit_events_written(log), 2);
	audit_close(log);

	FILE *in = fopen(path, "r");
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof(line), in)) {
		json_error_t err;
		json_t *o = json_loads(line, 0, &err);
		assert_non_null(o);
		assert_string_equal(json_string_value(json_object_get(o, "topology")), "combined");
		assert_non_null(json_object_get(o, "ts"));
		if (n == 0) {
			/* a field named "event" cannot override the event name */
			assert_string_equal(json_string_value(json_object_get(o, "event")), "egress_decision");
			assert_int_equal(json_integer_value(json_object_get(o, "pid")), 42);
		}
		json_decref(o);
		n++;
	}
	fclose(in);
	unlink(path);
	assert_int_equal(n, 2);
}

static void write_failure_is_counted(void **state)
{
	struct audit_log *log;
	assert_int_equal(audit_open("/dev/full", "combined", &log), 0);
	assert_true(audit_emit(log, "process_exit", NULL) < 0);
	assert_int_equal(audit_failures(log), 1);
	audit_close(log);
}

static int count_lines(const char *path, const char *needle)
{
	FILE *in = fopen(path, "r");
	if (!in)
		return -1;
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof(line), in))
		n += strstr(line, needle) != NULL;
	fclose(in);
	return n;
}

/* Rotation: the file is renamed away, audit_reopen writes a new one at the
 * path; nothing is lost, nothing lands twice. A failed reopen keeps the
 * old file. */
static void reopen_after_rename(void **state)
{
	char dir[] = "/tmp/tether-audit-rot-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256], old[300];
	snprintf(path, sizeof(path), "%s/audit.jsonl", dir);
	snprintf(old, sizeof(old), "%s.1", path);
	struct audit_log *log;
	assert_int_equal(audit_open(path, "combined", &log), 0);
	assert_int_equal(audit_emit(log, "before_rotation", NULL), 0);
	assert_int_equal(rename(path, old), 0);
	assert_int_equal(audit_emit(log, "between", NULL), 0); /* still the old file */
	assert_int_equal(audit_reopen(log), 0);
	assert_int_equal(audit_emit(log, "after_rotation", NULL), 0);
	assert_int_equal(count_lines(old, "before_rotation"), 1);
	assert_int_equal(count_lines(old, "between"), 1);
	assert_int_equal(count_lines(old, "after_rotation"), 0);
	assert_int_equal(count_lines(path, "after_rotation"), 1);
	assert_int_equal(count_lines(path, "before_rotation"), 0);
	/* The directory is gone: the reopen fails, the log keeps writing. */
	unlink(path);
	unlink(old);
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(audit_reopen(log), -ENOENT);
	assert_int_equal(audit_emit(log, "still_writing", NULL), 0);
	audit_close(log);
	/* stdout is not reopened */
	assert_int_equal(audit_open("-", "combined", &log), 0);
	assert_int_equal(audit_reopen(log), 0);
	audit_close(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ts_format),
		cmocka_unit_test(lines_are_json_with_required_fields),
		cmocka_unit_test(write_failure_is_counted),
		cmocka_unit_test(reopen_after_rename),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
