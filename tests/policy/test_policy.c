/* The policy loader: file format, precise FILE:LINE:COL errors, layers,
 * lockdown, the section-registry contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/policy.h"

static struct policy *load_ok(const char *text)
{
	struct policy *p = NULL;
	struct policy_diag d;
	int r = policy_load_buffer("t.yaml", text, strlen(text), NULL, 0, &p, &d);
	if (r < 0)
		fail_msg("unexpected error: %s", d.msg);
	return p;
}

/* Load must fail with exactly `prefix` at the start of the message. */
static void load_err(const char *text, const char *prefix, const char *contains)
{
	struct policy *p = NULL;
	struct policy_diag d;
	int r = policy_load_buffer("t.yaml", text, strlen(text), NULL, 0, &p, &d);
	if (r >= 0)
		fail_msg("loaded but should have failed with %s", prefix);
	assert_null(p);
	if (strncmp(d.msg, prefix, strlen(prefix)) != 0)
		fail_msg("got '%s', want prefix '%s'", d.msg, prefix);
	if (contains && !strstr(d.msg, contains))
		fail_msg("got '%s', want it to contain '%s'", d.msg, contains);
}

static void test_full_policy(void **state)
{
	struct policy *p = load_ok("version: 1\n"
				   "immutable: false\n"
				   "environment:\n"
				   "  mode: secrets-off\n"
				   "  pass_through: [EDITOR, \"GIT_AUTHOR_*\"]\n"
				   "  deny: [\"AWS_*\"]\n"
				   "  set: { FOO: bar, N: 3 }\n"
				   "  path_strict: true\n"
				   "  broker: false\n"
				   "network:\n"
				   "  mode: enforce\n"
				   "exec:\n"
				   "  shell: /bin/sh\n");
	assert_int_equal(p->env.mode, POLICY_ENV_SECRETS_OFF);
	assert_int_equal(p->env.mode_layer, POLICY_LAYER_COMMAND);
	assert_int_equal(p->env.pass_through.n, 2);
	assert_string_equal(p->env.pass_through.v[1].pattern, "GIT_AUTHOR_*");
	assert_int_equal(p->env.pass_through.v[1].line, 5);
	assert_int_equal(p->env.pass_through.v[1].col, 26);
	assert_string_equal(p->env.pass_through.v[1].file, "t.yaml");
	assert_int_equal(p->env.deny.n, 1);
	assert_int_equal(p->env.n_set, 2);
	assert_string_equal(p->env.set[1].name, "N");
	assert_string_equal(p->env.set[1].value, "3");
	assert_true(p->env.path_strict);
	assert_false(p->env.broker);
	assert_string_equal(p->exec.shell, "/bin/sh");
	/* baseline is the embedded data file */
	assert_true(p->env.baseline.n >= 13);
	bool home = false, lc = false;
	for (size_t i = 0; i < p->env.baseline.n; i++) {
		home |= strcmp(p->env.baseline.v[i].pattern, "HOME") == 0;
		lc |= strcmp(p->env.baseline.v[i].pattern, "LC_*") == 0;
		assert_int_equal(p->env.baseline.v[i].layer, POLICY_LAYER_BASELINE);
	}
	assert_true(home && lc);
	assert_string_equal(p->files[0], "embedded:profiles/baseline.yaml");
	policy_free(p);
}

