/* HTTP rules of inspected endpoints (policy/httprules.h): the `tls:`,
 * `rules:` and `mode:` keys, their errors, and the per-request decision
 * table (deny wins, WebSocket only by an explicit rule, non-canonical paths
 * refused, audit mode). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/httprules.h"
#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"

static const struct policy_section *const secs[] = { &network_policy_section };

static struct policy *load(const char *yaml, struct policy_diag *d)
{
	struct policy *p = NULL;
	memset(d, 0, sizeof(*d));
	return policy_load_buffer("t.yaml", yaml, strlen(yaml), secs, 1, &p, d) < 0 ? NULL : p;
}

static const char *POLICY =
	"version: 1\n"
	"network:\n"
	"  policies:\n"
	"    - name: api\n"
	"      binaries: [{path: /usr/bin/curl}]\n"
	"      endpoints:\n"
	"        - host: api.example.com\n"
	"          ports: [443]\n"
	"          tls: inspect\n"
	"          rules:\n"
	"            - {method: GET, path: '/repos/**'}\n"
	"            - {name: no-admin, method: '*', path: '/repos/*/admin/**', action: deny}\n"
	"            - {method: POST, path: /v1/messages}\n"
	"            - {name: ws, method: GET, path: /socket, websocket: true}\n"
	"            - {method: GET, path: /plain}\n"
	"        - host: audit.example.com\n"
	"          ports: [443]\n"
	"          tls: inspect\n"
	"          mode: audit\n"
	"          rules: [{method: GET, path: /ok}]\n"
	"        - host: open.example.com\n"
	"          ports: [443]\n"
	"          tls: inspect\n"
	"        - host: pass.example.com\n"
	"          ports: [443]\n";

static const struct netpol_endpoint *endpoint_for(const struct network_policy *np, const char *host)
{
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup("/usr/bin/curl");
	id->source = FLOW_SOURCE_STATIC_TEST;
	struct netpolicy_decision d = netpolicy_decide(np, id, host, 443, NULL);
	flow_identity_free(id);
	assert_true(d.allow);
	return d.endpoint;
}

static void test_decisions(void **state)
{
	(void)state;
	struct policy_diag d;
	struct policy *p = load(POLICY, &d);
	if (!p)
		fail_msg("load: %s", d.msg);
	const struct network_policy *np = policy_section_data(p, "network");
	const struct netpol_endpoint *api = endpoint_for(np, "api.example.com");
	assert_int_equal(api->tls, NETPOL_TLS_INSPECT);
	struct row {
		const char *method, *target;
		bool ws, allow;
		const char *reason, *rule;
	} rows[] = {
		{ "GET", "/repos/a/b", false, true, "allowed", "GET /repos/**" },
		{ "GET", "/repos/a/b?x=/admin/", false, true, "allowed", "GET /repos/**" },
		{ "GET", "https://api.example.com/repos/x", false, true, "allowed", "GET /repos/**" },
		{ "GET", "/repos/a/admin/x", false, false, "http_rule_deny", "no-admin" },
		{ "DELETE", "/repos/a/admin/x", false, false, "http_rule_deny", "no-admin" },
		{ "DELETE", "/repos/a/b", false, false, "http_no_matching_rule", NULL },
		{ "POST", "/v1/messages", false, true, "allowed", "POST /v1/messages" },
		{ "GET", "/v1/messages", false, false, "http_no_matching_rule", NULL },
		{ "GET", "/socket", true, true, "allowed", "ws" },
		{ "GET", "/plain", true, false, "websocket_not_allowed", "GET /plain" },
		{ "GET", "/repos/a/../../admin", false, false, "http_path_not_canonical", NULL },
		{ "GET", "/repos/./a", false, false, "http_path_not_canonical", NULL },
		{ "GET", "/repos//a", false, false, "http_path_not_canonical", NULL },
		{ "GET", "/repos/a%2fadmin", false, false, "http_path_not_canonical", NULL },
		{ "GET", "/repos/a%2Eb", false, false, "http_path_not_canonical", NULL },
		{ "GET", "/repos/a%2", false, false, "http_path_not_canonical", NULL },
		{ "GET", "/repos/a\\b", false, false, "http_path_not_canonical", NULL },
		{ "GET", "*", false, false, "http_path_not_canonical", NULL },
		{ "GET", "/repos/a%20b", false, true, "allowed", "GET /repos/**" },
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct netpol_http_decision h = netpol_http_decide(&api->http, rows[i].method, rows[i].target, rows[i].ws);
		if (h.allow != rows[i].allow || strcmp(reason_word(h.reason), rows[i].reason) != 0 ||
		    (rows[i].rule ? !h.rule || strcmp(h.rule, rows[i].rule) : h.rule != NULL))
			fail_msg("row %zu %s %s: allow=%d reason=%s rule=%s", i, rows[i].method, rows[i].target,
				 h.allow, reason_word(h.reason), h.rule ? h.rule : "(null)");
	}
	const struct netpol_endpoint *au = endpoint_for(np, "audit.example.com");
	struct netpol_http_decision h = netpol_http_decide(&au->http, "DELETE", "/x", false);
	assert_true(h.allow);
	assert_true(h.audit_mode);
	assert_string_equal(reason_word(h.reason), "http_no_matching_rule");
	h = netpol_http_decide(&endpoint_for(np, "open.example.com")->http, "DELETE", "/anything", true);
	assert_true(h.allow);
	assert_false(h.audit_mode);
	assert_int_equal(endpoint_for(np, "pass.example.com")->tls, NETPOL_TLS_PASSTHROUGH);
	policy_free(p);
}

static void expect_error(const char *endpoint, const char *contains)
{
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
		 "version: 1\nnetwork:\n  policies:\n    - name: t\n      binaries: [{path: /x}]\n"
		 "      endpoints:\n        - %s\n", endpoint);
	struct policy_diag d;
	struct policy *p = load(yaml, &d);
	if (p)
		fail_msg("loaded: %s", endpoint);
	if (!strstr(d.msg, contains))
		fail_msg("%s: error '%s' lacks '%s'", endpoint, d.msg, contains);
}

static void test_errors(void **state)
{
	(void)state;
	expect_error("{host: a.example, ports: [443], tls: mitm}", "expected inspect or passthrough");
	expect_error("{cidr: 198.51.100.0/24, ports: [443], tls: inspect}", "needs a 'host' endpoint");
	expect_error("{host: a.example, ports: [443], rules: [{path: /}]}", "only an endpoint with 'tls: inspect'");
	expect_error("{host: a.example, ports: [443], tls: inspect, rules: []}", "at least one rule");
	expect_error("{host: a.example, ports: [443], tls: inspect, rules: [{method: GET}]}", "needs 'path'");
	expect_error("{host: a.example, ports: [443], tls: inspect, rules: [{path: x}]}", "must start with '/'");
	expect_error("{host: a.example, ports: [443], tls: inspect, rules: [{path: /, method: get}]}",
		     "upper-case letters");
	expect_error("{host: a.example, ports: [443], tls: inspect, rules: [{path: /, action: block}]}",
		     "expected allow or deny");
	expect_error("{host: a.example, ports: [443], tls: inspect, mode: learn}", "expected enforce or audit");
	expect_error("{host: a.example, ports: [443], tls: inspect, rules: [{path: /, verb: GET}]}", "verb");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decisions),
		cmocka_unit_test(test_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
