/* Credential placeholders in a request head (net-supervisor/credsub.h):
 * plain and Basic substitution, refusal of a credential not permitted or
 * unknown (nothing half-substituted), the request line untouched, secrets
 * that could inject a header refused, heads that are not heads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "net-supervisor/credsub.h"

static const struct credsub_cred creds[] = {
	{ .name = "GITHUB", .secret = "ghp_realsecret123" },
	{ .name = "MODEL_KEY", .secret = "sk-live-abc" },
};

/* GITHUB is permitted, MODEL_KEY is not (another binary's) */
static bool permitted(void *ctx, const struct credsub_cred *c)
{
	(void)ctx;
	return strcmp(c->name, "GITHUB") == 0;
}

static int sub(const char *head, struct credsub_result *r)
{
	return credsub_head(head, strlen(head), creds, 2, permitted, NULL, r);
}

static void test_bearer(void **state)
{
	(void)state;
	struct credsub_result r;
	assert_int_equal(sub("GET /repos?t=tether-cred:GITHUB HTTP/1.1\r\nHost: api.github.com\r\n"
			     "Authorization: Bearer tether-cred:GITHUB\r\nX-Other: a tether-cred:GITHUB b\r\n\r\n", &r),
			 CREDSUB_OK);
	assert_non_null(r.head);
	assert_int_equal(r.n_swapped, 2);
	assert_string_equal(r.head, "GET /repos?t=tether-cred:GITHUB HTTP/1.1\r\nHost: api.github.com\r\n"
				    "Authorization: Bearer ghp_realsecret123\r\nX-Other: a ghp_realsecret123 b\r\n\r\n");
	assert_int_equal(r.head_len, strlen(r.head));
	credsub_result_done(&r);
}

static void test_unchanged(void **state)
{
	(void)state;
	struct credsub_result r;
	assert_int_equal(sub("GET / HTTP/1.1\r\nHost: x\r\n\r\n", &r), CREDSUB_OK);
	assert_null(r.head);
	/* only in the request line: not a secret, passes as is */
	assert_int_equal(sub("GET /?k=tether-cred:MODEL_KEY HTTP/1.1\r\nHost: x\r\n\r\n", &r), CREDSUB_OK);
	assert_null(r.head);
}

static void test_refused(void **state)
{
	(void)state;
	struct credsub_result r;
	assert_int_equal(sub("POST /v1 HTTP/1.1\r\nAuthorization: Bearer tether-cred:GITHUB\r\n"
			     "X-Api-Key: tether-cred:MODEL_KEY\r\n\r\n", &r),
			 CREDSUB_REFUSED);
	assert_null(r.head);
	assert_string_equal(r.refused, "MODEL_KEY");
	assert_false(r.refused_unknown);
	assert_int_equal(sub("GET / HTTP/1.1\r\nX: tether-cred:NOPE\r\n\r\n", &r), CREDSUB_REFUSED);
	assert_string_equal(r.refused, "NOPE");
	assert_true(r.refused_unknown);
	/* a prefix of a name is not the name */
	assert_int_equal(sub("GET / HTTP/1.1\r\nX: tether-cred:GITHUBX\r\n\r\n", &r), CREDSUB_REFUSED);
	assert_string_equal(r.refused, "GITHUBX");
	assert_int_equal(sub("GET / HTTP/1.1\r\nX: tether-cred:\r\n\r\n", &r), CREDSUB_REFUSED);
	assert_string_equal(r.refused, "");
}

static void test_basic(void **state)
{
	(void)state;
	const char *plain = "x-access-token:tether-cred:GITHUB";
	char b64[128], head[256], want[256];
	sodium_bin2base64(b64, sizeof(b64), (const unsigned char *)plain, strlen(plain), sodium_base64_VARIANT_ORIGINAL);
	snprintf(head, sizeof(head), "GET /o/r.git/info/refs HTTP/1.1\r\nauthorization: basic %s\r\n\r\n", b64);
	const char *real = "x-access-token:ghp_realsecret123";
	sodium_bin2base64(b64, sizeof(b64), (const unsigned char *)real, strlen(real), sodium_base64_VARIANT_ORIGINAL);
	snprintf(want, sizeof(want), "GET /o/r.git/info/refs HTTP/1.1\r\nauthorization: Basic %s\r\n\r\n", b64);
	struct credsub_result r;
	assert_int_equal(sub(head, &r), CREDSUB_OK);
	assert_non_null(r.head);
	assert_string_equal(r.head, want);
	credsub_result_done(&r);
	/* Basic with another binary's credential: refused */
	plain = "u:tether-cred:MODEL_KEY";
	sodium_bin2base64(b64, sizeof(b64), (const unsigned char *)plain, strlen(plain), sodium_base64_VARIANT_ORIGINAL);
	snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nAuthorization: Basic %s\r\n\r\n", b64);
	assert_int_equal(sub(head, &r), CREDSUB_REFUSED);
	assert_string_equal(r.refused, "MODEL_KEY");
}

