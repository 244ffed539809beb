/* tether run: a local composition of both supervisors in one topology
 * (launcher/launcher.h does the work). This file is the CLI edge: options,
 * policy validation before anything is created (a bad policy is 125 with
 * the loader's FILE:LINE:COL message), --dry-run, and exit statuses. */
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/log.h"
#include "common/util.h"
#include "common/upstream_proxy.h"
#include "policy/credentials.h"
#include "policy/network.h"
#include "policy/policy.h"
#include "proc-supervisor/env_build.h"
#include "proc-supervisor/env_redact.h"
#include "launcher/launcher.h"
#include "topology/model.h"

extern char **environ;

#define EXIT_TETHER 125
#define MAX_POLICY_FILES 32

static void usage(FILE *out)
{
	char names[256];
	if (topology_names_format(names, sizeof(names), "|") < 0)
		strscpy(names, "combined|shared-pid|vm|split", sizeof(names));
	fprintf(out,
		"usage: tether run [--topology NAME] [--policy FILE]... [--agent NAME]\n"
		"                  [--audit FILE] [--audit-failure deny|allow] [--exec-socket PATH]\n"
		"                  [--user USER] [--quiet] [-v] [--wait-all] [--dry-run] [--learn]\n"
		"                  [--upstream-proxy http://HOST:PORT [--upstream-proxy-auth-file FILE]\n"
		"                   [--upstream-proxy-connect address|name] [--no-upstream-proxy LIST]]\n"
		"                  [--upstream-ca FILE] -- CMD [ARG...]\n"
		"\n"
		"Build a sandbox on this machine with namespaces, start the proc-supervisor\n"
		"and the net-supervisor where the topology puts them, run CMD as the\n"
		"entrypoint, and tear everything down when it exits (also when tether or\n"
		"either supervisor crashes: a cleanup guardian removes what was created).\n"
		"\n"
		"  --topology NAME    %s\n"
		"                     (default combined; vm = vm-local, split = split-shared-netns;\n"
		"                     docs/topologies.md shows each)\n"
		"  --policy FILE      policy file for both supervisors (repeatable, layered)\n"
		"  --agent NAME       agent preset for the env boundary\n"
		"  --audit FILE       JSONL audit log of both supervisors (default: none)\n"
		"  --audit-failure deny|allow  while the audit file cannot take a decision\n"
		"                     (disk full): deny answers flows 503 audit_unavailable\n"
		"                     (default), allow relays them (net-supervisor)\n"
		"  --learn            learn mode (needs --audit): NOTHING IS ENFORCED; every flow\n"
		"                     is allowed and audited as learned, with what the policy\n"
		"                     would have done; then `tether policy suggest AUDIT`\n"
		"  --transparent on|off  capture TCP flows that ignore HTTP(S)_PROXY (curl\n"
		"                     --noproxy, Node fetch, Go net.Dial, ssh) and decide them\n"
		"                     like proxied ones (default on; off: they are refused)\n"
		"  --exec-socket PATH proc-supervisor exec gateway socket (tether exec)\n"
		"  --user USER        run the workload as USER or UID[:GID] (default: shared-pid\n"
		"                     and split-shared-netns nobody, since their nftables fence\n"
		"                     exempts uid 0; the others as we run)\n"
		"  --dry-run          print the resolved plan, env names kept/dropped and the\n"
		"                     redacted command; create and run nothing\n"
		"  -q, --quiet        no line per denied flow on stderr (the audit file\n"
		"                     stays the record)\n"
		"  -v, --verbose      also a line per allowed flow, and the daemons' info lines\n"
		"  --wait-all         when CMD exits, wait for the processes it left behind\n"
		"                     (default: say how many and stop them after a 2 s grace)\n"
		"  --upstream-proxy http://HOST:PORT  behind a corporate proxy: the net-supervisor\n"
		"                     reaches allowed destinations through it (CONNECT), after\n"
		"                     its own decision and checks (docs/net-supervisor.md)\n"
		"  --upstream-proxy-auth-file FILE  USER:PASSWORD for it, mode 0600, outside\n"
		"                     the sandbox (the workload must not be able to read it)\n"
		"  --upstream-proxy-connect address|name  what the CONNECT names (default\n"
		"                     address: the one tether checked)\n"
		"  --no-upstream-proxy LIST  go direct to these: names, .suffix, addresses,\n"
		"                     CIDRs, comma-separated (repeatable)\n"
		"  --upstream-ca FILE  endpoints with `tls: inspect`: verify the real servers\n"
		"                     against these CAs (PEM) instead of the system's\n"
		"\n"
		"By default tether prints only one line per denied flow on stderr:\n"
		"  tether: denied EXE (ANCESTORS) -> HOST:PORT reason=WORD[; to allow: ...]\n"
		"Policy layers: /etc/tether, ~/.config/tether/policy.yaml, ./.tether.yaml,\n"
		"then every --policy; their network rules add up.\n"
		"\n"
		"Exit status: CMD's own (128+N when killed by signal N); 125 tether failed\n"
		"(bad policy, setup error, a supervisor died) with a one-line reason;\n"
		"126 CMD not executable; 127 CMD not found; 2 usage error.\n"
		"Must run as root (namespaces, veth). Binaries are looked up next to tether\n"
		"(or in $TETHER_BIN_DIR).\n",
		names);
}

