/* tether policy check | explain | suggest: validate policy files with the
 * layered loader, run the proxy's own decision function (netpolicy_decide)
 * on a hypothetical flow, and write a policy from an audit (suggest.h).
 * check and explain resolve symlinked binary paths in a root (--root, "/")
 * as the net-supervisor does in the workload's, and say which names never
 * connect themselves (binpath.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/log.h"
#include "common/util.h"
#include "policy/binpath.h"
#include "policy/credentials.h"
#include "policy/netpolicy.h"
#include "policy/network.h"
#include "policy/policy.h"
#include "policy/suggest.h"

#define MAX_FILES 32
#define MAX_ANC 32

static const struct policy_section *const sections[] = { &network_policy_section, &credentials_section };

static void usage(FILE *out)
{
	fprintf(out,
		"usage: tether policy check [--root DIR] FILE...\n"
		"       tether policy explain --policy FILE [--policy FILE]... --binary PATH\n"
		"                             [--sha256 HEX] [--ancestor PATH]... --dest HOST:PORT\n"
		"                             [--ip ADDR]... [--raw] [--root DIR]\n"
		"                             [--method METHOD --path PATH [--websocket]]\n"
		"       tether policy suggest AUDIT.jsonl... [--pin] [--merge FILE] [-o OUT]\n"
		"                             [--root DIR]\n"
		"\n"
		"check: load the files as one layered policy (in order, on top of the\n"
		"embedded baseline); print the first error as FILE:LINE:COL: message.\n"
		"Exit 0 valid, 1 invalid.\n"
		"explain: the decision net-supervisor would take for a flow from binary\n"
		"PATH (with that image hash and those ancestors, nearest first) to\n"
		"HOST:PORT. HOST is resolved unless it is an IP literal or --ip gives the\n"
		"addresses. Exit 0 allow, 1 deny (audit mode: 0, with the would-be reason).\n"
		"--raw: the flow is a captured (transparent) stream that is neither TLS\n"
		"nor HTTP (ssh, a database), which only `protocol: tcp` endpoints admit.\n"
		"--method and --path: also the decision on one HTTP request in the flow\n"
		"(an inspected endpoint's `rules:`; --websocket: it asks to upgrade);\n"
		"the exit status is then the request's (0 allow, 1 deny).\n"
		"A --binary that is a symlink is decided as its target, a script as its\n"
		"interpreter: what the proxy sees as the running binary.\n"
		"check and explain resolve symlinked binary paths of the policy in DIR\n"
		"(default /; the net-supervisor uses the workload's root) and warn about\n"
		"names whose flows come from another program (git, pip, npm, ...).\n"
		"suggest: a policy from the flows of audit files (written by `tether run\n"
		"--learn --audit AUDIT`): one rule per binary the flows came from, the\n"
		"ancestors present on all its flows, its endpoints by host and port.\n"
		"--pin adds each binary's sha256; --merge FILE extends that policy (rules\n"
		"only for flows it does not allow yet; comments are not kept). Written to\n"
		"OUT (default stdout), checked by the loader first. Exit 0, 1 error.\n");
}

static int load(const char *const *files, size_t n, struct policy **out)
{
	struct policy_loader *l;
	struct policy_diag d = { { 0 } };
	int r = policy_loader_new(sections, 2, &l, &d);
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

static int open_root(const char *root)
{
	int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		log_error("--root %s: %m", root);
	return fd;
}

/* Is `path` (a binary the flows really come from) matched by some binary
 * entry of the rule? */
static bool rule_covers(const struct netpol_rule *rule, const char *glob_or_path)
{
	for (size_t i = 0; i < rule->n_binaries; i++) {
		const struct netpol_binary *b = &rule->binaries[i];
		const char *p = b->resolved ? b->resolved : b->path;
		if (netpol_path_match(glob_or_path, p) || netpol_path_match(b->path, glob_or_path))
			return true;
	}
	return false;
}

/* What check says about one exact binary path of a rule: the symlink it
 * is, the interpreter of a script, a row of the table of names that never
 * connect themselves. */
static void check_binary(int rootfd, const char *root, const struct netpol_rule *rule,
			 const struct netpol_binary *b)
{
	const char *where = b->where ? b->where : rule->origin;
	if (b->resolved)
		fprintf(stderr, "note: %s: %s is a symlink: it matches %s (resolved in %s)\n", where, b->path,
			b->resolved, root);
	const char *real = b->resolved ? b->resolved : b->path;
	char interp[PATH_MAX];
	int r = binpath_interpreter(rootfd, real, interp, sizeof(interp));
	if (r == 1) {
		if (binpath_is_shell(interp))
			fprintf(stderr, "warning: %s: %s is a shell script (%s): its flows come from the "
				"programs it runs, never from %s\n", where, b->path, interp, b->path);
		else if (!rule_covers(rule, interp))
			fprintf(stderr, "warning: %s: %s is a script run by %s: its flows come from %s "
				"(name it, with ancestors to scope it), or from the program it runs if "
				"it is a wrapper\n", where, b->path, interp, interp);
		return;
	}
	const struct binpath_hint *h = binpath_hint_find(b->path, b->resolved);
	if (h && !(h->connects && rule_covers(rule, h->connects)))
		fprintf(stderr, "warning: %s: %s: %s\n", where, b->path, h->text);
}

