/* Unit tests of the member table and the ancestry walk: synthetic tables
 * (recorded, exited entries) for the walk's rules, plus small real process
 * trees (children of the test) where a live process is needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "identity/ancestry.h"
#include "identity/members.h"
#include "identity/procref.h"
#include "tests/identity/lineage_common.h"

struct fx {
	struct kernel_caps caps;
	struct procref anchor;
	struct members *t;
	int next_fake;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	assert_int_equal(kernel_caps_probe(&f->caps), 0);
	assert_int_equal(procref_open(&f->caps, getpid(), &f->anchor), 0);
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE };
	assert_int_equal(members_create(&f->caps, &f->anchor, &cfg, &f->t), 0);
	f->next_fake = 1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	members_free(f->t);
	procref_close(&f->anchor);
	free(f);
	return 0;
}

/* A recorded ref of a process that never existed: a pid above any
 * pid_max, so nothing live can ever match it. */
static struct procref fake(struct fx *f, uint64_t start_time)
{
	struct procref r;
	memset(&r, 0, sizeof(r));
	r.pidfd = -1;
	memcpy(r.boot_id, f->caps.boot_id, sizeof(r.boot_id));
	r.key_kind = PROCREF_KEY_PID_START;
	r.pid = 5000000 + f->next_fake++;
	r.start_time = start_time;
	snprintf(r.comm, sizeof(r.comm), "fake%d", (int)r.pid);
	snprintf(r.key, sizeof(r.key), "%s:%d:%llu", r.boot_id, (int)r.pid,
		 (unsigned long long)start_time);
	return r;
}

/* Append a recorded, exited entry under parent_key; returns its ref. */
static struct procref add(struct fx *f, const char *parent_key, uint64_t start,
			  enum member_join how)
{
	struct procref r = fake(f, start);
	assert_int_equal(members_add_recorded(f->t, &r, how, parent_key), 0);
	assert_int_equal(members_mark_exited(f->t, r.key), 0);
	return r;
}

/* A chain of n recorded entries below the anchor; returns the deepest. */
static struct procref chain(struct fx *f, int n, int64_t step)
{
	struct procref cur = f->anchor;
	uint64_t st = f->anchor.start_time + 1000;
	for (int i = 0; i < n; i++) {
		struct procref r = add(f, cur.key, st, i == 0 ? MEMBER_ENTRYPOINT : MEMBER_BORN_IN_TREE);
		cur = r;
		st = (uint64_t)((int64_t)st + step);
	}
	return cur;
}

static void test_recorded_chain_reaches_anchor(void **state)
{
	struct fx *f = *state;
	struct procref r3 = chain(f, 3, 10);
	struct ancestry_result res;
	assert_int_equal(ancestry_walk(&f->caps, f->t, &r3, NULL, &res), 0);
	assert_int_equal(res.reason, REASON_OK);
	assert_true(res.anchored);
	assert_int_equal(res.n, 3);
	assert_string_equal(res.hops[2].ref.key, f->anchor.key);
	assert_int_equal(res.hops[2].join, MEMBER_ANCHOR);
	assert_false(res.hops[0].live); /* exited, kept as a record */
	assert_true(res.hops[0].recorded);
	assert_int_equal(res.hops[1].join, MEMBER_ENTRYPOINT);
	json_t *j = ancestry_chain_to_json(&res);
	assert_non_null(j);
	assert_int_equal(json_array_size(j), 3);
	json_decref(j);
	ancestry_result_free(&res);
}

static void test_start_time_decreasing_is_pid_reused(void **state)
{
	struct fx *f = *state;
	/* Each child starts 5 ticks *before* its parent. */
	struct procref r = chain(f, 3, -5);
	struct ancestry_result res;
	assert_int_equal(ancestry_walk(&f->caps, f->t, &r, NULL, &res), -ESTALE);
	assert_int_equal(res.reason, REASON_PID_REUSED);
	assert_false(res.anchored);
	assert_string_equal(reason_word(res.reason), "pid_reused");
	ancestry_result_free(&res);
}