/* The same layered load the daemons do, with the network section, so a
 * broken policy fails here before anything is built. */
static int load_policy(const char *const *files, size_t n, const char *agent, struct policy **out)
{
	static const struct policy_section *const sections[] = { &network_policy_section, &credentials_section };
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd))) {
		fprintf(stderr, "tether run: cannot determine the working directory: %m\n");
		return -1;
	}
	struct policy_paths paths;
	if (policy_paths_default(&paths, cwd) < 0) {
		fprintf(stderr, "tether run: out of memory\n");
		return -1;
	}
	paths.agent = agent;
	paths.command_files = files;
	paths.n_command_files = n;
	struct policy_diag diag;
	int r = policy_load_layers(&paths, sections, 2, out, &diag);
	policy_paths_done(&paths);
	if (r < 0) {
		fprintf(stderr, "tether run: bad policy: %s\n", diag.msg);
		return -1;
	}
	return 0;
}

/* The files of the layers below the command line that the load found
 * (system, user, project), for the net-supervisor's --policy-layer. */
static size_t layer_files(const struct policy *pol, struct launch_layer_file *out, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < pol->n_files && n < max; i++) {
		enum policy_layer l = pol->file_layers[i];
		if (l != POLICY_LAYER_SYSTEM && l != POLICY_LAYER_USER && l != POLICY_LAYER_PROJECT)
			continue;
		if (strncmp(pol->files[i], "embedded:", 9) == 0)
			continue;
		out[n].layer = policy_layer_name(l);
		out[n].path = pol->files[i];
		n++;
	}
	return n;
}

/* Without any network rules the proxy can only refuse every flow
 * (503 not_ready): say so at once, naming what was looked at. */
static void no_network_message(const struct policy *pol, char *buf, size_t size)
{
	char seen[1024] = "";
	size_t off = 0;
	for (size_t i = 0; i < pol->n_files; i++) {
		if (strncmp(pol->files[i], "embedded:", 9) == 0)
			continue;
		int n = snprintf(seen + off, sizeof(seen) - off, "%s%s", off ? ", " : "", pol->files[i]);
		if (n < 0 || (size_t)n >= sizeof(seen) - off)
			break;
		off += (size_t)n;
	}
	if (off)
		snprintf(buf, size,
			 "no network policy: none of %s has a 'network:' section, so every connection would be "
			 "refused; add one there or give --policy FILE (docs/network-policy.md)", seen);
	else
		snprintf(buf, size,
			 "no network policy: no --policy FILE given and no policy file found (/etc/tether/policy.yaml, "
			 "~/.config/tether/policy.yaml, ./.tether.yaml), so every connection would be refused; "
			 "give --policy FILE (docs/network-policy.md)");
}

