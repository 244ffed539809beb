/* The env boundary builder. See env_build.h for the order of checks; the
 * tables below are the hard-deny list (docs/environment.md explains
 * each group). */
#include "proc-supervisor/env_build.h"

#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "policy/credentials.h"
#include "policy/trust_bundle.h"
#include "proc-supervisor/env_redact.h"

/* Matched case-insensitively; a trailing '*' is a prefix match. */
static const char *const hard_deny[] = {
	/* dynamic-loader code injection */
	"LD_*", "_RLD*", "LDR_*", "LIBPATH", "SHLIB_PATH", "DYLD_*",
	/* glibc loads attacker files / parser bugs */
	"GLIBC_TUNABLES", "MALLOC_TRACE", "GCONV_PATH", "LOCPATH", "NLSPATH", "PATH_LOCALE",
	"GETCONF_DIR",
	/* name-resolution redirection */
	"HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "RESOLV_HOST_CONF", "NIS_PATH",
	/* tzdata file swap */
	"TZDIR",
	/* code at every sh -c */
	"BASH_ENV", "ENV", "ZDOTDIR", "FPATH", "PS4", "SHELLOPTS", "BASHOPTS", "GLOBIGNORE", "IFS",
	"CDPATH", "NULLCMD", "READNULLCMD", "TMPPREFIX", "BASH_FUNC_*", "PROMPT_COMMAND",
	/* interpreter preload: a runtime loads code the exe hash never saw
	 * (docs/environment.md, "Runtime code loading", lists the source of each) */
	"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONUSERBASE",
	"PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONPYCACHEPREFIX", "PYTHONPLATLIBDIR",
	"NODE_OPTIONS", "NODE_REPL_EXTERNAL_MODULE", "ELECTRON_RUN_AS_NODE", "NPM_CONFIG_NODE_OPTIONS",
	"BUN_OPTIONS", "BUN_INSPECT*", "BUN_BE_BUN",
	"PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "PERLDB_OPTS", "PERLIO_DEBUG",
	"RUBYOPT", "RUBYLIB", "RUBYPATH",
	"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
	"DOTNET_STARTUP_HOOKS", "DOTNET_ADDITIONAL_DEPS", "DOTNET_SHARED_STORE", "CORECLR_*",
	"COR_ENABLE_PROFILING", "COR_PROFILER*", "DOTNET_DIAGNOSTICPORTS", "COMPLUS_DIAGNOSTICPORTS",
	"DOTNET_GCNAME", "COMPLUS_GCNAME", "DOTNET_GCPATH", "COMPLUS_GCPATH", "DOTNET_ALTJIT*",
	"COMPLUS_ALTJIT*", "DOTNET_JITNAME", "COMPLUS_JITNAME", "DOTNET_JITPATH", "COMPLUS_JITPATH",
	"LUA_INIT*", "LUA_PATH*", "LUA_CPATH*",
	"PHPRC", "PHP_INI_SCAN_DIR",
	"R_PROFILE*", "R_ENVIRON*", "R_LIBS*",
	/* git config / ssh injection past file denies */
	"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_*", "GIT_CONFIG_VALUE_*", "GIT_CONFIG_PARAMETERS",
	"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_DIR",
	"GIT_WORK_TREE", "GIT_EXEC_PATH", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND",
	"GIT_EXTERNAL_DIFF",
	/* terminal parsers load attacker files */
	"TERMINFO", "TERMINFO_DIRS", "TERMCAP", "TERMPATH",
	/* config/keytab swap, TLS key exfiltration */
	"KRB5_CONFIG*", "KRB5_KTNAME", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES",
	"SSLKEYLOGFILE",
	/* handles to host capabilities */
	"SSH_AUTH_SOCK", "SSH_AGENT_PID", "DBUS_SESSION_BUS_ADDRESS", "XAUTHORITY",
};

/* Names whose value the supervisor decides; the parent's is never used.
 * PATH and TMPDIR are handled on their own (the parent value is an input). */
static const char *const supervisor_owned[] = {
	"PWD", "OLDPWD", "SHELL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY",
	"RSYNC_PROXY", "GIT_SSH_COMMAND",
};

/* Toolchain locations: allowed only when named exactly in pass_through. */
static const char *const toolchain[] = {
	"NODE_PATH", "CARGO_HOME", "RUSTUP_HOME", "NVM_DIR", "DENO_DIR", "GEM_HOME", "GEM_PATH", "CLASSPATH",
	"DOTNET_ROOT",
};

