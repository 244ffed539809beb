/* Subcommand entry points. Each is defined in cli/cmd_<name>.c; a weak
 * declaration lets the CLI build while a module is still missing, and main()
 * says so instead of crashing. Each gets argv starting at its own name and
 * returns the process exit status. */
#pragma once

#define TETHER_CMD(name) int name(int argc, char **argv) __attribute__((weak))

TETHER_CMD(cmd_run);
TETHER_CMD(cmd_exec);
TETHER_CMD(cmd_ps);
TETHER_CMD(cmd_inspect);
TETHER_CMD(cmd_policy);
TETHER_CMD(cmd_env);
TETHER_CMD(cmd_keygen);
TETHER_CMD(cmd_verify_context);
TETHER_CMD(cmd_fence);
TETHER_CMD(cmd_connect);