static void test_depth_limit(void **state)
{
	struct fx *f = *state;
	struct ancestry_result res;
	/* Default 64: a chain of 70 recorded hops fails. */
	struct procref deep = chain(f, 70, 1);
	assert_int_equal(ancestry_walk(&f->caps, f->t, &deep, NULL, &res), -ELOOP);
	assert_int_equal(res.reason, REASON_DEPTH_EXCEEDED);
	ancestry_result_free(&res);

	/* Exactly max_depth hops (9 entries above the subject + the anchor) pass,
	 * one more fails. */
	struct ancestry_opts o = { .max_depth = 10 };
	struct procref ten = chain(f, 10, 1);
	assert_int_equal(ancestry_walk(&f->caps, f->t, &ten, &o, &res), 0);
	assert_int_equal(res.n, 10);
	ancestry_result_free(&res);
	struct procref eleven = chain(f, 11, 1);
	assert_int_equal(ancestry_walk(&f->caps, f->t, &eleven, &o, &res), -ELOOP);
	assert_int_equal(res.reason, REASON_DEPTH_EXCEEDED);
	ancestry_result_free(&res);
}

static void test_adopted_hop_is_foreign(void **state)
{
	struct fx *f = *state;
	struct procref a = add(f, f->anchor.key, f->anchor.start_time + 1, MEMBER_ADOPTED);
	struct procref b = add(f, a.key, f->anchor.start_time + 2, MEMBER_BORN_IN_TREE);
	struct ancestry_result res;
	assert_int_equal(ancestry_walk(&f->caps, f->t, &b, NULL, &res), -EPERM);
	assert_int_equal(res.reason, REASON_FOREIGN_PROCESS);
	assert_int_equal(res.failed_pid, a.pid);
	ancestry_result_free(&res);
	assert_false(members_is_member(f->t, &a));
}

static void test_unknown_recorded_subject_vanished(void **state)
{
	struct fx *f = *state;
	/* Recorded elsewhere, unknown to the table, nothing at its pid. */
	struct procref r = fake(f, f->anchor.start_time + 1);
	struct ancestry_result res;
	assert_int_equal(ancestry_walk(&f->caps, f->t, &r, NULL, &res), -ESRCH);
	assert_int_equal(res.reason, REASON_PROCESS_VANISHED);
	ancestry_result_free(&res);
}

static void test_subject_is_anchor(void **state)
{
	struct fx *f = *state;
	struct ancestry_result res;
	assert_int_equal(ancestry_walk(&f->caps, f->t, &f->anchor, NULL, &res), 0);
	assert_true(res.anchored);
	assert_int_equal(res.n, 0);
	ancestry_result_free(&res);
}

static pid_t spawn_pause(void)
{
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;)
			pause();
	}
	return p;
}

static void kill_reap(pid_t p)
{
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
}

/* A sibling of the anchor is not below it, and the anchor's parent (this
 * test process) is never opened. */
static void test_sibling_not_anchored(void **state)
{
	struct fx *f = *state;
	pid_t a = spawn_pause(), b = spawn_pause();
	struct procref ar, br;
	assert_int_equal(procref_open(&f->caps, a, &ar), 0);
	assert_int_equal(procref_open(&f->caps, b, &br), 0);
	struct members *t;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE };
	assert_int_equal(members_create(&f->caps, &ar, &cfg, &t), 0);
	struct lt_opened o = { .n = 0 };
	struct ancestry_opts opts = { .on_open = lt_record_open, .userdata = &o };
	struct ancestry_result res;
	assert_int_equal(ancestry_walk(&f->caps, t, &br, &opts, &res), -EPERM);
	assert_int_equal(res.reason, REASON_ANCESTRY_NOT_ANCHORED);
	assert_false(lt_opened_has(&o, getpid()));
	ancestry_result_free(&res);

	/* From this process upwards the chain never meets the anchor: it ends
	 * at PID 1, which is not opened. */
	struct procref self;
	assert_int_equal(procref_open(&f->caps, getpid(), &self), 0);
	o.n = 0;
	assert_int_equal(ancestry_walk(&f->caps, t, &self, &opts, &res), -EPERM);
	assert_int_equal(res.reason, REASON_REACHED_NAMESPACE_INIT);
	assert_false(lt_opened_has(&o, 1));
	ancestry_result_free(&res);

	/* learn refuses both, recording nothing. */
	enum reason why;
	assert_int_equal(members_learn(t, b, &why, NULL), -EPERM);
	assert_int_equal(why, REASON_ANCESTRY_NOT_ANCHORED);
	assert_int_equal(members_lookup_key(t, br.key, NULL), -ENOENT);

	procref_close(&self);
	members_free(t);
	procref_close(&ar);
	procref_close(&br);
	kill_reap(a);
	kill_reap(b);
}

