/* The network policy: parser errors (FILE:LINE:COL) and the decision table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"

static const struct policy_section *const secs[] = { &network_policy_section };

static struct policy *load(const char *yaml, struct policy_diag *d)
{
	struct policy *p = NULL;
	memset(d, 0, sizeof(*d));
	int r = policy_load_buffer("test.yaml", yaml, strlen(yaml), secs, 1, &p, d);
	return r < 0 ? NULL : p;
}

static const char *POLICY =
	"version: 1\n"
	"network:\n"
	"  mode: enforce\n"
	"  policies:\n"
	"    - name: github\n"
	"      binaries:\n"
	"        - path: /usr/bin/git\n"
	"        - path: /usr/lib/git-core/*\n"
	"      endpoints:\n"
	"        - host: github.com\n"
	"          ports: [443]\n"
	"        - host: '*.github.com'\n"
	"          ports: [443, 80]\n"
	"    - name: tools\n"
	"      binaries:\n"
	"        - path: /opt/**/bin/tool\n"
	"      endpoints:\n"
	"        - host: 198.51.100.7\n"
	"          ports: [8080]\n"
	"        - cidr: 203.0.113.0/24\n"
	"          ports: [9000]\n"
	"    - name: pinned\n"
	"      binaries:\n"
	"        - path: /usr/bin/curl\n"
	"          sha256: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"
	"      endpoints:\n"
	"        - host: pinned.example\n"
	"          ports: [443]\n"
	"    - name: agent-python\n"
	"      binaries:\n"
	"        - path: /usr/bin/python3*\n"
	"      ancestors:\n"
	"        - path: /usr/local/bin/agent\n"
	"      endpoints:\n"
	"        - host: pypi.org\n"
	"          ports: [443]\n"
	"    - name: internal\n"
	"      binaries:\n"
	"        - path: /usr/bin/psql\n"
	"      endpoints:\n"
	"        - cidr: 10.1.0.0/16\n"
	"          ports: [5432]\n"
	"        - cidr: 0.0.0.0/0\n"
	"          ports: [5433]\n"
	"        - cidr: 169.254.169.254/32\n"
	"          ports: [80]\n";

struct row {
	const char *binary, *sha256, *ancestor, *host, *ip;
	uint16_t port;
	bool allow;
	const char *reason, *policy;
};

