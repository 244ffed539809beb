/* proc-supervisor: the process-side trust anchor, usable on its own as a
 * container init (no control channel yet). */
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fdlimit.h"
#include "common/log.h"
#include "proc-supervisor/services.h"
#include "proc-supervisor/supervisor.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: proc-supervisor [OPTIONS] -- CMD [ARG...]\n"
		"\n"
		"Run CMD as the supervised entrypoint: subreaper (or PID 1) of its tree, with\n"
		"the workload seccomp profile, Landlock signal scoping, no_new_privs,\n"
		"RLIMIT_CORE=0, a per-sandbox cgroup and connect-time socket attribution.\n"
		"Exits with CMD's status (128+N when killed by signal N); 126 CMD not\n"
		"executable, 127 not found, 125 supervisor setup failed, 2 usage error.\n"
		"\n"
		"Options:\n"
		"  --audit FILE           append JSONL audit events (process_spawn, process_exit)\n"
		"  --topology NAME        topology name for audit lines (default: standalone)\n"
		"  --signal-group         forward signals to CMD's process group, not CMD alone\n"
		"  --grace SECONDS        shutdown grace before SIGKILL (default 10)\n"
		"  --wait-all             when CMD exits, wait for the workload processes it\n"
		"                         left (default: SIGTERM them, SIGKILL after the grace)\n"
		"  --cgroup auto|none|PATH  per-sandbox cgroup v2 (default auto: under our own\n"
		"                         cgroup when writable, else membership by lineage)\n"
		"  --no-seccomp           DEBUG ONLY: no seccomp profile, no connect attribution\n"
		"  --no-landlock          do not use Landlock scoping (test the seccomp fallback)\n"
		"  --policy FILE          env boundary policy (command layer; repeatable)\n"
		"  --agent NAME           agent preset for the env boundary\n"
		"  --trust-bundle FILE    the workload's trust bundle (every variable of\n"
		"                         environment.trust_bundle), instead of the policy's\n"
		"  --proxy URL            proxy URL children get in HTTP(S)_PROXY/ALL_PROXY\n"
"  --transparent-capture  the fence captures TCP flows that bypass the proxy\n"
"                         (transparent capture): a TCP connect elsewhere is not\n"
"                         audited as egress_bypass_attempt (UDP and others are)\n"
		"  --user USER|UID[:GID]  run every workload process as this user (groups: only\n"
		"                         GID, default the user's primary group); default: ours\n"
		"  --exec-socket PATH     exec gateway (tether exec): sessions as our own children\n"
		"  --exec-allow-uid UID   peer uid allowed on the exec/status sockets (repeatable;\n"
		"                         default: our own euid only)\n"
		"  --exec-allow-gid GID   peer primary gid allowed (repeatable)\n"
		"  --status-socket PATH   the supervised tree as JSON (tether ps)\n"
		"  --control ENDPOINT     identity service: unix:PATH | tcp:HOST:PORT | vsock:CID:PORT\n"
		"  --provisioning-key FILE  signs the anchor certificate (required with --control);\n"
		"                         read again to renew it, so it must stay readable\n"
		"  --cert-validity N[s|m|h|d]  anchor certificate validity (default 30d, at least\n"
		"                         10s); renewed two thirds of the way through\n"
		"  --control-allow ADDR[/PREFIX]  tcp: control endpoint: only peers from here may\n"
		"                         connect (repeatable, up to 8; default any that can reach it)\n"
		"  --control-peer-uid UID  unix: control endpoint: the socket belongs to UID and only\n"
		"                         a peer of that uid may ask (a net-supervisor that does not\n"
		"                         run as root; default: whoever may open the 0600 socket)\n"
		"  --strict-socket-owner  identity service: a socket counts as its connector's only\n"
		"                         while that process still holds it (denies a socket handed\n"
		"                         out of the tree; a connect-and-exit flow is then denied)\n"
		"  --no-identity-push     identity service: do not push each recorded connect's\n"
		"                         identity to the net side (protocol 1.3); every flow is\n"
		"                         then asked for. Implied by --strict-socket-owner\n"
		"  --identity-feed PATH   connect-time identity for a local net-supervisor\n"
		"                         (--identity-feed unix:PATH there): each recorded connect's\n"
		"                         verified identity, by socket cookie, on this Unix socket\n"
		"                         (same peer rules as the status socket)\n"
		"  --debug-registry FILE  at exit, write the connect attributions as JSON\n"
		"  --list-seccomp         print the workload seccomp rules and exit\n"
		"  -v, --verbose          debug logging\n"
		"  --features             what this build offers a launcher, one word a line\n"
		"  -h, --help             this help\n");
}

