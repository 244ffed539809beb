/* The env boundary's twelve verification cases (docs/environment.md), through a real spawn:
 * a minimal stand-in for the proc-supervisor's spawner (fork, then in the
 * child envb_harden_child() and execve with the envp envb_build() made).
 * The "host" environment is a constructed parent envp, never the test's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "proc-supervisor/env_broker.h"
#include "proc-supervisor/env_build.h"
#include "proc-supervisor/env_harden.h"
#include "tests/proc-supervisor/envb_test.h"

#define NOBODY 65534

struct run {
	int status;
	char out[65536];
	size_t len;
};

/* fork → (setuid) → envb_harden_child → execve; stdout captured; 10 s cap. */
static int spawn(char *const *argv, char *const *envp, const int *keep, size_t nkeep, unsigned flags,
		 uid_t uid, struct run *res)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(p[1], 1);
		if (uid != (uid_t)-1) {
			gid_t g = (gid_t)uid;
			if (setgroups(0, NULL) < 0 || setresgid(g, g, g) < 0 || setresuid(uid, uid, uid) < 0)
				_exit(126);
		}
		if (envb_harden_child(keep, nkeep, flags) < 0)
			_exit(125);
		execve(argv[0], argv, envp);
		_exit(127);
	}
	close(p[1]);
	res->len = 0;
	unsigned long long deadline = now_mono_ns() + 10ull * 1000000000ull;
	for (;;) {
		long left = (long)((deadline - now_mono_ns()) / 1000000);
		if (now_mono_ns() >= deadline) {
			kill(pid, SIGKILL);
			break;
		}
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		int pr = poll(&pf, 1, (int)left);
		if (pr <= 0)
			continue;
		ssize_t n = read(p[0], res->out + res->len, sizeof(res->out) - 1 - res->len);
		if (n <= 0)
			break;
		res->len += (size_t)n;
		if (res->len >= sizeof(res->out) - 1)
			break;
	}
	res->out[res->len] = '\0';
	close(p[0]);
	waitpid(pid, &res->status, 0);
	return 0;
}

/* Build with policy p and parent, spawn `env -0`, return the child's names. */
static size_t child_env(const struct policy *p, char *const *parent, const struct envb_extra *x,
			struct run *res, char names[][128], size_t max)
{
	struct envb_result r;
	int rc = envb_build(p, parent, x, &r);
	if (rc < 0)
		fail_msg("envb_build: %s", r.error);
	char *argv[] = { "/usr/bin/env", "-0", NULL };
	assert_int_equal(spawn(argv, r.envp, NULL, 0, 0, (uid_t)-1, res), 0);
	assert_true(WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0);
	size_t n = 0;
	for (size_t off = 0; off < res->len && n < max;) {
		const char *e = res->out + off;
		size_t l = strlen(e);
		const char *eq = strchr(e, '=');
		snprintf(names[n++], 128, "%.*s", (int)(eq ? eq - e : (long)l), e);
		off += l + 1;
	}
	/* the child saw exactly what the builder returned */
	assert_int_equal(n, r.envc);
	envb_result_done(&r);
	return n;
}