static void test_errors_precise(void **state)
{
	/* unknown key */
	load_err("version: 1\nenvironment:\n  mode: sanitized\n  pass_thru: [A]\n",
		 "t.yaml:4:3: unknown key 'pass_thru' in environment (expected one of: mode, pass_through",
		 NULL);
	/* bad mode */
	load_err("version: 1\nenvironment:\n  mode: permissive\n",
		 "t.yaml:3:9: environment.mode: unknown value 'permissive' (expected one of: sanitized, explicit, baseline, secrets-off)",
		 NULL);
	/* wrong type */
	load_err("version: 1\nenvironment:\n  path_strict: \"yes\"\n",
		 "t.yaml:3:16: environment.path_strict: expected true or false", NULL);
	load_err("version: 1\nenvironment:\n  pass_through: EDITOR\n",
		 "t.yaml:3:17: environment.pass_through: expected a sequence, got a scalar", NULL);
	load_err("version: 1\nenvironment: [a]\n",
		 "t.yaml:2:14: environment: expected a mapping, got a sequence", NULL);
	load_err("version: 1\nexec:\n  shell: true\n",
		 "t.yaml:3:10: exec.shell: expected a string, got a boolean", NULL);
	/* duplicate key */
	load_err("version: 1\nenvironment:\n  mode: sanitized\n  mode: explicit\n",
		 "t.yaml:4:3: duplicate key 'mode' (first at line 3, column 3)", NULL);
	/* bad version */
	load_err("version: 2\n", "t.yaml:1:10: unsupported policy version 2", NULL);
	load_err("version: one\n", "t.yaml:1:10: version: expected an unsigned integer", NULL);
	load_err("environment: {}\n", "t.yaml:1:1: missing 'version: 1'", NULL);
	load_err("", "t.yaml:1:1: empty policy file", NULL);
	/* malformed YAML: unclosed flow sequence */
	load_err("version: 1\nenvironment:\n  pass_through: [A, B\n  deny: []\n",
		 "t.yaml:4:7: YAML syntax error: did not find expected ',' or ']'", NULL);
	load_err("version: 1\n\tbad: tab\n", "t.yaml:2:1: YAML syntax error:", NULL);
	/* unknown top-level key */
	load_err("version: 1\nnetwrk: {}\n", "t.yaml:2:1: unknown key 'netwrk' in the policy file", NULL);
}

static void test_errors_semantic(void **state)
{
	load_err("version: 1\nenvironment:\n  mode: inherit-all\n", "t.yaml:3:9: environment.mode 'inherit-all' is not allowed",
		 "secrets included");
	load_err("version: 1\nenvironment:\n  pass_through: [\"*\"]\n", "t.yaml:3:18: environment.pass_through: '*' alone",
		 "inherit-all");
	load_err("version: 1\nenvironment:\n  deny: [\"A*B\"]\n", "t.yaml:3:10: environment.deny: 'A*B': '*' is only allowed as a trailing wildcard",
		 NULL);
	load_err("version: 1\nenvironment:\n  pass_through: [\"A=B\"]\n", "t.yaml:3:18: environment.pass_through: 'A=B' is not a valid variable name",
		 NULL);
	load_err("version: 1\nenvironment:\n  pass_through: [\"A\\0B\"]\n", "t.yaml:3:18: environment.pass_through: NUL byte in string",
		 NULL);
	load_err("version: 1\nenvironment:\n  set: { \"X*\": a }\n", "t.yaml:3:10: environment.set: 'X*': wildcards are not allowed here",
		 NULL);
	load_err("version: 1\nexec:\n  shell: bin/sh\n", "t.yaml:3:10: exec.shell: expected an absolute path", NULL);
	load_err("version: 1\nexec:\n  shell: /bin/../tmp/sh\n", "t.yaml:3:10: exec.shell: '..' is not allowed", NULL);
	load_err("version: 1\nexec:\n  shel: /bin/sh\n", "t.yaml:3:3: unknown key 'shel' in exec (expected one of: shell)", NULL);
	load_err("version: 1\nenvironment: &a {}\n", "t.yaml:2:14: YAML anchors are not supported", NULL);
	load_err("version: 1\nx: *a\n", "t.yaml:2:4: YAML aliases are not supported", NULL);
	load_err("version: 1\nenvironment: !!map {}\n", "t.yaml:2:14: YAML tags are not supported", NULL);
	load_err("version: 1\n---\nversion: 1\n", "t.yaml:2:1: only one YAML document", NULL);
	load_err("version: 1\n? [a]\n: b\n", "t.yaml:2:3: mapping keys must be scalars", NULL);
	load_err("- a\n", "t.yaml:1:1: policy file: expected a mapping, got a sequence", NULL);
	/* deep nesting is bounded */
	char deep[400];
	size_t o = (size_t)snprintf(deep, sizeof(deep), "version: 1\nx: ");
	for (int i = 0; i < 100; i++)
		deep[o++] = '[';
	deep[o] = 0;
	load_err(deep, "t.yaml:2:", "nesting too deep");
}

