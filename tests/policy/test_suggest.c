/* `tether policy suggest`'s core: audit lines in, a policy out.
 * Asserts: one rule per binary, endpoints deduplicated by host and port,
 * ancestors = those on every flow, --pin pins each distinct image (and
 * refuses an unhashed one), --merge keeps the existing document and adds
 * rules only for what it does not allow, flows a policy cannot name safely
 * are left out with a note, malformed lines are errors with their line
 * number, and the output round-trips through the project's loader,
 * allowing every learned flow and nothing else tested here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"
#include "policy/suggest.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* An egress_decision line as net-supervisor writes it (learn mode). */
static char *line(const char *bin, const char *sha, const char *anc, const char *host, int port,
		  const char *ip)
{
	char *s;
	char shaj[80], ipj[80];
	snprintf(shaj, sizeof(shaj), sha ? "\"%s\"" : "null", sha);
	snprintf(ipj, sizeof(ipj), ip ? "\"%s\"" : "null", ip);
	assert_true(asprintf(&s,
			     "{\"ts\":\"2026-12-03T20:00:00Z\",\"event\":\"egress_decision\",\"topology\":"
			     "\"combined\",\"decision\":\"allow\",\"reason\":\"no_matching_policy\",\"mode\":"
			     "\"learn\",\"learn\":true,\"would\":\"deny\",\"identity_source\":\"local_procfs\","
			     "\"binary\":{\"path\":\"%s\",\"sha256\":%s},\"pid\":7,\"ancestors\":[%s],"
			     "\"dest\":{\"host\":\"%s\",\"port\":%d,\"ip\":%s},\"policy\":null}\n",
			     bin, shaj, anc, host, port, ipj) > 0);
	return s;
}

static int add(struct suggest *s, char *l, unsigned n)
{
	char msg[256];
	int r = suggest_add_line(s, l, strlen(l), n, msg, sizeof(msg));
	free(l);
	return r;
}

static const struct policy_section *const secs[] = { &network_policy_section };

static struct policy *load(const char *text)
{
	struct policy *p = NULL;
	struct policy_diag d;
	if (policy_load_buffer("out.yaml", text, strlen(text), secs, 1, &p, &d) < 0)
		fail_msg("suggested policy does not load: %s\n%s", d.msg, text);
	return p;
}

static const struct netpol_rule *rule_for(const struct network_policy *np, const char *path)
{
	for (size_t i = 0; i < np->n_rules; i++)
		for (size_t j = 0; j < np->rules[i].n_binaries; j++)
			if (!strcmp(np->rules[i].binaries[j].path, path))
				return &np->rules[i];
	return NULL;
}

static bool decide(const struct network_policy *np, const char *bin, const char *anc, const char *host,
		   int port, const char *ip)
{
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup(bin);
	if (anc)
		flow_identity_add_ancestor(id, anc, 1, NULL);
	struct netaddr a;
	if (ip)
		netaddr_parse(ip, &a);
	struct netpolicy_decision d = netpolicy_decide(np, id, host, (uint16_t)port, ip ? &a : NULL);
	flow_identity_free(id);
	return d.reason == REASON_ALLOWED;
}

static char *write_ok(struct suggest *s, const struct suggest_opts *o)
{
	char *y;
	size_t n;
	struct policy_diag d;
	int r = suggest_write(s, o, &y, &n, &d);
	if (r < 0)
		fail_msg("suggest_write: %d %s", r, d.msg);
	assert_int_equal(strlen(y), n);
	return y;
}