static int check(int argc, char **argv)
{
	const char *root = "/";
	const char *files[MAX_FILES];
	size_t nf = 0;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--root") && i + 1 < argc) {
			root = argv[++i];
			continue;
		}
		if (nf == MAX_FILES) {
			log_error("policy check: too many files (max %d)", MAX_FILES);
			return 2;
		}
		files[nf++] = argv[i];
	}
	if (nf == 0) {
		log_error("policy check needs at least one FILE");
		return 2;
	}
	int rootfd = open_root(root);
	if (rootfd < 0)
		return 2;
	struct policy *p;
	if (load(files, nf, &p) < 0 || netpol_resolve_binaries(p, rootfd, root) < 0) {
		close(rootfd);
		return 1;
	}
	const struct network_policy *np = policy_section_data(p, "network");
	for (size_t i = 0; i < p->n_warnings; i++)
		fprintf(stderr, "warning: %s\n", p->warnings[i]);
	for (size_t i = 0; np && i < np->n_rules; i++)
		for (size_t j = 0; j < np->rules[i].n_binaries; j++)
			if (!strchr(np->rules[i].binaries[j].path, '*'))
				check_binary(rootfd, root, &np->rules[i], &np->rules[i].binaries[j]);
	close(rootfd);
	printf("ok: %zu file(s); network: %s, %zu rule(s)%s\n", nf,
	       np && np->mode == NETPOL_AUDIT ? "audit" : "enforce", np ? np->n_rules : (size_t)0,
	       np ? "" : " (no network section: every flow is denied)");
	policy_free(p);
	return 0;
}

/* The binary a process started as `binary` runs, as the proxy will see
 * it: symlinks followed, a script's interpreter. Notes on stderr. */
static void explain_binary(int rootfd, const char *root, const char *binary, char *eff, size_t size)
{
	strscpy(eff, binary, size);
	char res[PATH_MAX], interp[PATH_MAX];
	int r = binpath_resolve(rootfd, binary, res, sizeof(res));
	if (r < 0) {
		fprintf(stderr, "note: %s %s in %s: deciding for the path as given\n", binary,
			r == -ENOENT ? "does not exist" : "cannot be resolved", root);
	} else if (binpath_interpreter(rootfd, res, interp, sizeof(interp)) == 1) {
		if (binpath_is_shell(interp)) {
			fprintf(stderr, "warning: %s is a shell script: its flows come from the programs it "
				"runs, never from %s\n", binary, binary);
		} else {
			fprintf(stderr, "note: %s is a script (%s) run by %s: its flows come from %s, "
				"decided below (or from the program it runs if it is a wrapper)\n", binary,
				res, interp, interp);
			strscpy(eff, interp, size);
		}
		return;
	} else if (strcmp(res, binary) != 0) {
		fprintf(stderr, "note: %s is a symlink to %s: a process started as %s runs %s, which is "
			"what the proxy decides on\n", binary, res, binary, res);
		strscpy(eff, res, size);
	}
	const struct binpath_hint *h = binpath_hint_find(binary, r == 0 ? res : NULL);
	if (h)
		fprintf(stderr, "warning: %s: %s\n", binary, h->text);
}

/* One HTTP request inside an allowed flow: what the proxy's request gate
 * decides (the same netpol_http_decide) when the endpoint is inspected; a
 * passthrough endpoint never sees requests. Returns the exit status. */
static int explain_request(const struct netpolicy_decision *flow, const char *method, const char *path,
			   bool websocket)
{
	if (!flow->tls_inspect || !flow->endpoint) {
		printf("  request %s %s: not decided on its own (the endpoint is tls: passthrough; "
		       "only an inspected CONNECT tunnel's requests meet HTTP rules)\n",
		       method, path);
		return 0;
	}
	struct netpol_http_decision d = netpol_http_decide(&flow->endpoint->http, method, path, websocket);
	printf("  request %s %s%s: %s, reason %s, rule %s%s\n", method, path, websocket ? " (websocket)" : "",
	       d.allow ? "allow" : "deny", reason_word(d.reason), d.rule ? d.rule : "-",
	       d.audit_mode ? " (audit mode: would be denied, allowed and logged)" : "");
	return d.allow ? 0 : 1;
}