static void test_immutable_warning_outside_system(void **state)
{
	struct policy *p = load_ok("version: 1\nimmutable: true\n");
	assert_false(p->immutable);
	assert_int_equal(p->n_warnings, 1);
	assert_non_null(strstr(p->warnings[0], "t.yaml:2:12: 'immutable' is honoured in the system layer only"));
	policy_free(p);
}

/* The garbage never crashes: every truncation and a byte flip sweep. */
static void test_truncations_and_flips(void **state)
{
	const char *good = "version: 1\nimmutable: false\nenvironment:\n  mode: sanitized\n"
			   "  pass_through: [EDITOR, \"GIT_*\"]\n  set: {A: \"x\"}\nexec: {shell: /bin/sh}\n";
	size_t n = strlen(good);
	char buf[256];
	for (size_t len = 0; len <= n; len++) {
		struct policy *p = NULL;
		struct policy_diag d;
		int r = policy_load_buffer("t.yaml", good, len, NULL, 0, &p, &d);
		if (r < 0)
			assert_true(strncmp(d.msg, "t.yaml:", 7) == 0);
		policy_free(p);
	}
	static const char flips[] = { '[', ']', '{', '}', ':', '-', '&', '*', '!', '"', '\'', '\0', '\t', '?', '|', '>' };
	for (size_t i = 0; i < n; i++)
		for (size_t f = 0; f < sizeof(flips); f++) {
			memcpy(buf, good, n);
			buf[i] = flips[f];
			struct policy *p = NULL;
			struct policy_diag d;
			int r = policy_load_buffer("t.yaml", buf, n, NULL, 0, &p, &d);
			if (r < 0)
				assert_true(strncmp(d.msg, "t.yaml:", 7) == 0);
			policy_free(p);
		}
}

/* ── the section registry ─────────────────────────────────────────────── */

struct fake_net {
	int mode;
	unsigned calls;
	unsigned last_line;
};
static int fake_parse(struct pctx *ctx, const struct pnode *node, void **data)
{
	static const char *const keys[] = { "mode", "policies", NULL };
	static const char *const modes[] = { "enforce", "audit", NULL };
	int r = pnode_expect_map(ctx, node, "network");
	if (r < 0)
		return r;
	if ((r = pmap_check_keys(ctx, node, "network", keys)) < 0)
		return r;
	struct fake_net *fn = *data;
	if (!fn && !(fn = *data = calloc(1, sizeof(*fn))))
		return -ENOMEM;
	fn->calls++;
	const struct pnode *m = pmap_get(node, "mode");
	if (m) {
		if ((r = pnode_expect_enum(ctx, m, "network.mode", modes, &fn->mode)) < 0)
			return r;
		fn->last_line = m->line;
	}
	const struct pnode *ps = pmap_get(node, "policies");
	if (ps) {
		if ((r = pnode_expect_seq(ctx, ps, "network.policies")) < 0)
			return r;
		for (size_t i = 0; i < ps->n; i++) {
			uint64_t port;
			const struct pnode *pn = pmap_get(ps->vals[i], "port");
			if (!pn)
				return pnode_error(ctx, ps->vals[i], "network.policies[%zu]: missing port", i);
			if ((r = pnode_expect_uint(ctx, pn, "port", 65535, &port)) < 0)
				return r;
		}
	}
	return 0;
}
static const struct policy_section fake_section = { .name = "network", .parse = fake_parse, .free = free };

