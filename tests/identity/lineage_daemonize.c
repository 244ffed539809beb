/* daemonize: the test is the anchor (a child subreaper). It spawns an
 * entrypoint C (recorded through the table); C forks a middle M which forks
 * daemons D, D2, D3 and exits, so they are reparented to the anchor.
 *   - D was learnt while M was alive: still a member afterwards, and its
 *     chain D → M (recorded, exited) → C → anchor is anchored although its
 *     live ppid now is the anchor.
 *   - D2 was never seen before M exited: it is indistinguishable from an
 *     adopted stranger, so it is NOT a member (fail closed; the supervisor
 *     learns forks while the parent lives).
 *   - the orphan rules: with MEMBERS_ORPHANS_DESCENDANTS (we are a subreaper,
 *     not PID 1) or, in cgroup mode, MEMBERS_ORPHANS_IN_CGROUP, D2 is born in
 *     the tree after all; D3 outside the cgroup never is.
 *   - cgroup mode: D3 is moved out of the sandbox cgroup before it is learnt
 *     and is refused; a spawned child outside the cgroup is refused.
 *   - MEMBERS_ORPHANS_FOREIGN: D2 is adopted unless it is vouched for as
 *     carrying the sandbox's filter (members_learn_filtered) under its own
 *     key. */
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "tests/identity/lineage_common.h"

static struct kernel_caps caps;
static struct procref anchor;

static int self_opened;
static void note_self_open(pid_t pid, void *userdata)
{
	(void)userdata;
	if (pid == getpid())
		self_opened++;
}

static void daemon_body(void)
{
	alarm(30); /* bounded even if the test dies without killing us */
	for (;;)
		pause();
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, s, strlen(s));
	int r = n == (ssize_t)strlen(s) ? 0 : -errno;
	close(fd);
	return r;
}

static int move_to_cgroup(const char *dir, pid_t pid)
{
	char path[PATH_MAX], v[32];
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	snprintf(v, sizeof(v), "%d", (int)pid);
	return write_file(path, v);
}

/* Own cgroup v2 path as /proc/self/cgroup prints it. */
static int own_cgroup(char *out, size_t size)
{
	char *buf;
	size_t len;
	int r = lt_proc_read("/proc/self", "cgroup", PROCFS_CGROUP_MAX, &buf, &len);
	if (r < 0)
		return r;
	struct procfs_cgroup cg;
	r = procfs_parse_cgroup(buf, len, &cg);
	free(buf);
	if (r < 0)
		return r;
	return snprintf(out, size, "%s", cg.path) < (int)size ? 0 : -ENAMETOOLONG;
}

