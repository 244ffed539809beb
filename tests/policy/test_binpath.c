/* Binary paths as the workload sees them: symlinks resolved inside a root
 * directory (never the host's), applied to a loaded policy (and again on a
 * reload), scripts' interpreters, and the table of names that never
 * connect themselves. Asserts: a policy naming a symlink allows its target
 * and nothing else; a path resolving to nothing is a warning, never an allow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/binpath.h"
#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"

static char root[PATH_MAX];
static int rootfd = -1;

static void mk(const char *rel, const char *content)
{
	char p[2 * PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
	chmod(p, 0755);
}

static void ln(const char *target, const char *rel)
{
	char p[2 * PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	unlink(p);
	assert_int_equal(symlink(target, p), 0);
}

static int setup(void **state)
{
	(void)state;
	strcpy(root, "/tmp/tether-binpath.XXXXXX");
	if (!mkdtemp(root))
		return -1;
	char p[2 * PATH_MAX];
	snprintf(p, sizeof(p), "%s/usr", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/usr/bin", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/etc", root);
	mkdir(p, 0755);
	mk("usr/bin/python3.11", "\x7f" "ELF");
	mk("usr/bin/python3.12", "\x7f" "ELF");
	mk("usr/bin/node", "\x7f" "ELF");
	mk("usr/bin/dash", "\x7f" "ELF");
	mk("usr/bin/env", "\x7f" "ELF");
	mk("etc/inside", "x");
	ln("python3.11", "usr/bin/python3");          /* relative */
	ln("/usr/bin/python3", "usr/bin/py-abs");      /* absolute: inside the root */
	ln("usr/bin", "bin");                          /* a directory link */
	ln("nothing-here", "usr/bin/dangling");
	ln("loop-b", "usr/bin/loop-a");
	ln("loop-a", "usr/bin/loop-b");
	ln("../../../../../etc/inside", "usr/bin/up"); /* ".." stops at the root */
	ln("dash", "usr/bin/sh");
	mk("usr/bin/pip", "#!/usr/bin/python3\nimport sys\n");
	mk("usr/bin/npm-cli.js", "#!/usr/bin/env node\nrequire('x')\n");
	ln("npm-cli.js", "usr/bin/npm");
	mk("usr/bin/tool.sh", "#!/bin/sh\nexec curl \"$@\"\n");
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return rootfd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	close(rootfd);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void expect(const char *in, int r_want, const char *out_want)
{
	char out[PATH_MAX] = "";
	int r = binpath_resolve(rootfd, in, out, sizeof(out));
	if (r != r_want)
		fail_msg("%s: got %d (%s), want %d", in, r, out, r_want);
	if (out_want)
		assert_string_equal(out, out_want);
}

static void test_resolve(void **state)
{
	(void)state;
	expect("/usr/bin/python3.11", 0, "/usr/bin/python3.11");
	expect("/usr/bin/python3", 0, "/usr/bin/python3.11");
	expect("/usr/bin/py-abs", 0, "/usr/bin/python3.11");   /* absolute link stays in the root */
	expect("/bin/python3", 0, "/usr/bin/python3.11");      /* through a directory link */
	expect("/usr/./bin/../bin//python3", 0, "/usr/bin/python3.11");
	expect("/usr/bin/up", 0, "/etc/inside");               /* not the host's /etc */
	expect("/../../usr/bin/python3", 0, "/usr/bin/python3.11");
	expect("/usr/bin/dangling", -ENOENT, NULL);
	expect("/usr/bin/missing", -ENOENT, NULL);
	expect("/usr/bin/loop-a", -ELOOP, NULL);
	expect("/usr/bin/python3.11/x", -ENOTDIR, NULL);
	expect("usr/bin/python3", -EINVAL, NULL);
	expect("/", 0, "/");
}

static const struct policy_section *const secs[] = { &network_policy_section };

static struct policy *load(const char *text)
{
	struct policy *p = NULL;
	struct policy_diag d;
	if (policy_load_buffer("t.yaml", text, strlen(text), secs, 1, &p, &d) < 0)
		fail_msg("load: %s", d.msg);
	return p;
}

static bool allowed(const struct network_policy *np, const char *bin)
{
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup(bin);
	struct netaddr ip;
	netaddr_parse("198.51.100.7", &ip);
	struct netpolicy_decision d = netpolicy_decide(np, id, "example.org", 443, &ip);
	flow_identity_free(id);
	return d.allow;
}

static const char pol[] = "version: 1\n"
			  "network:\n"
			  "  policies:\n"
			  "    - name: py\n"
			  "      binaries:\n"
			  "        - path: /usr/bin/python3\n"
			  "        - path: /usr/bin/dangling\n"
			  "        - path: /opt/*/tool\n"
			  "      ancestors:\n"
			  "        - path: /bin/sh\n"
			  "      endpoints:\n"
			  "        - host: example.org\n"
			  "          ports: [443]\n";

static bool allowed_under_sh(const struct network_policy *np, const char *bin)
{
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup(bin);
	flow_identity_add_ancestor(id, "/usr/bin/dash", 2, NULL);
	struct netaddr ip;
	netaddr_parse("198.51.100.7", &ip);
	struct netpolicy_decision d = netpolicy_decide(np, id, "example.org", 443, &ip);
	flow_identity_free(id);
	return d.allow;
}