static const struct row rows[] = {
	{ "/usr/bin/git", NULL, NULL, "github.com", "140.82.112.3", 443, true, "allowed", "github" },
	{ "/usr/bin/git", NULL, NULL, "github.com", "140.82.112.3", 80, false, "no_matching_policy", NULL },
	{ "/usr/bin/git", NULL, NULL, "api.github.com", "140.82.112.5", 80, true, "allowed", "github" },
	{ "/usr/bin/git", NULL, NULL, "a.b.github.com", "140.82.112.5", 443, false, "no_matching_policy", NULL },
	{ "/usr/bin/git", NULL, NULL, "evilgithub.com", "1.2.3.4", 443, false, "no_matching_policy", NULL },
	{ "/usr/lib/git-core/git-remote-https", NULL, NULL, "github.com", "140.82.112.3", 443, true, "allowed", "github" },
	{ "/usr/lib/git-core/sub/git", NULL, NULL, "github.com", "140.82.112.3", 443, false, "no_matching_policy", NULL },
	{ "/usr/bin/curl", NULL, NULL, "github.com", "140.82.112.3", 443, false, "no_matching_policy", NULL },
	/* a name that resolves into a blocked range: refused even when the host matches */
	{ "/usr/bin/git", NULL, NULL, "github.com", "127.0.0.1", 443, false, "blocked_destination", "github" },
	{ "/usr/bin/git", NULL, NULL, "github.com", "::ffff:169.254.169.254", 443, false, "blocked_destination", "github" },
	{ "/usr/bin/git", NULL, NULL, "github.com", "fd00::1", 443, false, "blocked_destination", "github" },
	{ "/usr/bin/git", NULL, NULL, "github.com", "100.64.0.1", 443, false, "blocked_destination", "github" },
	/* '**' crosses segments */
	{ "/opt/a/b/c/bin/tool", NULL, NULL, "198.51.100.7", "198.51.100.7", 8080, true, "allowed", "tools" },
	{ "/opt/bin/tool", NULL, NULL, "198.51.100.7", "198.51.100.7", 8080, true, "allowed", "tools" },
	{ "/opt/a/bin/tool2", NULL, NULL, "198.51.100.7", "198.51.100.7", 8080, false, "no_matching_policy", NULL },
	{ "/opt/a/bin/tool", NULL, NULL, "198.51.100.8", "198.51.100.8", 8080, false, "no_matching_policy", NULL },
	{ "/opt/a/bin/tool", NULL, NULL, "x.example", "203.0.113.99", 9000, true, "allowed", "tools" },
	{ "/opt/a/bin/tool", NULL, NULL, "x.example", "203.0.114.1", 9000, false, "no_matching_policy", NULL },
	/* sha256 pin */
	{ "/usr/bin/curl", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL, "pinned.example", "1.1.1.1", 443, true, "allowed", "pinned" },
	{ "/usr/bin/curl", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", NULL, "pinned.example", "1.1.1.1", 443, false, "binary_hash_mismatch", "pinned" },
	{ "/usr/bin/curl", NULL, NULL, "pinned.example", "1.1.1.1", 443, false, "binary_hash_mismatch", "pinned" },
	/* ancestors: explicit requirement */
	{ "/usr/bin/python3.11", NULL, "/usr/local/bin/agent", "pypi.org", "151.101.0.223", 443, true, "allowed", "agent-python" },
	{ "/usr/bin/python3.11", NULL, "/bin/bash", "pypi.org", "151.101.0.223", 443, false, "ancestor_requirement_unmet", "agent-python" },
	{ "/usr/bin/python3.11", NULL, NULL, "pypi.org", "151.101.0.223", 443, false, "ancestor_requirement_unmet", "agent-python" },
	/* cidr names private / metadata targets; 0.0.0.0/0 is too broad to unblock */
	{ "/usr/bin/psql", NULL, NULL, "db.internal", "10.1.2.3", 5432, true, "allowed", "internal" },
	{ "/usr/bin/psql", NULL, NULL, "db.internal", "10.2.2.3", 5432, false, "blocked_destination", NULL },
	{ "/usr/bin/psql", NULL, NULL, "db.internal", "8.8.8.8", 5433, true, "allowed", "internal" },
	{ "/usr/bin/psql", NULL, NULL, "db.internal", "127.0.0.1", 5433, false, "blocked_destination", "internal" },
	{ "/usr/bin/psql", NULL, NULL, "169.254.169.254", "169.254.169.254", 80, true, "allowed", "internal" },
	{ "/usr/bin/psql", NULL, NULL, "169.254.169.254", "::ffff:169.254.169.254", 80, true, "allowed", "internal" },
	{ "/usr/bin/psql", NULL, NULL, "169.254.169.253", "169.254.169.253", 80, false, "blocked_destination", NULL },
	{ "/usr/bin/git", NULL, NULL, "0.0.0.0", "0.0.0.0", 443, false, "blocked_destination", NULL },
	{ "/usr/bin/git", NULL, NULL, "::", "::", 443, false, "blocked_destination", NULL },
	{ "/usr/bin/git", NULL, NULL, "x", "fe80::1", 443, false, "blocked_destination", NULL },
	{ "/usr/bin/git", NULL, NULL, "x", "ff02::1", 443, false, "blocked_destination", NULL },
	{ "/usr/bin/git", NULL, NULL, "x", "224.0.0.1", 443, false, "blocked_destination", NULL },
	{ "/usr/bin/git", NULL, NULL, "x", "64:ff9b::a00:1", 443, false, "blocked_destination", NULL },
};

static void test_decision_table(void **state)
{
	struct policy_diag d;
	struct policy *p = load(POLICY, &d);
	if (!p)
		fail_msg("load: %s", d.msg);
	const struct network_policy *np = policy_section_data(p, "network");
	assert_non_null(np);
	assert_int_equal(np->n_rules, 5);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct flow_identity *id = flow_identity_new();
		id->binary_path = strdup(r->binary);
		if (r->sha256)
			strcpy(id->sha256, r->sha256);
		id->source = FLOW_SOURCE_STATIC_TEST;
		if (r->ancestor)
			flow_identity_add_ancestor(id, r->ancestor, 10, NULL);
		char host[256];
		assert_int_equal(netpol_host_normalize(r->host, host, sizeof(host)), 0);
		struct netaddr ip;
		assert_int_equal(netaddr_parse(r->ip, &ip), 0);
		struct netpolicy_decision dec = netpolicy_decide(np, id, host, r->port, &ip);
		if (dec.allow != r->allow || strcmp(reason_word(dec.reason), r->reason) != 0 ||
		    (r->policy ? !dec.policy || strcmp(dec.policy, r->policy) : dec.policy != NULL))
			fail_msg("row %zu (%s → %s:%u via %s): got %s/%s/%s, want %s/%s/%s", i, r->binary,
				 r->host, r->port, r->ip, dec.allow ? "allow" : "deny", reason_word(dec.reason),
				 dec.policy ? dec.policy : "-", r->allow ? "allow" : "deny", r->reason,
				 r->policy ? r->policy : "-");
		assert_false(dec.audit_mode);
		/* The proxy skips the lookup when this says no: it must never
		 * say no where an address could allow. */
		if (r->allow && !netpolicy_resolution_may_allow(np, id, host, r->port))
			fail_msg("row %zu: an allowed flow judged not worth a lookup", i);
		flow_identity_free(id);
	}
	/* Which names are worth a lookup for which identity. */
	static const struct {
		const char *binary, *ancestor, *host;
		uint16_t port;
		bool want;
	} look[] = {
		{ "/usr/bin/git", NULL, "github.com", 443, true },       /* host rule */
		{ "/usr/bin/git", NULL, "github.com", 80, false },       /* '*.' needs a label */
		{ "/usr/bin/git", NULL, "data.evil.example", 443, false },
		{ "/usr/bin/curl", NULL, "github.com", 443, false },     /* another binary's rule */
		{ "/opt/x/bin/tool", NULL, "anything.example", 9000, true }, /* cidr: only the address tells */
		{ "/opt/x/bin/tool", NULL, "anything.example", 9001, false },
		{ "/usr/bin/python3.11", NULL, "pypi.org", 443, false },  /* ancestor unmet */
		{ "/usr/bin/python3.11", "/usr/local/bin/agent", "pypi.org", 443, true },
	};
	for (size_t i = 0; i < sizeof(look) / sizeof(look[0]); i++) {
		struct flow_identity *id = flow_identity_new();
		id->binary_path = strdup(look[i].binary);
		if (look[i].ancestor)
			flow_identity_add_ancestor(id, look[i].ancestor, 10, NULL);
		if (netpolicy_resolution_may_allow(np, id, look[i].host, look[i].port) != look[i].want)
			fail_msg("lookup %zu (%s → %s:%u): want %d", i, look[i].binary, look[i].host, look[i].port,
				 look[i].want);
		flow_identity_free(id);
	}
	assert_false(netpolicy_resolution_may_allow(np, NULL, "github.com", 443));
	assert_false(netpolicy_resolution_may_allow(NULL, NULL, "github.com", 443));
	/* Which names each identity may resolve at all (the workload's
	 * resolver): any port counts; an allowed flow's name always may. */
	static const struct {
		const char *binary, *ancestor, *host;
		bool want;
	} names[] = {
		{ "/usr/bin/git", NULL, "github.com", true },
		{ "/usr/bin/git", NULL, "api.github.com", true },       /* the glob, on its own port */
		{ "/usr/bin/git", NULL, "a.b.github.com", false },       /* one label only */
		{ "/usr/bin/git", NULL, "data.evil.example", false },
		{ "/usr/bin/curl", NULL, "github.com", false },          /* another binary's rule */
		{ "/opt/x/bin/tool", NULL, "anything.example", true },   /* a cidr: any name could match */
		{ "/usr/bin/python3.11", NULL, "pypi.org", false },      /* ancestor unmet */
		{ "/usr/bin/python3.11", "/usr/local/bin/agent", "pypi.org", true },
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct flow_identity *id = flow_identity_new();
		id->binary_path = strdup(names[i].binary);
		if (names[i].ancestor)
			flow_identity_add_ancestor(id, names[i].ancestor, 10, NULL);
		if (netpolicy_name_may_allow(np, id, names[i].host) != names[i].want)
			fail_msg("name %zu (%s → %s): want %d", i, names[i].binary, names[i].host, names[i].want);
		flow_identity_free(id);
	}
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		char host[256];
		if (!r->allow || netpol_host_normalize(r->host, host, sizeof(host)) < 0)
			continue;
		struct flow_identity *id = flow_identity_new();
		id->binary_path = strdup(r->binary);
		if (r->sha256)
			strcpy(id->sha256, r->sha256);
		if (r->ancestor)
			flow_identity_add_ancestor(id, r->ancestor, 10, NULL);
		if (!netpolicy_name_may_allow(np, id, host))
			fail_msg("row %zu: an allowed flow's name refused by the resolver", i);
		flow_identity_free(id);
	}
	assert_false(netpolicy_name_may_allow(np, NULL, "github.com"));
	assert_false(netpolicy_name_may_allow(NULL, NULL, "github.com"));
	/* No identity, no policy. */
	struct netaddr ip;
	netaddr_parse("1.1.1.1", &ip);
	struct netpolicy_decision dec = netpolicy_decide(np, NULL, "github.com", 443, &ip);
	assert_false(dec.allow);
	assert_int_equal(dec.reason, REASON_IDENTITY_UNAVAILABLE);
	dec = netpolicy_decide(NULL, NULL, "github.com", 443, &ip);
	assert_false(dec.allow);
	assert_int_equal(dec.reason, REASON_POLICY_NOT_LOADED);
	policy_free(p);
}

