/* ancestry: the chain from a subject process up to its trust anchor.
 *
 * Rules (fail closed, each failure a stable reason word):
 *   - recorded lineage from the member table is followed first; a process
 *     not yet recorded falls back to its live ppid (re-read after the parent
 *     is opened, so a parent that exits mid-walk is not mistaken for a
 *     newcomer at its pid);
 *   - every hop is alive (its live process confirmed against the record) or
 *     recorded in the table (a dead recorded parent of a daemon is fine);
 *     an unrecorded hop that exits mid-walk, or the subject exiting, is
 *     process_vanished;
 *   - start_time never increases towards the root (a parent cannot start
 *     after its child): else pid_reused;
 *   - at most max_depth hops (default 64): else depth_exceeded;
 *   - the walk stops AT the anchor and never opens anything above it: not
 *     the anchor's parent, not PID 1 of the caller's namespace unless it is
 *     the anchor (a VM's /init.krun cannot even be stat'ed). Reaching PID 1
 *     or ppid 0 is reached_namespace_init; ending anywhere else is
 *     ancestry_not_anchored; a hop recorded as adopted, or an unrecorded
 *     live child of the anchor (not spawned by it), is foreign_process.
 * The live ppid of live recorded hops is cross-checked: it must be the
 * recorded parent or, after reparenting, a later hop of the chain. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "identity/members.h"
#include "identity/procref.h"

#define ANCESTRY_DEFAULT_DEPTH 64

struct ancestry_opts {
	unsigned max_depth; /* 0 = ANCESTRY_DEFAULT_DEPTH */
	/* Do not read the exe tuple of live hops: recorded hops keep the exe
	 * recorded when they were learnt, unrecorded ones get none (exe_err
	 * -ENODATA). Cheaper; for callers that do not judge ancestors' exes. */
	bool skip_exe;
	/* The caller IS the table's anchor (the proc-supervisor's identity
	 * service): it is alive while it walks, so the walk does not re-open
	 * it to confirm that. Honoured only when the anchor's pid is ours. */
	bool anchor_is_self;
	/* Test and debug hooks (may be NULL). on_open sees every pid the walk
	 * is about to open or match against procfs; between_hops runs after
	 * hop `hop` (0 = the subject) is established and before its parent is
	 * looked at. */
	void (*on_open)(pid_t pid, void *userdata);
	void (*between_hops)(unsigned hop, const struct procref *cur, void *userdata);
	void *userdata;
};

struct ancestry_hop {
	struct procref ref;  /* recorded copy (pidfd -1) */
	bool live;           /* confirmed alive during the walk */
	bool recorded;       /* found in the member table */
	enum member_join join; /* valid when recorded */
};

struct ancestry_result {
	enum reason reason; /* REASON_OK when anchored */
	bool anchored;      /* the chain ends at the anchor */
	size_t n;           /* hops: [0] = the subject's parent ... [n-1] = anchor */
	struct ancestry_hop *hops; /* malloc'd; ancestry_result_free */
	pid_t failed_pid;   /* where the walk stopped on failure (0: unknown) */
	char detail[160];   /* one human-readable line */
};

/* Walk from subject (live with a pidfd, or recorded) to the table's anchor.
 * Returns 0 when anchored; otherwise res->reason says why and the return is
 * -EPERM (not anchored / namespace init / foreign), -ESRCH (vanished),
 * -ESTALE (pid reused), -ELOOP (depth), -ENOMEM. res is always filled and
 * must be released with ancestry_result_free. opts may be NULL. */
int ancestry_walk(const struct kernel_caps *caps, struct members *table,
		  const struct procref *subject, const struct ancestry_opts *opts,
		  struct ancestry_result *res);

/* No anchor at all (tether inspect without --anchor): the live ppid chain up
 * to but not including PID 1, for display only — never an allow decision.
 * res->anchored is false; reason is REASON_OK when the chain reached PID 1
 * or a parent outside the namespace, else the failure (vanished, pid_reused,
 * depth). */
int ancestry_walk_unanchored(const struct kernel_caps *caps, const struct procref *subject,
			     const struct ancestry_opts *opts, struct ancestry_result *res);

void ancestry_result_free(struct ancestry_result *res);

/* [{pid, key, comm, start_time, exe, live, recorded, join}] */
json_t *ancestry_chain_to_json(const struct ancestry_result *res);