static void test_dedupe_and_ancestors(void **state)
{
	(void)state;
	struct suggest *s;
	assert_int_equal(suggest_new(&s), 0);
	const char *dash = "{\"path\":\"/usr/bin/dash\",\"pid\":3}";
	const char *both = "{\"path\":\"/usr/bin/bash\",\"pid\":4},{\"path\":\"/usr/bin/dash\",\"pid\":3}";
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, both, "example.org", 443, "198.51.100.7"), 1), 1);
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, dash, "example.org", 443, "198.51.100.7"), 2), 1);
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, both, "example.org", 80, "198.51.100.7"), 3), 1);
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, dash, "api.example.org", 443, NULL), 4), 1);
	assert_int_equal(add(s, line("/usr/bin/python3.11", SHA_B, both, "pypi.example", 443, NULL), 5), 1);
	assert_int_equal(add(s, line("/usr/bin/python3.11", SHA_B, "", "198.51.100.9", 8080, NULL), 6), 1);
	/* not flows: other events, no identity, blank */
	char other[] = "{\"event\":\"process_spawn\",\"pid\":3}";
	char msg[256];
	assert_int_equal(suggest_add_line(s, other, strlen(other), 7, msg, sizeof(msg)), 0);
	char noid[] = "{\"event\":\"egress_decision\",\"decision\":\"deny\",\"binary\":null,"
		      "\"dest\":{\"host\":\"x.example\",\"port\":443,\"ip\":null}}";
	assert_int_equal(suggest_add_line(s, noid, strlen(noid), 8, msg, sizeof(msg)), 0);
	assert_int_equal(suggest_add_line(s, "\n", 1, 9, msg, sizeof(msg)), 0);

	struct suggest_opts o = { .rootfd = -1 };
	char *y = write_ok(s, &o);
	struct policy *p = load(y);
	const struct network_policy *np = policy_section_data(p, "network");
	assert_non_null(np);
	assert_int_equal(np->mode, NETPOL_ENFORCE);
	assert_int_equal(np->n_rules, 2);
	const struct netpol_rule *curl = rule_for(np, "/usr/bin/curl");
	assert_non_null(curl);
	assert_string_equal(curl->name, "curl");
	assert_int_equal(curl->n_binaries, 1);
	assert_false(curl->binaries[0].has_sha256); /* no --pin */
	/* ancestors: dash was on every flow, bash not */
	assert_int_equal(curl->n_ancestors, 1);
	assert_string_equal(curl->ancestors[0].path, "/usr/bin/dash");
	/* endpoints: one per host, sorted; ports sorted and unique */
	assert_int_equal(curl->n_endpoints, 2);
	assert_string_equal(curl->endpoints[0].host, "api.example.org");
	assert_int_equal(curl->endpoints[0].n_ports, 1);
	assert_string_equal(curl->endpoints[1].host, "example.org");
	assert_int_equal(curl->endpoints[1].n_ports, 2);
	assert_int_equal(curl->endpoints[1].ports[0], 80);
	assert_int_equal(curl->endpoints[1].ports[1], 443);
	/* python: one flow had no ancestors, so none are required */
	const struct netpol_rule *py = rule_for(np, "/usr/bin/python3.11");
	assert_non_null(py);
	assert_int_equal(py->n_ancestors, 0);
	assert_int_equal(py->endpoints[1].host_kind, NETPOL_HOST_EXACT);
	assert_int_equal(py->endpoints[0].host_kind, NETPOL_HOST_IP);
	/* exactly the learned flows */
	assert_true(decide(np, "/usr/bin/curl", "/usr/bin/dash", "example.org", 443, "198.51.100.7"));
	assert_true(decide(np, "/usr/bin/python3.11", NULL, "198.51.100.9", 8080, "198.51.100.9"));
	assert_false(decide(np, "/usr/bin/curl", NULL, "example.org", 443, "198.51.100.7"));      /* no dash */
	assert_false(decide(np, "/usr/bin/curl", "/usr/bin/dash", "example.org", 8443, "198.51.100.7"));
	assert_false(decide(np, "/usr/bin/curl", "/usr/bin/dash", "evil.example", 443, "198.51.100.7"));
	assert_false(decide(np, "/usr/bin/wget", "/usr/bin/dash", "example.org", 443, "198.51.100.7"));
	assert_false(decide(np, "/usr/bin/python3.11", NULL, "198.51.100.9", 80, "198.51.100.9"));
	const struct suggest_stats *st = suggest_stats(s);
	assert_int_equal(st->flows, 6);
	assert_int_equal(st->no_identity, 1);
	assert_int_equal(st->rules, 2);
	/* the same input gives the same text */
	char *y2 = write_ok(s, &o);
	assert_string_equal(y, y2);
	free(y2);
	free(y);
	policy_free(p);
	suggest_free(s);
}

static void test_pin(void **state)
{
	(void)state;
	struct suggest *s;
	assert_int_equal(suggest_new(&s), 0);
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, "", "example.org", 443, NULL), 1), 1);
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_B, "", "example.org", 443, NULL), 2), 1);
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, "", "example.org", 443, NULL), 3), 1);
	struct suggest_opts o = { .pin = true, .rootfd = -1 };
	char *y = write_ok(s, &o);
	struct policy *p = load(y);
	const struct network_policy *np = policy_section_data(p, "network");
	assert_int_equal(np->n_rules, 1);
	assert_int_equal(np->rules[0].n_binaries, 2); /* one per distinct image */
	assert_true(np->rules[0].binaries[0].has_sha256);
	assert_string_equal(np->rules[0].binaries[0].sha256, SHA_A);
	assert_string_equal(np->rules[0].binaries[1].sha256, SHA_B);
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup("/usr/bin/curl");
	memset(id->sha256, 'c', 64);
	struct netpolicy_decision d = netpolicy_decide(np, id, "example.org", 443, NULL);
	assert_int_equal(d.reason, REASON_BINARY_HASH_MISMATCH);
	flow_identity_free(id);
	free(y);
	policy_free(p);
	/* an unhashed flow cannot be pinned: an error, not an unpinned rule */
	assert_int_equal(add(s, line("/usr/bin/wget", NULL, "", "example.org", 443, NULL), 4), 1);
	size_t n;
	struct policy_diag dg;
	assert_int_equal(suggest_write(s, &o, &y, &n, &dg), -EINVAL);
	assert_non_null(strstr(dg.msg, "--pin: the audit has no sha256 for /usr/bin/wget (line 4)"));
	suggest_free(s);
}

