/* gw_procsup: the real supervisor (procsup_init, the hardened spawner,
 * seccomp, env boundary, cgroup, notifier) with the services wired through
 * procsup_services_start() — exactly what proc-supervisor's main.c does
 * with --exec-socket/--status-socket/--control, usable by the tests until
 * (and independently of) the daemon's own option parsing.
 *
 *   gw_procsup [--exec-socket P] [--status-socket P] [--control EP
 *               --provisioning-key F] [--audit F] [--exec-allow-uid U]
 *              [--grace S] [--policy F] -- CMD [ARG...] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc-supervisor/services.h"
#include "proc-supervisor/supervisor.h"

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "exec-socket", required_argument, NULL, 'e' },
		{ "status-socket", required_argument, NULL, 's' },
		{ "control", required_argument, NULL, 'c' },
		{ "provisioning-key", required_argument, NULL, 'k' },
		{ "audit", required_argument, NULL, 'a' },
		{ "exec-allow-uid", required_argument, NULL, 'u' },
		{ "grace", required_argument, NULL, 'g' },
		{ "policy", required_argument, NULL, 'p' },
		{ 0 },
	};
	struct procsup_config cfg = { .grace_s = 2, .cgroup_mode = CGROUP_MODE_AUTO };
	struct procsup_services_cfg svc = { 0 };
	const char *policies[4];
	size_t np = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'e': svc.exec_socket = optarg; break;
		case 's': svc.status_socket = optarg; break;
		case 'c': svc.control = optarg; break;
		case 'k': svc.provisioning_key = optarg; break;
		case 'a': cfg.audit_path = optarg; break;
		case 'u':
			if (svc.n_allow_uids < PROCSUP_SVC_MAX_IDS)
				svc.allow_uids[svc.n_allow_uids++] = (uid_t)atoi(optarg);
			break;
		case 'g': cfg.grace_s = (unsigned)atoi(optarg); break;
		case 'p': if (np < 4) policies[np++] = optarg; break;
		default: return 2;
		}
	}
	if (optind >= argc)
		return 2;
	cfg.policy_files = policies;
	cfg.n_policy_files = np;
	struct procsup ps;
	int r = procsup_init(&ps, &cfg);
	if (r < 0) {
		fprintf(stderr, "gw_procsup: init: %s\n", strerror(-r));
		procsup_destroy(&ps);
		return 125;
	}
	if (procsup_services_start(&ps, &svc) < 0) {
		procsup_destroy(&ps);
		return 125;
	}
	struct spawn_error err;
	if (procsup_spawn_entrypoint(&ps, argv + optind, &err) < 0) {
		fprintf(stderr, "gw_procsup: %s\n", err.message);
		procsup_destroy(&ps);
		return err.exit_code ? err.exit_code : 125;
	}
	int code = procsup_run(&ps);
	procsup_destroy(&ps);
	return code;
}
