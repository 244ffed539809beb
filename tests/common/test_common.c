#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "common/util.h"
#include <fcntl.h>

static void reason_words_round_trip(void **state)
{
	for (int i = 0; i < REASON__COUNT; i++) {
		const char *w = reason_word((enum reason)i);
		assert_string_not_equal(w, "");
		assert_int_equal(reason_from_word(w), i);
	}
	assert_string_equal(reason_word(REASON_AMBIGUOUS_SOCKET_OWNER), "ambiguous_socket_owner");
	assert_int_equal(reason_from_word("no_such_word"), REASON__COUNT);
	assert_string_equal(reason_word((enum reason)9999), "internal_error");
}

static void hex_round_trip(void **state)
{
	unsigned char in[4] = { 0x00, 0xab, 0x7f, 0xff }, out[4];
	char hex[9];
	hex_encode(in, 4, hex);
	assert_string_equal(hex, "00ab7fff");
	assert_int_equal(hex_decode(hex, out, 4), 0);
	assert_memory_equal(in, out, 4);
	assert_int_equal(hex_decode("00ab7ff", out, 4), -EINVAL);
	assert_int_equal(hex_decode("00ab7fgf", out, 4), -EINVAL);
}

static void strscpy_truncates(void **state)
{
	char b[4];
	assert_int_equal(strscpy(b, "abc", sizeof(b)), 0);
	assert_int_equal(strscpy(b, "abcd", sizeof(b)), -ENAMETOOLONG);
	assert_string_equal(b, "abc");
}

static void caps_forced_fallbacks(void **state)
{
	struct kernel_caps c;
	unsetenv("TETHER_FORCE_FALLBACK");
	assert_int_equal(kernel_caps_probe(&c), 0);
	assert_int_equal(strlen(c.boot_id), 36);
	assert_int_equal(kernel_caps_force_fallback(&c, "pidfs_ino,pidfd_info"), 0);
	assert_false(c.pidfs_ino);
	assert_false(c.pidfd_info);
	assert_int_equal(kernel_caps_force_fallback(&c, "all"), 0);
	assert_false(c.peer_pidfd);
	assert_false(c.cgroup_v2);
	assert_int_equal(kernel_caps_force_fallback(&c, "bogus"), -EINVAL);
	setenv("TETHER_FORCE_FALLBACK", "peer_pidfd", 1);
	assert_int_equal(kernel_caps_probe(&c), 0);
	assert_false(c.peer_pidfd);
	unsetenv("TETHER_FORCE_FALLBACK");
}

static void read_file_limits(void **state)
{
	char buf[8];
	assert_true(read_file_at(AT_FDCWD, "/proc/self/stat", buf, sizeof(buf)) == -EFBIG);
	assert_true(read_file_at(AT_FDCWD, "/nonexistent/x", buf, sizeof(buf)) == -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reason_words_round_trip), cmocka_unit_test(hex_round_trip),
		cmocka_unit_test(strscpy_truncates),       cmocka_unit_test(caps_forced_fallbacks),
		cmocka_unit_test(read_file_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
