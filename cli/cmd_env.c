/* tether env: the env boundary's verdict for the CURRENT environment as the
 * parent — which names a child would keep, which it would lose and why, and
 * the rewritten PATH. It runs the same loader and envb_build() as a real
 * spawn; only the exec is missing. Values are never printed (PATH aside). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/log.h"
#include "policy/policy.h"
#include "proc-supervisor/env_build.h"

extern char **environ;

static void usage(FILE *out)
{
	fprintf(out,
		"usage: tether env [--policy FILE]... [--agent NAME] [--proxy URL] [--json]\n"
		"\n"
		"Show what the env boundary would hand a child started from this shell:\n"
		"every variable kept or dropped (with the reason word), what the policy\n"
		"and the supervisor set, and the sanitized PATH. Layers: system\n"
		"($TETHER_SYSTEM_POLICY_DIR or /etc/tether), user ($TETHER_USER_POLICY_DIR or\n"
		"~/.config/tether), project (./.tether.yaml), agent preset, --policy files.\n"
		"\n"
		"  --policy FILE  add a command-layer policy file (repeatable)\n"
		"  --agent NAME   add an agent preset (claude, codex, opencode, aider, gemini)\n"
		"  --proxy URL    show the proxy variables as a spawn behind this proxy gets them\n"
		"  --json         print the env_boundary audit event plus the per-name verdicts\n");
}

static json_t *verdicts(const struct envb_entry *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_pack("{s:s, s:b, s:s}", "name", v[i].name, "kept", v[i].kept,
						   "reason", reason_word(v[i].reason)));
	return a;
}

int cmd_env(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' }, { "agent", required_argument, NULL, 'a' },
		{ "proxy", required_argument, NULL, 'x' },  { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
	};
	const char *files[64];
	size_t n_files = 0;
	const char *agent = NULL, *proxy = NULL;
	bool json = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (n_files == sizeof(files) / sizeof(files[0])) {
				log_error("env: too many --policy files");
				return 2;
			}
			files[n_files++] = optarg;
			break;
		case 'a':
			agent = optarg;
			break;
		case 'x':
			proxy = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		log_error("env: unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return 2;
	}

	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd))) {
		log_error("env: cannot determine the working directory: %m");
		return 1;
	}
	struct policy_paths paths;
	if (policy_paths_default(&paths, cwd) < 0) {
		log_error("env: out of memory");
		return 1;
	}
	paths.agent = agent;
	paths.command_files = files;
	paths.n_command_files = n_files;
	struct policy *p = NULL;
	struct policy_diag diag;
	int r = policy_load_layers(&paths, NULL, 0, &p, &diag);
	policy_paths_done(&paths);
	if (r < 0) {
		fprintf(stderr, "%s\n", diag.msg);
		return 1;
	}
	for (size_t i = 0; i < p->n_warnings; i++)
		fprintf(stderr, "tether: warning: %s\n", p->warnings[i]);

	char tether[PATH_MAX];
	struct envb_extra x = { .cwd = cwd, .has_target_uid = true, .target_uid = getuid(),
				.proxy_url = proxy,
				.tether_path = envb_sibling_tether(tether, sizeof(tether)) ? tether : NULL };
	struct envb_result res;
	r = envb_build(p, environ, &x, &res);
	if (json) {
		json_t *j = envb_audit_json(&res);
		if (j) {
			json_object_set_new(j, "parent", verdicts(res.parent, res.n_parent));
			json_object_set_new(j, "set", verdicts(res.set, res.n_set));
			json_object_set_new(j, "path", json_string(res.path ? res.path : ""));
			if (r < 0)
				json_object_set_new(j, "error", json_string(res.error[0] ? res.error : strerror(-r)));
			json_dumpf(j, stdout, JSON_COMPACT);
			fputc('\n', stdout);
			json_decref(j);
		}
	} else {
		envb_dry_run_print(stdout, &res, NULL);
	}
	int status = 0;
	if (r < 0) {
		log_error("env: %s", res.error[0] ? res.error : strerror(-r));
		status = 1;
	}
	envb_result_done(&res);
	policy_free(p);
	return status;
}
