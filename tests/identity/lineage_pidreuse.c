/* pid-reuse in a chain: inside a private PID (and mount) namespace whose
 * init is the anchor, a recorded or live parent dies and clone3(set_tid)
 * puts a newcomer N at exactly its pid. The newcomer is never accepted:
 *   A. recorded lineage: S → P (recorded, died, pid now N) → C → anchor is
 *      anchored through P's *record*; N's key is on no hop; lookup by P's
 *      pid says pid reused (-ESTALE); N itself is not a member.
 *   B. a recorded subject (ref without pidfd, unknown to the table) whose
 *      pid now holds N → pid_reused.
 *   C. live chain: S → P (unrecorded) → C; between reading S's ppid and
 *      opening it, P dies and N takes its pid → pid_reused (N started after
 *      its "child").
 * The whole scenario runs as PID 1 of the namespace; the driver checks its
 * exit status. */
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/prctl.h>

#include "tests/common/clone_at.h"
#include "tests/identity/lineage_common.h"

static struct kernel_caps caps;

/* Reap children forever (a parent in the tree that frees its children's
 * pids as soon as they exit). */
static void reaper(void)
{
	alarm(30);
	for (;;)
		if (wait(NULL) < 0 && errno == ECHILD)
			pause();
}

/* Wait until pid is free (exited and reaped). */
static int wait_pid_free(pid_t pid, int timeout_ms)
{
	for (int t = 0; t < timeout_ms; t += 2) {
		if (kill(pid, 0) < 0 && errno == ESRCH)
			return 0;
		lt_sleep_ms(2);
	}
	return -ETIMEDOUT;
}

/* A newcomer at exactly `pid` (this namespace), child of the caller. */
static pid_t spawn_at(pid_t pid)
{
	pid_t r = clone_at_pid(pid);
	if (r == 0)
		lt_idle();
	if (r > 0)
		lt_track(r);
	return r;
}

/* P waits for a byte on stop, then exits. */
static void stop_role(const struct lt_tree *tr)
{
	lt_recv_byte(tr->stop[0], 20000);
	_exit(0);
}

static void reaper_role(const struct lt_tree *tr)
{
	(void)tr;
	reaper();
}

/* C (spawned, reaps) → P (waits for a byte, then exits) → S (idle). */
static void make_tree(struct members *t, struct lt_tree *tr)
{
	LT_REQUIRE(pipe(tr->stop) == 0, "pipe");
	lt_make_tree(&caps, t, tr, stop_role, reaper_role);
}

/* Let P exit, wait for its pid to be free, put a newcomer there. */
static pid_t replace_p(struct lt_tree *tr, bool same_tick)
{
	lt_send_byte(tr->stop[1]);
	if (wait_pid_free(tr->p, 5000) < 0)
		return -ETIMEDOUT;
	/* A later clock tick than S's birth, so the start_time rule alone
	 * (all that the pid+start_time fallback has) sees the newcomer. */
	if (!same_tick)
		lt_sleep_ms(30);
	return spawn_at(tr->p);
}

struct hookctx {
	struct lt_tree *tr;
	bool same_tick;
	pid_t newcomer;
	bool fired;
};

static void reuse_at_hop0(unsigned hop, const struct procref *cur, void *ud)
{
	(void)cur;
	struct hookctx *h = ud;
	if (hop != 0 || h->fired)
		return;
	h->fired = true;
	h->newcomer = replace_p(h->tr, h->same_tick);
}

/* Whatever now holds P's pid (the newcomer) is on no hop of res. */
static void check_newcomer_off_chain(const struct lt_tree *tr, const struct ancestry_result *res)
{
	struct procref nref;
	if (procref_open(&caps, tr->p, &nref) == 0) {
		LT_CHECK(!lt_chain_has_key(res, nref.key), "the newcomer is on the chain");
		procref_close(&nref);
	}
}

/* Kill the tree's processes (P is gone) and the newcomer, if any. */
static void end_tree(struct lt_tree *tr, pid_t newcomer)
{
	if (newcomer > 0)
		kill(newcomer, SIGKILL);
	kill(tr->s, SIGKILL);
	kill(tr->c, SIGKILL);
	procref_close(&tr->cref);
}

