/* Learn mode in the decision (network_policy.learn, net-supervisor
 * --learn): the policy decides as usual, the flow is allowed, and the
 * decision says it was learned, with the reason the policy gave. A policy
 * file can never turn it on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"

static const struct policy_section *const secs[] = { &network_policy_section };

static void test_learn(void **state)
{
	(void)state;
	static const char text[] = "version: 1\nnetwork:\n  policies:\n    - name: curl\n      binaries:\n"
				   "        - path: /usr/bin/curl\n      endpoints:\n        - host: example.org\n"
				   "          ports: [443]\n";
	struct policy *p;
	struct policy_diag d;
	assert_int_equal(policy_load_buffer("t.yaml", text, strlen(text), secs, 1, &p, &d), 0);
	struct network_policy *np = policy_section_data(p, "network");
	assert_false(np->learn); /* never from a file */
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup("/usr/bin/wget");
	struct netaddr ip;
	netaddr_parse("198.51.100.7", &ip);
	struct netpolicy_decision dd = netpolicy_decide(np, id, "example.org", 443, &ip);
	assert_false(dd.allow);
	assert_false(dd.learn);
	assert_false(netpolicy_resolution_may_allow(np, id, "example.org", 443));

	np->learn = true;
	dd = netpolicy_decide(np, id, "example.org", 443, &ip);
	assert_true(dd.allow);
	assert_true(dd.learn);
	assert_true(dd.audit_mode);
	assert_int_equal(dd.reason, REASON_NO_MATCHING_POLICY); /* would deny */
	assert_true(netpolicy_resolution_may_allow(np, id, "example.org", 443));
	free(id->binary_path);
	id->binary_path = strdup("/usr/bin/curl");
	dd = netpolicy_decide(np, id, "example.org", 443, &ip);
	assert_true(dd.allow);
	assert_true(dd.learn);
	assert_int_equal(dd.reason, REASON_ALLOWED); /* would allow */
	assert_string_equal(dd.policy, "curl");
	/* no identity: allowed and learned, the reason kept */
	dd = netpolicy_decide(np, NULL, "example.org", 443, &ip);
	assert_true(dd.allow && dd.learn);
	assert_int_equal(dd.reason, REASON_IDENTITY_UNAVAILABLE);
	flow_identity_free(id);
	policy_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_learn) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
