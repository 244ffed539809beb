/* tether policy check | explain: validate policy files with the layered
 * loader, and run the proxy's own decision function (netpolicy_decide) on a
 * hypothetical flow. */
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cli/commands.h"
#include "common/log.h"
#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"

#define MAX_FILES 32
#define MAX_ANC 32

static const struct policy_section *const sections[] = { &network_policy_section };

static void usage(FILE *out)
{
	fprintf(out,
		"usage: tether policy check FILE...\n"
		"       tether policy explain --policy FILE [--policy FILE]... --binary PATH\n"
		"                             [--sha256 HEX] [--ancestor PATH]... --dest HOST:PORT\n"
		"                             [--ip ADDR]...\n"
		"\n"
		"check: load the files as one layered policy (in order, on top of the\n"
		"embedded baseline); print the first error as FILE:LINE:COL: message.\n"
		"Exit 0 valid, 1 invalid.\n"
		"explain: the decision net-supervisor would take for a flow from binary\n"
		"PATH (with that image hash and those ancestors, nearest first) to\n"
		"HOST:PORT. HOST is resolved unless it is an IP literal or --ip gives the\n"
		"addresses. Exit 0 allow, 1 deny (audit mode: 0, with the would-be reason).\n");
}

static int load(const char *const *files, size_t n, struct policy **out)
{
	struct policy_loader *l;
	struct policy_diag d = { { 0 } };
	int r = policy_loader_new(sections, 1, &l, &d);
	for (size_t i = 0; r >= 0 && i < n; i++)
		r = policy_loader_add_file(l, POLICY_LAYER_COMMAND, files[i], false, &d);
	if (r < 0) {
		if (l)
			policy_loader_free(l);
		fprintf(stderr, "%s\n", d.msg[0] ? d.msg : strerror(-r));
		return r;
	}
	return policy_loader_finish(l, out);
}

static int check(int argc, char **argv)
{
	if (argc < 3) {
		log_error("policy check needs at least one FILE");
		return 2;
	}
	if (!strcmp(argv[2], "--help")) {
		usage(stdout);
		return 0;
	}
	struct policy *p;
	if (load((const char *const *)argv + 2, (size_t)(argc - 2), &p) < 0)
		return 1;
	const struct network_policy *np = policy_section_data(p, "network");
	for (size_t i = 0; i < p->n_warnings; i++)
		fprintf(stderr, "warning: %s\n", p->warnings[i]);
	printf("ok: %d file(s); network: %s, %zu rule(s)%s\n", argc - 2,
	       np && np->mode == NETPOL_AUDIT ? "audit" : "enforce", np ? np->n_rules : (size_t)0,
	       np ? "" : " (no network section: every flow is denied)");
	policy_free(p);
	return 0;
}