static int ns_main(void)
{
	lt_init("lineage_pidreuse(ns)", 20);
	LT_REQUIRE(getpid() == 1, "not PID 1");
	LT_REQUIRE(mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0,
		   "mount proc");
	lt_probe(&caps);
	struct procref anchor;
	LT_REQUIRE(procref_open(&caps, 1, &anchor) == 0, "open self");
	struct members *t;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE };
	LT_REQUIRE(members_create(&caps, &anchor, &cfg, &t) == 0, "members_create");
	struct ancestry_result res;
	enum reason why;
	int r;

	/* A. recorded parent died, pid reused. */
	{
		struct lt_tree tr;
		make_tree(t, &tr);
		r = members_learn(t, tr.s, &why, NULL);
		LT_REQUIRE(r == 0, "learn S: %d %s", r, reason_word(why));
		struct member_entry pe;
		LT_REQUIRE(members_lookup_pid(t, tr.p, &pe) == 0, "P not recorded");
		pid_t n = replace_p(&tr, false);
		LT_REQUIRE(n == tr.p, "clone3 set_tid gave %d, wanted %d", (int)n, (int)tr.p);
		struct procref nref, sref;
		LT_REQUIRE(procref_open(&caps, n, &nref) == 0, "open N");
		LT_CHECK(!procref_same(&nref, &pe.ref), "the newcomer has P's key");
		LT_CHECK(members_lookup_pid(t, tr.p, NULL) == -ESTALE,
			 "lookup of P's pid did not report reuse");
		LT_CHECK(lt_wait_ppid(tr.s, 1, 5000) == 0, "S not reparented to the init");
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		r = ancestry_walk(&caps, t, &sref, NULL, &res);
		LT_CHECK(r == 0 && res.anchored, "walk S: %s (%s)", reason_word(res.reason),
			 res.detail);
		LT_CHECK(!lt_chain_has_key(&res, nref.key), "the newcomer is on the chain");
		LT_CHECK(res.n == 3 && strcmp(res.hops[0].ref.key, pe.ref.key) == 0 &&
				 !res.hops[0].live,
			 "hop 0 is not P's record");
		ancestry_result_free(&res);
		r = members_learn(t, n, &why, NULL);
		LT_CHECK(r == -EPERM && why == REASON_FOREIGN_PROCESS, "learn N: %d %s", r,
			 reason_word(why));
		LT_CHECK(!members_is_member(t, &nref), "the newcomer is a member");
		procref_close(&nref);
		procref_close(&sref);
		end_tree(&tr, n);
	}

	/* B. a recorded subject whose pid now holds a newcomer. */
	{
		pid_t q = lt_fork();
		LT_REQUIRE(q >= 0, "fork");
		if (q == 0)
			lt_idle();
		struct procref qref, qrec;
		LT_REQUIRE(procref_open(&caps, q, &qref) == 0, "open Q");
		procref_copy_recorded(&qrec, &qref);
		procref_close(&qref);
		kill(q, SIGKILL);
		LT_REQUIRE(lt_reap(q, 5000) >= 0, "reap Q");
		/* A later tick: a pid+start_time key (the fallback) cannot tell
		 * two processes at one pid within one 10 ms tick apart. */
		lt_sleep_ms(30);
		pid_t n = spawn_at(q);
		LT_REQUIRE(n == q, "clone3 set_tid gave %d, wanted %d", (int)n, (int)q);
		r = ancestry_walk(&caps, t, &qrec, NULL, &res);
		LT_CHECK(r == -ESTALE && res.reason == REASON_PID_REUSED, "walk recorded Q: %s (%s)",
			 reason_word(res.reason), res.detail);
		ancestry_result_free(&res);
		kill(n, SIGKILL);
	}

	/* C. the live parent is replaced between reading the ppid and opening. */
	{
		struct lt_tree tr;
		make_tree(t, &tr);
		struct procref sref;
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		struct hookctx h = { .tr = &tr };
		struct ancestry_opts o = { .between_hops = reuse_at_hop0, .userdata = &h };
		r = ancestry_walk(&caps, t, &sref, &o, &res);
		LT_CHECK(h.fired && h.newcomer == tr.p, "newcomer at %d, wanted %d",
			 (int)h.newcomer, (int)tr.p);
		LT_CHECK(r == -ESTALE && res.reason == REASON_PID_REUSED, "live walk: %s (%s)",
			 reason_word(res.reason), res.detail);
		LT_CHECK(res.failed_pid == tr.p, "failed at %d", (int)res.failed_pid);
		check_newcomer_off_chain(&tr, &res);
		ancestry_result_free(&res);
		procref_close(&sref);
		end_tree(&tr, h.newcomer);
	}

	/* D. as C, but as fast as possible (likely the same clock tick as S's
	 * birth): the pidfs inode order still exposes the newcomer; without
	 * pidfs the walk may only notice that S's ppid moved — either way it
	 * fails and the newcomer is on no chain. */
	{
		struct lt_tree tr;
		make_tree(t, &tr);
		struct procref sref;
		LT_REQUIRE(procref_open(&caps, tr.s, &sref) == 0, "open S");
		struct hookctx h = { .tr = &tr, .same_tick = true };
		struct ancestry_opts o = { .between_hops = reuse_at_hop0, .userdata = &h };
		r = ancestry_walk(&caps, t, &sref, &o, &res);
		LT_CHECK(h.fired && h.newcomer == tr.p, "newcomer at %d", (int)h.newcomer);
		if (caps.pidfs_ino)
			LT_CHECK(r == -ESTALE && res.reason == REASON_PID_REUSED,
				 "same-tick walk: %s (%s)", reason_word(res.reason), res.detail);
		else
			LT_CHECK(r < 0 && (res.reason == REASON_PID_REUSED ||
					   res.reason == REASON_FOREIGN_PROCESS),
				 "same-tick walk (fallback): %s (%s)", reason_word(res.reason),
				 res.detail);
		check_newcomer_off_chain(&tr, &res);
		ancestry_result_free(&res);
		procref_close(&sref);
		end_tree(&tr, h.newcomer);
	}

	members_free(t);
	procref_close(&anchor);
	lt_npids = 0;
	return lt_finish();
}

int main(void)
{
	lt_init("lineage_pidreuse", 25);
	pid_t u = lt_fork();
	LT_REQUIRE(u >= 0, "fork");
	if (u == 0) {
		if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(30);
		pid_t i = fork();
		if (i == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			/* exit() as PID 1 ends the namespace: every process in it. */
			exit(ns_main());
		}
		int st;
		if (waitpid(i, &st, 0) < 0)
			_exit(31);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 32);
	}
	int st = lt_reap(u, 22000);
	lt_npids = 0;
	LT_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		 "namespace side failed: status %d", st);
	return lt_finish();
}
