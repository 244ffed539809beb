/* bench_envb: what the env boundary adds to a spawn. Times (1) loading the
 * layered policy from memory (embedded baseline + the claude preset + one
 * command-layer document) and (2) envb_build() over a 60-variable parent
 * environment with a 9-entry PATH. Prints median and p99. --quick: fewer runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "policy/policy.h"
#include "proc-supervisor/env_build.h"

static int cmp(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, unsigned long long *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp);
	printf("%-44s median %7.1f us   p99 %7.1f us   (n=%zu)\n", what, v[n / 2] / 1000.0,
	       v[(n * 99) / 100] / 1000.0, n);
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 200 : 5000;
	static const char doc[] = "version: 1\nenvironment:\n  mode: sanitized\n"
				  "  pass_through: [EDITOR, \"GIT_AUTHOR_*\", \"GIT_COMMITTER_*\", CARGO_HOME]\n"
				  "  deny: [\"AWS_*\"]\n  set: { FOO: bar }\nexec:\n  shell: /bin/sh\n";
	unsigned long long *t = calloc(n, sizeof(*t));
	if (!t)
		return 1;
	struct policy *p = NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned long long s = now_mono_ns();
		struct policy_loader *l;
		struct policy_diag d;
		if (policy_loader_new(NULL, 0, &l, &d) < 0 || policy_loader_add_agent(l, "claude", &d) < 0 ||
		    policy_loader_add_buffer(l, POLICY_LAYER_COMMAND, "bench.yaml", doc, sizeof(doc) - 1, &d) < 0) {
			fprintf(stderr, "bench_envb: %s\n", d.msg);
			return 1;
		}
		policy_free(p);
		policy_loader_finish(l, &p);
		t[i] = now_mono_ns() - s;
	}
	report("policy load (baseline+agent+1 file)", t, n);

	char *parent[64];
	char bufs[60][64];
	static const char *const fixed[] = {
		"HOME=/root", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:.:/nonexistent:/usr/games",
		"SHELL=/bin/bash", "USER=root", "LANG=C.UTF-8", "TERM=xterm-256color", "LD_PRELOAD=/x.so",
		"GH_TOKEN=ghp_x", "AWS_SECRET_ACCESS_KEY=x", "ANTHROPIC_API_KEY=sk-ant-x", "EDITOR=vi",
		"GIT_AUTHOR_NAME=a", "TETHER_X=1", "OLDPWD=/", "PWD=/root", "TMPDIR=/tmp",
	};
	size_t k = 0;
	for (; k < ARRAY_SIZE(fixed); k++)
		parent[k] = (char *)fixed[k];
	for (size_t i = 0; k < 60; i++, k++) {
		snprintf(bufs[i], sizeof(bufs[i]), "VAR_%zu=value-%zu", i, i);
		parent[k] = bufs[i];
	}
	parent[k] = NULL;
	struct envb_extra x = { .cwd = "/work", .has_target_uid = true, .target_uid = 0,
				.proxy_url = "http://192.0.2.1:3128" };
	for (size_t i = 0; i < n; i++) {
		struct envb_result r;
		unsigned long long s = now_mono_ns();
		if (envb_build(p, parent, &x, &r) < 0)
			return 1;
		json_t *j = envb_audit_json(&r);
		t[i] = now_mono_ns() - s;
		json_decref(j);
		envb_result_done(&r);
	}
	report("envb_build + audit json (60 vars, 9 PATH)", t, n);
	policy_free(p);
	free(t);
	return 0;
}