static int explain(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' }, { "binary", required_argument, NULL, 'b' },
		{ "sha256", required_argument, NULL, 's' }, { "ancestor", required_argument, NULL, 'a' },
		{ "dest", required_argument, NULL, 'd' },   { "ip", required_argument, NULL, 'i' },
		{ "root", required_argument, NULL, 'r' },   { "help", no_argument, NULL, 'h' },
		{ "raw", no_argument, NULL, 'R' },         { "method", required_argument, NULL, 'M' },
		{ "path", required_argument, NULL, 'P' },  { "websocket", no_argument, NULL, 'W' },
		{ NULL, 0, NULL, 0 },
	};
	enum netpolicy_flow kind = NETPOLICY_FLOW_HTTP;
	const char *files[MAX_FILES], *anc[MAX_ANC], *ips[16];
	size_t nf = 0, na = 0, ni = 0;
	const char *binary = NULL, *sha = NULL, *dest = NULL, *root = "/";
	const char *method = NULL, *req_path = NULL;
	bool websocket = false;
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
		case 'r': root = optarg; break;
		case 'R': kind = NETPOLICY_FLOW_RAW; break;
		case 'M': method = optarg; break;
		case 'P': req_path = optarg; break;
		case 'W': websocket = true; break;
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
	if (!method != !req_path || (websocket && !method)) {
		log_error("--method and --path go together (and --websocket needs them)");
		return 2;
	}
	if (req_path && req_path[0] != '/') {
		log_error("--path %s: expected an origin-form path starting with '/'", req_path);
		return 2;
	}
	if (method && kind == NETPOLICY_FLOW_RAW) {
		log_error("--method/--path describe an HTTP request: not with --raw");
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
	int rootfd = open_root(root);
	if (rootfd < 0)
		return 2;
	char eff[PATH_MAX];
	explain_binary(rootfd, root, binary, eff, sizeof(eff));
	binary = eff;
	struct policy *p;
	int lr = load(files, nf, &p);
	if (lr == 0 && (lr = netpol_resolve_binaries(p, rootfd, root)) < 0)
		policy_free(p);
	close(rootfd);
	if (lr < 0)
		return 1;
	for (size_t i = 0; i < p->n_warnings; i++)
		fprintf(stderr, "warning: %s\n", p->warnings[i]);
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
		struct netpolicy_decision d = netpolicy_decide_flow(np, id, host, (uint16_t)port, NULL, kind);
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
		struct netpolicy_decision d = netpolicy_decide_flow(np, id, host, (uint16_t)port, &addrs[i], kind);
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
	if (final.allow && final.tls_inspect)
		printf("  TLS inspected (endpoint tls: inspect): each HTTP request is decided by its rules\n");
	/* the credentials this flow could spend (its placeholders swapped by
	 * the net-supervisor in inspected requests; never their values) */
	const struct credential_set *creds = policy_section_data(p, "credentials");
	for (size_t i = 0; final.allow && creds && i < creds->n; i++) {
		bool ok = false;
		for (size_t k = 0; k < n && !ok; k++)
			ok = credential_permits(&creds->v[i], id, host, (uint16_t)port, &addrs[k]);
		if (ok)
			printf("  credential %s: %s=tether-cred:%s becomes the secret from %s%s%s\n", creds->v[i].name,
			       creds->v[i].variable, creds->v[i].name, creds->v[i].source_file ? "file " : "variable ",
			       creds->v[i].source_file ? creds->v[i].source_file : creds->v[i].source_env,
			       final.tls_inspect ? "" : " (only in inspected requests: this endpoint is passthrough)");
		if (ok && creds->v[i].header)
			printf("  credential %s: the proxy sets %s: %s (its {} the secret)\n", creds->v[i].name,
			       creds->v[i].header, creds->v[i].header_format);
	}
	int rc = final.allow ? 0 : 1;
	if (method && final.allow)
		rc = explain_request(&final, method, req_path, websocket);
	flow_identity_free(id);
	policy_free(p);
	return rc;
}

/* ---------- suggest ---------- */

static int read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);
	char chunk[65536];
	size_t got;
	int r = 0;
	while (m && (got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		if (n + got > POLICY_MAX_FILE_SIZE) {
			r = -EFBIG;
			break;
		}
		fwrite(chunk, 1, got, m);
	}
	if (!m || ferror(f))
		r = r ? r : -EIO;
	fclose(f);
	if (m)
		fclose(m);
	if (r < 0) {
		free(buf);
		return r;
	}
	*out = buf;
	*len = n;
	return 0;
}

