/* members: the process table of one trust anchor — who belongs to the tree.
 *
 * A process is a *member* only when the anchor spawned it (entrypoint, exec
 * session) or it was seen born inside the tree: its live parent, at the time
 * it was learnt, was a recorded member. Being the anchor's child is NOT
 * enough: a PID-namespace init (or subreaper) also adopts orphans of sessions
 * entered from outside (nsenter, runtime exec); those are recorded as
 * MEMBER_ADOPTED for display and are never members. Lineage is recorded when
 * a process is learnt and kept after it exits (until pruned), so a daemon
 * whose middle parent exited still links to the anchor through the record;
 * live ppid is only a cross-check (CLONE_PARENT makes it lie about the
 * creator).
 *
 * MEMBERSHIP_CGROUP adds a second, independent condition: a member must also
 * sit in the sandbox's cgroup v2 or below it (a non-root workload cannot move
 * out; a runtime-exec'd process placed elsewhere is caught). Lineage is still
 * required in that mode — a process injected into the cgroup from outside is
 * not a member.
 *
 * Keys are procref keys. Entries hold *recorded* refs (pidfd -1). All
 * functions are thread-safe; none holds the lock across procfs I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "identity/procref.h"

enum member_join {
	MEMBER_ANCHOR = 1,      /* the anchor itself: the root, not a member */
	MEMBER_ENTRYPOINT,      /* spawned by the anchor as the workload entrypoint */
	MEMBER_EXEC_SESSION,    /* spawned by the anchor for an exec/SSH session */
	MEMBER_BORN_IN_TREE,    /* learnt while its parent was a recorded member */
	MEMBER_ADOPTED,         /* the anchor's child only by adoption: NOT a member */
};

enum membership_mode {
	MEMBERSHIP_LINEAGE = 1, /* recorded lineage only */
	MEMBERSHIP_CGROUP = 2,  /* recorded lineage AND inside the sandbox cgroup */
};

enum members_orphans {
	/* Never a member (MEMBER_ADOPTED): the safe default, and the only
	 * answer for a PID-namespace init anchor without a cgroup, which
	 * adopts every orphan of its namespace, nsenter'd sessions' too. */
	MEMBERS_ORPHANS_FOREIGN = 0,
	/* The anchor is a child subreaper that is NOT its namespace's init:
	 * the kernel reparents only the anchor's own descendants to it, so
	 * such a child was born in the tree (orphans of injected sessions go
	 * to PID 1, never here). */
	MEMBERS_ORPHANS_DESCENDANTS,
	/* MEMBERSHIP_CGROUP: born in the tree when it (and every hop learnt
	 * with it) is inside the sandbox cgroup, which a fork inherits and an
	 * injected process is not placed in. Otherwise adopted. */
	MEMBERS_ORPHANS_IN_CGROUP,
};

struct members_config {
	enum membership_mode mode;
	/* MEMBERSHIP_CGROUP: the sandbox cgroup as /proc/<pid>/cgroup prints it
	 * for the table's reader (e.g. "/tether/sbx1"), and optionally its id
	 * (the cgroup directory's inode; 0 = looked up under caps->cgroup_root).
	 * The path decides; a matching id is only a shortcut for a process
	 * directly in the sandbox cgroup. */
	const char *cgroup_path;
	uint64_t cgroup_id;
	/* ONLY for one-shot tools without a supervisor table (tether inspect):
	 * an unrecorded live child of the anchor is taken as a member. This is
	 * weaker — an nsenter'd orphan passes — and is reported as
	 * "live-chain" membership. */
	bool live_chain;
	/* How an unrecorded child of the anchor (an orphan reparented to it,
	 * its middle parents gone unseen: a daemon) is judged. */
	enum members_orphans orphans;
	size_t max_entries; /* 0 = 65536; when full, members_learn fails -ENOSPC */
};

struct member_entry {
	struct procref ref;                /* recorded (pidfd -1) */
	enum member_join join;
	char parent_key[PROCREF_KEY_MAX];  /* "" for the anchor */
	pid_t parent_pid;                  /* the parent's pid when recorded */
	struct exe_tuple exe_spawn;        /* exe when recorded */
	struct exe_tuple exe_connect;      /* exe at the last connect, if any */
	bool has_exe_connect;
	uint64_t spawn_ns;                 /* CLOCK_REALTIME when recorded */
	uint64_t exit_ns;                  /* CLOCK_REALTIME when marked exited */
	bool exited;
};

struct members;

/* A new table rooted at `anchor` (copied as recorded). -EOPNOTSUPP for
 * MEMBERSHIP_CGROUP without cgroup v2 (caps->cgroup_v2 false), -EINVAL for
 * a bad config. caps must outlive the table. */
int members_create(const struct kernel_caps *caps, const struct procref *anchor,
		   const struct members_config *cfg, struct members **out);
void members_free(struct members *t);

/* The anchor spawned `child` (how = MEMBER_ENTRYPOINT or MEMBER_EXEC_SESSION);
 * its parent is the anchor. In cgroup mode the child must already be inside
 * the sandbox cgroup (-EPERM otherwise). -EEXIST when the key is known. */
int members_add_spawned(struct members *t, const struct procref *child, enum member_join how);

/* Record a process whose parent is already known to the caller (a fork event
 * with both pids verified, or a synthetic table in tests). parent_key must
 * be recorded; how is any join but MEMBER_ANCHOR. No cgroup check. */
int members_add_recorded(struct members *t, const struct procref *ref, enum member_join how,
			 const char *parent_key);