static int explain(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' }, { "binary", required_argument, NULL, 'b' },
		{ "sha256", required_argument, NULL, 's' }, { "ancestor", required_argument, NULL, 'a' },
		{ "dest", required_argument, NULL, 'd' },   { "ip", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
	};
	const char *files[MAX_FILES], *anc[MAX_ANC], *ips[16];
	size_t nf = 0, na = 0, ni = 0;
	const char *binary = NULL, *sha = NULL, *dest = NULL;
	int c;
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (nf == MAX_FILES)
				return 2;
			files[nf++] = optarg;
			break;
		case 'b': binary = optarg; break;
		case 's': sha = optarg; break;
		case 'a':
			if (na == MAX_ANC)
				return 2;
			anc[na++] = optarg;
			break;
		case 'd': dest = optarg; break;
		case 'i':
			if (ni == 16)
				return 2;
			ips[ni++] = optarg;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc - 1) {
		log_error("policy explain: unexpected argument '%s'", argv[optind + 1]);
		return 2;
	}
	if (!nf || !binary || !dest) {
		log_error("policy explain needs --policy, --binary and --dest (see --help)");
		return 2;
	}
	if (binary[0] != '/') {
		log_error("--binary needs an absolute path");
		return 2;
	}
	if (sha && (strlen(sha) != 64 || strspn(sha, "0123456789abcdefABCDEF") != 64)) {
		log_error("--sha256 needs 64 hex digits");
		return 2;
	}
	/* HOST:PORT, [v6]:PORT */
	char hostbuf[300], host[256];
	const char *colon = dest[0] == '[' ? strstr(dest, "]:") : strrchr(dest, ':');
	if (!colon || (size_t)(colon - dest) >= sizeof(hostbuf)) {
		log_error("--dest %s: expected HOST:PORT", dest);
		return 2;
	}
	size_t hl = (size_t)(colon - dest) + (dest[0] == '[');
	memcpy(hostbuf, dest, hl);
	hostbuf[hl] = '\0';
	const char *ps = colon + (dest[0] == '[' ? 2 : 1);
	char *end;
	unsigned long port = strtoul(ps, &end, 10);
	if (!*ps || *end || port == 0 || port > 65535 || netpol_host_normalize(hostbuf, host, sizeof(host)) < 0) {
		log_error("--dest %s: expected HOST:PORT with a valid host and port 1-65535", dest);
		return 2;
	}
	struct netaddr addrs[16];
	size_t n = 0;
	for (size_t i = 0; i < ni; i++)
		if (netaddr_parse(ips[i], &addrs[n++]) < 0) {
			log_error("--ip %s is not an IP address", ips[i]);
			return 2;
		}
	if (n == 0 && netaddr_parse(host, &addrs[0]) == 0)
		n = 1;
	struct policy *p;
	if (load(files, nf, &p) < 0)
		return 1;
	const struct network_policy *np = policy_section_data(p, "network");
	static const struct network_policy empty = { 0 };
	if (!np)
		np = &empty;
	struct flow_identity *id = flow_identity_new();
	id->binary_path = strdup(binary);
	if (sha)
		for (size_t i = 0; i < 64; i++)
			id->sha256[i] = (char)(sha[i] | 0x20);
	for (size_t i = 0; i < na; i++)
		flow_identity_add_ancestor(id, anc[i], 0, NULL);
	if (n == 0 && !netpolicy_resolution_may_allow(np, id, host, (uint16_t)port)) {
		/* As the proxy does: no rule could allow this name for this
		 * identity, so it is never looked up. */
		struct netpolicy_decision d = netpolicy_decide(np, id, host, (uint16_t)port, NULL);
		printf("  (not looked up: no rule of this binary could allow %s:%lu)\n", host, port);
		printf("%s%s → %s:%lu: %s, reason %s, policy %s\n", binary, sha ? " (with that hash)" : "", host,
		       port, d.allow ? "allow" : "deny", reason_word(d.reason), d.policy ? d.policy : "-");
		flow_identity_free(id);
		policy_free(p);
		return d.allow ? 0 : 1;
	}
	if (n == 0) {
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
		int r = getaddrinfo(host, NULL, &hints, &res);
		if (r != 0) {
			log_error("cannot resolve %s: %s (give --ip)", host, gai_strerror(r));
			flow_identity_free(id);
			policy_free(p);
			return 1;
		}
		for (struct addrinfo *ai = res; ai && n < 16; ai = ai->ai_next)
			if (netaddr_from_sockaddr(ai->ai_addr, &addrs[n]) == 0)
				n++;
		freeaddrinfo(res);
	}
	/* As the proxy does: the first allowed address is the one used. */
	struct netpolicy_decision final = { 0 };
	bool have = false;
	for (size_t i = 0; i < n; i++) {
		struct netpolicy_decision d = netpolicy_decide(np, id, host, (uint16_t)port, &addrs[i]);
		char ip[64];
		printf("  %s: %s (%s)%s%s\n", netaddr_format(&addrs[i], ip, sizeof(ip)),
		       d.allow ? "allow" : "deny", reason_word(d.reason), d.policy ? " policy " : "",
		       d.policy ? d.policy : "");
		if (!have || (d.allow && !final.allow)) {
			final = d;
			have = true;
		}
	}
	printf("%s%s → %s:%lu: %s, reason %s, policy %s%s\n", binary, sha ? " (with that hash)" : "", host, port,
	       final.allow ? "allow" : "deny", reason_word(final.reason), final.policy ? final.policy : "-",
	       final.audit_mode ? " (audit mode: would be denied, allowed and logged)" : "");
	int rc = final.allow ? 0 : 1;
	flow_identity_free(id);
	policy_free(p);
	return rc;
}

int cmd_policy(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "check"))
		return check(argc, argv);
	if (!strcmp(argv[1], "explain"))
		return explain(argc, argv);
	log_error("policy: unknown action '%s' (check or explain)", argv[1]);
	return 2;
}
