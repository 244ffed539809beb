/* Unit tests for the exec gateway's edges: the peer allow rule, shell
 * resolution, and hostile first frames (garbage, wrong fd count, oversized
 * length, silence) — each must be refused with an answer or a close, never
 * a spawn or a crash. The gateway runs on a loop in this process with a
 * spawner that records calls. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "proc-supervisor/env_build.h"
#include "proc-supervisor/exec_gateway.h"
#include "proc-supervisor/peercheck.h"
#include "proto/frame.h"
#include "proto/message.h"

static void t_peer_allowed(void **st)
{
	uid_t u[] = { 1000, 1001 };
	gid_t g[] = { 50 };
	assert_true(exec_gw_peer_allowed(NULL, 0, NULL, 0, geteuid(), 12345));
	assert_false(exec_gw_peer_allowed(NULL, 0, NULL, 0, geteuid() + 1, 12345));
	assert_true(exec_gw_peer_allowed(u, 2, g, 1, 1001, 7));
	assert_true(exec_gw_peer_allowed(u, 2, g, 1, 4242, 50));
	assert_false(exec_gw_peer_allowed(u, 2, g, 1, 4242, 51));
	/* Lists add to the supervisor's own uid, they do not replace it. */
	assert_true(exec_gw_peer_allowed(u, 2, g, 1, geteuid(), 99));
	assert_false(exec_gw_peer_allowed(u, 2, g, 1, geteuid() + 7777, 99));
}

static void t_resolve_shell(void **st)
{
	char out[256], msg[256];
	assert_int_equal(exec_gw_resolve_shell("/nonexistent/shell", 0, out, sizeof(out), msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "exec.shell /nonexistent/shell"));
	assert_int_equal(exec_gw_resolve_shell("/bin/sh", 0, out, sizeof(out), msg, sizeof(msg)), 0);
	assert_string_equal(out, "/bin/sh");
	/* An empty file is not a shell, even when executable. */
	char tmpl[] = "/tmp/gw-unit-XXXXXX";
	int fd = mkstemp(tmpl);
	assert_true(fd >= 0);
	fchmod(fd, 0755);
	close(fd);
	assert_int_equal(exec_gw_resolve_shell(tmpl, 0, out, sizeof(out), msg, sizeof(msg)), -ENOENT);
	unlink(tmpl);
	/* No passwd entry: /bin/sh. */
	assert_int_equal(exec_gw_resolve_shell(NULL, 3999999, out, sizeof(out), msg, sizeof(msg)), 0);
	assert_string_equal(out, "/bin/sh");
	/* A passwd shell that refuses to run commands (nobody's nologin, not
	 * in /etc/shells) is no shell: /bin/sh (it was nologin before). */
	struct passwd *pw = getpwuid(65534);
	if (pw && strstr(pw->pw_shell, "nologin")) {
		assert_int_equal(exec_gw_resolve_shell(NULL, 65534, out, sizeof(out), msg, sizeof(msg)), 0);
		assert_string_equal(out, "/bin/sh");
	}
	/* root's shell, when /etc/shells lists it, is kept */
	pw = getpwuid(0);
	char want[256];
	if (pw && envb_passwd_shell(0, want, sizeof(want))) {
		assert_int_equal(exec_gw_resolve_shell(NULL, 0, out, sizeof(out), msg, sizeof(msg)), 0);
		assert_string_equal(out, pw->pw_shell);
	}
}

/* ---- hostile first frames against a live gateway ---- */

struct env {
	uv_loop_t loop;
	struct kernel_caps caps;
	struct exec_gw *gw;
	char path[108];
	int spawns;
};

static int fake_spawn(void *ud, const struct exec_gw_spawn *req, struct exec_gw_spawned *out,
		      struct spawn_error *err)
{
	struct env *e = ud;
	e->spawns++;
	snprintf(err->message, sizeof(err->message), "fake spawner refuses");
	err->exit_code = 127;
	return -ENOENT;
}

static int setup(void **st)
{
	struct env *e = calloc(1, sizeof(*e));
	uv_loop_init(&e->loop);
	kernel_caps_probe(&e->caps);
	snprintf(e->path, sizeof(e->path), "/tmp/gw-unit-%d.sock", (int)getpid());
	struct exec_gw_opts o = { .path = e->path, .caps = &e->caps, .spawn = fake_spawn, .spawn_userdata = e,
				  .handshake_timeout_ms = 300 };
	assert_int_equal(exec_gw_start(&e->loop, &o, &e->gw), 0);
	*st = e;
	return 0;
}

static void on_done(void *ud)
{
	*(bool *)ud = true;
}

static int teardown(void **st)
{
	struct env *e = *st;
	bool done = false;
	exec_gw_stop(e->gw, on_done, &done);
	for (int i = 0; i < 1000 && !done; i++)
		uv_run(&e->loop, UV_RUN_NOWAIT), usleep(1000);
	assert_true(done);
	uv_run(&e->loop, UV_RUN_NOWAIT);
	assert_int_equal(uv_loop_close(&e->loop), 0);
	free(e);
	return 0;
}