/* --features: the machine-readable answer to "can this build do what a
 * topology needs" (`tether run` asks before composing a command line;
 * --help is for people). One word a line; each is an option the launcher
 * may pass, without its dashes. Add a word when a launcher-facing option
 * lands; never rename one. */
static const char *const procsup_features[] = {
	"user", "cgroup", "status-socket", "exec-socket",
	"control", "control-allow", "control-peer-uid", "provisioning-key", "wait-all", "identity-feed",
	"transparent-capture", "trust-bundle",
};

static void list_seccomp(void)
{
	const struct workload_rule_doc *d;
	for (size_t i = 0; (d = workload_filter_rule_doc(i)); i++)
		printf("%-20s %-40s %-12s %s\n", d->syscall, d->when, d->action, d->why);
}

/* --user USER|UID[:GID]: a name or number from passwd (its primary group
 * unless GID is given), or a bare number that has no passwd entry (then
 * GID defaults to the same number). */
static int parse_user(const char *arg, struct procsup_config *cfg)
{
	char name[256];
	const char *colon = strchr(arg, ':');
	size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
	if (len == 0 || len >= sizeof(name)) {
		fprintf(stderr, "proc-supervisor: --user: expected USER or UID[:GID], got '%s'\n", arg);
		return -EINVAL;
	}
	memcpy(name, arg, len);
	name[len] = '\0';
	struct passwd pw, *pwr = NULL;
	char buf[4096];
	char *end;
	errno = 0;
	unsigned long v = strtoul(name, &end, 10);
	bool numeric = !*end && name[0] != '-' && errno == 0 && v < 0xffffffffUL;
	if (numeric) {
		if (getpwuid_r((uid_t)v, &pw, buf, sizeof(buf), &pwr) != 0)
			pwr = NULL;
		cfg->run_uid = (uid_t)v;
		cfg->run_gid = pwr ? pwr->pw_gid : (gid_t)v;
	} else {
		if (getpwnam_r(name, &pw, buf, sizeof(buf), &pwr) != 0 || !pwr) {
			fprintf(stderr, "proc-supervisor: --user: no such user '%s'\n", name);
			return -ENOENT;
		}
		cfg->run_uid = pwr->pw_uid;
		cfg->run_gid = pwr->pw_gid;
	}
	if (colon) {
		errno = 0;
		v = strtoul(colon + 1, &end, 10);
		if (errno || !colon[1] || *end || colon[1] == '-' || v >= 0xffffffffUL) {
			fprintf(stderr, "proc-supervisor: --user: GID must be a number, got '%s'\n", colon + 1);
			return -EINVAL;
		}
		cfg->run_gid = (gid_t)v;
	}
	cfg->run_as = true;
	return 0;
}

/* --cert-validity N[s|m|h|d]: 10 s (a test) to 365 days. */
static int parse_validity(const char *arg, uint64_t *out_s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 10);
	if (errno || end == arg || arg[0] == '-')
		return -EINVAL;
	unsigned long long mul = 1;
	switch (*end) {
	case '\0': case 's': break;
	case 'm': mul = 60; break;
	case 'h': mul = 3600; break;
	case 'd': mul = 86400; break;
	default: return -EINVAL;
	}
	if (*end && end[1])
		return -EINVAL;
	if (v > 365ull * 86400 || v * mul < 10 || v * mul > 365ull * 86400)
		return -EINVAL;
	*out_s = v * mul;
	return 0;
}

