/* The topology table: lookups, aliases, sharing, channels, words. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "topology/model.h"

static void test_lookup_and_aliases(void **state)
{
	(void)state;
	assert_ptr_equal(topology_by_name("combined"), topology_by_id(TOPOLOGY_COMBINED));
	assert_ptr_equal(topology_by_name("shared-pid"), topology_by_id(TOPOLOGY_SHARED_PID));
	assert_ptr_equal(topology_by_name("vm"), topology_by_id(TOPOLOGY_VM_LOCAL));
	assert_ptr_equal(topology_by_name("vm-delegated"), topology_by_id(TOPOLOGY_VM_DELEGATED));
	assert_ptr_equal(topology_by_name("split"), topology_by_id(TOPOLOGY_SPLIT_SHARED_NETNS));
	assert_ptr_equal(topology_by_name("split-veth"), topology_by_id(TOPOLOGY_SPLIT_VETH));
	assert_string_equal(topology_by_name("split")->name, "split-shared-netns");
	assert_string_equal(topology_by_name("split")->family, "split");
	assert_null(topology_by_name("Combined"));
	assert_null(topology_by_name(""));
	assert_null(topology_by_name(NULL));
	assert_null(topology_by_name("combined "));
	assert_null(topology_by_id(TOPOLOGY__COUNT));
	assert_null(topology_by_id((enum topology_id)-1));
}

static void test_table_consistent(void **state)
{
	(void)state;
	size_t n = 0;
	const struct topology *all = topology_all(&n);
	assert_int_equal(n, TOPOLOGY__COUNT);
	for (size_t i = 0; i < n; i++) {
		const struct topology *t = &all[i];
		assert_int_equal(t->id, (int)i);
		assert_ptr_equal(topology_by_name(t->name), t); /* canonical names resolve */
		assert_non_null(t->summary);
		/* every topology has both supervisors and a workload */
		assert_true(topology_has_role(t, TOPOLOGY_ROLE_PROC_SUPERVISOR));
		assert_true(topology_has_role(t, TOPOLOGY_ROLE_NET_SUPERVISOR));
		assert_true(topology_has_role(t, TOPOLOGY_ROLE_WORKLOAD));
		/* the workload is always the proc-supervisor's child and shares its PID ns */
		assert_true(t->roles[TOPOLOGY_ROLE_WORKLOAD].has_parent);
		assert_int_equal(t->roles[TOPOLOGY_ROLE_WORKLOAD].parent, TOPOLOGY_ROLE_PROC_SUPERVISOR);
		assert_true(topology_shared_ns(t, TOPOLOGY_ROLE_WORKLOAD, TOPOLOGY_ROLE_PROC_SUPERVISOR) &
			    TOPOLOGY_NS_PID);
		/* at most one PID 1 per PID group; the anchor's group has exactly one */
		for (int g = 1; g <= 2; g++) {
			int members = 0, pid1 = 0;
			for (int r = 0; r < TOPOLOGY_ROLE__COUNT; r++) {
				if (!t->roles[r].present || t->roles[r].pid_group != g)
					continue;
				members++;
				pid1 += t->roles[r].pid1;
			}
			assert_true(pid1 <= 1);
			if (members && g == t->roles[TOPOLOGY_ROLE_PROC_SUPERVISOR].pid_group)
				assert_int_equal(pid1, 1);
		}
		/* parents are present and share the child's PID namespace */
		for (int r = 0; r < TOPOLOGY_ROLE__COUNT; r++) {
			const struct topology_placement *p = &t->roles[r];
			if (!p->present || !p->has_parent)
				continue;
			assert_true(topology_has_role(t, p->parent));
			assert_true(topology_shared_ns(t, (enum topology_role)r, p->parent) & TOPOLOGY_NS_PID);
			assert_false(p->pid1);
		}
		/* local procfs needs a shared PID namespace between the supervisors; delegated must not rely on one */
		unsigned sup = topology_shared_ns(t, TOPOLOGY_ROLE_NET_SUPERVISOR, TOPOLOGY_ROLE_PROC_SUPERVISOR);
		if (t->identity == TOPOLOGY_IDENTITY_LOCAL_PROCFS)
			assert_true(sup & TOPOLOGY_NS_PID);
		else
			assert_false(sup & TOPOLOGY_NS_PID);
		/* delegated identity always needs a channel and the certificate */
		if (t->identity == TOPOLOGY_IDENTITY_DELEGATED) {
			assert_int_not_equal(t->transport, TOPOLOGY_TRANSPORT_NONE);
			assert_int_equal(t->anchor, TOPOLOGY_ANCHOR_CERTIFICATE);
		}
		/* the default transport is one of the accepted ones */
		assert_true(t->transports & TOPOLOGY_TRANSPORT_BIT(t->transport));
		/* fence matches the net arrangement: veth fence needs the workload
		 * outside the proxy's netns; nft fence needs them together */
		unsigned wn = topology_shared_ns(t, TOPOLOGY_ROLE_WORKLOAD, TOPOLOGY_ROLE_NET_SUPERVISOR);
		if (t->fence == TOPOLOGY_FENCE_VETH_ONLY_ROUTE)
			assert_false(wn & TOPOLOGY_NS_NET);
		else
			assert_true(wn & TOPOLOGY_NS_NET);
		/* a foreign PID 1 is exactly a pause or runtime-init role */
		bool foreign = topology_has_role(t, TOPOLOGY_ROLE_PAUSE) ||
			       topology_has_role(t, TOPOLOGY_ROLE_RUNTIME_INIT);
		assert_int_equal(t->foreign_pid1, foreign);
	}
}