/* --pin pins an ancestor only when every flow recorded the same hash. */
static void test_pin_ancestors(void **state)
{
	(void)state;
	struct suggest *s;
	assert_int_equal(suggest_new(&s), 0);
	const char *dash_a = "{\"path\":\"/usr/bin/dash\",\"pid\":3,\"sha256\":\"" SHA_A "\"},"
			     "{\"path\":\"/usr/bin/bash\",\"pid\":2,\"sha256\":\"" SHA_A "\"}";
	const char *dash_a_bash_b = "{\"path\":\"/usr/bin/dash\",\"pid\":3,\"sha256\":\"" SHA_A "\"},"
				    "{\"path\":\"/usr/bin/bash\",\"pid\":2,\"sha256\":\"" SHA_B "\"}";
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, dash_a, "example.org", 443, NULL), 1), 1);
	assert_int_equal(add(s, line("/usr/bin/curl", SHA_A, dash_a_bash_b, "example.org", 443, NULL), 2), 1);
	struct suggest_opts o = { .pin = true, .rootfd = -1 };
	char *y = write_ok(s, &o);
	struct policy *p = load(y);
	const struct network_policy *np = policy_section_data(p, "network");
	assert_int_equal(np->rules[0].n_ancestors, 2);
	assert_string_equal(np->rules[0].ancestors[0].path, "/usr/bin/dash");
	assert_true(np->rules[0].ancestors[0].has_sha256);
	assert_string_equal(np->rules[0].ancestors[0].sha256, SHA_A);
	assert_string_equal(np->rules[0].ancestors[1].path, "/usr/bin/bash");
	assert_false(np->rules[0].ancestors[1].has_sha256); /* it changed between flows */
	free(y);
	policy_free(p);
	char bad[] = "{\"event\":\"egress_decision\",\"binary\":{\"path\":\"/a\"},\"ancestors\":[{\"path\":"
		     "\"/b\",\"sha256\":\"12\"}],\"dest\":{\"host\":\"h.example\",\"port\":1}}";
	char msg[256];
	assert_int_equal(suggest_add_line(s, bad, strlen(bad), 3, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "line 3: ancestors[0].sha256 is not 64"));
	suggest_free(s);
}

static void test_merge(void **state)
{
	(void)state;
	static const char existing[] = "version: 1\n"
				       "environment:\n"
				       "  pass_through: [EDITOR]\n"
				       "network:\n"
				       "  mode: enforce\n"
				       "  policies:\n"
				       "    - name: curl\n"
				       "      binaries:\n"
				       "        - path: /usr/bin/cur*\n"
				       "      endpoints:\n"
				       "        - host: example.org\n"
				       "          ports: [443]\n";
	struct suggest *s;
	assert_int_equal(suggest_new(&s), 0);
	assert_int_equal(add(s, line("/usr/bin/curl", NULL, "", "example.org", 443, NULL), 1), 1);
	assert_int_equal(add(s, line("/usr/bin/curl", NULL, "", "other.example", 80, NULL), 2), 1);
	assert_int_equal(add(s, line("/usr/bin/node", NULL, "", "registry.example", 443, NULL), 3), 1);
	struct suggest_opts o = { .merge_name = "existing.yaml", .merge_text = existing,
				  .merge_len = strlen(existing), .rootfd = -1 };
	char *y = write_ok(s, &o);
	struct policy *p = load(y);
	const struct network_policy *np = policy_section_data(p, "network");
	assert_int_equal(np->n_rules, 3);
	assert_string_equal(np->rules[0].name, "curl");      /* kept, first */
	assert_string_equal(np->rules[0].binaries[0].path, "/usr/bin/cur*");
	assert_string_equal(np->rules[1].name, "curl-2");    /* a new name */
	assert_int_equal(np->rules[1].n_endpoints, 1);       /* only what was not allowed */
	assert_string_equal(np->rules[1].endpoints[0].host, "other.example");
	assert_string_equal(np->rules[2].name, "node");
	/* the rest of the document is still there */
	assert_int_equal(p->env.pass_through.n, 1);
	assert_string_equal(p->env.pass_through.v[0].pattern, "EDITOR");
	assert_int_equal(suggest_stats(s)->covered, 1);
	free(y);
	policy_free(p);
	/* a bad merge policy is refused with the loader's message */
	struct suggest_opts bad = { .merge_name = "bad.yaml", .merge_text = "version: 1\nnetwork: 3\n",
				    .merge_len = 22, .rootfd = -1 };
	size_t n;
	struct policy_diag d;
	assert_int_equal(suggest_write(s, &bad, &y, &n, &d), -EINVAL);
	assert_non_null(strstr(d.msg, "bad.yaml:2:"));
	/* a merge policy without a network section gets one */
	static const char envonly[] = "version: 1\nenvironment:\n  pass_through: [EDITOR]\n";
	struct suggest_opts eo = { .merge_name = "e.yaml", .merge_text = envonly, .merge_len = strlen(envonly),
				   .rootfd = -1 };
	y = write_ok(s, &eo);
	p = load(y);
	assert_int_equal(((const struct network_policy *)policy_section_data(p, "network"))->n_rules, 2);
	free(y);
	policy_free(p);
	suggest_free(s);
}

