/* vanished: processes exiting while the walk runs (killed from the
 * between_hops hook, then waited for) give process_vanished — never a crash,
 * never a chain. A *recorded* hop that exits mid-walk is fine: the record
 * stands in for it. The test is the anchor (and a subreaper, so orphans come
 * back to it and nothing is left behind). */
#include <stdio.h>
#include <sys/prctl.h>

#include "tests/identity/lineage_common.h"

static struct kernel_caps caps;
static struct procref anchor;

static void idle(void)
{
	alarm(30);
	for (;;)
		pause();
}

/* A chain anchor → C (spawned, recorded) → P → S; P and S not recorded. */
struct tree {
	pid_t c, p, s;
	struct procref cref;
};

static void make_tree(struct members *t, struct tree *tr)
{
	int pp[2], sp[2];
	LT_REQUIRE(pipe(pp) == 0 && pipe(sp) == 0, "pipe");
	tr->c = lt_fork();
	LT_REQUIRE(tr->c >= 0, "fork");
	if (tr->c == 0) {
		pid_t p = fork();
		if (p == 0) {
			pid_t s = fork();
			if (s == 0)
				idle();
			lt_send_pid(sp[1], s);
			idle();
		}
		lt_send_pid(pp[1], p);
		idle();
	}
	LT_REQUIRE(lt_recv_pid(pp[0], &tr->p, 5000) == 0 && lt_recv_pid(sp[0], &tr->s, 5000) == 0,
		   "tree did not report");
	lt_track(tr->p);
	lt_track(tr->s);
	LT_REQUIRE(procref_open(&caps, tr->c, &tr->cref) == 0, "open C");
	LT_REQUIRE(members_add_spawned(t, &tr->cref, MEMBER_ENTRYPOINT) == 0, "add C");
	close(pp[0]), close(pp[1]), close(sp[0]), close(sp[1]);
}

static void kill_tree(struct tree *tr)
{
	kill(tr->s, SIGKILL);
	kill(tr->p, SIGKILL);
	kill(tr->c, SIGKILL);
	procref_close(&tr->cref);
}

/* Kill `victim` (a pid) when the walk reaches hop `at`, and wait until it
 * is dead so the walk's next look sees it gone. */
struct killer {
	unsigned at;
	pid_t victim;
	bool fired;
};

static void kill_at_hop(unsigned hop, const struct procref *cur, void *ud)
{
	(void)cur;
	struct killer *k = ud;
	if (hop != k->at || k->fired)
		return;
	k->fired = true;
	int pfd = sys_pidfd_open(k->victim, 0);
	kill(k->victim, SIGKILL);
	if (pfd >= 0) {
		lt_wait_dead(pfd, 5000);
		close(pfd);
	}
}