static void test_specific_facts(void **state)
{
	(void)state;
	const struct topology *c = topology_by_name("combined");
	assert_int_equal(c->identity, TOPOLOGY_IDENTITY_LOCAL_PROCFS);
	assert_int_equal(c->anchor, TOPOLOGY_ANCHOR_SPAWNED_PIDFD_HASH);
	assert_int_equal(c->fence, TOPOLOGY_FENCE_VETH_ONLY_ROUTE);
	assert_true(c->roles[TOPOLOGY_ROLE_PROC_SUPERVISOR].pid1);
	assert_false(topology_has_role(c, TOPOLOGY_ROLE_PAUSE));

	const struct topology *s = topology_by_name("shared-pid");
	assert_true(s->roles[TOPOLOGY_ROLE_PAUSE].pid1);
	assert_int_equal(s->anchor, TOPOLOGY_ANCHOR_PEER_PIDFD_EXE_HASH);
	assert_int_equal(s->fence, TOPOLOGY_FENCE_NFT_UID);
	assert_int_equal(s->transport, TOPOLOGY_TRANSPORT_UNIX);
	assert_int_equal(topology_shared_ns(s, TOPOLOGY_ROLE_NET_SUPERVISOR, TOPOLOGY_ROLE_PROC_SUPERVISOR),
			 TOPOLOGY_NS_PID | TOPOLOGY_NS_NET);

	const struct topology *vl = topology_by_name("vm-local");
	assert_true(vl->roles[TOPOLOGY_ROLE_RUNTIME_INIT].pid1);
	assert_int_equal(vl->roles[TOPOLOGY_ROLE_PROC_SUPERVISOR].parent, TOPOLOGY_ROLE_RUNTIME_INIT);
	assert_int_equal(vl->identity, TOPOLOGY_IDENTITY_LOCAL_PROCFS);

	const struct topology *vd = topology_by_name("vm-delegated");
	assert_int_equal(vd->identity, TOPOLOGY_IDENTITY_DELEGATED);
	assert_int_equal(vd->transport, TOPOLOGY_TRANSPORT_VSOCK);
	assert_true(vd->transports & TOPOLOGY_TRANSPORT_BIT(TOPOLOGY_TRANSPORT_UNIX));
	assert_int_equal(topology_shared_ns(vd, TOPOLOGY_ROLE_NET_SUPERVISOR, TOPOLOGY_ROLE_PROC_SUPERVISOR), 0);

	const struct topology *ss = topology_by_name("split-shared-netns");
	assert_int_equal(topology_shared_ns(ss, TOPOLOGY_ROLE_NET_SUPERVISOR, TOPOLOGY_ROLE_PROC_SUPERVISOR),
			 TOPOLOGY_NS_NET);
	assert_int_equal(ss->fence, TOPOLOGY_FENCE_NFT_UID);
	const struct topology *sv = topology_by_name("split-veth");
	assert_int_equal(topology_shared_ns(sv, TOPOLOGY_ROLE_NET_SUPERVISOR, TOPOLOGY_ROLE_PROC_SUPERVISOR), 0);
	assert_int_equal(sv->transport, TOPOLOGY_TRANSPORT_TCP);

	/* sharing is symmetric, reflexive for present roles, 0 for absent ones */
	assert_int_equal(topology_shared_ns(c, TOPOLOGY_ROLE_WORKLOAD, TOPOLOGY_ROLE_WORKLOAD),
			 TOPOLOGY_NS_PID | TOPOLOGY_NS_NET | TOPOLOGY_NS_MNT);
	assert_int_equal(topology_shared_ns(c, TOPOLOGY_ROLE_PAUSE, TOPOLOGY_ROLE_WORKLOAD), 0);
	assert_int_equal(topology_shared_ns(NULL, TOPOLOGY_ROLE_WORKLOAD, TOPOLOGY_ROLE_WORKLOAD), 0);
	assert_int_equal(topology_shared_ns(c, TOPOLOGY_ROLE__COUNT, TOPOLOGY_ROLE_WORKLOAD), 0);
	size_t n;
	const struct topology *all = topology_all(&n);
	for (size_t i = 0; i < n; i++)
		for (int a = 0; a < TOPOLOGY_ROLE__COUNT; a++)
			for (int b = 0; b < TOPOLOGY_ROLE__COUNT; b++)
				assert_int_equal(topology_shared_ns(&all[i], a, b), topology_shared_ns(&all[i], b, a));
}