static void test_section_registry(void **state)
{
	const struct policy_section *ext[] = { &fake_section };
	const char *t = "version: 1\nnetwork:\n  mode: audit\n  policies:\n    - port: 443\n";
	struct policy *p = NULL;
	struct policy_diag d;
	assert_int_equal(policy_load_buffer("n.yaml", t, strlen(t), ext, 1, &p, &d), 0);
	struct fake_net *fn = policy_section_data(p, "network");
	assert_non_null(fn);
	assert_int_equal(fn->mode, 1);
	assert_int_equal(fn->calls, 1);
	assert_int_equal(fn->last_line, 3);
	policy_free(p);

	t = "version: 1\nnetwork:\n  policies:\n    - port: 70000\n";
	assert_true(policy_load_buffer("n.yaml", t, strlen(t), ext, 1, &p, &d) < 0);
	assert_string_equal(d.msg, "n.yaml:4:13: port: 70000 is out of range (max 65535)");
	t = "version: 1\nnetwork:\n  policies:\n    - name: x\n";
	assert_true(policy_load_buffer("n.yaml", t, strlen(t), ext, 1, &p, &d) < 0);
	assert_string_equal(d.msg, "n.yaml:4:7: network.policies[0]: missing port");
	t = "version: 1\nnetwork:\n  mod: audit\n";
	assert_true(policy_load_buffer("n.yaml", t, strlen(t), ext, 1, &p, &d) < 0);
	assert_string_equal(d.msg, "n.yaml:3:3: unknown key 'mod' in network (expected one of: mode, policies)");

	/* Unregistered: the known section is skipped, not an error. */
	t = "version: 1\nnetwork:\n  whatever: 1\n";
	p = load_ok(t);
	assert_null(policy_section_data(p, "network"));
	policy_free(p);
}

/* ── layers on disk ───────────────────────────────────────────────────── */

struct tmpl {
	char root[64];
	char sys[128], user[128], proj[128];
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p);
}

static int tmpl_setup(void **state)
{
	struct tmpl *t = calloc(1, sizeof(*t));
	strcpy(t->root, "/tmp/tether-policy-XXXXXX");
	if (!mkdtemp(t->root))
		return -1;
	snprintf(t->sys, sizeof(t->sys), "%s/etc", t->root);
	snprintf(t->user, sizeof(t->user), "%s/user", t->root);
	snprintf(t->proj, sizeof(t->proj), "%s/proj", t->root);
	mkdir(t->sys, 0755);
	mkdir(t->user, 0755);
	mkdir(t->proj, 0755);
	char d[192];
	snprintf(d, sizeof(d), "%s/policy.d", t->sys);
	mkdir(d, 0755);
	*state = t;
	return 0;
}

static int tmpl_teardown(void **state)
{
	struct tmpl *t = *state;
	nftw(t->root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(t);
	return 0;
}

static void put(const char *dir, const char *name, const char *text)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	write_file(p, text);
}

static int load_layers(struct tmpl *t, const char *agent, const char *const *cmd, size_t ncmd,
		       struct policy **p, struct policy_diag *d)
{
	struct policy_paths paths = { .system_dir = t->sys, .user_dir = t->user, .project_dir = t->proj,
				      .agent = agent, .command_files = cmd, .n_command_files = ncmd };
	return policy_load_layers(&paths, NULL, 0, p, d);
}

static bool has_name(const struct policy_names *ns, const char *name, enum policy_layer layer)
{
	for (size_t i = 0; i < ns->n; i++)
		if (strcmp(ns->v[i].pattern, name) == 0 && ns->v[i].layer == layer)
			return true;
	return false;
}

