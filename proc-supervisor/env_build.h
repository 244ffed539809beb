/* The environment boundary: every child's environment is built from
 * nothing (docs/environment.md). envb_build() takes the resolved policy, the
 * parent's envp and the supervisor's own facts (env_extra) and returns a
 * fresh envp plus a report of every decision. Nothing is inherited unless
 * the mode and the layered pass_through allow it, and nothing passes the
 * hard-deny table, the policy's deny list or the value checks.
 *
 * Order per parent entry: name_invalid (no '=', bad characters, repeated
 * name) → tether_reserved (TETHER_*) → hard_deny → policy_deny →
 * value_check ("() {" functions) → supervisor_set (PWD, OLDPWD, SHELL,
 * proxies, NO_PROXY: the supervisor owns them) → not_allowed (mode and
 * pass_through) → secret_shaped (secrets-off, or a secret-shaped name
 * reached only through a wildcard) → value_check (LANG/LC_/TERM/TZ).
 * Deny and hard-deny match case-insensitively; pass_through matches
 * exactly ('*' only as a trailing wildcard, never passing a secret).
 *
 * Then `set:` literals (same checks), then env_extra: PATH (sanitized
 * parent PATH), PWD, TMPDIR, SHELL, proxy variables (both cases), NO_PROXY,
 * TETHER_* session variables, TETHER_CREDENTIAL_SOCKET. OLDPWD is never set.
 *
 * The report holds names and reasons only, never values (PATH entries are
 * not secret and are listed). envb_audit_json() is the `env_boundary`
 * event; envb_dry_run_print() is what `tether run --dry-run` and
 * `tether env` print. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/reason.h"
#include "policy/policy.h"

/* What the supervisor knows about this spawn. Every field is optional. */
struct envb_extra {
	const char *cwd;              /* → PWD */
	bool has_target_uid;          /* SHELL from this user's passwd entry */
	uid_t target_uid;
	const char *private_tmp;      /* mounted private tmp → TMPDIR */
	const char *proxy_url;        /* net-supervisor URL → HTTP(S)_PROXY, ALL_PROXY, lowercase */
	const char *no_proxy;         /* comma list; NULL or "" → "localhost,127.0.0.1,::1" */
	const char *credential_socket;/* broker socket path (never set in secrets-off) */
	/* The tether CLI as the workload sees it: with environment.git_ssh_via_proxy
	 * and a proxy_url, GIT_SSH_COMMAND is
	 * "ssh -o ProxyCommand='TETHER_PATH connect %h %p'". */
	const char *tether_path;
	/* Further "KEY=VALUE" the supervisor sets. Allowed keys: TETHER_*,
	 * GIT_SSH_COMMAND. Anything else is a programming error: abort() in
	 * debug builds, dropped with a warning otherwise. */
	const char *const *vars;
	size_t n_vars;
	/* Tests only: resolve PATH entries relative to this root (NULL = /). */
	const char *path_root;
};

struct envb_entry {
	char *name;        /* the parent's name (sanitized for printing if invalid) */
	bool kept;
	enum reason reason; /* REASON_ALLOWED when kept */
	/* The policy rule that decided (pass_through or baseline entry that
	 * allowed it, or the deny entry), NULL for built-in decisions. Points
	 * into the policy: valid while the policy lives. */
	const struct policy_name *rule;
};

struct envb_path_drop {
	char *entry;       /* the PATH entry as given ("" for an empty one) */
	const char *why;   /* empty, dot, dotdot, relative, missing, not_directory, duplicate, writable */
};

struct envb_result {
	char **envp;                 /* NULL-terminated, owned */
	size_t envc;
	enum policy_env_mode mode;
	struct envb_entry *parent;   /* one per parent entry, in parent order */
	size_t n_parent;
	struct envb_entry *set;      /* policy `set:` and env_extra names, kept or dropped */
	size_t n_set;
	char *path;                  /* the child's PATH */
	bool path_rewritten;         /* differs from the parent's PATH */
	struct envb_path_drop *path_dropped;
	size_t n_path_dropped;
	char **path_writable;        /* kept entries that are group/world-writable */
	size_t n_path_writable;
	char **warnings;             /* names and paths only */
	size_t n_warnings;
	char error[512];             /* set when envb_build fails (path_strict, ...) */
};

/* 0, or -EPERM with out->error set (path_strict found a bad entry), or
 * -ENOMEM / -EINVAL. out is always safe to envb_result_done(). */
int envb_build(const struct policy *p, char *const *parent_envp, const struct envb_extra *x,
	       struct envb_result *out);
void envb_result_done(struct envb_result *r);

/* The table, for tests and docs: is this name hard-denied? Case-insensitive. */
bool envb_hard_denied(const char *name);
/* The value checks of docs/environment.md; true if the value may pass. */
bool envb_value_ok(const char *name, const char *value);
/* TZ: a plain name, or an absolute path under /usr/share/zoneinfo, no "..". */
bool envb_tz_ok(const char *value);

/* PATH sanitizer alone (what envb_build uses). root NULL = "/". Returns the
 * new PATH (malloc) or NULL on ENOMEM; drops/writable appended to r. */
char *envb_sanitize_path(const char *path, const char *root, struct envb_result *r);

/* The `env_boundary` audit event body: {mode, allowed, dropped:[{name,
 * reason}], path_rewritten, path_dropped, path_writable, warnings}. New
 * reference, NULL on ENOMEM. Pass it to audit_emit(log, "env_boundary", j). */
json_t *envb_audit_json(const struct envb_result *r);

/* Human-readable: one line per parent variable (kept / dropped + reason),
 * the variables set by policy and supervisor, the PATH, dropped PATH entries
 * and warnings; then, if argv is non-NULL, the command with secrets
 * redacted ("command: ..."). Never prints a value except PATH. */
void envb_dry_run_print(FILE *out, const struct envb_result *r, char *const *argv);

/* The tether CLI installed beside this executable (dirname of
 * /proc/self/exe + "/tether"), for envb_extra.tether_path: true and its
 * path in out when it is an executable file. */
bool envb_sibling_tether(char *out, size_t size);

/* A file that can be a shell: an absolute path to a non-empty regular file
 * we may execute. */
bool envb_shell_usable(const char *path);

/* uid's login shell from its passwd entry, when that is a shell to run
 * commands with: usable (above) and listed in /etc/shells, so
 * /usr/sbin/nologin and /bin/false are not (without /etc/shells, any
 * usable file not named nologin or false). Copies it to out and returns
 * true; false otherwise (no entry, not a shell, too long). The workload's
 * SHELL and the exec gateway's shell both come from here before /bin/sh. */
bool envb_passwd_shell(uid_t uid, char *out, size_t size);
