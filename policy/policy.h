/* The policy loader: one parser, one file format, one error style.
 *
 * A policy file is YAML (libyaml), `version: 1` plus the top-level keys
 * `immutable`, `environment`, `network`, `exec`. Files come in layers
 * (system → user → project → agent → command); each file is parsed into a
 * small typed tree (struct pnode) and each top-level section is handed to
 * its section parser, which validates it ONCE into typed structs and merges
 * it with what earlier layers produced. Internal code never re-parses.
 *
 * Every error is one line, "FILE:LINE:COL: message" (1-based, from libyaml
 * marks), stored in a struct policy_diag. The first error stops the load
 * (fail closed). Malformed YAML, aliases, tags, several documents, deep
 * nesting, NUL bytes and oversized input are errors, never crashes.
 *
 * ─── Writing a section parser (e.g. `network:`) ───────────────────────────
 *
 *   struct netpol { ...typed rules... };
 *
 *   static int netpol_parse(struct pctx *ctx, const struct pnode *node,
 *                           void **data)
 *   {
 *           static const char *const keys[] = { "mode", "policies", NULL };
 *           int r = pnode_expect_map(ctx, node, "network");
 *           if (r < 0)
 *                   return r;
 *           r = pmap_check_keys(ctx, node, "network", keys);   // unknown keys
 *           if (r < 0)
 *                   return r;
 *           struct netpol *np = *data;          // NULL on the first layer
 *           if (!np && !(np = *data = calloc(1, sizeof(*np))))
 *                   return -ENOMEM;
 *           const struct pnode *m = pmap_get(node, "mode");
 *           if (m) {
 *                   static const char *const modes[] = { "enforce", "audit", NULL };
 *                   int mode;
 *                   r = pnode_expect_enum(ctx, m, "network.mode", modes, &mode);
 *                   if (r < 0)
 *                           return r;          // diag already says FILE:L:C
 *                   np->mode = mode;
 *           }
 *           if (pctx_layer(ctx) != POLICY_LAYER_COMMAND && ...)
 *                   return pnode_error(ctx, m, "network.mode may only be set ...");
 *           ...
 *           return 0;
 *   }
 *   static void netpol_free(void *data) { ... }
 *   const struct policy_section netpol_section = {
 *           .name = "network", .parse = netpol_parse, .free = netpol_free,
 *   };
 *
 *   // caller (daemon or CLI):
 *   const struct policy_section *ext[] = { &netpol_section };
 *   struct policy *p; struct policy_diag d;
 *   r = policy_load_layers(&paths, ext, 1, &p, &d);
 *   if (r < 0) { fprintf(stderr, "%s\n", d.msg); ... }
 *   const struct netpol *np = policy_section_data(p, "network");  // NULL if absent
 *
 * Rules for section parsers: call pnode_error()/pnode_expect_*() for every
 * rejection (they fill the diag once, with the node's position, and return
 * -EINVAL); never keep pointers into the pnode tree (it is freed after each
 * file); copy strings (pnode_strdup). `parse` runs once per file that has
 * the section, in layer order, and merges into *data; `free` releases it.
 * Top-level keys the loader knows but no parser is registered for (e.g.
 * `network` in `tether env`) are skipped; any other top-level key is an
 * "unknown key" error. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ── layers ─────────────────────────────────────────────────────────────── */

enum policy_layer {
	POLICY_LAYER_BASELINE = 0, /* the embedded default baseline data file */
	POLICY_LAYER_SYSTEM,       /* /etc/tether/policy.yaml, /etc/tether/policy.d/[*].yaml */
	POLICY_LAYER_USER,         /* ~/.config/tether/policy.yaml */
	POLICY_LAYER_PROJECT,      /* .tether.yaml in the workload's cwd */
	POLICY_LAYER_AGENT,        /* embedded preset profiles/agents/NAME.yaml */
	POLICY_LAYER_COMMAND,      /* --policy FILE..., CLI flags */
	POLICY_LAYER__COUNT
};
const char *policy_layer_name(enum policy_layer l); /* "system", "project", ... */

/* One error, "FILE:LINE:COL: message". msg[0] == 0 means no error. */
struct policy_diag {
	char msg[1024];
};

/* ── the typed tree handed to section parsers ───────────────────────────── */

enum pnode_kind { PNODE_SCALAR, PNODE_MAP, PNODE_SEQ };

struct pnode {
	enum pnode_kind kind;
	unsigned line, col; /* 1-based position of the node's start */
	/* scalar */
	char *str;   /* NUL-terminated; may contain NUL (see len) — expect_string rejects it */
	size_t len;
	bool plain;  /* unquoted: only plain scalars can be bools, ints or null */
	/* map (keys[i] → vals[i], keys are scalars, no duplicates) or seq (vals) */
	size_t n;
	struct pnode **keys;
	struct pnode **vals;
};