/* A merge policy naming a symlink (resolved in the root) already allows
 * the flows of its target: no new rule for them. */
static void test_merge_symlink(void **state)
{
	(void)state;
	char root[] = "/tmp/tether-suggest.XXXXXX", p1[64], p2[64];
	assert_non_null(mkdtemp(root));
	snprintf(p1, sizeof(p1), "%s/python3.11", root);
	snprintf(p2, sizeof(p2), "%s/python3", root);
	close(open(p1, O_CREAT | O_WRONLY, 0755));
	assert_int_equal(symlink("python3.11", p2), 0);
	char existing[512];
	snprintf(existing, sizeof(existing),
		 "version: 1\nnetwork:\n  policies:\n    - name: py\n      binaries:\n        - path: /python3\n"
		 "      endpoints:\n        - host: pypi.example\n          ports: [443]\n");
	struct suggest *s;
	assert_int_equal(suggest_new(&s), 0);
	assert_int_equal(add(s, line("/python3.11", NULL, "", "pypi.example", 443, NULL), 1), 1);
	int fd = open(root, O_PATH | O_DIRECTORY);
	struct suggest_opts o = { .merge_name = "m.yaml", .merge_text = existing, .merge_len = strlen(existing),
				  .rootfd = fd, .root_label = root };
	char *y = write_ok(s, &o);
	assert_int_equal(suggest_stats(s)->covered, 1);
	assert_int_equal(suggest_stats(s)->rules, 0);
	free(y);
	close(fd);
	unlink(p2);
	unlink(p1);
	rmdir(root);
	suggest_free(s);
}