/* The anchor's child that the anchor did not record is foreign; in a
 * live-chain table (tether inspect) it is accepted. */
static void test_unrecorded_anchor_child(void **state)
{
	struct fx *f = *state;
	pid_t k = spawn_pause(), s = spawn_pause();
	struct procref kr, sr;
	assert_int_equal(procref_open(&f->caps, k, &kr), 0);
	assert_int_equal(procref_open(&f->caps, s, &sr), 0);
	struct ancestry_result res;
	assert_int_equal(ancestry_walk(&f->caps, f->t, &kr, NULL, &res), -EPERM);
	assert_int_equal(res.reason, REASON_FOREIGN_PROCESS);
	ancestry_result_free(&res);

	enum reason why;
	struct member_entry e;
	assert_int_equal(members_learn(f->t, k, &why, &e), -EPERM);
	assert_int_equal(why, REASON_FOREIGN_PROCESS);
	assert_int_equal(e.join, MEMBER_ADOPTED);
	assert_false(members_is_member(f->t, &kr));
	/* Known as adopted: the answer comes from the table. */
	assert_int_equal(members_learn(f->t, k, &why, NULL), -EPERM);

	/* Spawned through the table: a member, in live_pids, walk ok. */
	assert_int_equal(members_add_spawned(f->t, &sr, MEMBER_EXEC_SESSION), 0);
	assert_int_equal(members_add_spawned(f->t, &sr, MEMBER_EXEC_SESSION), -EEXIST);
	assert_true(members_is_member(f->t, &sr));
	pid_t pids[8];
	size_t n = members_live_pids(f->t, pids, 8);
	assert_int_equal(n, 1);
	assert_int_equal(pids[0], s);
	assert_int_equal(ancestry_walk(&f->caps, f->t, &sr, NULL, &res), 0);
	assert_int_equal(res.n, 1);
	ancestry_result_free(&res);
	assert_int_equal(members_lookup_pid(f->t, s, &e), 0);
	assert_int_equal(e.join, MEMBER_EXEC_SESSION);
	assert_int_equal(members_lookup_pid(f->t, getpid(), &e), 0);
	assert_int_equal(e.join, MEMBER_ANCHOR);

	struct members *lc;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE, .live_chain = true };
	assert_int_equal(members_create(&f->caps, &f->anchor, &cfg, &lc), 0);
	assert_int_equal(ancestry_walk(&f->caps, lc, &kr, NULL, &res), 0);
	assert_int_equal(res.n, 1);
	ancestry_result_free(&res);
	assert_int_equal(members_learn(lc, k, &why, &e), 0);
	assert_int_equal(e.join, MEMBER_BORN_IN_TREE);
	members_free(lc);

	procref_close(&kr);
	procref_close(&sr);
	kill_reap(k);
	kill_reap(s);
	/* Killed but not marked: lookups see nothing live; reap marks both
	 * (the member and the adopted one) and takes s off live_pids. */
	assert_int_equal(members_lookup_pid(f->t, s, NULL), -ESRCH);
	assert_int_equal(members_reap(f->t), 2);
	assert_int_equal(members_live_pids(f->t, NULL, 0), 0);
	assert_int_equal(members_lookup_pid(f->t, s, NULL), -ENOENT);
}

