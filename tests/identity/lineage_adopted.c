/* adopted-foreign: the anchor is the init of a fresh PID namespace (I). It
 * spawns a member M (recorded) which forks G (born in the tree). From
 * OUTSIDE, a process setns()es into that PID namespace and forks a session
 * inside, whose leader then exits: its child (called E2 below, with its own
 * child E3) is orphaned to the namespace init — the anchor — exactly like an
 * nsenter/runtime-exec session. E2 and E3 must not be members: learn refuses them (recorded as adopted), the walk
 * says foreign_process, and live_pids (the holder search set) excludes them.
 * Only a live-chain table (tether inspect) would accept E2: that weakness is
 * pinned here so it stays documented. */
#include <sched.h>
#include <stdio.h>
#include <sys/prctl.h>

#include "tests/identity/lineage_common.h"

/* First pid listed in /proc/<pid>/task/<pid>/children, within timeout. */
static pid_t first_child(pid_t pid, int timeout_ms)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	for (int t = 0; t < timeout_ms; t += 5) {
		char buf[256];
		ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
		if (n > 0) {
			long v = strtol(buf, NULL, 10);
			if (v > 0)
				return (pid_t)v;
		}
		lt_sleep_ms(5);
	}
	return -1;
}

int main(void)
{
	lt_init("lineage_adopted", 25);
	struct kernel_caps caps;
	lt_probe(&caps);
	LT_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "subreaper");

	int ip[2];
	LT_REQUIRE(pipe(ip) == 0, "pipe");
	pid_t u = lt_fork();
	LT_REQUIRE(u >= 0, "fork");
	if (u == 0) {
		if (unshare(CLONE_NEWPID) < 0)
			_exit(10);
		pid_t i = fork();
		if (i == 0) {
			/* PID 1 of the new namespace: the anchor. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			alarm(30);
			pid_t m = fork();
			if (m == 0) {
				if (fork() == 0)
					lt_idle(); /* G */
				lt_idle();     /* M */
			}
			for (;;)
				if (wait(NULL) < 0 && errno == ECHILD)
					pause();
		}
		lt_send_pid(ip[1], i);
		waitpid(i, NULL, 0);
		_exit(0);
	}
	pid_t init;
	LT_REQUIRE(lt_recv_pid(ip[0], &init, 5000) == 0, "no namespace init");
	lt_track(init);
	pid_t m = first_child(init, 5000);
	LT_REQUIRE(m > 0, "M not found");
	pid_t g = first_child(m, 5000);
	LT_REQUIRE(g > 0, "G not found");

	struct procref anchor, mref;
	LT_REQUIRE(procref_open(&caps, init, &anchor) == 0, "open anchor");
	LT_REQUIRE(procref_open(&caps, m, &mref) == 0, "open M");
	struct members *t;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE };
	LT_REQUIRE(members_create(&caps, &anchor, &cfg, &t) == 0, "members_create");
	LT_REQUIRE(members_add_spawned(t, &mref, MEMBER_ENTRYPOINT) == 0, "add M");

	/* Control: G, seen born below M, is a member and anchored. */
	enum reason why;
	int r = members_learn(t, g, &why, NULL);
	LT_CHECK(r == 0, "learn G: %d %s", r, reason_word(why));

	/* Enter the namespace from outside, like nsenter: E1 (outside) joins
	 * the PID namespace for its children and forks E2 inside; E2 forks E3
	 * (which forks E4). When E2 exits, E3 is orphaned to the namespace
	 * init — the anchor. (E2 itself goes to this test, a subreaper, when
	 * E1 exits: its dying parent was outside the namespace.) */
	int ep[2], stop[2];
	LT_REQUIRE(pipe(ep) == 0 && pipe(stop) == 0, "pipe");
	pid_t e1 = lt_fork();
	LT_REQUIRE(e1 >= 0, "fork");
	if (e1 == 0) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)init);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWPID) < 0)
			_exit(11);
		pid_t e2 = fork();
		if (e2 == 0) {
			if (fork() == 0) {
				if (fork() == 0)
					lt_idle(); /* E4 */
				lt_idle();         /* E3 */
			}
			lt_recv_byte(stop[0], 10000);
			_exit(0); /* E2 */
		}
		lt_send_pid(ep[1], e2);
		_exit(0);
	}
	pid_t e2p;
	LT_REQUIRE(lt_recv_pid(ep[0], &e2p, 5000) == 0, "entered process did not report");
	lt_track(e2p);
	LT_REQUIRE(lt_reap(e1, 5000) >= 0, "outside parent did not exit");
	pid_t e3 = first_child(e2p, 5000);
	LT_REQUIRE(e3 > 0, "E3 not found");
	pid_t e4 = first_child(e3, 5000);
	LT_REQUIRE(e4 > 0, "E4 not found");
	lt_send_byte(stop[1]);
	LT_REQUIRE(lt_wait_ppid(e3, init, 5000) == 0, "E3 was not adopted by the ns init");
	LT_CHECK(lt_reap(e2p, 5000) >= 0, "E2 did not exit");
	close(stop[0]), close(stop[1]), close(ep[0]), close(ep[1]);
	/* From here on: E2 := the adopted process, E3 := its child. */
	pid_t e2 = e3;
	e3 = e4;

	struct procref e2ref, e3ref;
	LT_REQUIRE(procref_open(&caps, e2, &e2ref) == 0, "open E2");
	LT_REQUIRE(procref_open(&caps, e3, &e3ref) == 0, "open E3");
	LT_CHECK(e2ref.ppid == init, "E2's live ppid %d is not the anchor", (int)e2ref.ppid);

	/* Not learnt yet: the live ppid is the anchor, but that is not enough. */
	struct ancestry_result res;
	r = ancestry_walk(&caps, t, &e2ref, NULL, &res);
	LT_CHECK(r == -EPERM && res.reason == REASON_FOREIGN_PROCESS, "walk E2: %s (%s)",
		 reason_word(res.reason), res.detail);
	ancestry_result_free(&res);
	r = ancestry_walk(&caps, t, &e3ref, NULL, &res);
	LT_CHECK(r == -EPERM && res.reason == REASON_FOREIGN_PROCESS, "walk E3: %s (%s)",
		 reason_word(res.reason), res.detail);
	ancestry_result_free(&res);

	/* learn refuses both and records them as adopted (for tether ps). */
	struct member_entry e;
	r = members_learn(t, e3, &why, &e);
	LT_CHECK(r == -EPERM && why == REASON_FOREIGN_PROCESS, "learn E3: %d %s", r,
		 reason_word(why));
	LT_CHECK(e.join == MEMBER_ADOPTED, "E3 recorded as %s", member_join_word(e.join));
	LT_CHECK(members_lookup_key(t, e2ref.key, &e) == 0 && e.join == MEMBER_ADOPTED,
		 "E2 not recorded as adopted");
	LT_CHECK(strcmp(e.parent_key, anchor.key) == 0, "E2's recorded parent is not the anchor");
	LT_CHECK(!members_is_member(t, &e2ref) && !members_is_member(t, &e3ref),
		 "an entered process is a member");
	r = ancestry_walk(&caps, t, &e2ref, NULL, &res);
	LT_CHECK(r == -EPERM && res.reason == REASON_FOREIGN_PROCESS, "walk recorded E2: %s",
		 reason_word(res.reason));
	ancestry_result_free(&res);

	pid_t live[8];
	size_t n = members_live_pids(t, live, 8);
	LT_CHECK(n == 2, "live pids: %zu (want M and G)", n);
	for (size_t i = 0; i < n && i < 8; i++)
		LT_CHECK(live[i] == m || live[i] == g, "live pid %d is not M or G", (int)live[i]);

	struct procref gref;
	LT_REQUIRE(procref_open(&caps, g, &gref) == 0, "open G");
	r = ancestry_walk(&caps, t, &gref, NULL, &res);
	LT_CHECK(r == 0 && res.n == 2 && strcmp(res.hops[1].ref.key, anchor.key) == 0,
		 "walk G: %s (%s)", reason_word(res.reason), res.detail);
	ancestry_result_free(&res);

	/* The documented weakness of live-chain membership (no table). */
	struct members *lc;
	struct members_config lcc = { .mode = MEMBERSHIP_LINEAGE, .live_chain = true };
	LT_REQUIRE(members_create(&caps, &anchor, &lcc, &lc) == 0, "live-chain table");
	r = ancestry_walk(&caps, lc, &e2ref, NULL, &res);
	LT_CHECK(r == 0, "live-chain walk of E2: %s", reason_word(res.reason));
	ancestry_result_free(&res);
	members_free(lc);

	procref_close(&gref);
	procref_close(&e2ref);
	procref_close(&e3ref);
	procref_close(&mref);
	procref_close(&anchor);
	members_free(t);
	/* Killing the init ends every process in its namespace. */
	kill(init, SIGKILL);
	LT_CHECK(lt_reap(u, 5000) >= 0, "namespace holder did not exit");
	lt_npids = 0;
	return lt_finish();
}
