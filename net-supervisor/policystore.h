/* The policy in force and its reloads.
 *
 * The files (each in its layer, in order, on top of the embedded baseline)
 * are loaded with the layered loader. A reload (SIGHUP, or a file arriving
 * complete: closed after writing or renamed into place, seen through
 * inotify on the directories, debounced; never a bare modification, which
 * may be a writer halfway through) parses and validates everything on the
 * thread pool; a policy path that is a symlink (a ConfigMap's `..data`
 * swap) is followed anew on every reload. Only a fully valid
 * result replaces the old policy, on the loop thread, in one pointer swap,
 * with the next generation number. An invalid file keeps the old policy. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "policy/network.h"
#include "policy/policy.h"

struct policystore;

/* ok=false: msg says why (FILE:LINE:COL: ...), the old policy stays. */
typedef void (*policystore_cb)(struct policystore *ps, bool ok, const char *msg, void *data);

/* Where symlinked binary paths of the policy are resolved: the workload's
 * root (e.g. /proc/ANCHOR/root; NULL or unset: "/"), at every load. */
int policystore_set_root(struct policystore *ps, const char *root);
/* Learn mode (--learn): every loaded policy has network_policy.learn set,
 * and a policy without a `network:` section is an empty one in learn mode. */
void policystore_set_learn(struct policystore *ps, bool learn);
/* The loaded policy's warnings ("FILE:LINE:COL: message"). */
const char *const *policystore_warnings(const struct policystore *ps, size_t *n);
/* layers: each file's layer (non-decreasing: system, user, project, then
 * command), or NULL for all command layer. A file of a layer below command
 * is optional (missing: skipped), as the layered loader treats it. */
int policystore_new(uv_loop_t *loop, const char *const *files, const enum policy_layer *layers,
		    size_t n_files, policystore_cb cb, void *data, struct policystore **out);
/* Synchronous first load (before the loop runs). -EINVAL with diag. */
int policystore_load_now(struct policystore *ps, struct policy_diag *diag);
/* Start watching files and SIGHUP. */
int policystore_watch(struct policystore *ps);
/* Asynchronous reload (coalesces while one is running). */
void policystore_reload(struct policystore *ps);
/* Close handles; free happens in the close callbacks (run the loop). */
void policystore_close(struct policystore *ps);

/* The network section in force (NULL: none loaded, or no `network:`
 * section, which denies everything). */
const struct network_policy *policystore_network(const struct policystore *ps);
/* The `credentials:` section (policy/credentials.h), or NULL. */
struct credential_set;
const struct credential_set *policystore_credentials(const struct policystore *ps);
bool policystore_loaded(const struct policystore *ps);
uint64_t policystore_generation(const struct policystore *ps);