static void test_layers_union(void **state)
{
	struct tmpl *t = *state;
	put(t->sys, "policy.yaml", "version: 1\nenvironment:\n  pass_through: [SYS_A]\n  deny: [\"AWS_*\"]\n");
	put(t->sys, "policy.d/20-b.yaml", "version: 1\nenvironment:\n  pass_through: [SYS_C]\n");
	put(t->sys, "policy.d/10-a.yaml", "version: 1\nenvironment:\n  pass_through: [SYS_B]\n");
	put(t->sys, "policy.d/ignored.txt", "not yaml: [");
	put(t->user, "policy.yaml", "version: 1\nenvironment:\n  pass_through: [USER_A]\n  mode: explicit\n");
	put(t->proj, ".tether.yaml", "version: 1\nenvironment:\n  pass_through: [PROJ_A]\n  deny: [GH_TOKEN]\n  path_strict: true\n");
	char cmdf[192];
	snprintf(cmdf, sizeof(cmdf), "%s/cmd.yaml", t->root);
	write_file(cmdf, "version: 1\nenvironment:\n  pass_through: [CMD_A]\n  path_strict: false\n  mode: sanitized\n");
	const char *cmd[] = { cmdf };
	struct policy *p;
	struct policy_diag d;
	int r = load_layers(t, "claude", cmd, 1, &p, &d);
	if (r < 0)
		fail_msg("%s", d.msg);
	assert_true(has_name(&p->env.pass_through, "SYS_A", POLICY_LAYER_SYSTEM));
	assert_true(has_name(&p->env.pass_through, "SYS_B", POLICY_LAYER_SYSTEM));
	assert_true(has_name(&p->env.pass_through, "USER_A", POLICY_LAYER_USER));
	assert_true(has_name(&p->env.pass_through, "PROJ_A", POLICY_LAYER_PROJECT));
	assert_true(has_name(&p->env.pass_through, "ANTHROPIC_API_KEY", POLICY_LAYER_AGENT));
	assert_true(has_name(&p->env.pass_through, "CMD_A", POLICY_LAYER_COMMAND));
	assert_true(has_name(&p->env.deny, "AWS_*", POLICY_LAYER_SYSTEM));
	assert_true(has_name(&p->env.deny, "GH_TOKEN", POLICY_LAYER_PROJECT));
	assert_true(p->env.path_strict); /* a lower layer cannot loosen it */
	assert_int_equal(p->env.mode, POLICY_ENV_SANITIZED);
	assert_int_equal(p->env.mode_layer, POLICY_LAYER_COMMAND);
	assert_string_equal(p->agent, "claude");
	/* files in load order: policy.d sorted */
	assert_non_null(strstr(p->files[1], "/etc/policy.yaml"));
	assert_non_null(strstr(p->files[2], "/policy.d/10-a.yaml"));
	assert_non_null(strstr(p->files[3], "/policy.d/20-b.yaml"));
	assert_string_equal(p->files[6], "embedded:profiles/agents/claude.yaml");
	policy_free(p);
}

