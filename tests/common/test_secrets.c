/* The registry of values never printed (common/secrets.h): scrubbing,
 * and that log lines, audit lines and audit_secret_add's JSON form obey it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/secrets.h"

static char *scrub(const char *s)
{
	char *o = NULL;
	size_t n = 0;
	int r = secrets_scrub(s, strlen(s), &o, &n);
	assert_true(r >= 0);
	if (r == 0) {
		assert_null(o);
		return strdup(s);
	}
	assert_int_equal(strlen(o), n);
	return o;
}

static void scrub_replaces_every_occurrence(void **state)
{
	(void)state;
	secrets_clear();
	char *o = scrub("nothing registered: s3cr3t");
	assert_string_equal(o, "nothing registered: s3cr3t");
	free(o);
	assert_int_equal(secrets_add("s3cr3t", 6), 0);
	assert_int_equal(secrets_add("s3cr3t", 6), 0); /* once */
	assert_int_equal(secrets_add("s3cr3t-longer", 13), 0);
	assert_int_equal(secrets_add("ab", 2), 0);     /* short values too */
	assert_int_equal(secrets_add("", 0), 0);       /* ignored */
	assert_int_equal(secrets_count(), 3);
	o = scrub("a s3cr3t, s3cr3ts3cr3t and s3cr3t-longer; xab");
	assert_string_equal(o, "a [REDACTED], [REDACTED][REDACTED] and [REDACTED]; x[REDACTED]");
	free(o);
	o = scrub("clean line");
	assert_string_equal(o, "clean line");
	free(o);
	o = scrub("ab");
	assert_string_equal(o, "[REDACTED]");
	free(o);
	secrets_clear();
	assert_int_equal(secrets_count(), 0);
	o = scrub("s3cr3t");
	assert_string_equal(o, "s3cr3t");
	free(o);
}

static void the_oldest_is_forgotten_past_the_cap(void **state)
{
	(void)state;
	secrets_clear();
	char v[32];
	for (int i = 0; i < SECRETS_MAX + 2; i++) {
		int n = snprintf(v, sizeof(v), "value-%05d", i);
		assert_int_equal(secrets_add(v, (size_t)n), 0);
	}
	assert_int_equal(secrets_count(), SECRETS_MAX);
	assert_int_equal(secrets_forgotten(), 2);
	char *o = scrub("value-00000 value-00002");
	assert_string_equal(o, "value-00000 [REDACTED]");
	free(o);
	secrets_clear();
}

/* A log line and an audit line, from a child whose stderr is a pipe. */
static void log_and_audit_lines_carry_no_secret(void **state)
{
	(void)state;
	secrets_clear();
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(p[1], STDERR_FILENO) >= 0);
	assert_int_equal(audit_secret_add("tok\"en\\42"), 0);
	log_error("header X-Key: tok\"en\\42 echoed");
	log_line("terminal tok\"en\\42");
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	close(p[1]);
	char buf[1024] = "";
	ssize_t n = read(p[0], buf, sizeof(buf) - 1);
	close(p[0]);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_null(strstr(buf, "tok\"en"));
	assert_non_null(strstr(buf, "X-Key: [REDACTED] echoed"));
	assert_non_null(strstr(buf, "terminal [REDACTED]\n"));

	/* the audit line: JSON escapes the quote and the backslash */
	json_t *f = json_pack("{s:s}", "path", "/a/tok\"en\\42/b");
	size_t len = 0;
	char *line = audit_format(NULL, "http_request", f, &len);
	json_decref(f);
	assert_non_null(line);
	assert_true(len > 0 && line[len - 1] == '\n');
	line[len - 1] = '\0';
	assert_null(strstr(line, "tok"));
	assert_non_null(strstr(line, "\"path\":\"/a/[REDACTED]/b\""));
	free(line);
	assert_int_equal(audit_secret_add("\xff\xfe"), -EINVAL); /* not UTF-8 */
	secrets_clear();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(scrub_replaces_every_occurrence),
		cmocka_unit_test(the_oldest_is_forgotten_past_the_cap),
		cmocka_unit_test(log_and_audit_lines_carry_no_secret),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
