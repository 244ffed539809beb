/* Namespace detection and topology_check_environment with real namespaces. */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/kernel.h"
#include "nschild.h"
#include "topology/detect.h"

static const unsigned flag_sets[] = { 0, TOPOLOGY_DETECT_NO_IOCTL };

static void test_self(void **state)
{
	(void)state;
	assert_int_equal(topology_same_pidns(getpid()), 1);
	assert_int_equal(topology_same_netns(getpid()), 1);
	assert_int_equal(topology_same_mntns(getpid()), 1);
	assert_int_equal(topology_pid_visible(getpid()), 1);
	assert_int_equal(topology_pid_visible(0), -EINVAL);
	assert_int_equal(topology_same_pidns(-5), -EINVAL);
	struct topology_ns_id a, b;
	assert_int_equal(topology_ns_self(TOPOLOGY_NS_NET, &a), 0);
	assert_int_equal(topology_ns_self(TOPOLOGY_NS_PID, &b), 0);
	assert_false(a.ino == b.ino);
	assert_int_equal(topology_ns_self((enum topology_ns)0x40, &a), -EINVAL);
}

static void test_child_namespaces(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	struct nschild net, pid, mnt, plain;
	assert_int_equal(nschild_start(&net, CLONE_NEWNET, NULL, NULL), 0);
	assert_int_equal(nschild_start(&pid, CLONE_NEWPID, NULL, NULL), 0);
	assert_int_equal(nschild_start(&mnt, CLONE_NEWNS, NULL, NULL), 0);
	assert_int_equal(nschild_start(&plain, 0, NULL, NULL), 0);
	for (size_t i = 0; i < 2; i++) {
		unsigned f = flag_sets[i];
		assert_int_equal(topology_same_ns_pidfd(net.pidfd, TOPOLOGY_NS_NET, f), 0);
		assert_int_equal(topology_same_ns_pidfd(net.pidfd, TOPOLOGY_NS_PID, f), 1);
		assert_int_equal(topology_same_ns_pidfd(net.pidfd, TOPOLOGY_NS_MNT, f), 1);
		assert_int_equal(topology_same_ns_pidfd(pid.pidfd, TOPOLOGY_NS_PID, f), 0);
		assert_int_equal(topology_same_ns_pidfd(pid.pidfd, TOPOLOGY_NS_NET, f), 1);
		assert_int_equal(topology_same_ns_pidfd(mnt.pidfd, TOPOLOGY_NS_MNT, f), 0);
		assert_int_equal(topology_same_ns_pidfd(mnt.pidfd, TOPOLOGY_NS_NET, f), 1);
		assert_int_equal(topology_same_ns_pidfd(plain.pidfd, TOPOLOGY_NS_PID, f), 1);
		assert_int_equal(topology_same_ns_pidfd(plain.pidfd, TOPOLOGY_NS_NET, f), 1);
		/* both paths agree on the namespace identity */
		struct topology_ns_id x, y;
		assert_int_equal(topology_ns_of_pidfd(net.pidfd, TOPOLOGY_NS_NET, 0, &x), 0);
		assert_int_equal(topology_ns_of_pidfd(net.pidfd, TOPOLOGY_NS_NET, TOPOLOGY_DETECT_NO_IOCTL, &y), 0);
		assert_true(x.dev == y.dev && x.ino == y.ino);
	}
	assert_int_equal(topology_same_netns(net.pid), 0);
	assert_int_equal(topology_same_pidns(pid.pid), 0);
	assert_int_equal(topology_same_mntns(mnt.pid), 0);
	assert_int_equal(topology_same_pidns(plain.pid), 1);

	/* an exited process answers ESRCH, never someone else's namespace */
	int keep = dup(plain.pidfd);
	pid_t old = plain.pid;
	nschild_stop(&plain);
	for (size_t i = 0; i < 2; i++)
		assert_int_equal(topology_same_ns_pidfd(keep, TOPOLOGY_NS_NET, flag_sets[i]), -ESRCH);
	close(keep);
	assert_int_equal(topology_pid_visible(old), 0);
	assert_int_equal(topology_same_netns(old), -ESRCH);

	nschild_stop(&net);
	nschild_stop(&pid);
	nschild_stop(&mnt);
}