static void test_role_channel(void **state)
{
	(void)state;
	struct topology_channel ch;
	assert_int_equal(topology_role_channel(topology_by_name("split"), TOPOLOGY_ROLE_NET_SUPERVISOR, &ch), 0);
	assert_int_equal(ch.identity, TOPOLOGY_IDENTITY_DELEGATED);
	assert_int_equal(ch.transport, TOPOLOGY_TRANSPORT_UNIX);
	assert_int_equal(ch.anchor, TOPOLOGY_ANCHOR_CERTIFICATE);
	assert_int_equal(topology_role_channel(topology_by_name("split"), TOPOLOGY_ROLE_PROC_SUPERVISOR, &ch), 0);
	assert_int_equal(ch.identity, TOPOLOGY_IDENTITY_DELEGATED);
	assert_int_equal(topology_role_channel(topology_by_name("combined"), TOPOLOGY_ROLE_NET_SUPERVISOR, &ch), 0);
	assert_int_equal(ch.identity, TOPOLOGY_IDENTITY_LOCAL_PROCFS);
	assert_int_equal(ch.transport, TOPOLOGY_TRANSPORT_NONE);
	assert_int_equal(topology_role_channel(topology_by_name("vm-delegated"), TOPOLOGY_ROLE_NET_SUPERVISOR, &ch), 0);
	assert_int_equal(ch.transport, TOPOLOGY_TRANSPORT_VSOCK);
	assert_int_equal(topology_role_channel(topology_by_name("combined"), TOPOLOGY_ROLE_WORKLOAD, &ch), -EOPNOTSUPP);
	assert_int_equal(topology_role_channel(topology_by_name("combined"), TOPOLOGY_ROLE_PAUSE, &ch), -ENOENT);
	assert_int_equal(topology_role_channel(topology_by_name("shared-pid"), TOPOLOGY_ROLE_PAUSE, &ch), -EOPNOTSUPP);
	assert_int_equal(topology_role_channel(NULL, TOPOLOGY_ROLE_NET_SUPERVISOR, &ch), -EINVAL);
}

static void test_names_and_words(void **state)
{
	(void)state;
	const char *const *names = topology_names();
	size_t count = 0;
	for (; names[count]; count++)
		assert_non_null(topology_by_name(names[count]));
	assert_int_equal(count, 8);
	char buf[256];
	assert_int_equal(topology_names_format(buf, sizeof(buf), "|"), 0);
	assert_string_equal(buf, "combined|shared-pid|vm|vm-local|vm-delegated|split|split-shared-netns|split-veth");
	char small[10];
	assert_int_equal(topology_names_format(small, sizeof(small), "|"), -ENAMETOOLONG);
	assert_int_equal(topology_names_format(NULL, 4, "|"), -EINVAL);

	assert_string_equal(topology_identity_name(TOPOLOGY_IDENTITY_LOCAL_PROCFS), "local_procfs");
	assert_string_equal(topology_identity_name(TOPOLOGY_IDENTITY_DELEGATED), "delegated");
	assert_string_equal(topology_role_name(TOPOLOGY_ROLE_NET_SUPERVISOR), "net-supervisor");
	assert_string_equal(topology_role_name(TOPOLOGY_ROLE__COUNT), "unknown");
	assert_string_equal(topology_fence_name(TOPOLOGY_FENCE_NFT_UID), "nftables-uid");
	assert_string_equal(topology_anchor_name(TOPOLOGY_ANCHOR_CERTIFICATE), "anchor-certificate");
	enum topology_transport tr;
	for (int t = TOPOLOGY_TRANSPORT_NONE; t <= TOPOLOGY_TRANSPORT_TCP; t++) {
		assert_int_equal(topology_transport_from_name(topology_transport_name(t), &tr), 0);
		assert_int_equal(tr, t);
	}
	assert_int_equal(topology_transport_from_name("VSOCK", &tr), -EINVAL);
	assert_int_equal(topology_transport_from_name(NULL, &tr), -EINVAL);
	assert_string_equal(topology_transport_name((enum topology_transport)99), "unknown");
}

static void test_plan(void **state)
{
	(void)state;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(topology_plan_write(topology_by_name("vm-delegated"), f), 0);
	fclose(f);
	assert_non_null(strstr(buf, "topology vm-delegated (vm): identity delegated, transport vsock (accepts unix,vsock)"));
	assert_non_null(strstr(buf, "anchor anchor-certificate, fence veth-only-route, PID 1 is foreign"));
	assert_non_null(strstr(buf, "  runtime-init     guest PID 1 (/init.krun); never inspected; shares pid,net,mnt with proc-supervisor\n"));
	assert_non_null(strstr(buf, "  net-supervisor   host side, outside the guest PID namespace; shares nothing with proc-supervisor\n"));
	assert_null(strstr(buf, "pause"));
	free(buf);
	assert_int_equal(topology_plan_write(NULL, stderr), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup_and_aliases),
		cmocka_unit_test(test_table_consistent),
		cmocka_unit_test(test_specific_facts),
		cmocka_unit_test(test_role_channel),
		cmocka_unit_test(test_names_and_words),
		cmocka_unit_test(test_plan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