static void test_policy_resolution(void **state)
{
	(void)state;
	struct policy *p = load(pol);
	struct network_policy *np = policy_section_data(p, "network");
	/* before resolution: the symlink's name never is a running binary */
	assert_false(allowed_under_sh(np, "/usr/bin/python3.11"));
	size_t w0 = p->n_warnings;
	assert_int_equal(netpol_resolve_binaries(p, rootfd, "ROOT"), 0);
	assert_string_equal(np->rules[0].binaries[0].path, "/usr/bin/python3"); /* kept for display */
	assert_string_equal(np->rules[0].binaries[0].resolved, "/usr/bin/python3.11");
	assert_null(np->rules[0].binaries[1].resolved);
	assert_null(np->rules[0].binaries[2].resolved); /* a glob is not resolved */
	assert_string_equal(np->rules[0].ancestors[0].resolved, "/usr/bin/dash");
	assert_true(allowed_under_sh(np, "/usr/bin/python3.11"));
	assert_false(allowed_under_sh(np, "/usr/bin/python3.12"));
	assert_false(allowed_under_sh(np, "/usr/bin/nothing-here"));
	assert_false(allowed(np, "/usr/bin/python3.11")); /* the ancestor (sh -> dash) is still required */
	/* the dangling path: one warning, with its position, and no allow */
	assert_int_equal(p->n_warnings, w0 + 1);
	assert_non_null(strstr(p->warnings[w0], "t.yaml:7:17: binaries[1].path /usr/bin/dangling resolves "
						"to nothing in the workload's root (ROOT)"));
	/* a reload resolves again: the link now points elsewhere */
	ln("python3.12", "usr/bin/python3");
	assert_int_equal(netpol_resolve_binaries(p, rootfd, "ROOT"), 0);
	assert_true(allowed_under_sh(np, "/usr/bin/python3.12"));
	assert_false(allowed_under_sh(np, "/usr/bin/python3.11"));
	ln("python3.11", "usr/bin/python3");
	/* no root: every exact path is a warning, and only a literal match allows */
	assert_int_equal(netpol_resolve_binaries(p, -1, "nowhere"), 0);
	assert_null(np->rules[0].binaries[0].resolved);
	assert_false(allowed_under_sh(np, "/usr/bin/python3.11"));
	policy_free(p);
}

static void test_interpreter(void **state)
{
	(void)state;
	char out[PATH_MAX];
	assert_int_equal(binpath_interpreter(rootfd, "/usr/bin/pip", out, sizeof(out)), 1);
	assert_string_equal(out, "/usr/bin/python3.11");
	assert_int_equal(binpath_interpreter(rootfd, "/usr/bin/npm-cli.js", out, sizeof(out)), 1);
	assert_string_equal(out, "/usr/bin/node");
	assert_int_equal(binpath_interpreter(rootfd, "/usr/bin/tool.sh", out, sizeof(out)), 1);
	assert_string_equal(out, "/usr/bin/dash");
	assert_true(binpath_is_shell(out));
	assert_false(binpath_is_shell("/usr/bin/python3.11"));
	assert_int_equal(binpath_interpreter(rootfd, "/usr/bin/python3.11", out, sizeof(out)), 0);
	assert_int_equal(binpath_interpreter(rootfd, "/usr/bin", out, sizeof(out)), 0);
	assert_true(binpath_interpreter(rootfd, "/usr/bin/missing", out, sizeof(out)) < 0);
}

static void test_hints(void **state)
{
	(void)state;
	const struct binpath_hint *h = binpath_hint_find("/usr/bin/git", "/usr/bin/git");
	assert_non_null(h);
	assert_string_equal(h->connects, "/usr/lib/git-core/git-remote-http");
	assert_non_null(binpath_hint_find("/usr/bin/npm", NULL));
	assert_string_equal(binpath_hint_find("/usr/bin/npx", NULL)->connects, "/usr/bin/node");
	assert_non_null(binpath_hint_find("/usr/bin/pip3.11", NULL));
	assert_non_null(binpath_hint_find("/usr/bin/python3", NULL));           /* unresolved */
	assert_null(binpath_hint_find("/usr/bin/python3", "/usr/bin/python3.11")); /* resolution did it */
	assert_null(binpath_hint_find("/usr/bin/python3.11", "/usr/bin/python3.11"));
	assert_non_null(binpath_hint_find("/root/.cargo/bin/cargo", "/root/.cargo/bin/rustup"));
	assert_null(binpath_hint_find("/usr/bin/cargo", "/usr/bin/cargo")); /* Debian's connects itself */
	assert_null(binpath_hint_find("/usr/bin/curl", "/usr/bin/curl"));
	assert_null(binpath_hint_find("/usr/bin/node", "/usr/bin/node"));
	size_t n;
	const struct binpath_hint *all = binpath_hints(&n);
	assert_true(n >= 8);
	for (size_t i = 0; i < n; i++)
		assert_non_null(all[i].text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_policy_resolution),
		cmocka_unit_test(test_interpreter),
		cmocka_unit_test(test_hints),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