static void test_lockdown_violation(void **state)
{
	struct tmpl *t = *state;
	put(t->sys, "policy.yaml", "version: 1\nimmutable: true\nenvironment:\n  pass_through: [EDITOR]\n");
	put(t->proj, ".tether.yaml", "version: 1\nenvironment:\n  pass_through:\n    - FOO\n    - AWS_SECRET_ACCESS_KEY\n");
	struct policy *p = NULL;
	struct policy_diag d;
	assert_true(load_layers(t, NULL, NULL, 0, &p, &d) < 0);
	char want[512];
	snprintf(want, sizeof(want),
		 "%s/.tether.yaml:5:7: policy lockdown violation: the project layer adds secret-shaped 'AWS_SECRET_ACCESS_KEY' to environment.pass_through, but the system policy is immutable",
		 t->proj);
	assert_string_equal(d.msg, want);

	/* lowercase is secret-shaped too */
	put(t->proj, ".tether.yaml", "version: 1\nenvironment:\n  pass_through: [gh_token]\n");
	assert_true(load_layers(t, NULL, NULL, 0, &p, &d) < 0);
	assert_non_null(strstr(d.msg, "policy lockdown violation: the project layer adds secret-shaped 'gh_token'"));

	/* a wildcard is fine: wildcards never pass secret-shaped names */
	put(t->proj, ".tether.yaml", "version: 1\nenvironment:\n  pass_through: [\"AWS_*\"]\n");
	assert_int_equal(load_layers(t, NULL, NULL, 0, &p, &d), 0);
	assert_true(p->immutable);
	policy_free(p);

	/* agent presets add API keys: refused unless the system layer grants them */
	unlink("/dev/null/x");
	char pj[192];
	snprintf(pj, sizeof(pj), "%s/.tether.yaml", t->proj);
	unlink(pj);
	assert_true(load_layers(t, "claude", NULL, 0, &p, &d) < 0);
	assert_non_null(strstr(d.msg, "embedded:profiles/agents/claude.yaml:"));
	assert_non_null(strstr(d.msg, "the agent layer adds secret-shaped 'ANTHROPIC_API_KEY'"));
	put(t->sys, "policy.yaml",
	    "version: 1\nimmutable: true\nenvironment:\n  pass_through: [ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN]\n");
	assert_int_equal(load_layers(t, "claude", NULL, 0, &p, &d), 0);
	policy_free(p);

	/* mode: a lower layer may tighten, not loosen */
	put(t->sys, "policy.yaml", "version: 1\nimmutable: true\nenvironment:\n  mode: secrets-off\n");
	put(t->user, "policy.yaml", "version: 1\nenvironment:\n  mode: sanitized\n");
	assert_true(load_layers(t, NULL, NULL, 0, &p, &d) < 0);
	assert_non_null(strstr(d.msg, "user/policy.yaml:3:9: policy lockdown violation: the user layer changes environment.mode from 'secrets-off' to 'sanitized'"));
	put(t->user, "policy.yaml", "version: 1\nenvironment:\n  broker: true\n");
	assert_true(load_layers(t, NULL, NULL, 0, &p, &d) < 0);
	assert_non_null(strstr(d.msg, "policy lockdown violation: the user layer enables environment.broker"));

	/* not immutable: the same project file loads */
	put(t->sys, "policy.yaml", "version: 1\nenvironment:\n  pass_through: [EDITOR]\n");
	put(t->user, "policy.yaml", "version: 1\n");
	put(t->proj, ".tether.yaml", "version: 1\nenvironment:\n  pass_through: [AWS_SECRET_ACCESS_KEY]\n");
	assert_int_equal(load_layers(t, NULL, NULL, 0, &p, &d), 0);
	assert_false(p->immutable);
	policy_free(p);
}

static void test_missing_and_unknown(void **state)
{
	struct tmpl *t = *state;
	struct policy *p = NULL;
	struct policy_diag d;
	/* absent system/user/project files are fine */
	assert_int_equal(load_layers(t, NULL, NULL, 0, &p, &d), 0);
	assert_int_equal(p->n_files, 1);
	policy_free(p);
	const char *cmd[] = { "/nonexistent/tether.yaml" };
	assert_true(load_layers(t, NULL, cmd, 1, &p, &d) < 0);
	assert_string_equal(d.msg, "/nonexistent/tether.yaml: cannot open policy file: No such file or directory");
	assert_true(load_layers(t, "nosuch", NULL, 0, &p, &d) < 0);
	assert_non_null(strstr(d.msg, "--agent nosuch: unknown agent preset (known: "));
	assert_non_null(strstr(d.msg, "claude"));
	assert_true(load_layers(t, "../etc", NULL, 0, &p, &d) < 0);
	/* an error in a system file names that file */
	put(t->sys, "policy.d/50-bad.yaml", "version: 1\nenvironment:\n  mode: loose\n");
	assert_true(load_layers(t, NULL, NULL, 0, &p, &d) < 0);
	assert_non_null(strstr(d.msg, "/etc/policy.d/50-bad.yaml:3:9: environment.mode: unknown value 'loose'"));
}