/* Learn the live process at pid. Its live parent chain is followed (without
 * ever opening PID 1 of the caller's namespace unless it is the anchor, or
 * anything at or above the anchor's parent) until a recorded entry:
 *   - a member or the anchor (the anchor only in live_chain mode, or for a
 *     process it recorded as spawned) → every unrecorded hop below is
 *     recorded as MEMBER_BORN_IN_TREE; returns 0 and *out (may be NULL);
 *   - the anchor for an unrecorded child, or an ADOPTED entry → those hops
 *     are recorded as MEMBER_ADOPTED; -EPERM, *why = foreign_process.
 * Other failures: -EPERM with why reached_namespace_init / ancestry_not_anchored
 * (nothing recorded), -ESRCH process_vanished, -ESTALE pid_reused, -ELOOP
 * depth_exceeded, -ENOSPC table full. Already known: 0 (member) or -EPERM
 * (adopted, or the anchor itself) without any procfs walk. why may be NULL. */
int members_learn(struct members *t, pid_t pid, enum reason *why, struct member_entry *out);
/* members_learn for a process the caller KNOWS carries the sandbox's
 * seccomp filter: `key` (the process at pid now) sent a notification on the
 * sandbox's listener. A filter is inherited at fork and can be attached to
 * no other process, CLONE_PARENT is denied under it, and an orphan goes to
 * its nearest subreaper ancestor: so it and every live parent up to the
 * anchor descend from a process the anchor spawned, however many middle
 * parents are gone — an unrecorded child of the anchor on that chain is
 * born in the tree under any members_orphans rule (an nsenter'd session
 * has no such filter and never gets here). A key that no longer names the
 * process at pid is judged as by members_learn. */
int members_learn_filtered(struct members *t, pid_t pid, const char *key, enum reason *why,
			   struct member_entry *out);

/* In cgroup mode: is the live process behind ref (pidfd held) inside the
 * sandbox cgroup? 0 yes (always 0 in lineage mode), -EPERM outside (or its
 * cgroup cannot be shown to be inside), -ESRCH gone, -EINVAL recorded ref.
 * The ancestry walk applies it to every live hop. */
int members_check_cgroup(struct members *t, const struct procref *ref);

/* Order-independent fingerprint of a pid set (e.g. members_live_pids):
 * caches keyed on "the same set of processes" compare it. */
uint64_t members_pid_set_hash(const pid_t *pids, size_t n);

/* Mark exited (keeps the record for lineage). -ENOENT unknown key. */
int members_mark_exited(struct members *t, const char *key);
/* Record the exe seen when the process last connected. */
int members_note_connect(struct members *t, const char *key, const struct exe_tuple *exe);
/* Check every not-yet-exited entry against the live process at its pid and
 * mark the gone ones exited; returns how many were marked. */
int members_reap(struct members *t);
/* Drop exited entries that no other entry names as parent (repeats to a
 * fixpoint, so a chain of dead ancestors of a live daemon is kept). Returns
 * how many were removed. */
int members_prune(struct members *t);

/* Copy the entry with this key. -ENOENT unknown. */
int members_lookup_key(struct members *t, const char *key, struct member_entry *out);
/* The entry for the live process at pid, revalidated with procref_match_pid:
 * 0 found; -ENOENT no live entry recorded at pid; -ESTALE an entry is
 * recorded at pid but the live process there is another one (pid reused);
 * -ESRCH nothing lives at pid. Includes the anchor and adopted entries:
 * check out->join. */
int members_lookup_pid(struct members *t, pid_t pid, struct member_entry *out);
/* Is ref recorded with a member join (entrypoint, exec session, born in
 * tree)? Compares keys; the anchor and adopted processes are not members. */
bool members_is_member(struct members *t, const struct procref *ref);
bool members_is_anchor(struct members *t, const struct procref *ref);
/* The anchor's recorded ref. */
void members_anchor(struct members *t, struct procref *out);
enum membership_mode members_mode(struct members *t);
bool members_live_chain(struct members *t);

/* Pids of the members not marked exited (no anchor, no adopted): exactly the
 * set the socket holder search scans. Writes up to max and returns the total
 * count (may exceed max: call again with a bigger buffer). */
size_t members_live_pids(struct members *t, pid_t *out, size_t max);

/* A consistent copy of every entry (anchor first). *out is malloc'd; the
 * count is returned, or -ENOMEM. */
ssize_t members_snapshot(struct members *t, struct member_entry **out);

/* The table as JSON for `tether ps`: {"mode", "cgroup_path", "anchor_key",
 * "processes": [{key, key_kind, pid, parent_key, parent_pid, join, member,
 * comm, start_time, uid, exe_spawn, exe_connect, spawn_time_ns, exited,
 * exit_time_ns}]}. NULL on allocation failure. */
json_t *members_to_json(struct members *t);

/* Can `parent` not be the parent of `child` because it is younger? True
 * when it started at a later clock tick, or — both keyed by pidfs inode,
 * which the kernel hands out in increasing order at fork — when its inode is
 * higher (this also catches a reuse within the same 10 ms tick). */
bool members_younger_than(const struct procref *parent, const struct procref *child);

const char *member_join_word(enum member_join j);
bool member_join_is_member(enum member_join j);
/* The exe tuple as JSON ({path, dev, ino, size, mtime_ns, ctime_ns, deleted,
 * memfd, maps_mismatch, sha256|null}); shared with tether inspect. */
json_t *members_exe_to_json(const struct exe_tuple *exe);