static void test_audit_mode(void **state)
{
	struct policy_diag d;
	struct policy *p = load("version: 1\nnetwork:\n  mode: audit\n  policies:\n"
				"    - name: a\n      binaries: [{path: /usr/bin/git}]\n"
				"      endpoints: [{host: github.com, ports: [443]}]\n", &d);
	if (!p)
		fail_msg("load: %s", d.msg);
	const struct network_policy *np = policy_section_data(p, "network");
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup("/usr/bin/curl");
	struct netaddr ip;
	netaddr_parse("1.1.1.1", &ip);
	struct netpolicy_decision dec = netpolicy_decide(np, id, "github.com", 443, &ip);
	assert_true(dec.allow);
	assert_true(dec.audit_mode);
	assert_string_equal(reason_word(dec.reason), "no_matching_policy");
	free(id->binary_path);
	id->binary_path = strdup("/usr/bin/git");
	dec = netpolicy_decide(np, id, "github.com", 443, &ip);
	assert_true(dec.allow);
	assert_false(dec.audit_mode);
	assert_string_equal(dec.policy, "a");
	/* audit mode lets every flow through: every name is looked up */
	assert_true(netpolicy_resolution_may_allow(np, NULL, "anything.example", 1));
	assert_true(netpolicy_name_may_allow(np, id, "anything.example"));
	flow_identity_free(id);
	policy_free(p);
}

