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

static void idle_role(const struct lt_tree *tr)
{
	(void)tr;
	lt_idle();
}

/* The chain anchor → C → P → S; all three idle. */
static void make_tree(struct members *t, struct lt_tree *tr)
{
	tr->stop[0] = tr->stop[1] = -1;
	lt_make_tree(&caps, t, tr, idle_role, idle_role);
}

static void kill_tree(struct lt_tree *tr)
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

/* A new tree, S learnt (recorded) when learn, and S's ref opened. */
static void start_case(struct members *t, struct lt_tree *tr, bool learn, struct procref *sref)
{
	make_tree(t, tr);
	if (learn) {
		enum reason why;
		LT_CHECK(members_learn(t, tr->s, &why, NULL) == 0, "learn S: %s", reason_word(why));
	}
	LT_REQUIRE(procref_open(&caps, tr->s, sref) == 0, "open S");
}

static void end_case(struct lt_tree *tr, struct procref *sref)
{
	procref_close(sref);
	kill_tree(tr);
}

/* Walk from S with victim killed when the walk reaches hop at. */
static int walk_killing(struct members *t, const struct procref *sref, unsigned at, pid_t victim,
			struct ancestry_result *res)
{
	struct killer k = { .at = at, .victim = victim };
	struct ancestry_opts o = { .between_hops = kill_at_hop, .userdata = &k };
	int r = ancestry_walk(&caps, t, sref, &o, res);
	LT_CHECK(k.fired, "hook did not run");
	return r;
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
		struct lt_tree tr;
		struct procref sref;
		start_case(t, &tr, false, &sref);
		r = walk_killing(t, &sref, 0, tr.s, &res);
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
		end_case(&tr, &sref);
	}

	/* 2. An unrecorded hop (P) exits mid-walk. */
	{
		struct lt_tree tr;
		struct procref sref;
		start_case(t, &tr, false, &sref);
		r = walk_killing(t, &sref, 1, tr.p, &res);
		LT_CHECK(r == -ESRCH && res.reason == REASON_PROCESS_VANISHED,
			 "hop exit: %d %s (%s)", r, reason_word(res.reason), res.detail);
		LT_CHECK(res.failed_pid == tr.p, "failed at %d, not P %d", (int)res.failed_pid,
			 (int)tr.p);
		ancestry_result_free(&res);
		end_case(&tr, &sref);
	}

	/* 3. A recorded (learnt) subject exits after its parent was looked at:
	 * the final liveness check catches it. */
	{
		struct lt_tree tr;
		struct procref sref;
		start_case(t, &tr, true, &sref);
		r = walk_killing(t, &sref, 2, tr.s, &res);
		LT_CHECK(r == -ESRCH && res.reason == REASON_PROCESS_VANISHED,
			 "recorded subject exit: %d %s (%s)", r, reason_word(res.reason),
			 res.detail);
		ancestry_result_free(&res);
		end_case(&tr, &sref);
	}

	/* 4. A recorded hop that exits mid-walk is not a failure: its record
	 * stands in, and the subject's new live parent (the anchor, by
	 * subreaping) is on the chain. */
	{
		struct lt_tree tr;
		struct procref sref;
		start_case(t, &tr, true, &sref);
		LT_CHECK(lt_wait_ppid(tr.s, tr.p, 1000) == 0, "S's parent is not P");
		r = walk_killing(t, &sref, 0, tr.p, &res);
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
		end_case(&tr, &sref);
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