static int check(const char *topo, enum topology_role self, enum topology_role role, pid_t pid, int pidfd,
		 char *msg, size_t msgsz)
{
	struct topology_peer peer = { .role = role, .pid = pid, .pidfd = pidfd };
	struct topology_error err = { 0 };
	int r = topology_check_environment(topology_by_name(topo), self, &peer, 1, 0, &err);
	if (msg)
		snprintf(msg, msgsz, "%s", err.msg);
	return r;
}

#define NS TOPOLOGY_ROLE_NET_SUPERVISOR
#define PS TOPOLOGY_ROLE_PROC_SUPERVISOR
#define WL TOPOLOGY_ROLE_WORKLOAD

static void test_check_environment(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	struct nschild same, netc, pidc, pidnet;
	assert_int_equal(nschild_start(&same, 0, NULL, NULL), 0);
	assert_int_equal(nschild_start(&netc, CLONE_NEWNET, NULL, NULL), 0);
	assert_int_equal(nschild_start(&pidc, CLONE_NEWPID, NULL, NULL), 0);
	assert_int_equal(nschild_start(&pidnet, CLONE_NEWPID | CLONE_NEWNET, NULL, NULL), 0);
	char m[512];

	/* arrangements the topology describes pass */
	assert_int_equal(check("combined", NS, PS, same.pid, -1, m, sizeof(m)), 0);
	assert_string_equal(m, "");
	assert_int_equal(check("combined", NS, WL, netc.pid, -1, m, sizeof(m)), 0);
	assert_int_equal(check("shared-pid", NS, PS, same.pid, -1, m, sizeof(m)), 0);
	assert_int_equal(check("shared-pid", NS, WL, same.pid, -1, m, sizeof(m)), 0);
	assert_int_equal(check("split", NS, PS, pidc.pid, -1, m, sizeof(m)), 0);
	assert_int_equal(check("split", NS, PS, 0, pidc.pidfd, m, sizeof(m)), 0); /* pidfd only (SO_PEERPIDFD) */
	assert_int_equal(check("split-veth", NS, PS, pidnet.pid, -1, m, sizeof(m)), 0);
	assert_int_equal(check("vm-delegated", NS, PS, pidnet.pid, -1, m, sizeof(m)), 0);
	assert_int_equal(check("vm", NS, WL, netc.pid, -1, m, sizeof(m)), 0);
	/* unknown peers are skipped */
	assert_int_equal(check("shared-pid", NS, PS, 0, -1, m, sizeof(m)), 0);

	/* wrong topology: refused with the mismatch and the matching topology */
	assert_int_equal(check("combined", NS, WL, same.pid, -1, m, sizeof(m)), -EXDEV);
	assert_non_null(strstr(m, "topology combined expects the workload in a separate network namespace"));
	assert_non_null(strstr(m, "use --topology shared-pid"));
	assert_int_equal(check("shared-pid", NS, PS, pidc.pid, -1, m, sizeof(m)), -EXDEV);
	assert_non_null(strstr(m, "topology shared-pid needs a shared PID namespace with the proc-supervisor"));
	assert_non_null(strstr(m, "use --topology split"));
	assert_int_equal(check("split", NS, PS, same.pid, -1, m, sizeof(m)), -EXDEV);
	assert_non_null(strstr(m, "separate PID namespace"));
	assert_non_null(strstr(m, "use --topology combined")); /* first topology sharing PID + net */
	assert_int_equal(check("split-veth", NS, PS, pidc.pid, -1, m, sizeof(m)), -EXDEV);
	assert_non_null(strstr(m, "use --topology split"));
	assert_int_equal(check("split", NS, PS, pidnet.pid, -1, m, sizeof(m)), -EXDEV);
	assert_non_null(strstr(m, "needs a shared network namespace"));
	assert_non_null(strstr(m, "use --topology vm-delegated"));
	assert_int_equal(check("shared-pid", NS, PS, 0, pidc.pidfd, m, sizeof(m)), -EXDEV);
	assert_non_null(strstr(m, "the peer"));

	/* roles the topology does not have */
	assert_int_equal(check("combined", NS, TOPOLOGY_ROLE_PAUSE, same.pid, -1, m, sizeof(m)), -EINVAL);
	assert_non_null(strstr(m, "topology combined has no pause"));
	assert_int_equal(check("split", TOPOLOGY_ROLE_RUNTIME_INIT, PS, same.pid, -1, m, sizeof(m)), -EINVAL);
	assert_int_equal(topology_check_environment(NULL, NS, NULL, 0, 0, NULL), -EINVAL);

	nschild_stop(&same);
	nschild_stop(&netc);
	nschild_stop(&pidc);
	nschild_stop(&pidnet);
}