static void test_left_out_and_malformed(void **state)
{
	(void)state;
	struct suggest *s;
	assert_int_equal(suggest_new(&s), 0);
	/* blocked range: a human decides (a cidr endpoint) */
	assert_int_equal(add(s, line("/usr/bin/curl", NULL, "", "metadata.example", 80, "169.254.169.254"), 1), 0);
	assert_int_equal(add(s, line("/usr/bin/curl", NULL, "", "127.0.0.1", 8080, NULL), 2), 0);
	/* a path a policy would read as a glob */
	assert_int_equal(add(s, line("/tmp/*", NULL, "", "example.org", 443, NULL), 3), 0);
	/* names the YAML emitter must quote so the loader reads strings */
	assert_int_equal(add(s, line("/opt/true", NULL, "", "true", 443, NULL), 4), 1);
	assert_int_equal(add(s, line("/opt/x", NULL, "", "null", 443, NULL), 5), 1);
	size_t n;
	const char *const *notes = suggest_notes(s, &n);
	assert_int_equal(n, 3);
	assert_non_null(strstr(notes[0], "line 1: /usr/bin/curl -> metadata.example:80: 169.254.169.254 is in a "
					  "blocked range"));
	assert_non_null(strstr(notes[2], "line 3: binary path cannot be named exactly"));
	assert_int_equal(suggest_stats(s)->left_out, 3);
	struct suggest_opts o = { .rootfd = -1 };
	char *y = write_ok(s, &o);
	struct policy *p = load(y);
	const struct network_policy *np = policy_section_data(p, "network");
	assert_int_equal(np->n_rules, 2);
	assert_string_equal(rule_for(np, "/opt/true")->endpoints[0].host, "true");
	assert_string_equal(rule_for(np, "/opt/x")->endpoints[0].host, "null");
	free(y);
	policy_free(p);

	static const struct {
		const char *line, *msg;
	} bad[] = {
		{ "not json", "line 9: not JSON" },
		{ "[1,2]", "line 9: not a JSON object" },
		{ "{\"x\":1}", "line 9: no \"event\"" },
		{ "{\"event\":\"egress_decision\",\"binary\":{\"path\":\"/a\"},\"dest\":{\"host\":\"h.example\","
		  "\"port\":0}}", "line 9: dest.port 0 is not a port" },
		{ "{\"event\":\"egress_decision\",\"binary\":{\"path\":\"/a\",\"sha256\":\"xyz\"},\"dest\":{"
		  "\"host\":\"h.example\",\"port\":1}}", "line 9: binary.sha256 is not 64" },
		{ "{\"event\":\"egress_decision\",\"binary\":{\"path\":\"/a\"},\"dest\":{\"host\":\"H..x\","
		  "\"port\":1}}", "line 9: dest.host is not a normalised" },
		{ "{\"event\":\"egress_decision\",\"binary\":{\"path\":\"/a\"},\"dest\":{\"host\":\"h.example\","
		  "\"port\":1,\"ip\":\"1.2.3\"}}", "line 9: dest.ip is not an IP" },
		{ "{\"event\":\"egress_decision\",\"binary\":{\"path\":\"/a\"},\"ancestors\":[3],\"dest\":{"
		  "\"host\":\"h.example\",\"port\":1}}", "line 9: ancestors[0] has no path" },
		{ "{\"event\":\"a\",\"event\":\"b\"}", "line 9: not JSON" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char msg[256] = "";
		int r = suggest_add_line(s, bad[i].line, strlen(bad[i].line), 9, msg, sizeof(msg));
		if (r != -EINVAL || strncmp(msg, bad[i].msg, strlen(bad[i].msg)) != 0)
			fail_msg("%s: got %d '%s', want '%s'", bad[i].line, r, msg, bad[i].msg);
	}
	suggest_free(s);
}

/* Captured flows (issue 21): a raw stream (peek other/incomplete) gets
 * its endpoint protocol: tcp, a TLS one does not; the result admits both
 * as the proxy decides them. */
static void test_transparent_raw(void **state)
{
	(void)state;
	struct suggest *s;
	assert_int_equal(suggest_new(&s), 0);
	char *l = line("/usr/bin/ssh", NULL, "", "git.example", 22, "198.51.100.7");
	char *raw = NULL;
	/* splice the transparent fields in before "policy" */
	char *at = strstr(l, ",\"policy\":null");
	assert_non_null(at);
	assert_true(asprintf(&raw, "%.*s,\"capture\":\"transparent\",\"name_source\":\"dns\",\"peek\":\"other\"%s",
			     (int)(at - l), l, at) > 0);
	free(l);
	assert_int_equal(add(s, raw, 1), 1);
	l = line("/usr/bin/curl", NULL, "", "web.example", 443, "198.51.100.8");
	at = strstr(l, ",\"policy\":null");
	assert_true(asprintf(&raw, "%.*s,\"capture\":\"transparent\",\"name_source\":\"sni\",\"peek\":\"tls\"%s",
			     (int)(at - l), l, at) > 0);
	free(l);
	assert_int_equal(add(s, raw, 2), 1);
	struct suggest_opts o = { .rootfd = -1 };
	char *y = write_ok(s, &o);
	struct policy *p = load(y);
	const struct network_policy *np = policy_section_data(p, "network");
	const struct netpol_rule *r = rule_for(np, "/usr/bin/ssh");
	assert_non_null(r);
	assert_int_equal(r->endpoints[0].protocol, NETPOL_PROTO_TCP);
	r = rule_for(np, "/usr/bin/curl");
	assert_non_null(r);
	assert_int_equal(r->endpoints[0].protocol, NETPOL_PROTO_HTTP);
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup("/usr/bin/ssh");
	struct netaddr a;
	netaddr_parse("198.51.100.7", &a);
	assert_true(netpolicy_decide_flow(np, id, "git.example", 22, &a, NETPOLICY_FLOW_RAW).allow);
	flow_identity_free(id);
	policy_free(p);
	free(y);
	suggest_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dedupe_and_ancestors),
		cmocka_unit_test(test_pin),
		cmocka_unit_test(test_pin_ancestors),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_merge_symlink),
		cmocka_unit_test(test_left_out_and_malformed),
		cmocka_unit_test(test_transparent_raw),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
