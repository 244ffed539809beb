#include "tests/proc-supervisor/envb_test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

struct policy *mkpol_full(const char *sys, const char *proj, const char *agent, const char *cmd,
			  char *want_error, size_t errlen)
{
	struct policy_loader *l;
	struct policy_diag d;
	struct policy *p = NULL;
	int r = policy_loader_new(NULL, 0, &l, &d);
	if (r == 0 && sys)
		r = policy_loader_add_buffer(l, POLICY_LAYER_SYSTEM, "sys.yaml", sys, strlen(sys), &d);
	if (r == 0 && proj)
		r = policy_loader_add_buffer(l, POLICY_LAYER_PROJECT, "proj.yaml", proj, strlen(proj), &d);
	if (r == 0 && agent)
		r = policy_loader_add_agent(l, agent, &d);
	if (r == 0 && cmd)
		r = policy_loader_add_buffer(l, POLICY_LAYER_COMMAND, "cmd.yaml", cmd, strlen(cmd), &d);
	if (r < 0) {
		if (l)
			policy_loader_free(l);
		if (want_error) {
			snprintf(want_error, errlen, "%s", d.msg);
			return NULL;
		}
		fail_msg("policy load failed: %s", d.msg);
	}
	if (want_error)
		fail_msg("policy loaded but an error was expected");
	policy_loader_finish(l, &p);
	return p;
}

const char *envp_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
			return envp[i] + n + 1;
	return NULL;
}