static void test_create_validation(void **state)
{
	struct fx *f = *state;
	struct members *t = NULL;
	struct members_config bad = { .mode = 0 };
	assert_int_equal(members_create(&f->caps, &f->anchor, &bad, &t), -EINVAL);
	struct members_config rel = { .mode = MEMBERSHIP_CGROUP, .cgroup_path = "tether" };
	struct kernel_caps c = f->caps;
	c.cgroup_v2 = true;
	assert_int_equal(members_create(&c, &f->anchor, &rel, &t), -EINVAL);
	struct members_config dots = { .mode = MEMBERSHIP_CGROUP, .cgroup_path = "/a/../b" };
	assert_int_equal(members_create(&c, &f->anchor, &dots, &t), -EINVAL);
	c.cgroup_v2 = false;
	struct members_config ok = { .mode = MEMBERSHIP_CGROUP, .cgroup_path = "/tether" };
	assert_int_equal(members_create(&c, &f->anchor, &ok, &t), -EOPNOTSUPP);
	assert_null(t);
}

static void test_prune_keeps_lineage_of_live(void **state)
{
	struct fx *f = *state;
	/* a (exited) -> b (exited) -> c (live record) ; d (exited leaf) */
	struct procref a = add(f, f->anchor.key, f->anchor.start_time + 1, MEMBER_ENTRYPOINT);
	struct procref b = add(f, a.key, f->anchor.start_time + 2, MEMBER_BORN_IN_TREE);
	struct procref c = fake(f, f->anchor.start_time + 3);
	assert_int_equal(members_add_recorded(f->t, &c, MEMBER_BORN_IN_TREE, b.key), 0);
	struct procref d = add(f, f->anchor.key, f->anchor.start_time + 4, MEMBER_EXEC_SESSION);
	assert_int_equal(members_add_recorded(f->t, &c, MEMBER_BORN_IN_TREE, b.key), -EEXIST);
	struct procref x = fake(f, 1);
	assert_int_equal(members_add_recorded(f->t, &x, MEMBER_BORN_IN_TREE, "nope"), -ENOENT);

	assert_int_equal(members_prune(f->t), 1); /* only d */
	assert_int_equal(members_lookup_key(f->t, d.key, NULL), -ENOENT);
	assert_int_equal(members_lookup_key(f->t, a.key, NULL), 0);
	assert_int_equal(members_mark_exited(f->t, c.key), 0);
	assert_int_equal(members_prune(f->t), 3); /* c, then b, then a */
	assert_int_equal(members_lookup_key(f->t, a.key, NULL), -ENOENT);
	assert_int_equal(members_mark_exited(f->t, "nope"), -ENOENT);
	/* The anchor is never pruned. */
	assert_int_equal(members_lookup_key(f->t, f->anchor.key, NULL), 0);
}

static void test_table_full(void **state)
{
	struct fx *f = *state;
	struct members *t;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE, .max_entries = 3 };
	assert_int_equal(members_create(&f->caps, &f->anchor, &cfg, &t), 0);
	struct procref a = fake(f, 10), b = fake(f, 11), c = fake(f, 12);
	assert_int_equal(members_add_recorded(t, &a, MEMBER_ENTRYPOINT, f->anchor.key), 0);
	assert_int_equal(members_add_recorded(t, &b, MEMBER_ENTRYPOINT, f->anchor.key), 0);
	assert_int_equal(members_add_recorded(t, &c, MEMBER_ENTRYPOINT, f->anchor.key), -ENOSPC);
	/* Full tables prune exited leaves first. */
	assert_int_equal(members_mark_exited(t, a.key), 0);
	assert_int_equal(members_add_recorded(t, &c, MEMBER_ENTRYPOINT, f->anchor.key), 0);
	members_free(t);
}