static int dry_run(const struct launch_config *cfg, const struct policy *pol)
{
	struct launch_plan plan;
	struct topology_error err = { 0 };
	int r = launch_plan_resolve(cfg, &plan, &err);
	if (r < 0) {
		fprintf(stderr, "tether run: %s\n", err.msg);
		launch_plan_done(&plan);
		return EXIT_TETHER;
	}
	printf("# tether run --dry-run: nothing was created or started\n");
	topology_plan_write(cfg->topo, stdout);
	launch_plan_write(cfg, &plan, stdout);
	char cwd[PATH_MAX], tether[PATH_MAX];
	struct envb_extra x = { .cwd = getcwd(cwd, sizeof(cwd)), .has_target_uid = true,
				.target_uid = getuid(), .proxy_url = plan.proxy_url,
				.tether_path = envb_sibling_tether(tether, sizeof(tether)) ? tether : NULL };
	struct envb_result res;
	r = envb_build(pol, environ, &x, &res);
	printf("# environment of the entrypoint\n");
	envb_dry_run_print(stdout, &res, cfg->argv);
	int status = 0;
	if (r < 0) {
		fprintf(stderr, "tether run: %s\n", res.error[0] ? res.error : strerror(-r));
		status = EXIT_TETHER;
	}
	envb_result_done(&res);
	launch_plan_done(&plan);
	fflush(stdout);
	return status;
}

