/* Private to policy/: the parse context and the tree builder. */
#pragma once

#include "policy/policy.h"

struct pctx {
	const char *file;
	enum policy_layer layer;
	bool immutable;
	struct policy_diag *diag;
	struct policy *policy;
	/* policy_loader_skip_workload_files(): paths the environment hands the
	 * workload (trust_bundle) are not opened here */
	bool skip_workload_files;
};

/* Parse one YAML document into *out (NULL for an empty document). */
int pnode_parse(struct pctx *ctx, const char *buf, size_t len, struct pnode **out);
void pnode_free(struct pnode *n);
/* Copy of a scalar fit for a message: at most 64 bytes, controls as '?'. */
void pnode_printable(const char *s, size_t len, char *out, size_t size);

int policy_add_warning(struct policy *p, const char *msg);
/* Intern a file name for struct policy_name.file. */
const char *policy_add_file(struct policy *p, const char *name, enum policy_layer layer);

/* The built-in sections. */
int policy_env_parse(struct pctx *ctx, const struct pnode *node);
int policy_exec_parse(struct pctx *ctx, const struct pnode *node);
void policy_env_done(struct policy_env *env);

/* Generated at build time from profiles/ (policy_embedded.c). */
struct policy_embedded_file {
	const char *name;
	const char *data;
	size_t len;
};
extern const struct policy_embedded_file policy_embedded_files[];
extern const size_t policy_embedded_count;