int main(void)
{
	lt_init("lineage_vanished", 25);
	lt_probe(&caps);
	LT_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "subreaper");
	LT_REQUIRE(procref_open(&caps, getpid(), &anchor) == 0, "open self");
	struct members *t;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE };
	LT_REQUIRE(members_create(&caps, &anchor, &cfg, &t) == 0, "members_create");
	struct ancestry_result res;
	int r;

	/* 1. The (unrecorded) subject exits before its parent is confirmed. */
	{
		struct tree tr;
		make_tree(t, &tr);
		struct procref sref;
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		struct killer k = { .at = 0, .victim = tr.s };
		struct ancestry_opts o = { .between_hops = kill_at_hop, .userdata = &k };
		r = ancestry_walk(&caps, t, &sref, &o, &res);
		LT_CHECK(k.fired, "hook did not run");
		LT_CHECK(r == -ESRCH && res.reason == REASON_PROCESS_VANISHED && !res.anchored,
			 "subject exit: %d %s (%s)", r, reason_word(res.reason), res.detail);
		ancestry_result_free(&res);
		/* Walking the dead subject again, and learning it, are vanished too. */
		r = ancestry_walk(&caps, t, &sref, NULL, &res);
		LT_CHECK(r == -ESRCH && res.reason == REASON_PROCESS_VANISHED, "dead subject: %s",
			 reason_word(res.reason));
		ancestry_result_free(&res);
		enum reason why;
		r = members_learn(t, tr.s, &why, NULL);
		LT_CHECK(r == -ESRCH && why == REASON_PROCESS_VANISHED, "learn dead: %d %s", r,
			 reason_word(why));
		procref_close(&sref);
		kill_tree(&tr);
	}

	/* 2. An unrecorded hop (P) exits mid-walk. */
	{
		struct tree tr;
		make_tree(t, &tr);
		struct procref sref;
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		struct killer k = { .at = 1, .victim = tr.p };
		struct ancestry_opts o = { .between_hops = kill_at_hop, .userdata = &k };
		r = ancestry_walk(&caps, t, &sref, &o, &res);
		LT_CHECK(k.fired, "hook did not run");
		LT_CHECK(r == -ESRCH && res.reason == REASON_PROCESS_VANISHED,
			 "hop exit: %d %s (%s)", r, reason_word(res.reason), res.detail);
		LT_CHECK(res.failed_pid == tr.p, "failed at %d, not P %d", (int)res.failed_pid,
			 (int)tr.p);
		ancestry_result_free(&res);
		procref_close(&sref);
		kill_tree(&tr);
	}

	/* 3. A recorded (learnt) subject exits after its parent was looked at:
	 * the final liveness check catches it. */
	{
		struct tree tr;
		make_tree(t, &tr);
		enum reason why;
		LT_CHECK(members_learn(t, tr.s, &why, NULL) == 0, "learn S: %s", reason_word(why));
		struct procref sref;
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		struct killer k = { .at = 2, .victim = tr.s };
		struct ancestry_opts o = { .between_hops = kill_at_hop, .userdata = &k };
		r = ancestry_walk(&caps, t, &sref, &o, &res);
		LT_CHECK(k.fired, "hook did not run");
		LT_CHECK(r == -ESRCH && res.reason == REASON_PROCESS_VANISHED,
			 "recorded subject exit: %d %s (%s)", r, reason_word(res.reason),
			 res.detail);
		ancestry_result_free(&res);
		procref_close(&sref);
		kill_tree(&tr);
	}

	/* 4. A recorded hop that exits mid-walk is not a failure: its record
	 * stands in, and the subject's new live parent (the anchor, by
	 * subreaping) is on the chain. */
	{
		struct tree tr;
		make_tree(t, &tr);
		enum reason why;
		LT_CHECK(members_learn(t, tr.s, &why, NULL) == 0, "learn S: %s", reason_word(why));
		struct procref sref;
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		struct killer k = { .at = 0, .victim = tr.p };
		struct ancestry_opts o = { .between_hops = kill_at_hop, .userdata = &k };
		LT_CHECK(lt_wait_ppid(tr.s, tr.p, 1000) == 0, "S's parent is not P");
		r = ancestry_walk(&caps, t, &sref, &o, &res);
		LT_CHECK(k.fired, "hook did not run");
		/* S's ppid was read before P died and still names P: consistent
		 * with the record. */
		LT_CHECK(r == 0 && res.n == 3 && !res.hops[0].live,
			 "recorded hop exit: %d %s (%s)", r, reason_word(res.reason), res.detail);
		ancestry_result_free(&res);
		/* Once reparented, the walk is anchored through P's record. */
		LT_CHECK(lt_wait_ppid(tr.s, getpid(), 5000) == 0, "S not reparented");
		procref_close(&sref);
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		r = ancestry_walk(&caps, t, &sref, NULL, &res);
		LT_CHECK(r == 0 && res.n == 3 && !res.hops[0].live && res.hops[0].recorded,
			 "walk after P died: %s (%s) n=%zu", reason_word(res.reason), res.detail,
			 res.n);
		ancestry_result_free(&res);
		procref_close(&sref);
		kill_tree(&tr);
	}

	members_free(t);
	procref_close(&anchor);
	/* Everything left is ours (subreaper): reap with a bound. */
	for (int i = 0; i < 400; i++) {
		pid_t w = waitpid(-1, NULL, WNOHANG);
		if (w < 0 && errno == ECHILD)
			break;
		if (w == 0)
			lt_sleep_ms(5);
	}
	lt_npids = 0;
	return lt_finish();
}
