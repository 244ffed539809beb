/* tether: the command-line front end. Each subcommand lives in its own
 * cmd_<name>.c; the table below names every subcommand (README.md lists
 * them for users). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/log.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "run", cmd_run, "build a topology and run CMD inside it" },
	{ "exec", cmd_exec, "run CMD as a child of a running proc-supervisor" },
	{ "ps", cmd_ps, "show the supervised tree with identities" },
	{ "inspect", cmd_inspect, "print a process's verified identity and its chain to the anchor" },
	{ "policy", cmd_policy, "check or explain a policy file, or suggest one from an audit" },
	{ "env", cmd_env, "show the env boundary result: names kept, dropped and why" },
	{ "keygen", cmd_keygen, "write a provisioning key pair" },
	{ "verify-context", cmd_verify_context, "verify signed contexts from an audit log" },
	{ "fence", cmd_fence, "install or remove the nftables egress fence" },
	{ "connect", cmd_connect, "tunnel stdin/stdout to HOST PORT through the egress proxy (ssh ProxyCommand)" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: tether COMMAND [ARGS...]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (commands[i].fn)
			fprintf(out, "  %-15s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\n'tether COMMAND --help' describes each command.\n");
}

int main(int argc, char **argv)
{
	log_set_program("tether");
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("tether %s\n", TETHER_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[1], commands[i].name) != 0)
			continue;
		if (!commands[i].fn) {
			log_error("'%s' is not part of this build yet", argv[1]);
			return 2;
		}
		return commands[i].fn(argc - 1, argv + 1);
	}
	log_error("unknown command '%s' (see 'tether --help')", argv[1]);
	return 2;
}