#define DEFAULT_PATH_INPUT "/usr/local/bin:/usr/bin:/bin"
#define EMPTY_PATH_RESULT "/usr/bin:/bin"
#define DEFAULT_NO_PROXY "localhost,127.0.0.1,::1"

static bool in_table(const char *const *t, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (policy_pattern_match(t[i], name, true))
			return true;
	return false;
}

bool envb_hard_denied(const char *name)
{
	return in_table(hard_deny, ARRAY_SIZE(hard_deny), name);
}

static bool supervisor_owns(const char *name)
{
	return in_table(supervisor_owned, ARRAY_SIZE(supervisor_owned), name);
}

static bool is_toolchain(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(toolchain); i++)
		if (strcmp(toolchain[i], name) == 0)
			return true;
	return false;
}

bool envb_tz_ok(const char *v)
{
	/* sudo's tz_is_safe(): an optional ':' then a name or a path under the
	 * zoneinfo directory; no "..", nothing unprintable, bounded. */
	if (*v == ':')
		v++;
	size_t n = strlen(v);
	if (n == 0 || n >= 256)
		return n == 0;
	if (v[0] == '/' && strncmp(v, "/usr/share/zoneinfo/", 20) != 0)
		return false;
	for (const char *c = v; *c; c++) {
		if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
			return false;
		if (c[0] == '.' && c[1] == '.' && (c == v || c[-1] == '/') && (c[2] == '/' || !c[2]))
			return false;
	}
	return true;
}

bool envb_value_ok(const char *name, const char *value)
{
	/* bash imports functions from values like "() { ...": never. */
	if (strncmp(value, "() {", 4) == 0)
		return false;
	if (strcmp(name, "LANG") == 0 || strcmp(name, "LANGUAGE") == 0 || strncmp(name, "LC_", 3) == 0 ||
	    strcmp(name, "TERM") == 0 || strcmp(name, "COLORTERM") == 0)
		return !strchr(value, '/') && !strchr(value, '%');
	if (strcmp(name, "TZ") == 0)
		return envb_tz_ok(value);
	return true;
}

static bool name_valid(const char *s, size_t len)
{
	if (len == 0 || len > 255)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (i > 0 && c >= '0' && c <= '9');
		if (!ok)
			return false;
	}
	return true;
}

/* ── small owned lists ──────────────────────────────────────────────────── */

static int strv_push(char ***v, size_t *n, char *s)
{
	if (!s)
		return -ENOMEM;
	char **nv = realloc(*v, (*n + 2) * sizeof(**v));
	if (!nv) {
		free(s);
		return -ENOMEM;
	}
	*v = nv;
	nv[(*n)++] = s;
	nv[*n] = NULL;
	return 0;
}

__attribute__((format(printf, 2, 3))) static int warn(struct envb_result *r, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -ENOMEM;
	return strv_push(&r->warnings, &r->n_warnings, s);
}

static int entry_push(struct envb_entry **v, size_t *n, const char *name, size_t len, bool kept,
		      enum reason why)
{
	struct envb_entry *nv = realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv)
		return -ENOMEM;
	*v = nv;
	char *s = malloc(len + 1);
	if (!s)
		return -ENOMEM;
	/* Names are printed and audited: make invalid ones harmless. */
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		s[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
	}
	s[len] = '\0';
	nv[(*n)++] = (struct envb_entry){ .name = s, .kept = kept, .reason = kept ? REASON_ALLOWED : why };
	return 0;
}

/* Insert or replace NAME=VALUE in the child's env. */
static int env_put(struct envb_result *r, const char *name, const char *value)
{
	char *s = NULL;
	if (asprintf(&s, "%s=%s", name, value) < 0)
		return -ENOMEM;
	size_t nl = strlen(name);
	for (size_t i = 0; i < r->envc; i++)
		if (strncmp(r->envp[i], name, nl) == 0 && r->envp[i][nl] == '=') {
			free(r->envp[i]);
			r->envp[i] = s;
			return 0;
		}
	return strv_push(&r->envp, &r->envc, s);
}

static int env_put_cb(void *r, const char *name, const char *value)
{
	return env_put(r, name, value);
}

static const char *env_get(const struct envb_result *r, const char *name)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i < r->envc; i++)
		if (strncmp(r->envp[i], name, nl) == 0 && r->envp[i][nl] == '=')
			return r->envp[i] + nl + 1;
	return NULL;
}