/* A full table of the default size (65536): short-lived processes that
 * exited (flat leaves), a daemon's chain of dead ancestors under a live
 * tip, and an exited process with a live child. A build or an agent's
 * shell loop fills a table like this; pruning it must keep exactly the
 * lineage of the live processes, and must not take the table's lock for
 * long (a prune that compared every entry with every other ran for
 * seconds here, stalling the supervisor's loop). */
static void test_prune_full_table(void **state)
{
	struct fx *f = *state;
	struct members *t;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE };
	assert_int_equal(members_create(&f->caps, &f->anchor, &cfg, &t), 0);
	enum { CHAIN = 2000, TOTAL = 65536 - 1 /* the anchor */ };
	struct procref prev = f->anchor, first_hop = { 0 };
	for (int i = 0; i < CHAIN; i++) { /* anchor -> c0 -> c1 -> ... -> tip (live) */
		struct procref r = fake(f, 100 + (uint64_t)i);
		assert_int_equal(members_add_recorded(t, &r, i == 0 ? MEMBER_ENTRYPOINT : MEMBER_BORN_IN_TREE,
						      prev.key), 0);
		if (i == 0)
			first_hop = r;
		if (i + 1 < CHAIN)
			assert_int_equal(members_mark_exited(t, r.key), 0);
		prev = r;
	}
	struct procref tip = prev;
	struct procref parent = fake(f, 50), child = fake(f, 51); /* exited parent, live child */
	assert_int_equal(members_add_recorded(t, &parent, MEMBER_ENTRYPOINT, f->anchor.key), 0);
	assert_int_equal(members_add_recorded(t, &child, MEMBER_BORN_IN_TREE, parent.key), 0);
	assert_int_equal(members_mark_exited(t, parent.key), 0);
	struct procref last = { 0 };
	for (int i = CHAIN + 2; i < TOTAL; i++) {
		last = fake(f, 10000 + (uint64_t)i);
		assert_int_equal(members_add_recorded(t, &last, MEMBER_BORN_IN_TREE, first_hop.key), 0);
		assert_int_equal(members_mark_exited(t, last.key), 0);
	}
	/* Full: the next insert prunes the dead leaves and fits. */
	struct procref one = fake(f, 99999999);
	assert_int_equal(members_add_recorded(t, &one, MEMBER_ENTRYPOINT, f->anchor.key), 0);
	assert_int_equal(members_lookup_key(t, last.key, NULL), -ENOENT);
	assert_int_equal(members_lookup_key(t, first_hop.key, NULL), 0);
	assert_int_equal(members_lookup_key(t, tip.key, NULL), 0);
	assert_int_equal(members_lookup_key(t, parent.key, NULL), 0);
	assert_int_equal(members_lookup_key(t, child.key, NULL), 0);
	assert_int_equal(members_prune(t), 0); /* nothing else is prunable */
	/* The tip exits: its whole dead chain goes in one prune. */
	assert_int_equal(members_mark_exited(t, tip.key), 0);
	assert_int_equal(members_prune(t), CHAIN);
	assert_int_equal(members_lookup_key(t, first_hop.key, NULL), -ENOENT);
	assert_int_equal(members_lookup_key(t, parent.key, NULL), 0);
	assert_int_equal(members_lookup_key(t, f->anchor.key, NULL), 0);
	members_free(t);
}

/* The table stores entries compactly (paths by length): what comes back
 * is what went in, field by field, including a PATH_MAX-long path and an
 * exe_connect replaced by a longer and then a shorter one. */
