/* The spawner through its API, many times in one process (as the daemon
 * does for exec sessions): exit codes come back, 127/126 with the right
 * step, the listener arrives, the sandbox cgroup is joined when asked, and
 * stdio can be remapped (stdout -> a pipe). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "proc-supervisor/cgroup.h"
#include "proc-supervisor/landlock.h"
#include "proc-supervisor/seccomp.h"
#include "proc-supervisor/spawn.h"
#include "tests/common/check.h"

int main(void)
{
	struct kernel_caps caps;
	if (kernel_caps_probe(&caps) < 0)
		return 1;
	struct workload_filter f;
	struct workload_filter_opts fo = { .notify_connect = true };
	if (workload_filter_build(&fo, &f) < 0)
		return 1;
	int ll = landlock_scope_ruleset();
	struct sandbox_cgroup cg;
	bool have_cg = sandbox_cgroup_setup(&caps, CGROUP_MODE_AUTO, NULL, &cg) == 0;

	for (int i = 0; i < 40; i++) {
		char code[8];
		snprintf(code, sizeof(code), "%d", i % 4 == 0 ? 0 : i);
		char *argv[] = { "sh", "-c", "exit $0", code, NULL };
		struct spawn_opts o;
		spawn_opts_init(&o);
		o.argv = argv;
		o.filter = &f;
		o.landlock_fd = ll;
		o.cgroup_fd = have_cg ? cg.workload_fd : -1;
		struct spawn_result res;
		struct spawn_error err;
		int r = spawn_process(&o, &res, &err);
		CHECK(r == 0, "spawn %d: %s", i, err.message);
		if (r < 0)
			continue;
		CHECK(res.listener_fd >= 0, "no listener (%d)", i);
		CHECK(res.in_cgroup == have_cg, "in_cgroup %d (%d)", res.in_cgroup, i);
		int st;
		CHECK(waitpid(res.pid, &st, 0) == res.pid && WIFEXITED(st) && WEXITSTATUS(st) == atoi(code),
		      "exit status of spawn %d", i);
		close(res.pidfd);
		close(res.listener_fd);
	}

	/* stdout into a pipe */
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
	char *argv_echo[] = { "echo", "spawned", NULL };
	struct spawn_opts o;
	spawn_opts_init(&o);
	o.argv = argv_echo;
	o.filter = &f;
	o.landlock_fd = ll;
	o.stdio[1] = p[1];
	struct spawn_result res;
	struct spawn_error err;
	CHECK(spawn_process(&o, &res, &err) == 0, "echo: %s", err.message);
	close(p[1]);
	char buf[64] = { 0 };
	ssize_t n = read(p[0], buf, sizeof(buf) - 1);
	CHECK(n > 0 && strcmp(buf, "spawned\n") == 0, "echo output '%s'", buf);
	close(p[0]);
	waitpid(res.pid, NULL, 0);
	close(res.pidfd);
	if (res.listener_fd >= 0)
		close(res.listener_fd);

	/* not found / not executable */
	char *argv_nf[] = { "/nonexistent/tether-x", NULL };
	o.argv = argv_nf;
	o.stdio[1] = -1;
	CHECK(spawn_process(&o, &res, &err) == -ENOENT && err.exit_code == 127, "not found: %d %s", err.exit_code,
	      err.message);
	char *argv_ne[] = { "/etc/hostname", NULL };
	o.argv = argv_ne;
	int r = spawn_process(&o, &res, &err);
	CHECK(r < 0 && err.exit_code == 126, "not executable: %d %s", err.exit_code, err.message);
	/* a failure inside the child: chdir into nowhere -> 127, step chdir */
	char *argv_ok[] = { "/bin/true", NULL };
	o.argv = argv_ok;
	o.cwd = "/nonexistent/tether-dir";
	r = spawn_process(&o, &res, &err);
	CHECK(r == -ENOENT && err.exit_code == 127 && err.step && strcmp(err.step, "chdir") == 0,
	      "chdir failure: %d %s", err.exit_code, err.message);

	if (have_cg)
		sandbox_cgroup_remove(&cg);
	if (ll >= 0)
		close(ll);
	workload_filter_free(&f);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	else
		printf("test_spawn: all checks passed\n");
	return failures ? 1 : 0;
}