static int suggest_audit(struct suggest *s, const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
	if (!f) {
		log_error("policy suggest: cannot open %s: %m", path);
		return -1;
	}
	char *line = NULL, msg[512];
	size_t cap = 0;
	ssize_t n;
	unsigned lineno = 0;
	int rc = 0;
	while ((n = getline(&line, &cap, f)) >= 0) {
		if (n > (ssize_t)POLICY_MAX_FILE_SIZE) {
			log_error("policy suggest: %s:%u: a line longer than %u bytes is no audit line", path,
				  lineno + 1, POLICY_MAX_FILE_SIZE);
			rc = -1;
			break;
		}
		int r = suggest_add_line(s, line, (size_t)n, ++lineno, msg, sizeof(msg));
		if (r < 0) {
			log_error("policy suggest: %s:%s", path, r == -ENOMEM ? " out of memory" : msg + 5);
			rc = -1;
			break;
		}
	}
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
}

static int suggest(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pin", no_argument, NULL, 'P' },          { "merge", required_argument, NULL, 'm' },
		{ "output", required_argument, NULL, 'o' }, { "root", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
	};
	const char *merge = NULL, *outp = NULL, *root = "/";
	bool pin = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'P': pin = true; break;
		case 'm': merge = optarg; break;
		case 'o': outp = optarg; break;
		case 'r': root = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc - 1) {
		log_error("policy suggest needs an AUDIT file (from tether run --learn --audit AUDIT)");
		return 2;
	}
	struct suggest *s;
	if (suggest_new(&s) < 0)
		return 1;
	int rc = 1;
	char *mtext = NULL, *yaml = NULL;
	size_t mlen = 0, ylen = 0;
	int rootfd = open_root(root);
	if (rootfd < 0) {
		suggest_free(s);
		return 2;
	}
	for (int i = optind + 1; i < argc; i++)
		if (suggest_audit(s, argv[i]) < 0)
			goto out;
	if (merge) {
		int r = read_file(merge, &mtext, &mlen);
		if (r < 0) {
			log_error("policy suggest: --merge %s: %s", merge, strerror(-r));
			goto out;
		}
	}
	struct suggest_opts o = { .pin = pin, .merge_name = merge, .merge_text = mtext, .merge_len = mlen,
				  .rootfd = rootfd, .root_label = root };
	struct policy_diag d;
	int r = suggest_write(s, &o, &yaml, &ylen, &d);
	if (r < 0) {
		log_error("policy suggest: %s", d.msg[0] ? d.msg : strerror(-r));
		goto out;
	}
	size_t nn;
	const char *const *notes = suggest_notes(s, &nn);
	for (size_t i = 0; i < nn; i++)
		fprintf(stderr, "note: %s\n", notes[i]);
	const struct suggest_stats *st = suggest_stats(s);
	fprintf(stderr, "suggest: %zu flow(s) from %zu audit line(s) -> %zu new rule(s)", st->flows, st->lines,
		st->rules);
	if (merge)
		fprintf(stderr, ", %zu flow(s) already allowed by %s", st->covered, merge);
	if (st->left_out)
		fprintf(stderr, ", %zu left out (see the notes)", st->left_out);
	if (st->no_identity)
		fprintf(stderr, ", %zu decision(s) without a verified binary or destination skipped",
			st->no_identity);
	fprintf(stderr, "; review it, then: tether run --policy FILE ...\n");
	static const char head[] = "# Suggested by `tether policy suggest` from what an audit recorded:\n"
				   "# review every rule before enforcing it.\n";
	if (!outp || !strcmp(outp, "-")) {
		fputs(merge ? "" : head, stdout);
		fwrite(yaml, 1, ylen, stdout);
		rc = fflush(stdout) == 0 ? 0 : 1;
		goto out;
	}
	/* next to OUT, then renamed over it: never a half-written policy */
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", outp, (int)getpid()) >= (int)sizeof(tmp)) {
		log_error("policy suggest: -o path too long");
		goto out;
	}
	FILE *f = fopen(tmp, "wxe");
	if (!f) {
		log_error("policy suggest: cannot write %s: %m", tmp);
		goto out;
	}
	bool ok = (merge || fputs(head, f) >= 0) && fwrite(yaml, 1, ylen, f) == ylen;
	ok = (fflush(f) == 0 && fsync(fileno(f)) == 0) && ok;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, outp) < 0) {
		log_error("policy suggest: cannot write %s: %m", outp);
		unlink(tmp);
		goto out;
	}
	rc = 0;
out:
	close(rootfd);
	free(mtext);
	free(yaml);
	suggest_free(s);
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
	if (!strcmp(argv[1], "suggest"))
		return suggest(argc, argv);
	log_error("policy: unknown action '%s' (check, explain or suggest)", argv[1]);
	return 2;
}