static void test_entry_roundtrip(void **state)
{
	struct fx *f = *state;
	struct procref r = fake(f, f->anchor.start_time + 7);
	r.ruid = 1234, r.egid = 99, r.cgroup_id = 77, r.procfs_pid = r.pid + 1, r.state = 'S';
	r.exe.dev = 8, r.exe.ino = 4242, r.exe.size = 4096, r.exe.hashed = true;
	memset(r.exe.sha256, 0xab, sizeof(r.exe.sha256));
	memset(r.exe.path, 'p', sizeof(r.exe.path) - 1);
	r.exe.path[0] = '/';
	r.exe.path[sizeof(r.exe.path) - 1] = '\0';
	assert_int_equal(members_add_recorded(f->t, &r, MEMBER_BORN_IN_TREE, f->anchor.key), 0);
	struct exe_tuple *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	c->dev = 9, c->ino = 5, c->deleted = true;
	strcpy(c->path, "/usr/lib/git-core/git-remote-https");
	assert_int_equal(members_note_connect(f->t, r.key, c), 0);
	strcpy(c->path, "/bin/sh");
	c->ino = 6;
	assert_int_equal(members_note_connect(f->t, r.key, c), 0);
	struct member_entry *e = calloc(1, sizeof(*e));
	assert_non_null(e);
	assert_int_equal(members_lookup_key(f->t, r.key, e), 0);
	assert_string_equal(e->ref.key, r.key);
	assert_string_equal(e->ref.exe.path, r.exe.path);
	assert_string_equal(e->exe_spawn.path, r.exe.path);
	assert_int_equal(e->ref.ruid, 1234);
	assert_int_equal(e->ref.egid, 99);
	assert_int_equal(e->ref.cgroup_id, 77);
	assert_int_equal(e->ref.procfs_pid, r.pid + 1);
	assert_int_equal(e->ref.state, 'S');
	assert_int_equal(e->ref.pidfd, -1);
	assert_int_equal(e->exe_spawn.ino, 4242);
	assert_true(e->exe_spawn.hashed);
	assert_memory_equal(e->exe_spawn.sha256, r.exe.sha256, 32);
	assert_true(e->has_exe_connect);
	assert_string_equal(e->exe_connect.path, "/bin/sh");
	assert_int_equal(e->exe_connect.ino, 6);
	assert_true(e->exe_connect.deleted);
	assert_string_equal(e->parent_key, f->anchor.key);
	assert_int_equal(e->parent_pid, f->anchor.pid);
	assert_int_equal(e->join, MEMBER_BORN_IN_TREE);
	assert_false(e->exited);
	assert_int_equal(members_mark_exited(f->t, r.key), 0);
	assert_int_equal(members_lookup_key(f->t, r.key, e), 0);
	assert_true(e->exited);
	assert_true(e->exit_ns >= e->spawn_ns);
	free(e);
	free(c);
}

static void test_json_export(void **state)
{
	struct fx *f = *state;
	struct procref a = add(f, f->anchor.key, f->anchor.start_time + 1, MEMBER_ENTRYPOINT);
	struct procref b = fake(f, f->anchor.start_time + 2);
	assert_int_equal(members_add_recorded(f->t, &b, MEMBER_ADOPTED, f->anchor.key), 0);
	struct exe_tuple ex = { .dev = 1, .ino = 2, .size = 3, .hashed = true };
	strcpy(ex.path, "/usr/bin/curl");
	assert_int_equal(members_note_connect(f->t, b.key, &ex), 0);
	assert_int_equal(members_note_connect(f->t, "nope", &ex), -ENOENT);

	json_t *j = members_to_json(f->t);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "mode")), "lineage");
	assert_string_equal(json_string_value(json_object_get(j, "anchor_key")), f->anchor.key);
	json_t *procs = json_object_get(j, "processes");
	assert_int_equal(json_array_size(procs), 3);
	json_t *p0 = json_array_get(procs, 0), *p1 = json_array_get(procs, 1),
	       *p2 = json_array_get(procs, 2);
	assert_string_equal(json_string_value(json_object_get(p0, "join")), "anchor");
	assert_false(json_is_true(json_object_get(p0, "member")));
	assert_string_equal(json_string_value(json_object_get(p1, "key")), a.key);
	assert_string_equal(json_string_value(json_object_get(p1, "join")), "entrypoint");
	assert_true(json_is_true(json_object_get(p1, "member")));
	assert_true(json_is_true(json_object_get(p1, "exited")));
	assert_true(json_is_integer(json_object_get(p1, "exit_time_ns")));
	assert_string_equal(json_string_value(json_object_get(p1, "parent_key")), f->anchor.key);
	assert_string_equal(json_string_value(json_object_get(p2, "join")), "adopted");
	json_t *ec = json_object_get(p2, "exe_connect");
	assert_string_equal(json_string_value(json_object_get(ec, "path")), "/usr/bin/curl");
	assert_int_equal(strlen(json_string_value(json_object_get(ec, "sha256"))), 64);
	assert_true(json_is_null(json_object_get(p1, "exe_connect")));
	json_decref(j);
}