struct bad {
	const char *yaml, *expect;
};

static void test_parse_errors(void **state)
{
	static const struct bad bad[] = {
		{ "version: 1\nnetwork:\n  mod: enforce\n", "test.yaml:3:3: unknown key 'mod'" },
		{ "version: 1\nnetwork:\n  mode: block\n", "test.yaml:3:9:" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		  "      endpoints: [{host: a.example}]\n", "needs 'ports'" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		  "      endpoints: [{host: a.example, cidr: 10.0.0.0/8, ports: [1]}]\n", "exactly one of" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		  "      endpoints: [{host: 'a.*.example', ports: [1]}]\n", "test.yaml:6:26:" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		  "      endpoints: [{host: '127.1', ports: [1]}]\n", "neither a DNS name" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		  "      endpoints: [{cidr: 10.0.0.1/8, ports: [1]}]\n", "zero host" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		  "      endpoints: [{cidr: 10.0.0.0/8, ports: [70000]}]\n", "test.yaml:6:46:" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x, sha256: abc}]\n"
		  "      endpoints: [{cidr: 10.0.0.0/8, ports: [1]}]\n", "64 hex" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: bin/x}]\n"
		  "      endpoints: [{cidr: 10.0.0.0/8, ports: [1]}]\n", "test.yaml:5:25:" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		  "      endpoints: [{cidr: 10.0.0.0/8, ports: [1]}]\n    - name: a\n"
		  "      binaries: [{path: /bin/x}]\n      endpoints: [{cidr: 10.0.0.0/8, ports: [1]}]\n",
		  "already used" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      endpoints: [{cidr: 10.0.0.0/8, ports: [1]}]\n",
		  "needs 'binaries'" },
		{ "version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: []\n"
		  "      endpoints: [{cidr: 10.0.0.0/8, ports: [1]}]\n", "at least one" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct policy_diag d;
		struct policy *p = load(bad[i].yaml, &d);
		if (p) {
			policy_free(p);
			fail_msg("case %zu loaded but should fail (%s)", i, bad[i].expect);
		}
		if (!strstr(d.msg, bad[i].expect))
			fail_msg("case %zu: '%s' does not contain '%s'", i, d.msg, bad[i].expect);
	}
}

