/* tether fence install|remove: the nftables egress fence of a pod-shaped
 * network namespace (net-supervisor/fence.h has the rules). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/log.h"
#include "net-supervisor/fence.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: tether fence install [--netns NAME] --proxy-uid UID [--allow-port PORT]... [--print]\n"
		"       tether fence remove  [--netns NAME]\n"
		"\n"
		"install: add table inet " FENCE_TABLE " to the current network namespace (or\n"
		"/run/netns/NAME): every outgoing packet (TCP, UDP, ICMP, any protocol, IPv4\n"
		"and IPv6) is rejected unless its socket belongs to UID (the proxy), it is\n"
		"loopback TCP to one of the --allow-port ports (the proxy and control ports),\n"
		"it belongs to an established flow, or it is IPv6 neighbour discovery.\n"
		"Installing again replaces the table atomically. --print shows the rules\n"
		"and changes nothing.\n"
		"remove: delete the table (no error when it is absent).\n");
}

static int parse_num(const char *what, const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || !*s || *end || v > max || s[0] == '-') {
		log_error("%s: expected a number up to %lu, got '%s'", what, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

int cmd_fence(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	bool install = !strcmp(argv[1], "install");
	if (!install && strcmp(argv[1], "remove") != 0) {
		log_error("fence: unknown action '%s' (install or remove)", argv[1]);
		return 2;
	}
	static const struct option opts[] = {
		{ "netns", required_argument, NULL, 'n' },
		{ "proxy-uid", required_argument, NULL, 'u' },
		{ "allow-port", required_argument, NULL, 'p' },
		{ "print", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct fence_config fc = { 0 };
	bool have_uid = false, print = false;
	unsigned long v;
	int c;
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'n': fc.netns = optarg; break;
		case 'u':
			if (parse_num("--proxy-uid", optarg, 4294967294ul, &v) < 0)
				return 2;
			fc.proxy_uid = (uid_t)v;
			have_uid = true;
			break;
		case 'p':
			if (parse_num("--allow-port", optarg, 65535, &v) < 0 || v == 0)
				return 2;
			if (fc.n_ports >= FENCE_MAX_PORTS) {
				log_error("at most %d --allow-port", FENCE_MAX_PORTS);
				return 2;
			}
			fc.ports[fc.n_ports++] = (uint16_t)v;
			break;
		case 'P': print = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc - 1) {
		log_error("fence: unexpected argument '%s'", argv[optind + 1]);
		return 2;
	}
	char err[1024];
	if (!install) {
		if (have_uid || fc.n_ports || print) {
			log_error("fence remove takes only --netns");
			return 2;
		}
		if (fence_remove(fc.netns, err, sizeof(err)) < 0) {
			log_error("%s", err);
			return 1;
		}
		return 0;
	}
	if (!have_uid) {
		log_error("fence install needs --proxy-uid UID (the uid net-supervisor runs as)");
		return 2;
	}
	if (print) {
		char *rules = fence_ruleset(&fc);
		if (!rules)
			return 1;
		fputs(rules, stdout);
		free(rules);
		return 0;
	}
	if (fence_install(&fc, err, sizeof(err)) < 0) {
		log_error("%s", err);
		return 1;
	}
	return 0;
}