static void scenario(enum membership_mode mode)
{
	fprintf(stderr, "--- %s mode\n", mode == MEMBERSHIP_CGROUP ? "cgroup" : "lineage");
	char cg_rel[1200] = "", cg_dir[1600] = "", cg_parent_dir[1400] = "";
	struct members_config cfg = { .mode = mode };
	if (mode == MEMBERSHIP_CGROUP) {
		char own[1024];
		LT_REQUIRE(own_cgroup(own, sizeof(own)) == 0, "cannot read own cgroup");
		snprintf(cg_rel, sizeof(cg_rel), "%s%stether-lineage-%d",
			 own, strcmp(own, "/") == 0 ? "" : "/", (int)getpid());
		snprintf(cg_parent_dir, sizeof(cg_parent_dir), "%s%s", caps.cgroup_root,
			 strcmp(own, "/") == 0 ? "" : own);
		snprintf(cg_dir, sizeof(cg_dir), "%s%s", caps.cgroup_root, cg_rel);
		if (mkdir(cg_dir, 0755) < 0) {
			fprintf(stderr, "cgroup mode skipped: mkdir %s: %s\n", cg_dir,
				strerror(errno));
			return;
		}
		cfg.cgroup_path = cg_rel;
	}
	struct members *t;
	LT_REQUIRE(members_create(&caps, &anchor, &cfg, &t) == 0, "members_create");

	int go[2], pids[2], stop[2], mpipe[2];
	LT_REQUIRE(pipe(go) == 0 && pipe(pids) == 0 && pipe(stop) == 0 && pipe(mpipe) == 0,
		   "pipe");
	pid_t c = lt_fork();
	LT_REQUIRE(c >= 0, "fork");
	if (c == 0) {
		alarm(30);
		if (lt_recv_byte(go[0], 10000) < 0)
			_exit(10);
		pid_t m = fork();
		if (m == 0) {
			pid_t d[3];
			for (int i = 0; i < 3; i++) {
				d[i] = fork();
				if (d[i] == 0)
					daemon_body();
			}
			for (int i = 0; i < 3; i++)
				lt_send_pid(pids[1], d[i]);
			lt_recv_byte(stop[0], 10000);
			_exit(0);
		}
		lt_send_pid(mpipe[1], m);
		waitpid(m, NULL, 0);
		daemon_body();
	}

	if (mode == MEMBERSHIP_CGROUP) {
		/* Spawned outside the sandbox cgroup: refused at add_spawned. */
		struct procref out_of;
		LT_REQUIRE(procref_open(&caps, c, &out_of) == 0, "open C");
		LT_CHECK(members_add_spawned(t, &out_of, MEMBER_ENTRYPOINT) == -EPERM,
			 "a child outside the sandbox cgroup was accepted");
		procref_close(&out_of);
		LT_REQUIRE(move_to_cgroup(cg_dir, c) == 0, "move C into %s", cg_dir);
	}
	struct procref cref;
	LT_REQUIRE(procref_open(&caps, c, &cref) == 0, "open C");
	LT_REQUIRE(members_add_spawned(t, &cref, MEMBER_ENTRYPOINT) == 0, "add C");
	if (mode == MEMBERSHIP_CGROUP) {
		/* The table's id shortcut rests on "cgroup id = directory inode". */
		struct stat cst;
		LT_CHECK(stat(cg_dir, &cst) == 0 && cref.cgroup_id == (uint64_t)cst.st_ino,
			 "cgroup id %llu is not the inode of %s", (unsigned long long)cref.cgroup_id,
			 cg_dir);
	}
	lt_send_byte(go[1]);

	pid_t m, d, d2, d3;
	LT_REQUIRE(lt_recv_pid(pids[0], &d, 5000) == 0 && lt_recv_pid(pids[0], &d2, 5000) == 0 &&
			   lt_recv_pid(pids[0], &d3, 5000) == 0 && lt_recv_pid(mpipe[0], &m, 5000) == 0,
		   "children did not report");
	lt_track(d);
	lt_track(d2);
	lt_track(d3);

	/* Learn D while M lives: D and M are recorded as born in the tree. */
	struct member_entry de, me;
	enum reason why = REASON_INTERNAL_ERROR;
	int r = members_learn(t, d, &why, &de);
	LT_CHECK(r == 0, "learn D: %d %s", r, reason_word(why));
	LT_CHECK(de.join == MEMBER_BORN_IN_TREE, "D join %s", member_join_word(de.join));
	LT_CHECK(members_lookup_pid(t, m, &me) == 0, "M not recorded by learning D");
	LT_CHECK(strcmp(de.parent_key, me.ref.key) == 0, "D's parent is not M");
	LT_CHECK(strcmp(me.parent_key, cref.key) == 0, "M's parent is not C");
	LT_CHECK(members_live_pids(t, NULL, 0) == 3, "live pids: %zu",
		 members_live_pids(t, NULL, 0));

	if (mode == MEMBERSHIP_CGROUP) {
		/* Born in the tree but moved out of the sandbox (root can): not a
		 * member, nothing recorded. */
		LT_REQUIRE(move_to_cgroup(cg_parent_dir, d3) == 0, "move D3 out");
		r = members_learn(t, d3, &why, NULL);
		LT_CHECK(r == -EPERM && why == REASON_FOREIGN_PROCESS, "learn D3: %d %s", r,
			 reason_word(why));
		LT_CHECK(members_lookup_pid(t, d3, NULL) == -ENOENT, "D3 was recorded");
		/* The walk applies the cgroup rule to live hops as well. */
		struct procref d3ref;
		LT_REQUIRE(procref_open(&caps, d3, &d3ref) == 0, "open D3");
		struct ancestry_result r3;
		r = ancestry_walk(&caps, t, &d3ref, NULL, &r3);
		LT_CHECK(r == -EPERM && r3.reason == REASON_FOREIGN_PROCESS, "walk D3: %s (%s)",
			 reason_word(r3.reason), r3.detail);
		ancestry_result_free(&r3);
		procref_close(&d3ref);
	}

	/* The middle exits; the daemons are reparented to the anchor. */
	lt_send_byte(stop[1]);
	LT_CHECK(lt_wait_ppid(d, getpid(), 5000) == 0, "D was not reparented to the anchor");
	LT_CHECK(lt_wait_ppid(d2, getpid(), 5000) == 0, "D2 was not reparented to the anchor");

	struct procref dref;
	LT_REQUIRE(procref_open(&caps, d, &dref) == 0, "open D");
	LT_CHECK(dref.ppid == getpid(), "D's live ppid is %d", (int)dref.ppid);
	LT_CHECK(members_is_member(t, &dref), "D is not a member after daemonizing");
	struct ancestry_result res;
	r = ancestry_walk(&caps, t, &dref, NULL, &res);
	LT_CHECK(r == 0 && res.reason == REASON_OK && res.anchored, "walk D: %s (%s)",
		 reason_word(res.reason), res.detail);
	LT_CHECK(res.n == 3, "chain length %zu", res.n);
	if (res.n == 3) {
		LT_CHECK(strcmp(res.hops[0].ref.key, me.ref.key) == 0, "hop 0 is not M");
		LT_CHECK(!res.hops[0].live && res.hops[0].recorded, "M should be a recorded hop");
		LT_CHECK(strcmp(res.hops[1].ref.key, cref.key) == 0 && res.hops[1].live,
			 "hop 1 is not live C");
		LT_CHECK(strcmp(res.hops[2].ref.key, anchor.key) == 0, "chain does not end at anchor");
	}
	ancestry_result_free(&res);
	/* anchor_is_self (we are the anchor): the same chain, and the walk
	 * never opens the anchor to confirm it is alive. */
	{
		struct ancestry_opts ao = { .anchor_is_self = true, .on_open = note_self_open };
		self_opened = 0;
		r = ancestry_walk(&caps, t, &dref, &ao, &res);
		LT_CHECK(r == 0 && res.anchored && res.n == 3, "anchor_is_self walk D: %s", reason_word(res.reason));
		LT_CHECK(self_opened == 0, "anchor_is_self still opened the anchor %d time(s)", self_opened);
		ancestry_result_free(&res);
		ao.anchor_is_self = false;
		r = ancestry_walk(&caps, t, &dref, &ao, &res);
		LT_CHECK(r == 0 && self_opened > 0, "without anchor_is_self the anchor is confirmed (opened %d)",
			 self_opened);
		ancestry_result_free(&res);
	}
	/* skip_exe: same chain, live hops carry the exe recorded at learn. */
	struct ancestry_opts so = { .skip_exe = true };
	r = ancestry_walk(&caps, t, &dref, &so, &res);
	LT_CHECK(r == 0 && res.n == 3 && res.hops[1].live && res.hops[1].ref.exe.ino != 0 &&
			 res.hops[1].ref.exe.ino == cref.exe.ino,
		 "skip_exe walk D: %s n=%zu", reason_word(res.reason), res.n);
	ancestry_result_free(&res);

	if (mode == MEMBERSHIP_CGROUP) {
		/* Below the sandbox cgroup is inside it. */
		char sub[1700];
		snprintf(sub, sizeof(sub), "%s/sub", cg_dir);
		LT_REQUIRE(mkdir(sub, 0755) == 0, "mkdir %s", sub);
		LT_REQUIRE(move_to_cgroup(sub, d) == 0, "move D below the sandbox");
		r = ancestry_walk(&caps, t, &dref, NULL, &res);
		LT_CHECK(r == 0, "walk D in a child cgroup: %s (%s)", reason_word(res.reason),
			 res.detail);
		ancestry_result_free(&res);
		LT_CHECK(members_check_cgroup(t, &dref) == 0, "D in a child cgroup is outside");
		/* A recorded member moved out of the sandbox fails the walk. */
		LT_REQUIRE(move_to_cgroup(cg_parent_dir, d) == 0, "move D out");
		LT_CHECK(rmdir(sub) == 0, "rmdir %s: %s", sub, strerror(errno));
		LT_CHECK(members_check_cgroup(t, &dref) == -EPERM, "D outside is inside");
		r = ancestry_walk(&caps, t, &dref, NULL, &res);
		LT_CHECK(r == -EPERM && res.reason == REASON_FOREIGN_PROCESS,
			 "walk D outside the cgroup: %s (%s)", reason_word(res.reason), res.detail);
		ancestry_result_free(&res);
		LT_REQUIRE(move_to_cgroup(cg_dir, d) == 0, "move D back");
	}

	/* D2 was not seen while M lived: adopted, not a member, walk foreign. */
	struct procref d2ref;
	LT_REQUIRE(procref_open(&caps, d2, &d2ref) == 0, "open D2");
	r = ancestry_walk(&caps, t, &d2ref, NULL, &res);
	LT_CHECK(r == -EPERM && res.reason == REASON_FOREIGN_PROCESS, "walk D2 unlearnt: %s",
		 reason_word(res.reason));
	ancestry_result_free(&res);
	struct member_entry d2e;
	r = members_learn(t, d2, &why, &d2e);
	LT_CHECK(r == -EPERM && why == REASON_FOREIGN_PROCESS && d2e.join == MEMBER_ADOPTED,
		 "learn D2: %d %s", r, reason_word(why));
	LT_CHECK(!members_is_member(t, &d2ref), "D2 is a member");
	r = ancestry_walk(&caps, t, &d2ref, NULL, &res);
	LT_CHECK(r == -EPERM && res.reason == REASON_FOREIGN_PROCESS, "walk D2 adopted: %s",
		 reason_word(res.reason));
	ancestry_result_free(&res);

	/* The orphan rules (enum members_orphans), each in a fresh table that
	 * knows only the anchor and C. We are a subreaper and not PID 1, so
	 * DESCENDANTS is sound here; IN_CGROUP decides by the sandbox cgroup. */
	for (int rule = MEMBERS_ORPHANS_DESCENDANTS; rule <= MEMBERS_ORPHANS_IN_CGROUP; rule++) {
		struct members_config oc = cfg;
		oc.orphans = (enum members_orphans)rule;
		struct members *t2;
		LT_REQUIRE(members_create(&caps, &anchor, &oc, &t2) == 0, "members_create (orphans)");
		LT_REQUIRE(members_add_spawned(t2, &cref, MEMBER_ENTRYPOINT) == 0, "add C (orphans)");
		bool in_cgroup_rule = rule == MEMBERS_ORPHANS_IN_CGROUP;
		/* in lineage mode IN_CGROUP has no cgroup to ask: stays adopted */
		bool want_member = !in_cgroup_rule || mode == MEMBERSHIP_CGROUP;
		struct member_entry oe;
		r = members_learn(t2, d2, &why, &oe);
		LT_CHECK(want_member ? (r == 0 && oe.join == MEMBER_BORN_IN_TREE)
				     : (r == -EPERM && oe.join == MEMBER_ADOPTED),
			 "orphans rule %d, %s mode: learn D2: %d %s", rule,
			 mode == MEMBERSHIP_CGROUP ? "cgroup" : "lineage", r, reason_word(why));
		if (mode == MEMBERSHIP_CGROUP) {
			/* D3 sits outside the sandbox cgroup: never a member */
			r = members_learn(t2, d3, &why, NULL);
			LT_CHECK(r == -EPERM && why == REASON_FOREIGN_PROCESS,
				 "orphans rule %d: learn D3 outside the cgroup: %d %s", rule, r,
				 reason_word(why));
		}
		members_free(t2);
	}

	/* MEMBERS_ORPHANS_FOREIGN (a PID-1 anchor without a cgroup): D2 is
	 * adopted, unless the caller vouches that D2 itself carries the
	 * sandbox's seccomp filter (members_learn_filtered, as the notifier's
	 * record does); another process's key vouches for nothing, and in
	 * cgroup mode D3 outside the cgroup stays refused. */
	{
		struct members_config oc = cfg;
		oc.orphans = MEMBERS_ORPHANS_FOREIGN;
		struct members *t3;
		LT_REQUIRE(members_create(&caps, &anchor, &oc, &t3) == 0, "members_create (foreign)");
		LT_REQUIRE(members_add_spawned(t3, &cref, MEMBER_ENTRYPOINT) == 0, "add C (foreign)");
		struct member_entry fe;
		r = members_learn_filtered(t3, d2, dref.key, &why, &fe);
		LT_CHECK(r == -EPERM && why == REASON_FOREIGN_PROCESS && fe.join == MEMBER_ADOPTED,
			 "foreign: D2 vouched with D's key: %d %s", r, reason_word(why));
		members_free(t3);
		LT_REQUIRE(members_create(&caps, &anchor, &oc, &t3) == 0, "members_create (foreign 2)");
		LT_REQUIRE(members_add_spawned(t3, &cref, MEMBER_ENTRYPOINT) == 0, "add C (foreign 2)");
		r = members_learn(t3, d2, &why, &fe);
		LT_CHECK(r == -EPERM && fe.join == MEMBER_ADOPTED, "foreign: D2 unvouched: %d %s", r,
			 reason_word(why));
		members_free(t3);
		LT_REQUIRE(members_create(&caps, &anchor, &oc, &t3) == 0, "members_create (foreign 3)");
		LT_REQUIRE(members_add_spawned(t3, &cref, MEMBER_ENTRYPOINT) == 0, "add C (foreign 3)");
		r = members_learn_filtered(t3, d2, d2ref.key, &why, &fe);
		LT_CHECK(r == 0 && fe.join == MEMBER_BORN_IN_TREE, "foreign: D2 vouched: %d %s", r,
			 reason_word(why));
		r = ancestry_walk(&caps, t3, &d2ref, NULL, &res);
		LT_CHECK(r == 0 && res.anchored, "foreign: walk vouched D2: %s (%s)", reason_word(res.reason),
			 res.detail);
		ancestry_result_free(&res);
		if (mode == MEMBERSHIP_CGROUP) {
			struct procref d3ref;
			LT_REQUIRE(procref_open(&caps, d3, &d3ref) == 0, "open D3 (foreign)");
			r = members_learn_filtered(t3, d3, d3ref.key, &why, NULL);
			LT_CHECK(r == -EPERM && why == REASON_FOREIGN_PROCESS,
				 "foreign: D3 outside the cgroup, vouched: %d %s", r, reason_word(why));
			procref_close(&d3ref);
		}
		LT_CHECK(members_learn_filtered(t3, d2, "", &why, NULL) == -EINVAL, "empty key accepted");
		members_free(t3);
	}

	/* M is gone: lookups by its pid fail, reap marks it, live pids = C, D. */
	r = members_lookup_pid(t, m, NULL);
	LT_CHECK(r == -ESRCH || r == -ESTALE, "lookup of exited M: %d", r);
	LT_CHECK(members_reap(t) == 1, "reap did not mark exactly M");
	pid_t live[8];
	size_t n = members_live_pids(t, live, 8);
	LT_CHECK(n == 2, "live pids after reap: %zu", n);
	for (size_t i = 0; i < n && i < 8; i++)
		LT_CHECK(live[i] == c || live[i] == d, "unexpected live pid %d", (int)live[i]);

	json_t *j = members_to_json(t);
	LT_CHECK(j && json_array_size(json_object_get(j, "processes")) == 5,
		 "json has %zu processes", j ? json_array_size(json_object_get(j, "processes")) : 0);
	json_decref(j);

	procref_close(&dref);
	procref_close(&d2ref);
	procref_close(&cref);
	members_free(t);
	kill(d, SIGKILL);
	kill(d2, SIGKILL);
	kill(d3, SIGKILL);
	kill(c, SIGKILL);
	/* d, d2 and d3 are ours now (subreaper), c always was. */
	pid_t mine[] = { c, d, d2, d3 };
	for (size_t i = 0; i < ARRAY_SIZE(mine); i++)
		lt_reap(mine[i], 5000);
	lt_npids = 0;
	close(go[0]), close(go[1]), close(pids[0]), close(pids[1]), close(stop[0]), close(stop[1]);
	close(mpipe[0]), close(mpipe[1]);
	if (cg_dir[0]) {
		for (int i = 0; i < 200 && rmdir(cg_dir) < 0 && errno == EBUSY; i++)
			lt_sleep_ms(10);
		LT_CHECK(access(cg_dir, F_OK) < 0, "cgroup %s left behind", cg_dir);
	}
}

int main(void)
{
	lt_init("lineage_daemonize", 25);
	lt_probe(&caps);
	LT_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "subreaper");
	LT_REQUIRE(procref_open(&caps, getpid(), &anchor) == 0, "open self");
	scenario(MEMBERSHIP_LINEAGE);
	if (caps.cgroup_v2) {
		scenario(MEMBERSHIP_CGROUP);
	} else {
		struct members *t = NULL;
		struct members_config cfg = { .mode = MEMBERSHIP_CGROUP, .cgroup_path = "/x" };
		LT_CHECK(members_create(&caps, &anchor, &cfg, &t) == -EOPNOTSUPP,
			 "cgroup mode without cgroup v2 must be refused");
	}
	procref_close(&anchor);
	return lt_finish();
}