static bool has(char names[][128], size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* output contains "NAME=VALUE\0" */
static bool out_has_pair(const struct run *res, const char *pair)
{
	size_t pl = strlen(pair);
	for (size_t off = 0; off < res->len;) {
		const char *e = res->out + off;
		if (strncmp(e, pair, pl + 1) == 0)
			return true;
		off += strlen(e) + 1;
	}
	return false;
}

static char tmp[64];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p);
}
static int setup(void **state)
{
	strcpy(tmp, "/tmp/tether-envb-XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	chmod(tmp, 0755);
	return 0;
}
static int teardown(void **state)
{
	nftw(tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static void write_exec(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
}

static char *host_secrets[] = {
	"HOME=/root", "PATH=/usr/bin:/bin", "USER=root", "LANG=C.UTF-8", "TERM=xterm",
	"GH_TOKEN=ghp_hostsecret0001", "AWS_SECRET_ACCESS_KEY=hostsecret0002", "OPENAI_API_KEY=sk-hostsecret0003",
	"TETHER_FAKE=spoof", "TETHER_SESSION_ID=spoofed-session", "SSH_AUTH_SOCK=/tmp/ssh-agent.sock",
	"DATABASE_PASSWORD=hostsecret0004", "FOO=bar", NULL,
};

/* 1. child prints env -0: only allowed names; no host secrets; no parent TETHER_*. */
static void test_01_env0_only_allowed_names(void **state)
{
	struct policy *p = mkpol(NULL, NULL, NULL, NULL);
	const char *vars[] = { "TETHER_SESSION_ID=real-session" };
	struct envb_extra x = { .cwd = "/", .vars = vars, .n_vars = 1 };
	struct run res;
	char names[64][128];
	size_t n = child_env(p, host_secrets, &x, &res, names, 64);
	static const char *const allowed[] = { "HOME", "PATH", "USER", "LANG", "TERM", "PWD", "SHELL",
					       "TETHER_SESSION_ID" };
	for (size_t i = 0; i < n; i++) {
		bool ok = false;
		for (size_t k = 0; k < sizeof(allowed) / sizeof(*allowed); k++)
			ok |= strcmp(names[i], allowed[k]) == 0;
		if (!ok)
			fail_msg("child has unexpected variable %s", names[i]);
	}
	assert_true(has(names, n, "HOME") && has(names, n, "PATH"));
	assert_false(has(names, n, "TETHER_FAKE"));
	assert_true(out_has_pair(&res, "TETHER_SESSION_ID=real-session"));
	assert_null(memmem(res.out, res.len, "spoof", 5));
	assert_null(memmem(res.out, res.len, "hostsecret", 10));
	assert_null(memmem(res.out, res.len, "ssh-agent", 9));
	policy_free(p);
}

/* 2. PATH has no empty/./../relative/missing entries, order kept, writable dirs reported. */
static void test_02_path_sanitized(void **state)
{
	char w[128], parent_path[512];
	snprintf(w, sizeof(w), "%s/wdir", tmp);
	mkdir(w, 0777);
	chmod(w, 0777);
	snprintf(parent_path, sizeof(parent_path), "PATH=/usr/bin::.:..:rel/bin:/nonexistent-dir:%s:/bin:/usr/bin/../sbin", w);
	char *parent[] = { parent_path, NULL };
	struct policy *p = mkpol(NULL, NULL, NULL, NULL);
	struct envb_result r;
	assert_int_equal(envb_build(p, parent, NULL, &r), 0);
	char *argv[] = { "/bin/sh", "-c", "printf %s \"$PATH\"", NULL };
	struct run res;
	assert_int_equal(spawn(argv, r.envp, NULL, 0, 0, (uid_t)-1, &res), 0);
	char want[256];
	snprintf(want, sizeof(want), "/usr/bin:%s:/bin", w);
	assert_string_equal(res.out, want);
	/* every entry absolute, existing, no . or .. components */
	char *save, *dup = strdup(res.out);
	for (char *e = strtok_r(dup, ":", &save); e; e = strtok_r(NULL, ":", &save)) {
		struct stat st;
		assert_true(e[0] == '/');
		assert_null(strstr(e, "/."));
		assert_int_equal(stat(e, &st), 0);
	}
	free(dup);
	assert_int_equal(r.n_path_writable, 1);
	assert_string_equal(r.path_writable[0], w);
	json_t *j = envb_audit_json(&r);
	char *s = json_dumps(j, JSON_COMPACT);
	assert_non_null(strstr(s, "\"path_rewritten\":true"));
	assert_non_null(strstr(s, "\"path_dropped\":[\"\",\".\",\"..\",\"rel/bin\",\"/nonexistent-dir\",\"/usr/bin/../sbin\"]"));
	free(s);
	json_decref(j);
	envb_result_done(&r);
	policy_free(p);
}

/* 3. another sandbox process cannot read the supervisor's /proc/<pid>/environ.
 * The stand-in supervisor and the sandboxed reader share uid 65534 (the
 * worst case: same uid, same pid namespace). With PR_SET_DUMPABLE 0
 * (envb_protect_supervisor) the reader is refused; the control run with
 * dumpable 1 shows the reader really could read it otherwise. */
static void standin_run(bool protect, pid_t *out)
{
	int ready[2];
	assert_int_equal(pipe(ready), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(ready[0]);
		if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
		    setresuid(NOBODY, NOBODY, NOBODY) < 0)
			_exit(1);
		if (protect ? envb_protect_supervisor() < 0 : prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
			_exit(1);
		alarm(20);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	char c;
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	*out = pid;
}

static void test_03_supervisor_environ_unreadable(void **state)
{
	struct policy *p = mkpol(NULL, NULL, NULL, NULL);
	struct envb_result r;
	char *parent[] = { "PATH=/usr/bin:/bin", NULL };
	assert_int_equal(envb_build(p, parent, NULL, &r), 0);
	for (int protect = 0; protect <= 1; protect++) {
		pid_t sup;
		standin_run(protect, &sup);
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "cat /proc/%d/environ 2>/dev/null | wc -c", (int)sup);
		char *argv[] = { "/bin/sh", "-c", cmd, NULL };
		struct run res;
		assert_int_equal(spawn(argv, r.envp, NULL, 0, 0, NOBODY, &res), 0);
		kill(sup, SIGKILL);
		waitpid(sup, NULL, 0);
		long bytes = strtol(res.out, NULL, 10);
		if (protect)
			assert_int_equal(bytes, 0);
		else
			assert_true(bytes > 0); /* control: the test can fail */
	}
	envb_result_done(&r);
	policy_free(p);
}

/* 4. BASH_ENV=/tmp/evil and ZDOTDIR= in the parent: a sh -c child never runs the marker. */
static void test_04_bash_env_zdotdir_no_marker(void **state)
{
	char evil[128], marker[128], zdot[128], script[256], be[160], en[160], zd[160];
	snprintf(evil, sizeof(evil), "%s/evil.sh", tmp);
	snprintf(marker, sizeof(marker), "%s/marker", tmp);
	snprintf(zdot, sizeof(zdot), "%s/zdot", tmp);
	mkdir(zdot, 0755);
	snprintf(script, sizeof(script), "touch %s\n", marker);
	write_exec(evil, script, 0755);
	char zshenv[160];
	snprintf(zshenv, sizeof(zshenv), "%s/.zshenv", zdot);
	write_exec(zshenv, script, 0644);
	snprintf(be, sizeof(be), "BASH_ENV=%s", evil);
	snprintf(en, sizeof(en), "ENV=%s", evil);
	snprintf(zd, sizeof(zd), "ZDOTDIR=%s", zdot);
	char *parent[] = { be, en, zd, "PATH=/usr/bin:/bin", "HOME=/root", NULL };
	char *shells[][5] = {
		{ "/bin/bash", "-c", "true", NULL },
		{ "/bin/sh", "-c", "true", NULL },
		{ "/bin/sh", "-i", "-c", "true", NULL }, /* interactive sh reads $ENV */
	};
	/* control: with the raw parent environment bash does run the file */
	struct run res;
	assert_int_equal(spawn(shells[0], parent, NULL, 0, 0, (uid_t)-1, &res), 0);
	assert_int_equal(access(marker, F_OK), 0);
	unlink(marker);

	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [BASH_ENV, ENV, ZDOTDIR]\n", NULL, NULL);
	struct envb_result r;
	assert_int_equal(envb_build(p, parent, NULL, &r), 0);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(spawn(shells[i], r.envp, NULL, 0, 0, (uid_t)-1, &res), 0);
		if (access(marker, F_OK) == 0)
			fail_msg("%s %s ran the startup file", shells[i][0], shells[i][1]);
	}
	assert_null(envp_get(r.envp, "BASH_ENV"));
	assert_null(envp_get(r.envp, "ENV"));
	assert_null(envp_get(r.envp, "ZDOTDIR"));
	envb_result_done(&r);
	policy_free(p);
}

/* 5. LD_PRELOAD, PYTHONPATH, NODE_OPTIONS=--require … are not inherited even
 * when a project layer lists them in pass_through. */
static void test_05_loader_vars_not_inherited(void **state)
{
	char *parent[] = { "LD_PRELOAD=/tmp/evil.so", "PYTHONPATH=/tmp/evilpy", "NODE_OPTIONS=--require /tmp/evil.js",
			   "LD_AUDIT=/tmp/evil.so", "PYTHONSTARTUP=/tmp/x.py", "PATH=/usr/bin:/bin", NULL };
	struct policy *p = mkpol(NULL,
				 "version: 1\nenvironment:\n  pass_through: [LD_PRELOAD, PYTHONPATH, NODE_OPTIONS, LD_AUDIT, PYTHONSTARTUP, \"LD_*\"]\n",
				 NULL, "version: 1\nenvironment:\n  pass_through: [LD_PRELOAD]\n");
	struct run res;
	char names[64][128];
	size_t n = child_env(p, parent, NULL, &res, names, 64);
	static const char *const bad[] = { "LD_PRELOAD", "PYTHONPATH", "NODE_OPTIONS", "LD_AUDIT", "PYTHONSTARTUP" };
	for (size_t i = 0; i < 5; i++)
		assert_false(has(names, n, bad[i]));
	assert_null(memmem(res.out, res.len, "/tmp/evil", 9));
	policy_free(p);
}

/* 6. AWS_SECRET_ACCESS_KEY, GH_TOKEN never reach the child in any profile
 * unless explicitly passed. */
static void test_06_host_secrets_never_reach_child(void **state)
{
	static const char *const agents[] = { NULL, "claude", "codex", "opencode", "aider", "gemini" };
	static const char *const modes[] = { "sanitized", "explicit", "baseline", "secrets-off" };
	for (size_t a = 0; a < 6; a++)
		for (size_t m = 0; m < 4; m++) {
			char cmd[128];
			snprintf(cmd, sizeof(cmd), "version: 1\nenvironment:\n  mode: %s\n  pass_through: [\"GH_*\", \"AWS_*\"]\n", modes[m]);
			struct policy *p = mkpol(NULL, NULL, agents[a], cmd);
			struct run res;
			char names[64][128];
			size_t n = child_env(p, host_secrets, NULL, &res, names, 64);
			if (has(names, n, "AWS_SECRET_ACCESS_KEY") || has(names, n, "GH_TOKEN"))
				fail_msg("secret reached the child (agent %s, mode %s)", agents[a] ? agents[a] : "-", modes[m]);
			assert_null(memmem(res.out, res.len, "hostsecret0001", 14));
			assert_null(memmem(res.out, res.len, "hostsecret0002", 14));
			assert_null(memmem(res.out, res.len, "hostsecret0004", 14)); /* DATABASE_PASSWORD */
			policy_free(p);
		}
	/* explicitly named: passes (sanitized) */
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [GH_TOKEN]\n", NULL, NULL);
	struct run res;
	char names[64][128];
	child_env(p, host_secrets, NULL, &res, names, 64);
	assert_true(out_has_pair(&res, "GH_TOKEN=ghp_hostsecret0001"));
	policy_free(p);
}

/* 7. an agent preset passes its API key; secrets-off removes it. */
static void test_07_agent_key_and_secrets_off(void **state)
{
	char *parent[] = { "ANTHROPIC_API_KEY=sk-ant-test-7", "PATH=/usr/bin:/bin", "HOME=/root", NULL };
	struct run res;
	char names[64][128];
	struct policy *p = mkpol(NULL, NULL, "claude", NULL);
	child_env(p, parent, NULL, &res, names, 64);
	assert_true(out_has_pair(&res, "ANTHROPIC_API_KEY=sk-ant-test-7"));
	policy_free(p);
	p = mkpol(NULL, NULL, "claude", "version: 1\nenvironment:\n  mode: baseline\n");
	child_env(p, parent, NULL, &res, names, 64);
	assert_true(out_has_pair(&res, "ANTHROPIC_API_KEY=sk-ant-test-7"));
	policy_free(p);
	p = mkpol(NULL, NULL, "claude", "version: 1\nenvironment:\n  mode: secrets-off\n");
	size_t n = child_env(p, parent, NULL, &res, names, 64);
	assert_false(has(names, n, "ANTHROPIC_API_KEY"));
	assert_true(has(names, n, "HOME"));
	assert_null(memmem(res.out, res.len, "sk-ant", 6));
	policy_free(p);
}

/* 8. immutable system layer + project pass_through: [AWS_SECRET_ACCESS_KEY] → load error. */
static void test_08_immutable_lockdown_error(void **state)
{
	char err[1024];
	struct policy *p = mkpol_full("version: 1\nimmutable: true\n",
				      "version: 1\nenvironment:\n  pass_through: [AWS_SECRET_ACCESS_KEY]\n", NULL, NULL,
				      err, sizeof(err));
	assert_null(p);
	assert_string_equal(err,
			    "proj.yaml:3:18: policy lockdown violation: the project layer adds secret-shaped 'AWS_SECRET_ACCESS_KEY' to environment.pass_through, but the system policy is immutable");
}

/* 9. lowercase aws_secret_access_key is denied by deny: [AWS_SECRET*]. */
static void test_09_lowercase_secret_denied(void **state)
{
	char *parent[] = { "aws_secret_access_key=lowersecret9", "PATH=/usr/bin:/bin", NULL };
	struct run res;
	char names[64][128];
	/* control: named in pass_through and not denied, it passes */
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  pass_through: [aws_secret_access_key]\n", NULL, NULL);
	child_env(p, parent, NULL, &res, names, 64);
	assert_true(out_has_pair(&res, "aws_secret_access_key=lowersecret9"));
	policy_free(p);
	p = mkpol("version: 1\nenvironment:\n  deny: [\"AWS_SECRET*\"]\n",
		  "version: 1\nenvironment:\n  pass_through: [aws_secret_access_key]\n", NULL, NULL);
	size_t n = child_env(p, parent, NULL, &res, names, 64);
	assert_false(has(names, n, "aws_secret_access_key"));
	assert_null(memmem(res.out, res.len, "lowersecret9", 12));
	policy_free(p);
}

/* 10. --dry-run -- tool --api-key=sk-test123 prints [REDACTED], never the value. */
static void test_10_dry_run_redacts_api_key(void **state)
{
	struct policy *p = mkpol(NULL, NULL, NULL, NULL);
	struct envb_result r;
	char *parent[] = { "PATH=/usr/bin:/bin", "OPENAI_API_KEY=sk-envsecret", NULL };
	assert_int_equal(envb_build(p, parent, NULL, &r), 0);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	char *argv[] = { "tool", "--api-key=sk-test123", "--token", "tok-value", NULL };
	envb_dry_run_print(f, &r, argv);
	fclose(f);
	assert_non_null(strstr(buf, "command: tool --api-key=[REDACTED] --token [REDACTED]\n"));
	assert_null(strstr(buf, "sk-test123"));
	assert_null(strstr(buf, "tok-value"));
	assert_null(strstr(buf, "sk-envsecret"));
	assert_non_null(strstr(buf, "dropped OPENAI_API_KEY"));
	free(buf);
	envb_result_done(&r);
	policy_free(p);
}

/* 11. a writable directory with a fake ls first in PATH is reported; under
 * path_strict the spawn is refused and the fake never runs. */
static void test_11_writable_fake_ls(void **state)
{
	char fake[128], ls[160], marker[128], script[256], pathv[256];
	snprintf(fake, sizeof(fake), "%s/fakebin", tmp);
	mkdir(fake, 0777);
	chmod(fake, 0777);
	snprintf(ls, sizeof(ls), "%s/ls", fake);
	snprintf(marker, sizeof(marker), "%s/pwned", tmp);
	snprintf(script, sizeof(script), "#!/bin/sh\ntouch %s\n", marker);
	write_exec(ls, script, 0755);
	snprintf(pathv, sizeof(pathv), "PATH=%s:/usr/bin:/bin", fake);
	char *parent[] = { pathv, NULL };
	char *argv[] = { "/bin/sh", "-c", "ls / >/dev/null", NULL };

	struct policy *p = mkpol(NULL, NULL, NULL, NULL);
	struct envb_result r;
	assert_int_equal(envb_build(p, parent, NULL, &r), 0);
	assert_int_equal(r.n_path_writable, 1);
	assert_string_equal(r.path_writable[0], fake);
	bool warned = false;
	for (size_t i = 0; i < r.n_warnings; i++)
		warned |= strstr(r.warnings[i], fake) && strstr(r.warnings[i], "world-writable");
	assert_true(warned);
	envb_result_done(&r);
	policy_free(p);

	p = mkpol(NULL, NULL, NULL, "version: 1\nenvironment:\n  path_strict: true\n");
	int rc = envb_build(p, parent, NULL, &r);
	assert_int_equal(rc, -EPERM);
	assert_non_null(strstr(r.error, fake));
	if (rc == 0) { /* a spawner spawns only on success */
		struct run res;
		spawn(argv, r.envp, NULL, 0, 0, (uid_t)-1, &res);
	}
	assert_int_not_equal(access(marker, F_OK), 0);
	envb_result_done(&r);
	policy_free(p);
}

/* 12. the credential-broker socket (when enabled) is mode 0600 with a random name. */
static void test_12_broker_socket_0600_random(void **state)
{
	char rt[128];
	snprintf(rt, sizeof(rt), "%s/run", tmp);
	mkdir(rt, 0755);
	struct policy *p = mkpol(NULL, "version: 1\nenvironment:\n  broker: true\n", NULL, NULL);
	struct envb_broker a, b;
	assert_int_equal(envb_broker_open(p, rt, (uid_t)-1, (gid_t)-1, &a), 0);
	assert_int_equal(envb_broker_open(p, rt, (uid_t)-1, (gid_t)-1, &b), 0);
	assert_true(a.fd >= 0 && b.fd >= 0);
	struct stat st;
	assert_int_equal(stat(a.path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(stat(a.dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	const char *base = strrchr(a.path, '/') + 1;
	assert_int_equal(strlen(base), strlen("cred-") + 32 + strlen(".sock"));
	assert_int_equal(strncmp(base, "cred-", 5), 0);
	for (size_t i = 5; i < 37; i++)
		assert_non_null(strchr("0123456789abcdef", base[i]));
	assert_string_equal(base + 37, ".sock");
	assert_string_not_equal(a.path, b.path);
	assert_string_not_equal(strrchr(a.path, '/'), strrchr(b.path, '/'));
	/* a client can connect */
	int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, a.path);
	assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(c);
	/* the child gets the path */
	char *parent[] = { "PATH=/usr/bin:/bin", "TETHER_CREDENTIAL_SOCKET=/spoofed", NULL };
	struct envb_extra x = { .credential_socket = a.path };
	struct run res;
	char names[64][128];
	child_env(p, parent, &x, &res, names, 64);
	char pair[200];
	snprintf(pair, sizeof(pair), "TETHER_CREDENTIAL_SOCKET=%s", a.path);
	assert_true(out_has_pair(&res, pair));
	assert_null(memmem(res.out, res.len, "/spoofed", 8));
	char dir[108];
	strcpy(dir, a.dir);
	char path[108];
	strcpy(path, a.path);
	envb_broker_close(&a);
	envb_broker_close(&b);
	assert_int_not_equal(access(path, F_OK), 0);
	assert_int_not_equal(access(dir, F_OK), 0);
	policy_free(p);

	/* secrets-off: no socket, no directory, no variable */
	p = mkpol(NULL, "version: 1\nenvironment:\n  broker: true\n  mode: secrets-off\n", NULL, NULL);
	assert_int_equal(envb_broker_open(p, rt, (uid_t)-1, (gid_t)-1, &a), 0);
	assert_int_equal(a.fd, -1);
	DIR *d = opendir(rt);
	struct dirent *de;
	size_t entries = 0;
	while ((de = readdir(d)))
		entries += de->d_name[0] != '.';
	closedir(d);
	assert_int_equal(entries, 0);
	x.credential_socket = "/run/x/cred.sock";
	size_t n = child_env(p, parent, &x, &res, names, 64);
	assert_false(has(names, n, "TETHER_CREDENTIAL_SOCKET"));
	policy_free(p);
	/* not enabled: nothing either */
	p = mkpol(NULL, NULL, NULL, NULL);
	assert_int_equal(envb_broker_open(p, rt, (uid_t)-1, (gid_t)-1, &a), 0);
	assert_int_equal(a.fd, -1);
	policy_free(p);
}

/* Hardening hooks: RLIMIT_CORE=0 and only 0-2 plus the kept fd survive,
 * with close_range and with both fallbacks. */
static void test_harden_core_and_fds(void **state)
{
	int devnull = open("/dev/null", O_RDONLY); /* not CLOEXEC: must still be closed */
	assert_true(devnull >= 0);
	assert_int_equal(dup2(devnull, 50), 50);
	assert_int_equal(dup3(devnull, 51, O_CLOEXEC), 51); /* kept: CLOEXEC must be cleared */
	int keep[] = { 51 };
	char *env[] = { "PATH=/usr/bin:/bin", NULL };
	char *argv[] = { "/bin/sh", "-c",
			 "ulimit -c; [ -e /proc/self/fd/50 ] && echo open50; [ -e /proc/self/fd/51 ] && echo open51; "
			 "[ -e /proc/self/fd/3 ] && echo open3; true",
			 NULL };
	unsigned flags[] = { 0, ENVB_HARDEN_FORCE_FDWALK, ENVB_HARDEN_FORCE_BRUTE };
	for (size_t i = 0; i < 3; i++) {
		struct run res;
		assert_int_equal(spawn(argv, env, keep, 1, flags[i] | ENVB_HARDEN_NO_NEW_PRIVS, (uid_t)-1, &res), 0);
		assert_true(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0);
		if (strcmp(res.out, "0\nopen51\n") != 0)
			fail_msg("flags %u: child saw '%s'", flags[i], res.out);
	}
	close(50);
	close(51);
	close(devnull);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_envb_verify needs root (uid switches); skipping\n");
		return 0;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_01_env0_only_allowed_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_02_path_sanitized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_03_supervisor_environ_unreadable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_04_bash_env_zdotdir_no_marker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_05_loader_vars_not_inherited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_06_host_secrets_never_reach_child, setup, teardown),
		cmocka_unit_test_setup_teardown(test_07_agent_key_and_secrets_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_08_immutable_lockdown_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_09_lowercase_secret_denied, setup, teardown),
		cmocka_unit_test_setup_teardown(test_10_dry_run_redacts_api_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_11_writable_fake_ls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_12_broker_socket_0600_random, setup, teardown),
		cmocka_unit_test_setup_teardown(test_harden_core_and_fds, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
