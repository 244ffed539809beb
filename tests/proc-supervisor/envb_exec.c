/* envb_exec POLICY.yaml CMD [ARG]...: run CMD with the environment the env
 * boundary builds from this process's environment, the embedded baseline
 * and POLICY.yaml as the command layer: the same envb_build() as a spawn.
 * For test_runtime_inject.sh, which needs real interpreters behind the
 * boundary. Dropped names go to stderr, one "dropped NAME REASON" a line. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proc-supervisor/env_build.h"

extern char **environ;

int main(int argc, char **argv)
{
	if (argc < 3 || argv[2][0] != '/') {
		fprintf(stderr, "usage: envb_exec POLICY.yaml /ABS/CMD [ARG]...\n");
		return 2;
	}
	struct policy_loader *l = NULL;
	struct policy_diag d;
	struct policy *p = NULL;
	if (policy_loader_new(NULL, 0, &l, &d) < 0 ||
	    policy_loader_add_file(l, POLICY_LAYER_COMMAND, argv[1], false, &d) < 0) {
		fprintf(stderr, "envb_exec: %s\n", d.msg);
		return 1;
	}
	if (policy_loader_finish(l, &p) < 0) {
		fprintf(stderr, "envb_exec: policy load failed\n");
		return 1;
	}
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd))) {
		perror("envb_exec: getcwd");
		return 1;
	}
	struct envb_extra x = { .cwd = cwd };
	struct envb_result r;
	int rc = envb_build(p, environ, &x, &r);
	if (rc < 0) {
		fprintf(stderr, "envb_exec: envb_build: %s\n", r.error[0] ? r.error : strerror(-rc));
		return 1;
	}
	for (size_t i = 0; i < r.n_parent; i++)
		if (!r.parent[i].kept)
			fprintf(stderr, "dropped %s %s\n", r.parent[i].name, reason_word(r.parent[i].reason));
	execve(argv[2], argv + 2, r.envp);
	fprintf(stderr, "envb_exec: %s: %s\n", argv[2], strerror(errno));
	return 127;
}
