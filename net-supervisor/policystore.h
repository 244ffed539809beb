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
/* Another worker's view of source (context.h): the policy, generation and
 * learn flag of the source as of the last refresh, kept alive (refcounted)
 * until the view moves on or is closed, whatever the source swaps in
 * meanwhile. Its accessors (below) are for that worker's thread only; it
 * has no handles and does not reload itself. */
int policystore_view_new(struct policystore *source, struct policystore **out);
/* Take the source's policy in force now (call on the view's thread,
 * between decisions: pointers from the accessors are valid until the next
 * refresh). true when it changed. */
bool policystore_view_refresh(struct policystore *view);
/* Close handles; free happens in the close callbacks (run the loop). A
 * view is freed at once. */
void policystore_close(struct policystore *ps);

/* The network section in force (NULL: none loaded, or no `network:`
 * section, which denies everything). */
const struct network_policy *policystore_network(const struct policystore *ps);
/* The `credentials:` section (policy/credentials.h), or NULL. */
struct credential_set;
const struct credential_set *policystore_credentials(const struct policystore *ps);
bool policystore_loaded(const struct policystore *ps);
uint64_t policystore_generation(const struct policystore *ps);