/* Parse context: which file and layer is being parsed, where errors go. */
struct pctx;
enum policy_layer pctx_layer(const struct pctx *ctx);
const char *pctx_file(const struct pctx *ctx);
/* True when the system layer said `immutable: true` (lower layers may then
 * not loosen the policy; a section decides what loosening means). */
bool pctx_immutable(const struct pctx *ctx);

/* Record an error at node's position (first error wins); returns -EINVAL.
 * node may be NULL (position 1:1 of the file). */
int pnode_error(struct pctx *ctx, const struct pnode *node, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Append a non-fatal warning "FILE:LINE:COL: message" to the policy. */
void pnode_warn(struct pctx *ctx, const struct pnode *node, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Map lookups. pmap_get returns NULL when absent (or node is not a map). */
const struct pnode *pmap_get(const struct pnode *map, const char *key);
/* Error on the first key not in the NULL-terminated `allowed` list:
 * "unknown key 'x' in WHAT (expected one of: a, b, c)". */
int pmap_check_keys(struct pctx *ctx, const struct pnode *map, const char *what,
		    const char *const *allowed);

/* Type checks. `what` names the value in messages ("environment.mode").
 * Each returns 0 or -EINVAL with the diag set at the node's position. */
int pnode_expect_map(struct pctx *ctx, const struct pnode *n, const char *what);
int pnode_expect_seq(struct pctx *ctx, const struct pnode *n, const char *what);
/* A scalar that is not plain null/~/true/false and has no NUL byte;
 * *out points into the tree (copy it with pnode_strdup to keep it). */
int pnode_expect_string(struct pctx *ctx, const struct pnode *n, const char *what,
			const char **out);
/* A plain `true` or `false`. */
int pnode_expect_bool(struct pctx *ctx, const struct pnode *n, const char *what, bool *out);
/* A plain decimal integer 0..max. */
int pnode_expect_uint(struct pctx *ctx, const struct pnode *n, const char *what,
		      uint64_t max, uint64_t *out);
/* A string from the NULL-terminated `words`; *out = its index. */
int pnode_expect_enum(struct pctx *ctx, const struct pnode *n, const char *what,
		      const char *const *words, int *out);
/* An absolute path without NUL, "//" is allowed, ".." components are not. */
int pnode_expect_abspath(struct pctx *ctx, const struct pnode *n, const char *what,
			 const char **out);
/* strdup that reports -ENOMEM through the diag; NULL on failure. */
char *pnode_strdup(struct pctx *ctx, const struct pnode *n);

/* ── section registry ───────────────────────────────────────────────────── */

struct policy_section {
	const char *name; /* top-level key */
	int (*parse)(struct pctx *ctx, const struct pnode *node, void **data);
	void (*free)(void *data);
};

/* ── built-in sections: environment and exec ────────────────────────────── */

enum policy_env_mode {
	POLICY_ENV_SANITIZED = 0, /* baseline + layered pass_through (default) */
	POLICY_ENV_EXPLICIT,      /* only pass_through of the project and command layers */
	POLICY_ENV_BASELINE,      /* baseline + the agent preset's pass_through */
	POLICY_ENV_SECRETS_OFF,   /* baseline mode minus every secret-shaped name, no broker */
	POLICY_ENV__COUNT
};
const char *policy_env_mode_name(enum policy_env_mode m);

/* A name or pattern ('*' only as the last character) and where it came from. */
struct policy_name {
	char *pattern;
	enum policy_layer layer;
	const char *file; /* owned by the policy (policy->files) */
	unsigned line, col;
};
struct policy_names {
	struct policy_name *v;
	size_t n;
};
struct policy_setvar {
	char *name;
	char *value;
	enum policy_layer layer;
	const char *file;
	unsigned line, col;
};

struct policy_env {
	enum policy_env_mode mode;
	enum policy_layer mode_layer; /* who set it (BASELINE = default) */
	struct policy_names baseline;     /* profiles/baseline.yaml */
	struct policy_names pass_through; /* union over layers */
	struct policy_names deny;         /* union over layers; only grows */
	struct policy_setvar *set;        /* later layers override same name */
	size_t n_set;
	bool path_strict; /* OR over layers: a layer can tighten, never loosen */
	bool broker;      /* `broker: true`: inject a credential-broker socket */
	bool git_ssh_via_proxy; /* GIT_SSH_COMMAND: ssh through `tether connect` */
	/* `trust_bundle: /path/ca.pem`: checked at load (trust_bundle.h), then
	 * every client's CA variable points at it; a later layer replaces it,
	 * except one an immutable system layer set. NULL: none. */
	char *trust_bundle;
	enum policy_layer trust_bundle_layer;
};

struct policy_exec {
	char *shell; /* absolute path or NULL (then passwd, then /bin/sh) */
};

struct policy {
	unsigned version;
	bool immutable; /* from the system layer */
	struct policy_env env;
	struct policy_exec exec;
	char *agent;           /* preset name loaded, or NULL */
	char **files;          /* every file loaded, in order ("embedded:..." for data) */
	enum policy_layer *file_layers; /* the layer of each of files[] */
	size_t n_files;
	char **warnings;       /* "FILE:LINE:COL: message" */
	size_t n_warnings;
	struct policy_ext {
		const struct policy_section *sec;
		void *data;
	} *ext;
	size_t n_ext;
};

/* Data of a registered section, or NULL when no layer had it. */
void *policy_section_data(const struct policy *p, const char *name);
void policy_free(struct policy *p);
static inline void policy_freep(struct policy **p)
{
	if (*p)
		policy_free(*p);
}
#define _cleanup_policy_ __attribute__((cleanup(policy_freep)))

/* Helpers the env boundary shares with the loader. */
/* `*_KEY *_TOKEN *_SECRET *_PASSWORD *_PASSWD *CREDENTIAL* *SECRET* *PASSWORD*`,
 * case-insensitive. */
bool policy_name_secret_shaped(const char *name);
/* Does pattern (exact, or PREFIX*) match name? case-insensitive when icase. */
bool policy_pattern_match(const char *pattern, const char *name, bool icase);

/* ── loading ────────────────────────────────────────────────────────────── */

/* Where each layer lives. NULL fields are skipped. policy_paths_default()
 * fills them from the environment of the CALLER (the supervisor or CLI, never
 * a workload): TETHER_SYSTEM_POLICY_DIR (default /etc/tether: policy.yaml and
 * policy.d/[*].yaml), TETHER_USER_POLICY_DIR (default
 * $XDG_CONFIG_HOME/tether or $HOME/.config/tether: policy.yaml), project =
 * cwd/.tether.yaml. Missing system/user/project files are fine; missing
 * command files and unknown agents are errors. */
struct policy_paths {
	char *system_dir;
	char *user_dir;
	char *project_dir;
	const char *agent;
	const char *const *command_files;
	size_t n_command_files;
};
int policy_paths_default(struct policy_paths *p, const char *cwd);
void policy_paths_done(struct policy_paths *p); /* frees the three dirs */

int policy_load_layers(const struct policy_paths *paths,
		       const struct policy_section *const *ext, size_t n_ext,
		       struct policy **out, struct policy_diag *diag);

/* One document as the command layer (on top of the embedded baseline):
 * `tether policy check`, tests and fuzzers. name is used in messages. */
int policy_load_buffer(const char *name, const char *buf, size_t len,
		       const struct policy_section *const *ext, size_t n_ext,
		       struct policy **out, struct policy_diag *diag);

/* Step by step: new → add (layers in non-decreasing order) → finish. */
struct policy_loader;
int policy_loader_new(const struct policy_section *const *ext, size_t n_ext,
		      struct policy_loader **out, struct policy_diag *diag);
int policy_loader_add_buffer(struct policy_loader *l, enum policy_layer layer,
			     const char *name, const char *buf, size_t len,
			     struct policy_diag *diag);
/* optional: a missing file (ENOENT) is skipped. */
int policy_loader_add_file(struct policy_loader *l, enum policy_layer layer,
			   const char *path, bool optional, struct policy_diag *diag);
/* The embedded preset NAME (profiles/agents/NAME.yaml) as the agent layer. */
int policy_loader_add_agent(struct policy_loader *l, const char *name,
			    struct policy_diag *diag);
/* For a loader that builds no environment (the net-supervisor, which may
 * run where the workload's files are not, e.g. a sidecar container): files
 * the environment section names for the workload (trust_bundle) are taken
 * as absolute paths without being opened. Every loader that builds an
 * environment (proc-supervisor, tether run, tether env, policy check)
 * checks them. */
void policy_loader_skip_workload_files(struct policy_loader *l);
/* Hand out the merged policy; the loader is freed either way. */
int policy_loader_finish(struct policy_loader *l, struct policy **out);
void policy_loader_free(struct policy_loader *l);

/* Embedded data files (profiles/), generated at build time. */
const char *policy_embedded_get(const char *name, size_t *len); /* "baseline", "agents/claude" */
/* NULL-terminated list of agent preset names. */
const char *const *policy_agent_names(void);

#define POLICY_MAX_FILE_SIZE (1u << 20)
#define POLICY_MAX_DEPTH 32
#define POLICY_MAX_NODES 65536
#define POLICY_MAX_MAP_KEYS 4096