static void test_unanchored_walk(void **state)
{
	struct fx *f = *state;
	pid_t k = spawn_pause();
	struct procref kr;
	assert_int_equal(procref_open(&f->caps, k, &kr), 0);
	struct lt_opened o = { .n = 0 };
	struct ancestry_opts opts = { .on_open = lt_record_open, .userdata = &o };
	struct ancestry_result res;
	assert_int_equal(ancestry_walk_unanchored(&f->caps, &kr, &opts, &res), 0);
	assert_false(res.anchored);
	assert_true(res.n >= 1);
	assert_int_equal(res.hops[0].ref.pid, getpid());
	for (size_t i = 0; i < res.n; i++)
		assert_int_not_equal(res.hops[i].ref.pid, 1);
	assert_false(lt_opened_has(&o, 1));
	ancestry_result_free(&res);
	procref_close(&kr);
	kill_reap(k);
}

struct worker {
	struct fx *f;
	int id;
	int errors;
};

/* Each thread adds, looks up, exits and prunes its own entries while the
 * others do the same and also read the whole table. */
static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct fx *f = wk->f;
	for (int i = 0; i < 300; i++) {
		struct procref r;
		memset(&r, 0, sizeof(r));
		r.pidfd = -1;
		r.pid = 6000000 + wk->id * 1000 + i;
		r.start_time = f->anchor.start_time + 1;
		snprintf(r.key, sizeof(r.key), "t%d:%d", wk->id, i);
		if (members_add_recorded(f->t, &r, MEMBER_BORN_IN_TREE, f->anchor.key) != 0)
			wk->errors++;
		struct member_entry e;
		if (members_lookup_key(f->t, r.key, &e) != 0 || e.ref.pid != r.pid)
			wk->errors++;
		if (i % 3 == 0 && members_mark_exited(f->t, r.key) != 0)
			wk->errors++;
		(void)members_live_pids(f->t, NULL, 0);
		if (i % 50 == 0) {
			json_t *j = members_to_json(f->t);
			if (!j)
				wk->errors++;
			json_decref(j);
			(void)members_prune(f->t);
		}
	}
	return NULL;
}

static void test_concurrent_use(void **state)
{
	struct fx *f = *state;
	pthread_t th[4];
	struct worker wk[4];
	for (int i = 0; i < 4; i++) {
		wk[i] = (struct worker){ .f = f, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &wk[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(wk[i].errors, 0);
	}
	members_prune(f->t);
	/* 4 x 200 entries were never marked exited: all still there. */
	assert_int_equal(members_live_pids(f->t, NULL, 0), 800);
	struct member_entry *snap;
	ssize_t n = members_snapshot(f->t, &snap);
	assert_int_equal(n, 801); /* + the anchor */
	free(snap);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_recorded_chain_reaches_anchor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_start_time_decreasing_is_pid_reused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_depth_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_adopted_hop_is_foreign, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_recorded_subject_vanished, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_subject_is_anchor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sibling_not_anchored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unrecorded_anchor_child, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_validation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_keeps_lineage_of_live, setup, teardown),
		cmocka_unit_test_setup_teardown(test_table_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune_full_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entry_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_json_export, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unanchored_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_use, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
