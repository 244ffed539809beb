#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/fdlimit.h"
#include "common/kernel.h"
#include "common/log.h"
#include "common/reason.h"
#include "common/util.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fdpass.h"

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

static int count_open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* A peer that sends more descriptors than asked for: one is handed over,
 * the others are closed, none stays open unseen. */
static void fdpass_extra_fds_closed(void **state)
{
	(void)state;
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int a = open("/dev/null", O_RDONLY | O_CLOEXEC), b = open("/", O_RDONLY | O_CLOEXEC),
	    c = open("/proc/self", O_RDONLY | O_CLOEXEC);
	assert_true(a >= 0 && b >= 0 && c >= 0);
	int three[3] = { a, b, c };
	union {
		char buf[CMSG_SPACE(sizeof(three))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	char byte = 'x';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(three));
	memcpy(CMSG_DATA(cm), three, sizeof(three));
	assert_int_equal(sendmsg(sv[0], &mh, 0), 1);
	close(a), close(b), close(c);
	int before = count_open_fds();
	char got = 0;
	int fd = -2;
	assert_int_equal(fdpass_recv(sv[1], &got, 1, &fd, 0), 1);
	assert_int_equal(got, 'x');
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISCHR(st.st_mode)); /* the first one sent: /dev/null */
	assert_int_equal(count_open_fds(), before + 1);
	close(fd);
	close(sv[0]);
	close(sv[1]);
}

/* One line per interval, the events in between counted and reported with
 * the next line. */
static void ratelimit_counts_what_it_holds_back(void **state)
{
	(void)state;
	struct log_ratelimit rl = { 0 };
	uint64_t held = 99;
	assert_true(log_ratelimit_ok(&rl, 5000, 10000, &held)); /* the first, whatever the clock */
	assert_int_equal(held, 0);
	for (int i = 0; i < 7; i++)
		assert_false(log_ratelimit_ok(&rl, 5001 + (uint64_t)i * 1000, 10000, &held));
	assert_false(log_ratelimit_ok(&rl, 14999, 10000, &held));
	assert_true(log_ratelimit_ok(&rl, 15000, 10000, &held));
	assert_int_equal(held, 8);
	assert_true(log_ratelimit_ok(&rl, 25000, 10000, NULL));
	assert_true(log_ratelimit_ok(&rl, 35001, 10000, &held));
	assert_int_equal(held, 0);
}

/* A daemon's log line never blocks on a full stderr pipe: it is dropped,
 * and the count goes out with the next line stderr can take. In a child
 * (stderr is replaced), with a 5 s alarm as the hang detector. */
static int never_block_child(void)
{
	int pfd[2];
	if (pipe(pfd) < 0 || dup2(pfd[1], STDERR_FILENO) < 0)
		return 10;
	int fl = fcntl(pfd[1], F_GETFL);
	fcntl(pfd[1], F_SETFL, fl | O_NONBLOCK);
	char junk[4096];
	memset(junk, 'j', sizeof(junk));
	while (write(pfd[1], junk, sizeof(junk)) > 0)
		;
	fcntl(pfd[1], F_SETFL, fl); /* blocking again, as a daemon's stderr is */
	fcntl(STDERR_FILENO, F_SETFL, fl);
	log_set_never_block(true);
	alarm(5);
	for (int i = 0; i < 1000; i++)
		log_warn("line %d", i);
	alarm(0);
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	char buf[65536];
	while (read(pfd[0], buf, sizeof(buf)) > 0)
		;
	log_warn("after");
	ssize_t n = read(pfd[0], buf, sizeof(buf) - 1);
	if (n <= 0)
		return 11;
	buf[n] = '\0';
	if (!strstr(buf, "warning: 1000 log lines dropped: stderr was not writable\n"))
		return 12;
	if (!strstr(buf, "warning: after\n"))
		return 13;
	return 0;
}

static void log_never_blocks_on_a_full_pipe(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(never_block_child());
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st)); /* killed by SIGALRM: it blocked */
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* The levels `--log-level` takes, and a terminal line (log_line) that no
 * level filters and no prefix decorates. In a child: stderr is a pipe. */
static int log_line_child(void)
{
	int pfd[2];
	if (pipe(pfd) < 0 || dup2(pfd[1], STDERR_FILENO) < 0)
		return 10;
	enum log_level lvl;
	if (log_level_parse("error", &lvl) < 0 || lvl != LOG_LVL_ERROR || log_level_parse("warn", &lvl) < 0 ||
	    lvl != LOG_LVL_WARN || log_level_parse("debug", &lvl) < 0 || lvl != LOG_LVL_DEBUG ||
	    log_level_parse("loud", &lvl) != -EINVAL)
		return 11;
	log_set_program("t");
	log_set_level(LOG_LVL_ERROR);
	log_set_never_block(true);
	log_warn("hidden");
	log_info("hidden too");
	log_line("tether: denied %s reason=%s", "/usr/bin/wget", "no_matching_policy");
	log_error("shown");
	char buf[4096];
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	ssize_t n = read(pfd[0], buf, sizeof(buf) - 1);
	if (n <= 0)
		return 12;
	buf[n] = '\0';
	return strcmp(buf, "tether: denied /usr/bin/wget reason=no_matching_policy\nt: error: shown\n") ? 13 : 0;
}

static void log_levels_and_terminal_lines(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(log_line_child());
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Connections that fit under a descriptor limit. */
static void fdlimit_capacity_arithmetic(void **state)
{
	(void)state;
	assert_int_equal(fdlimit_capacity(1024, 2, 256), 384);
	assert_int_equal(fdlimit_capacity(1025, 2, 256), 384);
	assert_int_equal(fdlimit_capacity(257, 2, 256), 0);
	assert_int_equal(fdlimit_capacity(256, 2, 256), 0);
	assert_int_equal(fdlimit_capacity(100, 2, 256), 0);
	assert_int_equal(fdlimit_capacity(1024, 0, 0), 0);
	assert_true(fdlimit_current() >= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reason_words_round_trip), cmocka_unit_test(hex_round_trip),
		cmocka_unit_test(strscpy_truncates),       cmocka_unit_test(caps_forced_fallbacks),
		cmocka_unit_test(read_file_limits),        cmocka_unit_test(fdpass_extra_fds_closed),
		cmocka_unit_test(ratelimit_counts_what_it_holds_back),
		cmocka_unit_test(fdlimit_capacity_arithmetic),
		cmocka_unit_test(log_never_blocks_on_a_full_pipe),
		cmocka_unit_test(log_levels_and_terminal_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