void envb_result_done(struct envb_result *r)
{
	for (size_t i = 0; i < r->envc; i++)
		free(r->envp[i]);
	free(r->envp);
	for (size_t i = 0; i < r->n_parent; i++)
		free(r->parent[i].name);
	free(r->parent);
	for (size_t i = 0; i < r->n_set; i++)
		free(r->set[i].name);
	free(r->set);
	free(r->path);
	for (size_t i = 0; i < r->n_path_dropped; i++)
		free(r->path_dropped[i].entry);
	free(r->path_dropped);
	for (size_t i = 0; i < r->n_path_writable; i++)
		free(r->path_writable[i]);
	free(r->path_writable);
	for (size_t i = 0; i < r->n_warnings; i++)
		free(r->warnings[i]);
	free(r->warnings);
	memset(r, 0, sizeof(*r));
}

/* ── PATH ───────────────────────────────────────────────────────────────── */

static int path_drop(struct envb_result *r, const char *e, size_t len, const char *why)
{
	struct envb_path_drop *nv = realloc(r->path_dropped, (r->n_path_dropped + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	r->path_dropped = nv;
	char *s = strndup(e, len);
	if (!s)
		return -ENOMEM;
	nv[r->n_path_dropped++] = (struct envb_path_drop){ .entry = s, .why = why };
	return 0;
}

static const char *classify_entry(const char *e, size_t len)
{
	if (len == 0)
		return "empty";
	if (e[0] != '/')
		return (len == 1 && e[0] == '.') ? "dot" : (len == 2 && e[0] == '.' && e[1] == '.') ? "dotdot"
												       : "relative";
	for (size_t i = 0; i < len;) {
		while (i < len && e[i] == '/')
			i++;
		size_t j = i;
		while (j < len && e[j] != '/')
			j++;
		if (j - i == 1 && e[i] == '.')
			return "dot";
		if (j - i == 2 && e[i] == '.' && e[i + 1] == '.')
			return "dotdot";
		i = j;
	}
	return NULL;
}

char *envb_sanitize_path(const char *path, const char *root, struct envb_result *r)
{
	char *out = NULL;
	size_t olen = 0;
	const char *p = path;
	for (;;) {
		const char *end = strchr(p, ':');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *why = classify_entry(p, len);
		char full[8192];
		struct stat st;
		if (!why && len >= 4096)
			why = "relative"; /* cannot be a real directory */
		if (!why) {
			snprintf(full, sizeof(full), "%s%.*s", root ? root : "", (int)len, p);
			if (stat(full, &st) < 0)
				why = "missing";
			else if (!S_ISDIR(st.st_mode))
				why = "not_directory";
		}
		if (!why && out) {
			/* a repeat adds nothing and only lengthens the search */
			for (const char *q = out; q && *q;) {
				const char *qe = strchr(q, ':');
				size_t ql = qe ? (size_t)(qe - q) : strlen(q);
				if (ql == len && memcmp(q, p, len) == 0)
					why = "duplicate";
				q = qe ? qe + 1 : NULL;
			}
		}
		if (why) {
			if (path_drop(r, p, len, why) < 0)
				goto oom;
		} else {
			if (st.st_mode & (S_IWGRP | S_IWOTH)) {
				if (strv_push(&r->path_writable, &r->n_path_writable, strndup(p, len)) < 0)
					goto oom;
				if (warn(r, "PATH entry %.*s is %s-writable: a program placed there can shadow system tools",
					 (int)len, p, (st.st_mode & S_IWOTH) ? "world" : "group") < 0)
					goto oom;
			}
			char *n = realloc(out, olen + len + 2);
			if (!n)
				goto oom;
			out = n;
			if (olen)
				out[olen++] = ':';
			memcpy(out + olen, p, len);
			olen += len;
			out[olen] = '\0';
		}
		if (!end)
			break;
		p = end + 1;
	}
	if (!out)
		return strdup(EMPTY_PATH_RESULT);
	return out;
oom:
	free(out);
	return NULL;
}

/* ── the builder ────────────────────────────────────────────────────────── */

struct match {
	bool allowed;
	const struct policy_name *rule; /* the exact rule if any, else the first wildcard */
	bool exact;          /* matched by a name, not a wildcard */
	bool exact_pass;     /* matched by name in pass_through (not the baseline) */
};

static bool layer_counts(enum policy_env_mode mode, enum policy_layer l)
{
	switch (mode) {
	case POLICY_ENV_EXPLICIT:
		return l == POLICY_LAYER_PROJECT || l == POLICY_LAYER_COMMAND;
	case POLICY_ENV_BASELINE:
	case POLICY_ENV_SECRETS_OFF:
		return l == POLICY_LAYER_AGENT;
	default:
		return true;
	}
}

static void match_names(const struct policy_names *ns, const char *name, enum policy_env_mode mode,
			bool baseline, struct match *m)
{
	for (size_t i = 0; i < ns->n; i++) {
		const struct policy_name *pn = &ns->v[i];
		if (!baseline && !layer_counts(mode, pn->layer))
			continue;
		if (!policy_pattern_match(pn->pattern, name, false))
			continue;
		m->allowed = true;
		if (!m->rule)
			m->rule = pn;
		if (!strchr(pn->pattern, '*')) {
			if (!m->exact)
				m->rule = pn;
			m->exact = true;
			if (!baseline)
				m->exact_pass = true;
		}
	}
}

static struct match allow_match(const struct policy_env *env, const char *name)
{
	struct match m = { 0 };
	if (env->mode != POLICY_ENV_EXPLICIT)
		match_names(&env->baseline, name, env->mode, true, &m);
	match_names(&env->pass_through, name, env->mode, false, &m);
	return m;
}

static const struct policy_name *denied_by_policy(const struct policy_env *env, const char *name)
{
	for (size_t i = 0; i < env->deny.n; i++)
		if (policy_pattern_match(env->deny.v[i].pattern, name, true))
			return &env->deny.v[i];
	return NULL;
}

/* Decide one parent variable; *path_in / *tmpdir_in receive PATH and TMPDIR
 * values that the supervisor then rewrites. */
static enum reason decide(const struct policy *p, const char *name, const char *value,
			  bool *warned_toolchain, const struct policy_name **rule)
{
	const struct policy_env *env = &p->env;
	if (strncasecmp(name, "TETHER_", 7) == 0)
		return REASON_TETHER_RESERVED;
	if (envb_hard_denied(name))
		return REASON_HARD_DENY;
	if ((*rule = denied_by_policy(env, name)))
		return REASON_POLICY_DENY;
	if (strncmp(value, "() {", 4) == 0)
		return REASON_VALUE_CHECK;
	if (supervisor_owns(name) || (env->trust_bundle && trust_bundle_var(name)) ||
	    credential_for_variable(policy_section_data(p, "credentials"), name))
		return REASON_SUPERVISOR_SET;
	struct match m = allow_match(env, name);
	*rule = m.rule;
	if (!m.allowed)
		return REASON_NOT_ALLOWED;
	if (is_toolchain(name)) {
		if (!m.exact_pass)
			return REASON_NOT_ALLOWED;
		*warned_toolchain = true;
	}
	if (policy_name_secret_shaped(name) && (env->mode == POLICY_ENV_SECRETS_OFF || !m.exact))
		return REASON_SECRET_SHAPED;
	if (!envb_value_ok(name, value))
		return REASON_VALUE_CHECK;
	return REASON_ALLOWED;
}

static bool extra_key_allowed(const char *name)
{
	return strncmp(name, "TETHER_", 7) == 0 || strcmp(name, "GIT_SSH_COMMAND") == 0;
}

bool envb_shell_usable(const char *path)
{
	struct stat st;
	return path && path[0] == '/' && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
	       access(path, X_OK) == 0;
}

/* 1: path is a line of /etc/shells; 0: it is not; -1: no /etc/shells. */
static int listed_in_etc_shells(const char *path)
{
	FILE *f = fopen("/etc/shells", "re");
	if (!f)
		return -1;
	char line[PATH_MAX];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = '\0';
		found = strcmp(line, path) == 0;
	}
	fclose(f);
	return found;
}

bool envb_passwd_shell(uid_t uid, char *out, size_t size)
{
	struct passwd pw, *res = NULL;
	char tmp[4096];
	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) != 0 || !res || !envb_shell_usable(res->pw_shell))
		return false;
	int listed = listed_in_etc_shells(res->pw_shell);
	if (listed == 0)
		return false;
	if (listed < 0) {
		const char *base = strrchr(res->pw_shell, '/') + 1;
		if (!strcmp(base, "nologin") || !strcmp(base, "false"))
			return false;
	}
	return strscpy(out, res->pw_shell, size) == 0;
}

