/* The redactor, table-driven: input → exact output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc-supervisor/env_redact.h"

static void test_lines(void **state)
{
	static const struct { const char *in, *out; } t[] = {
		{ "plain text stays", "plain text stays" },
		{ "--api-key=sk-test123", "--api-key=[REDACTED]" },
		{ "Authorization: Bearer abc.def", "Authorization: Bearer [REDACTED]" },
		{ "proxy-authorization: Basic dXNlcjpwYXNz", "proxy-authorization: Basic [REDACTED]" },
		{ "-H 'Authorization: token ghx'", "-H 'Authorization: token [REDACTED]'" },
		{ "Cookie: session=abc", "Cookie: [REDACTED]" },
		{ "https://user:hunter2@example.com/x", "https://user:[REDACTED]@example.com/x" },
		{ "https://example.com:8443/path", "https://example.com:8443/path" },
		{ "key is sk-abcdefgh1234 ok", "key is [REDACTED] ok" },
		{ "ghp_0123456789abcdefABCDEF", "[REDACTED]" },
		{ "gho_abcd ghs_abcd ghu_abcd", "[REDACTED] [REDACTED] [REDACTED]" },
		{ "github_pat_11AAAA_bbbb", "[REDACTED]" },
		{ "glpat-abcdefghij", "[REDACTED]" },
		{ "slack xoxb-1234-5678-abcd", "slack [REDACTED]" },
		{ "xoxp-12345678", "[REDACTED]" },
		{ "AKIAIOSFODNN7EXAMPLE", "[REDACTED]" },
		{ "id=ASIAIOSFODNN7EXAMPLE", "id=[REDACTED]" },
		{ "AKIA_not_a_key", "AKIA_not_a_key" },
		{ "AIzaSyA-1234567890abcdefghijklmnopqrstu", "[REDACTED]" },
		{ "tok eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "tok [REDACTED]" },
		{ "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "AWS_SECRET_ACCESS_KEY=[REDACTED]" },
		{ "password=hunter2&user=bob", "password=[REDACTED]&user=bob" },
		{ "{\"api_key\": \"abc123\", \"n\": 1}", "{\"api_key\": \"[REDACTED]\", \"n\": 1}" },
		{ "token: abc123", "token: [REDACTED]" },
		{ "GIT_AUTHOR_NAME=bob", "GIT_AUTHOR_NAME=bob" },
		{ "host:port", "host:port" },
		{ "task-list disk-usage", "task-list disk-usage" },
		{ "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\nafter",
		  "-----BEGIN OPENSSH PRIVATE KEY-----[REDACTED]-----END OPENSSH PRIVATE KEY-----\nafter" },
		{ "-----BEGIN RSA PRIVATE KEY-----\nMIIE truncated", "-----BEGIN RSA PRIVATE KEY-----[REDACTED]" },
		{ "", "" },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++) {
		char *o = redact_line(t[i].in);
		assert_non_null(o);
		if (strcmp(o, t[i].out) != 0)
			fail_msg("redact_line(%s) = '%s', want '%s'", t[i].in, o, t[i].out);
		free(o);
	}
}

static void test_argv(void **state)
{
	static const struct { const char *in[8]; const char *out[8]; } t[] = {
		{ { "tool", "--api-key=sk-test123" }, { "tool", "--api-key=[REDACTED]" } },
		{ { "tool", "--token", "abc", "next" }, { "tool", "--token", "[REDACTED]", "next" } },
		{ { "tool", "--password", "hunter2" }, { "tool", "--password", "[REDACTED]" } },
		{ { "tool", "--client-secret", "s3" }, { "tool", "--client-secret", "[REDACTED]" } },
		{ { "tool", "--token", "--verbose" }, { "tool", "--token", "--verbose" } },
		{ { "/usr/bin/mysql", "-uroot", "-phunter2", "db" }, { "/usr/bin/mysql", "-uroot", "-p[REDACTED]", "db" } },
		{ { "mysqldump", "-p" }, { "mysqldump", "-p" } },
		{ { "ls", "-precise" }, { "ls", "-precise" } },
		{ { "curl", "-u", "bob:hunter2", "https://x" }, { "curl", "-u", "bob:[REDACTED]", "https://x" } },
		{ { "curl", "-ubob:hunter2" }, { "curl", "-ubob:[REDACTED]" } },
		{ { "curl", "-H", "Authorization: Bearer xyz", "https://a:b@h/" },
		  { "curl", "-H", "Authorization: Bearer [REDACTED]", "https://a:[REDACTED]@h/" } },
		{ { "sh", "-c", "OPENAI_API_KEY=sk-abc123456 ./run" }, { "sh", "-c", "OPENAI_API_KEY=[REDACTED] ./run" } },
		{ { "git", "commit", "-m", "fix" }, { "git", "commit", "-m", "fix" } },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++) {
		char **o = redact_argv((char *const *)t[i].in);
		assert_non_null(o);
		for (size_t k = 0; k < 8; k++) {
			if (!t[i].out[k]) {
				assert_null(o[k]);
				break;
			}
			if (!o[k] || strcmp(o[k], t[i].out[k]) != 0)
				fail_msg("case %zu arg %zu: got '%s', want '%s'", i, k, o[k] ? o[k] : "(null)", t[i].out[k]);
		}
		redact_argv_free(o);
	}
}

static void test_key_classifier(void **state)
{
	assert_true(redact_key_secretish("--api-key", 9));
	assert_true(redact_key_secretish("AWS_SECRET_ACCESS_KEY", 21));
	assert_true(redact_key_secretish("db.password", 11));
	assert_true(redact_key_secretish("accessToken", 11));
	assert_false(redact_key_secretish("GIT_AUTHOR_NAME", 15));
	assert_false(redact_key_secretish("keyboard", 8));
	assert_false(redact_key_secretish("--verbose", 9));
	char longname[300];
	memset(longname, 'A', 290);
	strcpy(longname + 290, "_TOKEN");
	assert_true(redact_key_secretish(longname, strlen(longname)));
}

static void test_json(void **state)
{
	json_t *j = json_pack("{s:s, s:[s, s], s:{s:s, s:s}, s:i}", "cmd", "tool --api-key=sk-json123", "argv",
			      "curl", "https://u:pw123@h/", "headers", "x-custom-token", "opaque-value", "accept",
			      "text/plain", "n", 3);
	assert_int_equal(redact_json(j), 0);
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(s, "{\"argv\":[\"curl\",\"https://u:[REDACTED]@h/\"],\"cmd\":\"tool --api-key=[REDACTED]\","
			       "\"headers\":{\"accept\":\"text/plain\",\"x-custom-token\":\"[REDACTED]\"},\"n\":3}");
	free(s);
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines),
		cmocka_unit_test(test_argv),
		cmocka_unit_test(test_key_classifier),
		cmocka_unit_test(test_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