int main(int argc, char **argv)
{
	log_set_program("proc-supervisor");
	log_set_never_block(true);
	struct procsup_config cfg = { .grace_s = 10, .cgroup_mode = CGROUP_MODE_AUTO };
	enum { OPT_AUDIT = 256, OPT_TOPOLOGY, OPT_SIGNAL_GROUP, OPT_GRACE, OPT_CGROUP, OPT_NO_SECCOMP,
	       OPT_NO_LANDLOCK, OPT_DEBUG_REGISTRY, OPT_LIST_SECCOMP,
	       OPT_POLICY, OPT_AGENT, OPT_PROXY, OPT_TCAPTURE, OPT_EXEC_SOCKET, OPT_EXEC_UID, OPT_EXEC_GID, OPT_STATUS_SOCKET,
	       OPT_CONTROL, OPT_CONTROL_ALLOW, OPT_CONTROL_PEER_UID, OPT_PROV_KEY, OPT_CERT_VALIDITY, OPT_USER, OPT_STRICT_OWNER, OPT_NO_PUSH, OPT_IDFEED,
	       OPT_FEATURES, OPT_WAIT_ALL, OPT_TRUST_BUNDLE };
	struct procsup_services_cfg svc = { 0 };
	const char *policy_files[16];
	size_t n_policy = 0;
	static const struct option opts[] = {
		{ "audit", required_argument, NULL, OPT_AUDIT },
		{ "topology", required_argument, NULL, OPT_TOPOLOGY },
		{ "signal-group", no_argument, NULL, OPT_SIGNAL_GROUP },
		{ "grace", required_argument, NULL, OPT_GRACE },
		{ "wait-all", no_argument, NULL, OPT_WAIT_ALL },
		{ "cgroup", required_argument, NULL, OPT_CGROUP },
		{ "no-seccomp", no_argument, NULL, OPT_NO_SECCOMP },
		{ "no-landlock", no_argument, NULL, OPT_NO_LANDLOCK },
		{ "debug-registry", required_argument, NULL, OPT_DEBUG_REGISTRY },
		{ "list-seccomp", no_argument, NULL, OPT_LIST_SECCOMP },
		{ "policy", required_argument, NULL, OPT_POLICY },
		{ "agent", required_argument, NULL, OPT_AGENT },
		{ "proxy", required_argument, NULL, OPT_PROXY },
		{ "transparent-capture", no_argument, NULL, OPT_TCAPTURE },
		{ "exec-socket", required_argument, NULL, OPT_EXEC_SOCKET },
		{ "exec-allow-uid", required_argument, NULL, OPT_EXEC_UID },
		{ "exec-allow-gid", required_argument, NULL, OPT_EXEC_GID },
		{ "status-socket", required_argument, NULL, OPT_STATUS_SOCKET },
		{ "control", required_argument, NULL, OPT_CONTROL },
		{ "control-allow", required_argument, NULL, OPT_CONTROL_ALLOW },
		{ "control-peer-uid", required_argument, NULL, OPT_CONTROL_PEER_UID },
		{ "provisioning-key", required_argument, NULL, OPT_PROV_KEY },
		{ "cert-validity", required_argument, NULL, OPT_CERT_VALIDITY },
		{ "user", required_argument, NULL, OPT_USER },
		{ "strict-socket-owner", no_argument, NULL, OPT_STRICT_OWNER },
		{ "no-identity-push", no_argument, NULL, OPT_NO_PUSH },
		{ "identity-feed", required_argument, NULL, OPT_IDFEED },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "features", no_argument, NULL, OPT_FEATURES },
		{ "trust-bundle", required_argument, NULL, OPT_TRUST_BUNDLE },
		{ 0 },
	};
	int c;
	/* "+": stop at the first non-option so CMD's own options stay its own. */
	while ((c = getopt_long(argc, argv, "+hv", opts, NULL)) != -1) {
		switch (c) {
		case OPT_AUDIT:
			cfg.audit_path = optarg;
			break;
		case OPT_TOPOLOGY:
			cfg.topology = optarg;
			break;
		case OPT_SIGNAL_GROUP:
			cfg.signal_group = true;
			break;
		case OPT_WAIT_ALL:
			cfg.wait_all = true;
			break;
		case OPT_GRACE: {
			char *end;
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 0 || v > 86400) {
				fprintf(stderr, "proc-supervisor: --grace: not a number of seconds (0..86400): %s\n",
					optarg);
				return 2;
			}
			cfg.grace_s = (unsigned)v;
			break;
		}
		case OPT_CGROUP:
			if (cgroup_mode_parse(optarg, &cfg.cgroup_mode, &cfg.cgroup_path) < 0) {
				fprintf(stderr, "proc-supervisor: --cgroup: expected auto, none or an absolute path: %s\n",
					optarg);
				return 2;
			}
			break;
		case OPT_NO_SECCOMP:
			cfg.no_seccomp = true;
			break;
		case OPT_NO_LANDLOCK:
			cfg.no_landlock = true;
			break;
		case OPT_DEBUG_REGISTRY:
			cfg.debug_registry = optarg;
			break;
		case OPT_POLICY:
			if (n_policy == sizeof(policy_files) / sizeof(policy_files[0])) {
				fprintf(stderr, "proc-supervisor: too many --policy files\n");
				return 2;
			}
			policy_files[n_policy++] = optarg;
			break;
		case OPT_AGENT:
			cfg.agent = optarg;
			break;
		case OPT_TRUST_BUNDLE:
			if (optarg[0] != '/') {
				fprintf(stderr, "proc-supervisor: --trust-bundle needs an absolute path\n");
				return 2;
			}
			cfg.trust_bundle = optarg;
			break;
		case OPT_PROXY:
			cfg.proxy_url = optarg;
			break;
		case OPT_TCAPTURE:
			cfg.transparent_capture = true;
			break;
		case OPT_EXEC_SOCKET:
			svc.exec_socket = optarg;
			break;
		case OPT_EXEC_UID:
		case OPT_EXEC_GID: {
			char *end;
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			bool uid = c == OPT_EXEC_UID;
			size_t *n = uid ? &svc.n_allow_uids : &svc.n_allow_gids;
			if (errno || *end || end == optarg || v > 0xfffffffeUL || *n == PROCSUP_SVC_MAX_IDS) {
				fprintf(stderr, "proc-supervisor: --exec-allow-%s: a numeric id (at most %d): %s\n",
					uid ? "uid" : "gid", PROCSUP_SVC_MAX_IDS, optarg);
				return 2;
			}
			if (uid)
				svc.allow_uids[(*n)++] = (uid_t)v;
			else
				svc.allow_gids[(*n)++] = (gid_t)v;
			break;
		}
		case OPT_STATUS_SOCKET:
			svc.status_socket = optarg;
			break;
		case OPT_CONTROL:
			svc.control = optarg;
			break;
		case OPT_CONTROL_ALLOW:
			if (svc.n_control_allow == IDSERVICE_MAX_PEERS) {
				fprintf(stderr, "proc-supervisor: at most %d --control-allow\n", IDSERVICE_MAX_PEERS);
				return 2;
			}
			svc.control_allow[svc.n_control_allow++] = optarg;
			break;
		case OPT_CONTROL_PEER_UID: {
			char *end;
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || v > 0xfffffffeUL) {
				fprintf(stderr, "proc-supervisor: --control-peer-uid: a numeric uid: %s\n", optarg);
				return 2;
			}
			svc.control_peer_uid_set = true;
			svc.control_peer_uid = (uid_t)v;
			break;
		}
		case OPT_PROV_KEY:
			svc.provisioning_key = optarg;
			break;
		case OPT_CERT_VALIDITY:
			if (parse_validity(optarg, &svc.cert_validity_s) < 0) {
				fprintf(stderr, "proc-supervisor: --cert-validity: expected N[s|m|h|d] from 10s to 365d: %s\n",
					optarg);
				return 2;
			}
			break;
		case OPT_STRICT_OWNER:
			svc.strict_socket_owner = true;
			break;
		case OPT_NO_PUSH:
			svc.no_push = true;
			break;
		case OPT_IDFEED:
			svc.identity_feed = optarg;
			break;
		case OPT_USER:
			if (parse_user(optarg, &cfg) < 0)
				return 2;
			break;
		case OPT_LIST_SECCOMP:
			list_seccomp();
			return 0;
		case 'v':
			log_set_level(LOG_LVL_DEBUG);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case OPT_FEATURES:
			for (size_t i = 0; i < sizeof(procsup_features) / sizeof(procsup_features[0]); i++)
				printf("%s\n", procsup_features[i]);
			return fflush(stdout) == 0 ? 0 : 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "proc-supervisor: missing command (proc-supervisor [OPTIONS] -- CMD [ARG...])\n");
		return 2;
	}

	cfg.policy_files = policy_files;
	cfg.n_policy_files = n_policy;
	/* Pidfds of cached callers and pinned chains, listeners, sessions: a
	 * busy tree can outgrow an inherited 1024. The workload gets the
	 * limits it would have had without us. */
	cfg.have_child_nofile = fdlimit_raise(&cfg.child_nofile) == 0;
	struct procsup ps;
	int r = procsup_init(&ps, &cfg);
	if (r < 0) {
		fprintf(stderr, "proc-supervisor: setup failed: %s\n", strerror(-r));
		procsup_destroy(&ps);
		return 125;
	}
	/* Services first, so an exec session or an identity request can come
	 * in as soon as the workload runs. */
	r = procsup_services_start(&ps, &svc);
	if (r < 0) {
		procsup_destroy(&ps);
		return 125;
	}
	struct spawn_error err;
	r = procsup_spawn_entrypoint(&ps, argv + optind, &err);
	if (r < 0) {
		fprintf(stderr, "proc-supervisor: %s\n", err.message);
		procsup_destroy(&ps);
		return err.exit_code ? err.exit_code : 125;
	}
	int code = procsup_run(&ps);
	procsup_destroy(&ps);
	return code;
}
