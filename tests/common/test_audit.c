#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

/* ---- a write that fails part-way (the file system is full) ----
 * RLIMIT_FSIZE stands in for a full disk: the kernel takes the bytes up to
 * the limit, then fails the rest (EFBIG), as a full tmpfs does (ENOSPC). */

static char *slurp(const char *path, size_t *len)
{
	FILE *in = fopen(path, "r");
	assert_non_null(in);
	static char buf[65536];
	*len = fread(buf, 1, sizeof(buf) - 1, in);
	buf[*len] = '\0';
	fclose(in);
	return buf;
}

/* Every line of the file is a JSON object; returns how many there are. */
static int all_lines_json(const char *path)
{
	size_t len;
	char *p = slurp(path, &len);
	int n = 0;
	assert_true(len == 0 || p[len - 1] == '\n');
	for (char *save = NULL, *l = strtok_r(p, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		json_error_t err;
		json_t *o = json_loads(l, 0, &err);
		if (!o)
			fail_msg("line %d is not JSON: '%s'", n + 1, l);
		json_decref(o);
		n++;
	}
	return n;
}

static off_t file_size(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

static struct rlimit saved_fsize;

static void limit_file_size(off_t max)
{
	signal(SIGXFSZ, SIG_IGN);
	getrlimit(RLIMIT_FSIZE, &saved_fsize);
	struct rlimit rl = { (rlim_t)max, saved_fsize.rlim_max };
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

static void unlimit_file_size(void) { assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved_fsize), 0); }

static json_t *big_fields(size_t n)
{
	char *pad = malloc(n + 1);
	memset(pad, 'x', n);
	pad[n] = '\0';
	json_t *f = json_pack("{s:s}", "pad", pad);
	free(pad);
	return f;
}

/* A line cut short is taken back out of the file (nothing left of it, the
 * next line does not merge with it); one episode for the two failures; the
 * first write that works again writes audit_resumed first. Fails on a
 * log that leaves the fragment (a1b1567: the next line was appended to it). */
static void partial_line_is_cut_back(void **state)
{
	char path[] = "/tmp/tether-audit-full-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	struct audit_log *log;
	assert_int_equal(audit_open(path, "combined", &log), 0);
	assert_int_equal(audit_emit(log, "first", NULL), 0);
	off_t good = file_size(path);
	json_t *big = big_fields(300);
	limit_file_size(good + 100); /* room for a third of the next line */
	assert_int_equal(audit_emit(log, "egress_decision", big), -EFBIG);
	assert_int_equal(file_size(path), good);
	assert_false(audit_writable(log));
	assert_int_equal(audit_emit(log, "egress_decision", big), -EFBIG);
	assert_int_equal(file_size(path), good);
	assert_int_equal(audit_failures(log), 2);
	assert_int_equal(audit_failure_episodes(log), 1);
	/* room for the short audit_resumed line but not the line after it:
	 * neither stays, and the episode goes on (no warning per batch) */
	unlimit_file_size();
	limit_file_size(good + 200);
	assert_int_equal(audit_emit(log, "egress_decision", big), -EFBIG);
	assert_int_equal(file_size(path), good);
	assert_int_equal(audit_failure_episodes(log), 1);
	assert_false(audit_writable(log));
	unlimit_file_size();
	assert_int_equal(audit_emit(log, "after", big), 0);
	assert_true(audit_writable(log));
	assert_int_equal(audit_failure_episodes(log), 1);
	json_decref(big);
	assert_int_equal(all_lines_json(path), 3);
	assert_int_equal(count_lines(path, "\"event\":\"audit_resumed\""), 1);
	assert_int_equal(count_lines(path, "\"unrecorded_events\":3"), 1);
	assert_int_equal(count_lines(path, "\"error\":\"EFBIG\""), 1);
	assert_int_equal(audit_events_written(log), 3); /* first, audit_resumed, after */
	/* a second episode is a second warning */
	limit_file_size(file_size(path) + 10);
	assert_int_equal(audit_emit(log, "lost", NULL), -EFBIG);
	unlimit_file_size();
	assert_int_equal(audit_failure_episodes(log), 2);
	assert_int_equal(audit_emit(log, "back", NULL), 0);
	assert_int_equal(all_lines_json(path), 5);
	audit_close(log);
	unlink(path);
}

/* A batch that half fits: the whole lines that made it stay (and are
 * reported recorded), the line cut in the middle goes. */
static void batch_keeps_its_whole_lines(void **state)
{
	char path[] = "/tmp/tether-audit-batch-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	struct audit_log *log;
	assert_int_equal(audit_open(path, "combined", &log), 0);
	size_t l1, l2, l3;
	char *a = audit_format(log, "one", NULL, &l1);
	char *b = audit_format(log, "two", NULL, &l2);
	char *c = audit_format(log, "three", NULL, &l3);
	char buf[1024];
	memcpy(buf, a, l1);
	memcpy(buf + l1, b, l2);
	memcpy(buf + l1 + l2, c, l3);
	limit_file_size((off_t)(l1 + l2 / 2));
	size_t recorded = 99;
	assert_int_equal(audit_write_lines(log, buf, l1 + l2 + l3, &recorded), -EFBIG);
	unlimit_file_size();
	assert_int_equal(recorded, l1);
	assert_int_equal(file_size(path), (off_t)l1);
	assert_int_equal(audit_events_written(log), 1);
	assert_int_equal(audit_failures(log), 2);
	/* all of it now: audit_resumed, then the batch */
	assert_int_equal(audit_write_lines(log, buf, l1 + l2 + l3, &recorded), 0);
	assert_int_equal(recorded, l1 + l2 + l3);
	assert_int_equal(all_lines_json(path), 5);
	free(a);
	free(b);
	free(c);
	audit_close(log);
	unlink(path);
}

/* A fragment that cannot be cut (a pipe) is ended with a newline before
 * the next line: the lines after it are whole and parse. */
static void uncuttable_fragment_is_terminated(void **state)
{
	int p[2];
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	int cap = fcntl(p[1], F_SETPIPE_SZ, 8192);
	assert_true(cap >= 8192 && cap <= 16384);
	static char fill[16384];
	memset(fill, 'f', sizeof(fill));
	size_t room = (size_t)cap - 4096; /* one free page */
	assert_int_equal(write(p[1], fill, room), (ssize_t)room);
	struct audit_log *log;
	assert_int_equal(audit_open_fd(p[1], "combined", &log), 0);
	json_t *big = big_fields(6000); /* past PIPE_BUF: the pipe may take a part */
	assert_int_equal(audit_emit(log, "cut", big), -EAGAIN);
	json_decref(big);
	static char got[32768];
	size_t n = 0;
	ssize_t k;
	while ((k = read(p[0], got + n, sizeof(got) - 1 - n)) > 0)
		n += (size_t)k;
	assert_true(n > room && n < room + 6000); /* a part of the line went out */
	assert_int_equal(audit_emit(log, "next", NULL), 0);
	size_t m = 0;
	while ((k = read(p[0], got + m, sizeof(got) - 1 - m)) > 0)
		m += (size_t)k;
	got[m] = '\0';
	/* "\n" ending the fragment, then audit_resumed, then "next" */
	assert_int_equal(got[0], '\n');
	char *l1 = got + 1, *l2 = strchr(l1, '\n') + 1;
	assert_non_null(strstr(l1, "\"event\":\"audit_resumed\""));
	assert_non_null(strstr(l2, "\"event\":\"next\""));
	assert_int_equal(got[m - 1], '\n');
	audit_close(log);
	close(p[0]);
	close(p[1]);
}

/* A file left with a partial last line (a SIGKILL in the middle of a
 * write) is cut back to its last whole line when it is opened again. */
static void torn_tail_is_cut_at_open(void **state)
{
	char path[] = "/tmp/tether-audit-torn-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char *whole = "{\"event\":\"a\"}\n", *torn = "{\"event\":\"b\",\"pad\":\"xx";
	assert_int_equal(write(fd, whole, strlen(whole)), (ssize_t)strlen(whole));
	assert_int_equal(write(fd, torn, strlen(torn)), (ssize_t)strlen(torn));
	close(fd);
	struct audit_log *log;
	assert_int_equal(audit_open(path, "combined", &log), 0);
	assert_int_equal(file_size(path), (off_t)strlen(whole));
	assert_int_equal(audit_emit(log, "c", NULL), 0);
	audit_close(log);
	assert_int_equal(all_lines_json(path), 2);
	/* a whole file is left alone */
	off_t size = file_size(path);
	assert_int_equal(audit_open(path, "combined", &log), 0);
	audit_close(log);
	assert_int_equal(file_size(path), size);
	unlink(path);
}

/* audit_format's one-dump line is byte for byte the reference's (a second
 * object holding the header and the fields), whatever the fields. */
static void spliced_line_is_the_reference(void **state)
{
	(void)state;
	char path[] = "/tmp/tether-audit-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	struct audit_log *logs[3] = { NULL };
	assert_int_equal(audit_open(path, "combined", &logs[1]), 0);
	assert_int_equal(audit_open(path, "we\"ird\\t\xc3\xa9", &logs[2]), 0);
	json_t *fields[] = {
		json_object(),
		json_pack("{s:s,s:s,s:s,s:n,s:{s:s,s:s},s:i,s:s,s:[{s:s,s:i,s:s}],s:{s:s,s:i,s:s},s:s,s:I,s:{s:s,s:i},s:s}",
			  "decision", "allow", "reason", "allowed", "identity_source", "local_procfs", "signed",
			  "binary", "path", "/usr/bin/curl", "sha256", "0123abcd", "pid", 4242, "process_key",
			  "boot:123", "ancestors", "path", "/bin/sh", "pid", 1, "sha256", "", "dest", "host",
			  "example.test", "port", 443, "ip", "198.51.100.10", "policy", "bench", "policy_generation",
			  (json_int_t)1234567890123, "client", "ip", "127.0.0.1", "port", 5555, "method", "CONNECT"),
		json_pack("{s:s,s:s}", "decision", "deny", "ts", "spoofed"),
		json_pack("{s:s,s:i}", "event", "spoofed", "x", 1),
		json_pack("{s:s,s:i}", "topology", "spoofed", "x", 1),
		json_pack("{s:s,s:s,s:f,s:b,s:[]}", "u", "caf\xc3\xa9 \"q\" \\ /\n\t\x01", "e", "", "f", 0.25, "b", 1, "a"),
		json_pack("{s:{s:{s:{}}}}", "a", "b", "c"),
	};
	static const char *const events[] = { "egress_decision", "dns", "we\"ird" };
	static const char *const stamps[] = { "2026-12-05T16:48:40.123Z", "bad\\ts" };
	size_t n = 0;
	for (size_t l = 0; l < 3; l++)
		for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
			for (size_t e = 0; e < 3; e++)
				for (size_t t = 0; t < 2; t++) {
					assert_non_null(fields[f]);
					size_t la, lb;
					char *a = audit_format_at(logs[l], events[e], fields[f], stamps[t], false, &la);
					char *b = audit_format_at(logs[l], events[e], fields[f], stamps[t], true, &lb);
					assert_non_null(a);
					assert_non_null(b);
					if (la != lb || memcmp(a, b, la) != 0)
						fail_msg("'%.*s' is not '%.*s'", (int)la, a, (int)lb, b);
					assert_int_equal(a[la - 1], '\n');
					free(a);
					free(b);
					n++;
				}
	for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
		json_decref(fields[f]);
	audit_close(logs[1]);
	audit_close(logs[2]);
	unlink(path);
	assert_int_equal(n, 3 * 7 * 3 * 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ts_format),
		cmocka_unit_test(spliced_line_is_the_reference),
		cmocka_unit_test(lines_are_json_with_required_fields),
		cmocka_unit_test(write_failure_is_counted),
		cmocka_unit_test(reopen_after_rename),
		cmocka_unit_test(partial_line_is_cut_back),
		cmocka_unit_test(batch_keeps_its_whole_lines),
		cmocka_unit_test(uncuttable_fragment_is_terminated),
		cmocka_unit_test(torn_tail_is_cut_at_open),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