static void test_not_a_head(void **state)
{
	(void)state;
	struct credsub_result r;
	assert_int_equal(sub("GET / HTTP/1.1\r\nX: tether-cred:GITHUB\r\n", &r), -EINVAL);
	assert_int_equal(sub("GET / HTTP/1.1\r\nno colon tether-cred:GITHUB\r\n\r\n", &r), -EINVAL);
}

/* header: the proxy sets it for a permitted credential (replacing the
 * client's lines of that name, any case), not for one that is not */
static void test_inject(void **state)
{
	(void)state;
	const struct credsub_cred inj[] = {
		{ .name = "GITHUB", .secret = "ghp_realsecret123", .header = "Authorization", .format = "Bearer {}" },
		{ .name = "MODEL_KEY", .secret = "sk-live-abc", .header = "x-api-key" },
	};
	struct credsub_result r;
	const char *h = "POST /v1 HTTP/1.1\r\nHost: a\r\nauthorization: Bearer mine\r\nAuthorization: x\r\n"
			"x-api-key: client\r\nContent-Length: 2\r\n\r\n";
	assert_int_equal(credsub_head(h, strlen(h), inj, 2, permitted, NULL, &r), CREDSUB_OK);
	assert_non_null(r.head);
	assert_int_equal(r.n_swapped, 1);
	assert_string_equal(r.head, "POST /v1 HTTP/1.1\r\nHost: a\r\nx-api-key: client\r\nContent-Length: 2\r\n"
				    "Authorization: Bearer ghp_realsecret123\r\n\r\n");
	credsub_result_done(&r);
	/* no header of that name sent: added all the same; format default {} */
	const struct credsub_cred plain[] = { { .name = "GITHUB", .secret = "s3", .header = "X-Token" } };
	h = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
	assert_int_equal(credsub_head(h, strlen(h), plain, 1, permitted, NULL, &r), CREDSUB_OK);
	assert_string_equal(r.head, "GET / HTTP/1.1\r\nHost: a\r\nX-Token: s3\r\n\r\n");
	credsub_result_done(&r);
	/* not permitted: nothing added, the client's line passes */
	const struct credsub_cred other[] = { { .name = "MODEL_KEY", .secret = "sk", .header = "x-api-key" } };
	h = "GET / HTTP/1.1\r\nx-api-key: client\r\n\r\n";
	assert_int_equal(credsub_head(h, strlen(h), other, 1, permitted, NULL, &r), CREDSUB_OK);
	assert_null(r.head);
	/* with a placeholder of a credential not permitted: still refused */
	h = "GET / HTTP/1.1\r\nX-K: tether-cred:MODEL_KEY\r\n\r\n";
	assert_int_equal(credsub_head(h, strlen(h), inj, 2, permitted, NULL, &r), CREDSUB_REFUSED);
	assert_null(r.head);
	assert_string_equal(r.refused, "MODEL_KEY");
}

static void test_secret_ok(void **state)
{
	(void)state;
	assert_true(credsub_secret_ok("abc", 3));
	assert_false(credsub_secret_ok("a\r\nX-Injected: 1", 17));
	assert_false(credsub_secret_ok("a\nb", 3));
	assert_false(credsub_secret_ok("a\0b", 3));
	assert_false(credsub_secret_ok("", 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bearer),     cmocka_unit_test(test_unchanged), cmocka_unit_test(test_refused),
		cmocka_unit_test(test_basic),      cmocka_unit_test(test_not_a_head), cmocka_unit_test(test_secret_ok), cmocka_unit_test(test_inject),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