int cmd_run(int argc, char **argv)
{
	enum { O_WAIT_READY = 256, O_STAGE2, O_AUDIT_FAILURE, O_LEARN, O_WAIT_ALL, O_UPPROXY, O_UPAUTH,
	       O_UPCONNECT, O_NOUP, O_TRANSPARENT, O_UPCA };
	static const struct option opts[] = {
		{ "topology", required_argument, NULL, 't' },
		{ "policy", required_argument, NULL, 'p' },
		{ "agent", required_argument, NULL, 'a' },
		{ "audit", required_argument, NULL, 'A' },
		{ "audit-failure", required_argument, NULL, O_AUDIT_FAILURE },
		{ "exec-socket", required_argument, NULL, 'x' },
		{ "user", required_argument, NULL, 'u' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "learn", no_argument, NULL, O_LEARN },
		{ "transparent", required_argument, NULL, O_TRANSPARENT },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "wait-all", no_argument, NULL, O_WAIT_ALL },
		{ "upstream-proxy", required_argument, NULL, O_UPPROXY },
		{ "upstream-proxy-auth-file", required_argument, NULL, O_UPAUTH },
		{ "upstream-proxy-connect", required_argument, NULL, O_UPCONNECT },
		{ "upstream-ca", required_argument, NULL, O_UPCA },
		{ "no-upstream-proxy", required_argument, NULL, O_NOUP },
		{ "help", no_argument, NULL, 'h' },
		/* internal: the entrypoint's gate inside the sandbox */
		{ "wait-ready", required_argument, NULL, O_WAIT_READY },
		{ "internal-stage2", required_argument, NULL, O_STAGE2 },
		{ NULL, 0, NULL, 0 },
	};
	const char *files[MAX_POLICY_FILES];
	size_t n_files = 0;
	const char *audit_failure = NULL;
	const char *topo_name = "combined", *agent = NULL, *audit = NULL, *exec_socket = NULL, *user = NULL;
	const char *wait_ready = NULL;
	bool dry = false, verbose = false, learn = false, quiet = false, wait_all = false, transparent_off = false;
	const char *up_proxy = NULL, *up_auth = NULL, *up_connect = NULL, *up_ca = NULL;
	const char *no_up[8];
	size_t n_no_up = 0;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+hvq", opts, NULL)) != -1) {
		switch (c) {
		case 't': topo_name = optarg; break;
		case 'p':
			if (n_files == MAX_POLICY_FILES) {
				fprintf(stderr, "tether run: too many --policy files (max %d)\n", MAX_POLICY_FILES);
				return 2;
			}
			files[n_files++] = optarg;
			break;
		case 'a': agent = optarg; break;
		case 'A': audit = optarg; break;
		case O_AUDIT_FAILURE:
			if (strcmp(optarg, "deny") != 0 && strcmp(optarg, "allow") != 0) {
				fprintf(stderr, "tether run: --audit-failure: expected deny or allow, got '%s'\n", optarg);
				return 2;
			}
			audit_failure = optarg;
			break;
		case 'x': exec_socket = optarg; break;
		case 'u': user = optarg; break;
		case 'n': dry = true; break;
		case O_LEARN: learn = true; break;
		case O_TRANSPARENT:
			if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
				fprintf(stderr, "tether run: --transparent: expected on or off, got '%s'\n", optarg);
				return 2;
			}
			transparent_off = strcmp(optarg, "off") == 0;
			break;
		case 'v': verbose = true; break;
		case 'q': quiet = true; break;
		case O_WAIT_ALL: wait_all = true; break;
		case O_UPPROXY: up_proxy = optarg; break;
		case O_UPAUTH: up_auth = optarg; break;
		case O_UPCONNECT: up_connect = optarg; break;
		case O_UPCA: up_ca = optarg; break;
		case O_NOUP:
			if (n_no_up == ARRAY_SIZE(no_up)) {
				fprintf(stderr, "tether run: too many --no-upstream-proxy (max %zu; "
						"a list takes commas)\n", ARRAY_SIZE(no_up));
				return 2;
			}
			no_up[n_no_up++] = optarg;
			break;
		case O_WAIT_READY: wait_ready = optarg; break;
		case O_STAGE2: {
			int w, r, p;
			if (sscanf(optarg, "%d,%d,%d", &w, &r, &p) != 3)
				return 125;
			_exit(launcher_stage2(w, r, p));
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "tether run: missing command (tether run [OPTIONS] -- CMD [ARG...])\n");
		return 2;
	}
	char **cmd = argv + optind;
	if (wait_ready) {
		/* A failed gate leaves at once: no atexit work inside the sandbox
		 * (a sanitizer's leak checker cannot run under its seccomp). */
		int st = launcher_wait_ready_exec(wait_ready, 15000, cmd);
		fflush(stderr);
		_exit(st);
	}

	const struct topology *t = topology_by_name(topo_name);
	if (!t) {
		char names[256];
		topology_names_format(names, sizeof(names), ", ");
		fprintf(stderr, "tether run: unknown topology '%s' (one of: %s)\n", topo_name, names);
		return 2;
	}
	if (audit && audit[0] != '/' && strcmp(audit, "-") != 0) {
		/* both daemons get the same path; make it absolute now */
		static char abs_audit[PATH_MAX];
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(abs_audit, sizeof(abs_audit), "%s/%s", cwd, audit) >= (int)sizeof(abs_audit)) {
			fprintf(stderr, "tether run: --audit path too long\n");
			return 2;
		}
		audit = abs_audit;
	}
	if (!up_proxy && (up_auth || up_connect || n_no_up)) {
		fprintf(stderr, "tether run: --upstream-proxy-auth-file, --upstream-proxy-connect and "
				"--no-upstream-proxy need --upstream-proxy\n");
		return 2;
	}
	static char abs_auth[PATH_MAX];
	if (up_auth && up_auth[0] != '/') {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(abs_auth, sizeof(abs_auth), "%s/%s", cwd, up_auth) >= (int)sizeof(abs_auth)) {
			fprintf(stderr, "tether run: --upstream-proxy-auth-file path too long\n");
			return 2;
		}
		up_auth = abs_auth;
	}
	static char abs_ca[PATH_MAX];
	if (up_ca && up_ca[0] != '/') {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(abs_ca, sizeof(abs_ca), "%s/%s", cwd, up_ca) >= (int)sizeof(abs_ca)) {
			fprintf(stderr, "tether run: --upstream-ca path too long\n");
			return 2;
		}
		up_ca = abs_ca;
	}
	if (up_proxy) {
		/* the net-supervisor's own checks, now: a bad URL, list or
		 * credentials file fails here, before anything is built */
		struct upstream_proxy *up = NULL;
		if (upstream_load(up_proxy, up_auth, no_up, n_no_up, up_connect, &up) < 0)
			return EXIT_TETHER;
		upstream_free(up);
	}
	/* The credentials are the net side's: a workload that runs as root (the
	 * caller's uid in the veth topologies, unless --user) can read any
	 * file of ours. Said once, before anything runs. */
	if (up_auth && !user && geteuid() == 0 && t->fence != TOPOLOGY_FENCE_NFT_UID)
		fprintf(stderr, "tether run: warning: the workload runs as root and could read "
				"--upstream-proxy-auth-file %s; run it as another user (--user) so only the "
				"net-supervisor can\n", up_auth);
	if (learn && !audit) {
		fprintf(stderr, "tether run: --learn needs --audit FILE (the record `tether policy suggest` reads)\n");
		return 2;
	}
	struct policy *pol = NULL;
	if (load_policy(files, n_files, agent, &pol) < 0)
		return EXIT_TETHER;
	/* the secrets we can see never reach our output (--dry-run, errors) */
	credentials_register_values(policy_section_data(pol, "credentials"));
	/* The warnings the net-supervisor will have: symlinked binary paths
	 * resolve in the workload's root, which is ours here. */
	int rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (netpol_resolve_binaries(pol, rootfd, "/") < 0) {
		fprintf(stderr, "tether run: out of memory\n");
		if (rootfd >= 0)
			close(rootfd);
		policy_free(pol);
		return EXIT_TETHER;
	}
	if (rootfd >= 0)
		close(rootfd);
	for (size_t i = 0; i < pol->n_warnings; i++)
		fprintf(stderr, "tether run: warning: %s\n", pol->warnings[i]);

	struct launch_layer_file lf[MAX_POLICY_FILES];
	char missing[1536] = "";
	bool no_net = policy_section_data(pol, "network") == NULL;
	bool tls_inspect = false;
	const struct network_policy *np = policy_section_data(pol, "network");
	for (size_t i = 0; np && i < np->n_rules; i++)
		for (size_t e = 0; e < np->rules[i].n_endpoints; e++)
			tls_inspect |= np->rules[i].endpoints[e].tls == NETPOL_TLS_INSPECT;
	if (no_net)
		no_network_message(pol, missing, sizeof(missing));
	struct launch_config cfg = {
		.topo = t, .policy_files = files, .n_policy_files = n_files, .agent = agent,
		.layer_files = lf, .n_layer_files = layer_files(pol, lf, MAX_POLICY_FILES),
		.console = quiet ? LAUNCH_CONSOLE_OFF : verbose ? LAUNCH_CONSOLE_ALL : LAUNCH_CONSOLE_DENIALS,
		.audit = audit, .audit_failure = audit_failure, .exec_socket = exec_socket, .user = user, .argv = cmd, .verbose = verbose,
		.wait_all = wait_all, .no_network_policy = !learn && no_net,
		.missing_policy = !learn && missing[0] ? missing : NULL,
		.learn = learn,
		.upstream_proxy = up_proxy, .upstream_proxy_auth_file = up_auth,
		.upstream_proxy_connect = up_connect, .no_upstream_proxy = no_up, .n_no_upstream_proxy = n_no_up,
		.transparent_off = transparent_off,
		.tls_inspect = tls_inspect, .trust_bundle = pol->env.trust_bundle, .upstream_ca = up_ca,
	};
	if (learn && !dry)
		fprintf(stderr, "tether run: LEARN MODE: nothing is enforced; every flow is allowed and "
			"recorded in %s as learned. Then: tether policy suggest %s -o policy.yaml\n",
			audit, audit);
	if (dry) {
		if (missing[0])
			printf("# WARNING: %s\n", missing);
		int s = dry_run(&cfg, pol);
		policy_free(pol);
		return s;
	}
	if (geteuid() != 0) {
		policy_free(pol);
		fprintf(stderr, "tether run: must run as root (namespaces, veth)\n");
		return EXIT_TETHER;
	}
	int status = 0;
	struct topology_error err = { 0 };
	int r = launcher_run(&cfg, &status, &err);
	policy_free(pol);
	if (r < 0) {
		fprintf(stderr, "tether run: %s\n", err.msg[0] ? err.msg : strerror(-r));
		return EXIT_TETHER;
	}
	return status;
}