bool envb_sibling_tether(char *out, size_t size)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return false;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash)
		return false;
	*slash = '\0';
	int w = snprintf(out, size, "%s/tether", self);
	return w > 0 && (size_t)w < size && envb_shell_usable(out);
}

/* environment.git_ssh_via_proxy: git runs ssh with `tether connect` as
 * its ProxyCommand. The path travels inside single quotes through git's
 * shell and ssh's (which also expands %-tokens), so only plain path
 * characters are taken. */
static int put_git_ssh(struct envb_result *r, const struct envb_extra *x)
{
	static const char plain[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+,@";
	const char *t = x->tether_path;
	if (!x->proxy_url || !x->proxy_url[0])
		return warn(r, "GIT_SSH_COMMAND not set: environment.git_ssh_via_proxy needs the egress proxy, "
			       "and this spawn has none") < 0 ? -ENOMEM : 0;
	if (!t || t[0] != '/' || strspn(t, plain) != strlen(t) || strlen(t) > PATH_MAX)
		return warn(r, "GIT_SSH_COMMAND not set: environment.git_ssh_via_proxy: no usable path of the tether "
			       "binary (%s)", t ? "characters a shell would read" : "not found beside the supervisor") < 0
			       ? -ENOMEM
			       : 0;
	char v[PATH_MAX + 64];
	snprintf(v, sizeof(v), "ssh -o ProxyCommand='%s connect %%h %%p'", t);
	return env_put(r, "GIT_SSH_COMMAND", v);
}

/* exec.shell, else the target user's passwd shell when it is a shell
 * (envb_passwd_shell), else /bin/sh. getpwuid_r: the supervisor has
 * threads (libuv pool). */
static const char *shell_for(const struct policy *p, const struct envb_extra *x, char *buf, size_t size)
{
	if (p->exec.shell)
		return p->exec.shell;
	if (x && x->has_target_uid && envb_passwd_shell(x->target_uid, buf, size))
		return buf;
	return "/bin/sh";
}

int envb_build(const struct policy *p, char *const *parent, const struct envb_extra *x,
	       struct envb_result *r)
{
	static const struct envb_extra none = { 0 };
	memset(r, 0, sizeof(*r));
	if (!x)
		x = &none;
	const struct policy_env *env = &p->env;
	r->mode = env->mode;
	/* An empty, NULL-terminated envp from the start. */
	r->envp = calloc(1, sizeof(char *));
	if (!r->envp)
		return -ENOMEM;

	const char *path_in = NULL, *parent_path = NULL, *tmpdir_in = NULL;
	int rc;
	for (size_t i = 0; parent && parent[i]; i++) {
		const char *e = parent[i];
		const char *eq = strchr(e, '=');
		size_t nl = eq ? (size_t)(eq - e) : strlen(e);
		bool kept = false;
		enum reason why = REASON_NAME_INVALID;
		const struct policy_name *rule = NULL;
		char name[256];
		if (eq && strncasecmp(e, "BASH_FUNC_", 10) == 0) {
			why = REASON_HARD_DENY; /* exported bash function, whatever its suffix */
		} else if (eq && name_valid(e, nl)) {
			memcpy(name, e, nl);
			name[nl] = '\0';
			/* glibc's getenv() sees the first of two equal names;
			 * a later one is a smuggling attempt. */
			bool repeat = false;
			for (size_t j = 0; j < i && !repeat; j++)
				repeat = strncmp(parent[j], e, nl + 1) == 0;
			if (!repeat) {
				bool tool = false;
				why = decide(p, name, eq + 1, &tool, &rule);
				kept = why == REASON_ALLOWED;
				if (kept && tool &&
				    warn(r, "%s passed through explicit pass_through: it points toolchains at host paths, review it",
					 name) < 0)
					return -ENOMEM;
			}
		}
		if (entry_push(&r->parent, &r->n_parent, e, nl, kept, why) < 0)
			return -ENOMEM;
		r->parent[r->n_parent - 1].rule = rule;
		if (!kept)
			continue;
		if (strcmp(name, "PATH") == 0) {
			path_in = parent_path = eq + 1;
			continue;
		}
		if (strcmp(name, "TMPDIR") == 0) {
			tmpdir_in = eq + 1;
			continue;
		}
		if ((rc = env_put(r, name, eq + 1)) < 0)
			return rc;
	}

	/* policy `set:` literals */
	for (size_t i = 0; i < env->n_set; i++) {
		const struct policy_setvar *sv = &env->set[i];
		enum reason why = REASON_ALLOWED;
		if (strncasecmp(sv->name, "TETHER_", 7) == 0)
			why = REASON_TETHER_RESERVED;
		else if (envb_hard_denied(sv->name))
			why = REASON_HARD_DENY;
		else if (denied_by_policy(env, sv->name))
			why = REASON_POLICY_DENY;
		else if (supervisor_owns(sv->name) || strcmp(sv->name, "TMPDIR") == 0 ||
			 (env->trust_bundle && trust_bundle_var(sv->name)) ||
			 credential_for_variable(policy_section_data(p, "credentials"), sv->name))
			why = REASON_SUPERVISOR_SET;
		else if (env->mode == POLICY_ENV_SECRETS_OFF && policy_name_secret_shaped(sv->name))
			why = REASON_SECRET_SHAPED;
		else if (!envb_value_ok(sv->name, sv->value))
			why = REASON_VALUE_CHECK;
		if (entry_push(&r->set, &r->n_set, sv->name, strlen(sv->name), why == REASON_ALLOWED, why) < 0)
			return -ENOMEM;
		if (why != REASON_ALLOWED) {
			if (warn(r, "%s:%u:%u: environment.set %s dropped (%s)", sv->file, sv->line, sv->col,
				 sv->name, reason_word(why)) < 0)
				return -ENOMEM;
			continue;
		}
		if (strcmp(sv->name, "PATH") == 0) {
			path_in = sv->value; /* still sanitized below */
			continue;
		}
		if ((rc = env_put(r, sv->name, sv->value)) < 0)
			return rc;
	}

	/* ── env_extra: what only the supervisor sets ── */
	r->path = envb_sanitize_path(path_in ? path_in : DEFAULT_PATH_INPUT, x->path_root, r);
	if (!r->path)
		return -ENOMEM;
	r->path_rewritten = !parent_path || strcmp(parent_path, r->path) != 0;
	if ((rc = env_put(r, "PATH", r->path)) < 0)
		return rc;
	if (env->path_strict) {
		for (size_t i = 0; i < r->n_path_dropped; i++) {
			const char *w = r->path_dropped[i].why;
			if (strcmp(w, "missing") && strcmp(w, "not_directory") && strcmp(w, "duplicate")) {
				snprintf(r->error, sizeof(r->error),
					 "PATH entry '%s' is %s and environment.path_strict is true",
					 r->path_dropped[i].entry, w);
				return -EPERM;
			}
		}
		if (r->n_path_writable) {
			snprintf(r->error, sizeof(r->error),
				 "PATH entry '%s' is group/world-writable and environment.path_strict is true",
				 r->path_writable[0]);
			return -EPERM;
		}
	}
	if (x->cwd && (rc = env_put(r, "PWD", x->cwd)) < 0)
		return rc;
	struct stat st;
	if (x->private_tmp) {
		if ((rc = env_put(r, "TMPDIR", x->private_tmp)) < 0)
			return rc;
		for (size_t i = 0; i < r->n_parent; i++)
			if (strcmp(r->parent[i].name, "TMPDIR") == 0 && r->parent[i].kept) {
				r->parent[i].kept = false;
				r->parent[i].reason = REASON_SUPERVISOR_SET;
			}
	} else if (tmpdir_in) {
		if (tmpdir_in[0] == '/' && stat(tmpdir_in, &st) == 0 && S_ISDIR(st.st_mode)) {
			if ((rc = env_put(r, "TMPDIR", tmpdir_in)) < 0)
				return rc;
		} else {
			for (size_t i = 0; i < r->n_parent; i++)
				if (strcmp(r->parent[i].name, "TMPDIR") == 0 && r->parent[i].kept) {
					r->parent[i].kept = false;
					r->parent[i].reason = REASON_VALUE_CHECK;
				}
		}
	}
	char shell[4096];
	if ((rc = env_put(r, "SHELL", shell_for(p, x, shell, sizeof(shell)))) < 0)
		return rc;
	if (x->proxy_url && x->proxy_url[0]) {
		static const char *const proxy_names[] = { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
							   "http_proxy", "https_proxy", "all_proxy" };
		for (size_t i = 0; i < ARRAY_SIZE(proxy_names); i++)
			if ((rc = env_put(r, proxy_names[i], x->proxy_url)) < 0)
				return rc;
		const char *np = x->no_proxy && x->no_proxy[0] ? x->no_proxy : DEFAULT_NO_PROXY;
		if ((rc = env_put(r, "NO_PROXY", np)) < 0 || (rc = env_put(r, "no_proxy", np)) < 0)
			return rc;
	}
	if (env->git_ssh_via_proxy && (rc = put_git_ssh(r, x)) < 0)
		return rc;
	if (env->trust_bundle && (rc = trust_bundle_env(env->trust_bundle, env_put_cb, r)) < 0)
		return rc;
	/* credentials: the workload holds the placeholder, never the secret
	 * (the net-supervisor swaps it in: policy/credentials.h) */
	const struct credential_set *creds = policy_section_data(p, "credentials");
	for (size_t i = 0; creds && i < creds->n; i++) {
		char ph[96];
		snprintf(ph, sizeof(ph), "tether-cred:%s", creds->v[i].name);
		if ((rc = env_put(r, creds->v[i].variable, ph)) < 0)
			return rc;
	}
	if (x->credential_socket) {
		if (env->mode == POLICY_ENV_SECRETS_OFF) {
			if (warn(r, "TETHER_CREDENTIAL_SOCKET not set: secrets-off never injects the credential broker") < 0)
				return -ENOMEM;
		} else if (!env->broker) {
			if (warn(r, "TETHER_CREDENTIAL_SOCKET not set: environment.broker is not enabled") < 0)
				return -ENOMEM;
		} else if ((rc = env_put(r, "TETHER_CREDENTIAL_SOCKET", x->credential_socket)) < 0) {
			return rc;
		}
	}
	for (size_t i = 0; i < x->n_vars; i++) {
		const char *v = x->vars[i];
		const char *eq = strchr(v, '=');
		char name[256];
		size_t nl = eq ? (size_t)(eq - v) : 0;
		if (!eq || !name_valid(v, nl) || nl >= sizeof(name)) {
#ifndef NDEBUG
			abort(); /* programming error: env_extra entries are KEY=VALUE */
#endif
			if (warn(r, "env_extra entry without a valid KEY= dropped") < 0)
				return -ENOMEM;
			continue;
		}
		memcpy(name, v, nl);
		name[nl] = '\0';
		if (!extra_key_allowed(name)) {
#ifndef NDEBUG
			abort(); /* programming error: only TETHER_* and GIT_SSH_COMMAND */
#endif
			if (warn(r, "env_extra key %s is not on the allowlist; dropped", name) < 0)
				return -ENOMEM;
			continue;
		}
		if ((rc = env_put(r, name, eq + 1)) < 0)
			return rc;
	}
	/* Report what the supervisor set (names only). */
	static const char *const report[] = { "PATH", "PWD", "TMPDIR", "SHELL", "HTTP_PROXY",
					      "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
					      "TETHER_CREDENTIAL_SOCKET", "GIT_SSH_COMMAND" };
	for (size_t i = 0; i < ARRAY_SIZE(report); i++) {
		if (!env_get(r, report[i]))
			continue;
		if (strcmp(report[i], "TMPDIR") == 0 && !x->private_tmp)
			continue; /* inherited, already in the parent report */
		if (entry_push(&r->set, &r->n_set, report[i], strlen(report[i]), false, REASON_SUPERVISOR_SET) < 0)
			return -ENOMEM;
		r->set[r->n_set - 1].kept = true;
		r->set[r->n_set - 1].reason = REASON_SUPERVISOR_SET;
	}
	creds = policy_section_data(p, "credentials");
	for (size_t i = 0; creds && i < creds->n; i++) {
		const char *n = creds->v[i].variable;
		if (entry_push(&r->set, &r->n_set, n, strlen(n), true, REASON_SUPERVISOR_SET) < 0)
			return -ENOMEM;
		r->set[r->n_set - 1].reason = REASON_SUPERVISOR_SET;
	}
	for (size_t i = 0; env->trust_bundle && trust_bundle_vars[i]; i++) {
		const char *n = trust_bundle_vars[i];
		if (entry_push(&r->set, &r->n_set, n, strlen(n), true, REASON_SUPERVISOR_SET) < 0)
			return -ENOMEM;
		r->set[r->n_set - 1].reason = REASON_SUPERVISOR_SET;
	}
	return 0;
}

/* ── reporting ──────────────────────────────────────────────────────────── */

json_t *envb_audit_json(const struct envb_result *r)
{
	json_t *j = json_object();
	json_t *allowed = json_array(), *dropped = json_array(), *pd = json_array(), *pw = json_array(),
	       *w = json_array();
	if (!j || !allowed || !dropped || !pd || !pw || !w)
		goto fail;
	for (size_t i = 0; i < r->envc; i++) {
		const char *eq = strchr(r->envp[i], '=');
		json_array_append_new(allowed, json_stringn(r->envp[i], eq ? (size_t)(eq - r->envp[i])
									  : strlen(r->envp[i])));
	}
	for (size_t i = 0; i < r->n_parent; i++)
		if (!r->parent[i].kept)
			json_array_append_new(dropped, json_pack("{s:s, s:s}", "name", r->parent[i].name,
								 "reason", reason_word(r->parent[i].reason)));
	for (size_t i = 0; i < r->n_set; i++)
		if (!r->set[i].kept)
			json_array_append_new(dropped, json_pack("{s:s, s:s, s:s}", "name", r->set[i].name,
								 "reason", reason_word(r->set[i].reason),
								 "source", "set"));
	for (size_t i = 0; i < r->n_path_dropped; i++)
		json_array_append_new(pd, json_string(r->path_dropped[i].entry));
	for (size_t i = 0; i < r->n_path_writable; i++)
		json_array_append_new(pw, json_string(r->path_writable[i]));
	for (size_t i = 0; i < r->n_warnings; i++) {
		/* Warnings hold names and paths only; the redactor is a second net. */
		char *red = redact_line(r->warnings[i]);
		json_array_append_new(w, json_string(red ? red : "[REDACTED]"));
		free(red);
	}
	json_object_set_new(j, "mode", json_string(policy_env_mode_name(r->mode)));
	json_object_set_new(j, "allowed", allowed);
	json_object_set_new(j, "dropped", dropped);
	json_object_set_new(j, "path_rewritten", json_boolean(r->path_rewritten));
	json_object_set_new(j, "path_dropped", pd);
	json_object_set_new(j, "path_writable", pw);
	json_object_set_new(j, "warnings", w);
	return j;
fail:
	json_decref(j);
	json_decref(allowed);
	json_decref(dropped);
	json_decref(pd);
	json_decref(pw);
	json_decref(w);
	return NULL;
}

void envb_dry_run_print(FILE *out, const struct envb_result *r, char *const *argv)
{
	fprintf(out, "env mode: %s\n", policy_env_mode_name(r->mode));
	for (size_t i = 0; i < r->n_parent; i++) {
		const struct envb_entry *e = &r->parent[i];
		char from[512] = "";
		if (e->rule)
			snprintf(from, sizeof(from), "  (%s, %s layer, %s:%u:%u)", e->rule->pattern,
				 policy_layer_name(e->rule->layer), e->rule->file, e->rule->line, e->rule->col);
		fprintf(out, "%-7s %-32s %s%s%s\n", e->kept ? "kept" : "dropped", e->name,
			e->kept ? "allowed" : reason_word(e->reason), from,
			e->kept && strcmp(e->name, "PATH") == 0 ? "; value rewritten, see PATH= below" : "");
	}
	for (size_t i = 0; i < r->n_set; i++) {
		const struct envb_entry *e = &r->set[i];
		if (e->reason == REASON_SUPERVISOR_SET && e->kept)
			fprintf(out, "set     %-32s supervisor\n", e->name);
		else if (e->kept)
			fprintf(out, "set     %-32s policy\n", e->name);
		else
			fprintf(out, "dropped %-32s %s (policy set)\n", e->name, reason_word(e->reason));
	}
	fprintf(out, "PATH=%s\n", r->path ? r->path : "");
	for (size_t i = 0; i < r->n_path_dropped; i++)
		fprintf(out, "path dropped  %s (%s)\n",
			r->path_dropped[i].entry[0] ? r->path_dropped[i].entry : "\"\"", r->path_dropped[i].why);
	for (size_t i = 0; i < r->n_path_writable; i++)
		fprintf(out, "path writable %s\n", r->path_writable[i]);
	for (size_t i = 0; i < r->n_warnings; i++) {
		char *red = redact_line(r->warnings[i]);
		fprintf(out, "warning: %s\n", red ? red : "[REDACTED]");
		free(red);
	}
	if (argv) {
		char **red = redact_argv(argv);
		fputs("command:", out);
		for (size_t i = 0; red && red[i]; i++) {
			/* quote what a shell would split, so the line reads back */
			if (red[i][0] && !red[i][strcspn(red[i], " \t\n'\"\\$`;&|<>()*?!#~")]) {
				fprintf(out, " %s", red[i]);
				continue;
			}
			fputs(" '", out);
			for (const char *c = red[i]; *c; c++)
				if (*c == '\'')
					fputs("'\\''", out);
				else
					fputc(*c, out);
			fputc('\'', out);
		}
		fputc('\n', out);
		redact_argv_free(red);
	}
}