static int connect_gw(struct env *e)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, e->path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Run the loop until fd has everything the gateway will send (EOF), up
 * to 3 s; returns the bytes received. */
static size_t collect(struct env *e, int fd, uint8_t *buf, size_t cap)
{
	size_t len = 0;
	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (int i = 0; i < 3000; i++) {
		uv_run(&e->loop, UV_RUN_NOWAIT);
		ssize_t n = read(fd, buf + len, cap - len);
		if (n == 0)
			return len;
		if (n > 0)
			len += (size_t)n;
		usleep(1000);
	}
	fail_msg("the gateway did not close the connection");
	return len;
}

/* The last ExecExited code in a stream of frames, -1 if none. */
static int exited_code(const uint8_t *buf, size_t len)
{
	int code = -1;
	size_t off = 0;
	while (off + 4 <= len) {
		uint32_t fl = ((uint32_t)buf[off] << 24) | ((uint32_t)buf[off + 1] << 16) | ((uint32_t)buf[off + 2] << 8) | buf[off + 3];
		if (off + 4 + fl > len)
			break;
		struct ctl_msg m;
		if (ctl_decode(buf + off + 4, fl, &m) == 0) {
			if (m.kind == CTL_EXEC_EXITED)
				code = m.u.exec_exited.exit_code;
			ctl_msg_clear(&m);
		}
		off += 4 + fl;
	}
	return code;
}

static void t_garbage_frame(void **st)
{
	struct env *e = *st;
	int fd = connect_gw(e);
	uint8_t junk[] = { 0, 0, 0, 5, 0xff, 0xfe, 0xfd, 0xfc, 0xfb };
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	uint8_t buf[4096];
	size_t n = collect(e, fd, buf, sizeof(buf));
	assert_int_equal(exited_code(buf, n), 125);
	assert_int_equal(e->spawns, 0);
	close(fd);
}

static void t_oversized_length(void **st)
{
	struct env *e = *st;
	int fd = connect_gw(e);
	uint8_t big[] = { 0x7f, 0xff, 0xff, 0xff };
	assert_int_equal(write(fd, big, sizeof(big)), 4);
	uint8_t buf[4096];
	size_t n = collect(e, fd, buf, sizeof(buf));
	assert_int_equal(exited_code(buf, n), 125);
	assert_int_equal(e->spawns, 0);
	close(fd);
}

static void t_missing_fds(void **st)
{
	struct env *e = *st;
	int fd = connect_gw(e);
	char *argv[] = { "true", NULL };
	struct ctl_msg m = { .kind = CTL_EXEC_REQUEST };
	m.u.exec_request.argv = argv;
	m.u.exec_request.argc = 1;
	uint8_t *out;
	size_t len;
	assert_int_equal(ctl_encode(&m, &out, &len), 0);
	assert_int_equal(write(fd, out, len), (ssize_t)len); /* non-PTY without the 3 fds */
	free(out);
	uint8_t buf[4096];
	size_t n = collect(e, fd, buf, sizeof(buf));
	assert_int_equal(exited_code(buf, n), 125);
	assert_int_equal(e->spawns, 0);
	close(fd);
}

static void t_silence_times_out(void **st)
{
	struct env *e = *st;
	int fd = connect_gw(e);
	uint8_t part[] = { 0, 0 }; /* half a prefix, then nothing */
	assert_int_equal(write(fd, part, 2), 2);
	uint8_t buf[256];
	(void)collect(e, fd, buf, sizeof(buf)); /* closed by the 300 ms deadline */
	assert_int_equal(exec_gw_session_count(e->gw), 0);
	close(fd);
}

static void t_spawn_failure_reported(void **st)
{
	struct env *e = *st;
	int fd = connect_gw(e);
	char *argv[] = { "x", NULL };
	struct ctl_msg m = { .kind = CTL_EXEC_REQUEST };
	m.u.exec_request.argv = argv;
	m.u.exec_request.argc = 1;
	m.u.exec_request.pty = true;
	uint8_t *out;
	size_t len;
	assert_int_equal(ctl_encode(&m, &out, &len), 0);
	assert_int_equal(write(fd, out, len), (ssize_t)len);
	free(out);
	uint8_t buf[4096];
	size_t n = collect(e, fd, buf, sizeof(buf));
	assert_int_equal(exited_code(buf, n), 127);
	assert_int_equal(e->spawns, 1);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_peer_allowed),
		cmocka_unit_test(t_resolve_shell),
		cmocka_unit_test_setup_teardown(t_garbage_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(t_oversized_length, setup, teardown),
		cmocka_unit_test_setup_teardown(t_missing_fds, setup, teardown),
		cmocka_unit_test_setup_teardown(t_silence_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(t_spawn_failure_reported, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