struct invisible_arg {
	pid_t outside_pid;
};

/* Runs inside a fresh PID namespace, where the test process is invisible. */
static void check_from_inside(int wfd, void *p)
{
	struct invisible_arg *a = p;
	struct topology_peer peer = { .role = PS, .pid = a->outside_pid, .pidfd = -1 };
	struct topology_error err = { 0 };
	int r = topology_check_environment(topology_by_name("shared-pid"), NS, &peer, 1, 0, &err);
	int vis = topology_pid_visible(a->outside_pid);
	if (write(wfd, &r, sizeof(r)) != sizeof(r) || write(wfd, &vis, sizeof(vis)) != sizeof(vis) ||
	    write(wfd, err.msg, sizeof(err.msg)) != sizeof(err.msg))
		_exit(1);
	/* the same pid in split (no PID sharing expected) is fine */
	r = topology_check_environment(topology_by_name("split"), NS, &peer, 1, 0, &err);
	if (write(wfd, &r, sizeof(r)) != sizeof(r))
		_exit(1);
}

static void test_invisible_anchor(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	/* Pick a pid that exists out here and is certainly invisible in the child's
	 * new PID namespace: ours (the child namespace numbers from 1). */
	struct invisible_arg a = { .outside_pid = getpid() };
	if (a.outside_pid < 10)
		skip();
	struct nschild c;
	assert_int_equal(nschild_start(&c, CLONE_NEWPID, check_from_inside, &a), 0);
	int r = 0, vis = -1, r2 = -1;
	char msg[sizeof(((struct topology_error *)0)->msg)];
	assert_int_equal(nschild_read(&c, &r, sizeof(r), 5000), 0);
	assert_int_equal(nschild_read(&c, &vis, sizeof(vis), 5000), 0);
	assert_int_equal(nschild_read(&c, msg, sizeof(msg), 5000), 0);
	assert_int_equal(nschild_read(&c, &r2, sizeof(r2), 5000), 0);
	nschild_stop(&c);
	msg[sizeof(msg) - 1] = '\0';
	char want[256];
	snprintf(want, sizeof(want),
		 "topology shared-pid needs a shared PID namespace with the proc-supervisor; "
		 "pid %d is not visible here \xe2\x80\x94 use --topology split", (int)a.outside_pid);
	assert_int_equal(vis, 0);
	assert_int_equal(r, -ESRCH);
	assert_string_equal(msg, want);
	assert_int_equal(r2, 0);
}

static void test_suggest(void **state)
{
	(void)state;
	const unsigned PN = TOPOLOGY_NS_PID | TOPOLOGY_NS_NET;
	assert_string_equal(topology_suggest(NS, PS, PN, PN), "combined");
	assert_string_equal(topology_suggest(NS, PS, TOPOLOGY_NS_NET, PN), "split");
	assert_string_equal(topology_suggest(NS, PS, 0, PN), "vm-delegated");
	assert_string_equal(topology_suggest(NS, PS, 0, TOPOLOGY_NS_PID), "split");
	assert_string_equal(topology_suggest(NS, WL, TOPOLOGY_NS_PID | TOPOLOGY_NS_NET, PN), "shared-pid");
	assert_string_equal(topology_suggest(NS, WL, TOPOLOGY_NS_PID, PN), "combined");
	assert_null(topology_suggest(NS, TOPOLOGY_ROLE_PAUSE, TOPOLOGY_NS_NET, PN));
	/* PID shared but net separate between the supervisors: no topology has that */
	assert_null(topology_suggest(NS, PS, TOPOLOGY_NS_PID, PN));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_self),
		cmocka_unit_test(test_child_namespaces),
		cmocka_unit_test(test_check_environment),
		cmocka_unit_test(test_invisible_anchor),
		cmocka_unit_test(test_suggest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