static void test_globs_and_hosts(void **state)
{
	assert_true(netpol_path_match("/usr/bin/*", "/usr/bin/git"));
	assert_false(netpol_path_match("/usr/bin/*", "/usr/bin/x/git"));
	assert_true(netpol_path_match("/usr/**", "/usr/bin/x/git"));
	assert_true(netpol_path_match("/usr/**/git", "/usr/git"));
	assert_true(netpol_path_match("/a/*b*c", "/a/xxbyyc"));
	assert_false(netpol_path_match("/a/*b*c", "/a/xxbyy/c"));
	assert_true(netpol_path_match("/exact", "/exact"));
	assert_false(netpol_path_match("/exact", "/exact2"));
	/* hostile pattern stays fast */
	char pat[200], path[4000];
	strcpy(pat, "/");
	for (int i = 0; i < 40; i++)
		strcat(pat, "**a");
	strcat(pat, "b");
	memset(path, 'a', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	assert_false(netpol_path_match(pat, path));

	char out[256];
	assert_int_equal(netpol_host_normalize("GitHub.COM.", out, sizeof(out)), 0);
	assert_string_equal(out, "github.com");
	assert_int_equal(netpol_host_normalize("[::1]", out, sizeof(out)), 0);
	assert_string_equal(out, "::1");
	assert_true(netpol_host_normalize("127.1", out, sizeof(out)) < 0);
	assert_true(netpol_host_normalize("2130706433", out, sizeof(out)) < 0);
	assert_true(netpol_host_normalize("0x7f.1", out, sizeof(out)) < 0);
	assert_true(netpol_host_normalize("a..b", out, sizeof(out)) < 0);
	assert_true(netpol_host_normalize("a b", out, sizeof(out)) < 0);
	assert_true(netpol_host_normalize("", out, sizeof(out)) < 0);

	struct netcidr c;
	struct netaddr a;
	assert_int_equal(netcidr_parse("::ffff:10.0.0.0/104", &c), 0);
	netaddr_parse("10.9.9.9", &a);
	assert_true(netcidr_contains(&c, &a));
	assert_true(netcidr_parse("10.0.0.0/33", &c) < 0);
	assert_true(netcidr_parse("10.0.0.0/", &c) < 0);
}

static void test_layers(void **state)
{
	/* Two layers: rules add up, the stricter mode wins. */
	struct policy_loader *l;
	struct policy_diag d = { { 0 } };
	assert_int_equal(policy_loader_new(secs, 1, &l, &d), 0);
	const char *a = "version: 1\nnetwork:\n  mode: enforce\n  policies:\n    - name: a\n"
			"      binaries: [{path: /bin/a}]\n      endpoints: [{host: a.example, ports: [1]}]\n";
	const char *b = "version: 1\nnetwork:\n  mode: audit\n  policies:\n    - name: b\n"
			"      binaries: [{path: /bin/b}]\n      endpoints: [{host: b.example, ports: [1]}]\n";
	assert_int_equal(policy_loader_add_buffer(l, POLICY_LAYER_PROJECT, "a.yaml", a, strlen(a), &d), 0);
	assert_int_equal(policy_loader_add_buffer(l, POLICY_LAYER_COMMAND, "b.yaml", b, strlen(b), &d), 0);
	struct policy *p;
	assert_int_equal(policy_loader_finish(l, &p), 0);
	const struct network_policy *np = policy_section_data(p, "network");
	assert_int_equal(np->n_rules, 2);
	assert_int_equal(np->mode, NETPOL_ENFORCE);
	/* every file is listed with its layer (the audit's policy_loaded) */
	assert_int_equal(p->n_files, 3); /* the embedded baseline, a, b */
	assert_string_equal(p->files[1], "a.yaml");
	assert_int_equal(p->file_layers[0], POLICY_LAYER_BASELINE);
	assert_int_equal(p->file_layers[1], POLICY_LAYER_PROJECT);
	assert_int_equal(p->file_layers[2], POLICY_LAYER_COMMAND);
	policy_free(p);
}

/* The rule `tether run`'s denial line names as the place to add a binary:
 * the first with an endpoint for the destination, whatever its binaries. */
static void test_rule_for_destination(void **state)
{
	struct policy_diag d;
	struct policy *p = load(POLICY, &d);
	assert_non_null(p);
	const struct network_policy *np = policy_section_data(p, "network");
	struct netaddr ip;
	assert_string_equal(netpolicy_rule_for_destination(np, "github.com", 443, NULL), "github");
	assert_string_equal(netpolicy_rule_for_destination(np, "api.github.com", 80, NULL), "github");
	assert_null(netpolicy_rule_for_destination(np, "github.com", 80, NULL));
	/* a cidr endpoint: by the resolved address, or an address literal */
	assert_string_equal(netpolicy_rule_for_destination(np, "203.0.113.9", 9000, NULL), "tools");
	netaddr_parse("203.0.113.10", &ip);
	assert_string_equal(netpolicy_rule_for_destination(np, "name.example", 9000, &ip), "tools");
	assert_null(netpolicy_rule_for_destination(np, "name.example", 9000, NULL));
	assert_null(netpolicy_rule_for_destination(np, "nowhere.example", 443, NULL));
	assert_null(netpolicy_rule_for_destination(NULL, "github.com", 443, NULL));
	policy_free(p);
}

/* protocol: tcp (issue 21): a raw transparent stream needs a tcp endpoint;
 * an http endpoint that would match says protocol_not_allowed; every
 * other flow is admitted by both kinds. */
static void test_protocol_tcp(void **state)
{
	(void)state;
	struct policy_diag d;
	struct policy *p = load("version: 1\nnetwork:\n  policies:\n"
				"    - name: ssh\n      binaries: [{path: /usr/bin/ssh}]\n"
				"      endpoints: [{host: git.example, ports: [22], protocol: tcp},\n"
				"                  {cidr: 198.51.100.0/24, ports: [5432], protocol: tcp}]\n"
				"    - name: web\n      binaries: [{path: /usr/bin/curl}]\n"
				"      endpoints: [{host: git.example, ports: [22, 443], protocol: http}]\n", &d);
	if (!p)
		fail_msg("load: %s", d.msg);
	const struct network_policy *np = policy_section_data(p, "network");
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup("/usr/bin/ssh");
	struct netaddr ip;
	netaddr_parse("198.51.100.10", &ip);
	struct netpolicy_decision dec = netpolicy_decide_flow(np, id, "git.example", 22, &ip, NETPOLICY_FLOW_RAW);
	assert_true(dec.allow);
	assert_string_equal(dec.policy, "ssh");
	dec = netpolicy_decide_flow(np, id, "198.51.100.10", 5432, &ip, NETPOLICY_FLOW_RAW);
	assert_true(dec.allow);
	/* tcp admits TLS/HTTP too */
	dec = netpolicy_decide_flow(np, id, "git.example", 22, &ip, NETPOLICY_FLOW_HTTP);
	assert_true(dec.allow);
	free(id->binary_path);
	id->binary_path = strdup("/usr/bin/curl");
	dec = netpolicy_decide_flow(np, id, "git.example", 22, &ip, NETPOLICY_FLOW_RAW);
	assert_false(dec.allow);
	assert_string_equal(reason_word(dec.reason), "protocol_not_allowed");
	assert_string_equal(dec.policy, "web");
	dec = netpolicy_decide_flow(np, id, "git.example", 443, &ip, NETPOLICY_FLOW_HTTP);
	assert_true(dec.allow);
	/* the explicit proxy's decision is the http kind */
	dec = netpolicy_decide(np, id, "git.example", 22, &ip);
	assert_true(dec.allow);
	/* another binary: no rule at all */
	free(id->binary_path);
	id->binary_path = strdup("/usr/bin/nc");
	dec = netpolicy_decide_flow(np, id, "git.example", 22, &ip, NETPOLICY_FLOW_RAW);
	assert_false(dec.allow);
	assert_string_equal(reason_word(dec.reason), "no_matching_policy");
	flow_identity_free(id);
	policy_free(p);
	p = load("version: 1\nnetwork:\n  policies:\n    - name: a\n      binaries: [{path: /bin/x}]\n"
		 "      endpoints: [{cidr: 10.0.0.0/8, ports: [1], protocol: udp}]\n", &d);
	assert_null(p);
	assert_non_null(strstr(d.msg, "protocol 'udp'"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_protocol_tcp),
		cmocka_unit_test(test_decision_table),
		cmocka_unit_test(test_audit_mode),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_globs_and_hosts),
		cmocka_unit_test(test_layers),
		cmocka_unit_test(test_rule_for_destination),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