static void test_every_agent_preset_loads(void **state)
{
	const char *const *names = policy_agent_names();
	size_t n = 0;
	for (; names[n]; n++) {
		struct policy_loader *l;
		struct policy_diag d;
		struct policy *p;
		assert_int_equal(policy_loader_new(NULL, 0, &l, &d), 0);
		if (policy_loader_add_agent(l, names[n], &d) < 0)
			fail_msg("%s: %s", names[n], d.msg);
		policy_loader_finish(l, &p);
		bool key = false;
		for (size_t i = 0; i < p->env.pass_through.n; i++)
			key |= policy_name_secret_shaped(p->env.pass_through.v[i].pattern);
		assert_true(key); /* each preset names the API key its CLI needs */
		policy_free(p);
	}
	assert_true(n >= 5);
}

static void test_paths_default(void **state)
{
	struct policy_paths p;
	setenv("TETHER_SYSTEM_POLICY_DIR", "/x/sys", 1);
	setenv("TETHER_USER_POLICY_DIR", "/x/user", 1);
	assert_int_equal(policy_paths_default(&p, "/work/dir"), 0);
	assert_string_equal(p.system_dir, "/x/sys");
	assert_string_equal(p.user_dir, "/x/user");
	assert_string_equal(p.project_dir, "/work/dir");
	policy_paths_done(&p);
	unsetenv("TETHER_SYSTEM_POLICY_DIR");
	unsetenv("TETHER_USER_POLICY_DIR");
	setenv("XDG_CONFIG_HOME", "/x/cfg", 1);
	assert_int_equal(policy_paths_default(&p, NULL), 0);
	assert_string_equal(p.system_dir, "/etc/tether");
	assert_string_equal(p.user_dir, "/x/cfg/tether");
	assert_null(p.project_dir);
	policy_paths_done(&p);
	unsetenv("XDG_CONFIG_HOME");
	setenv("HOME", "/x/home", 1);
	assert_int_equal(policy_paths_default(&p, NULL), 0);
	assert_string_equal(p.user_dir, "/x/home/.config/tether");
	policy_paths_done(&p);
}

static void test_name_helpers(void **state)
{
	static const char *const secret[] = { "AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "GH_TOKEN",
					      "OPENAI_API_KEY", "DB_PASSWORD", "MY_CREDENTIALS_FILE",
					      "github_pat", "X_PASSWD", "CLIENT_SECRET" };
	static const char *const plain[] = { "HOME", "PATH", "EDITOR", "LANG", "TERM_PROGRAM", "KEYBOARD",
					     "MONKEY", "TOKENIZERS_PARALLELISM" };
	for (size_t i = 0; i < sizeof(secret) / sizeof(*secret); i++)
		if (!policy_name_secret_shaped(secret[i]))
			fail_msg("%s should be secret-shaped", secret[i]);
	for (size_t i = 0; i < sizeof(plain) / sizeof(*plain); i++)
		if (policy_name_secret_shaped(plain[i]))
			fail_msg("%s should not be secret-shaped", plain[i]);
	assert_true(policy_pattern_match("AWS_SECRET*", "AWS_SECRET_ACCESS_KEY", false));
	assert_false(policy_pattern_match("AWS_SECRET*", "aws_secret_access_key", false));
	assert_true(policy_pattern_match("AWS_SECRET*", "aws_secret_access_key", true));
	assert_true(policy_pattern_match("EDITOR", "EDITOR", false));
	assert_false(policy_pattern_match("EDITOR", "EDITORX", false));
	assert_false(policy_pattern_match("EDITOR", "EDITO", false));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_policy),
		cmocka_unit_test(test_errors_precise),
		cmocka_unit_test(test_errors_semantic),
		cmocka_unit_test(test_immutable_warning_outside_system),
		cmocka_unit_test(test_truncations_and_flips),
		cmocka_unit_test(test_section_registry),
		cmocka_unit_test_setup_teardown(test_layers_union, tmpl_setup, tmpl_teardown),
		cmocka_unit_test_setup_teardown(test_lockdown_violation, tmpl_setup, tmpl_teardown),
		cmocka_unit_test_setup_teardown(test_missing_and_unknown, tmpl_setup, tmpl_teardown),
		cmocka_unit_test(test_every_agent_preset_loads),
		cmocka_unit_test(test_paths_default),
		cmocka_unit_test(test_name_helpers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
