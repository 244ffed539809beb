/* tether fence install|remove: the nftables egress fence of a pod-shaped
 * network namespace (fence/fence.h has the rules). */
#include <errno.h>
#include <stdint.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/log.h"
#include "fence/fence.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: tether fence install [--netns NAME] --proxy-uid UID [--allow-port PORT]...\n"
		"                            [--dns-port PORT]... [--supervisor-port PORT]...\n"
		"                            [--transparent-port PORT] [--print]\n"
		"       tether fence install [--netns NAME] --veth IFACE --allow-port PORT... [--addr ADDR]...\n"
		"                            [--dns-port PORT]... [--transparent-port PORT] [--print]\n"
		"       tether fence remove  [--netns NAME] [--veth IFACE]\n"
		"\n"
		"install (pod fence): add table inet " FENCE_TABLE " to the current network\n"
		"namespace (or /run/netns/NAME): every outgoing packet (TCP, UDP, ICMP, any\n"
		"protocol, IPv4 and IPv6) is rejected unless its socket belongs to UID (the\n"
		"proxy), it belongs to an established flow, it is IPv6 neighbour discovery,\n"
		"loopback TCP to an --allow-port (the proxy), loopback TCP/UDP to a\n"
		"--dns-port, or the workload's loopback traffic to itself. A supervisor's\n"
		"loopback endpoint (a socket of UID) never answers a flow another uid\n"
		"started; a --supervisor-port is also refused at once (reset/unreachable).\n"
		"install --veth (veth fence): add table inet " FENCE_TABLE "_IFACE to the netns that\n"
		"holds the proxy's end IFACE of a workload's veth: from IFACE only TCP to an\n"
		"--allow-port (and TCP/UDP to a --dns-port) on the --addr addresses (any\n"
		"local address without --addr), replies of established flows and IPv6\n"
		"neighbour discovery are accepted; anything else is refused (TCP reset,\n"
		"ICMP admin-prohibited) and counted, and nothing is forwarded from or to IFACE.\n"
		"--transparent-port PORT (transparent capture): pod fence: every TCP flow\n"
		"another uid starts to a non-loopback destination is redirected to PORT on\n"
		"loopback; veth fence: every TCP flow from IFACE to a non-local address is\n"
		"DNATed to PORT on the first --addr of its family. The net-supervisor's\n"
		"--transparent-listen takes them with their original destination; a direct\n"
		"connection to PORT is refused.\n"
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

static int add_port(const char *what, const char *arg, uint16_t *ports, size_t *n)
{
	unsigned long v;
	if (parse_num(what, arg, 65535, &v) < 0 || v == 0) {
		if (v == 0)
			log_error("%s: port 0 is not a port", what);
		return -1;
	}
	if (*n >= FENCE_MAX_PORTS) {
		log_error("at most %d %s", FENCE_MAX_PORTS, what);
		return -1;
	}
	ports[(*n)++] = (uint16_t)v;
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
		{ "dns-port", required_argument, NULL, 'd' },
		{ "supervisor-port", required_argument, NULL, 's' },
		{ "veth", required_argument, NULL, 'v' },
		{ "addr", required_argument, NULL, 'a' },
		{ "print", no_argument, NULL, 'P' },
		{ "transparent-port", required_argument, NULL, 't' },
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
			if (add_port("--allow-port", optarg, fc.ports, &fc.n_ports) < 0)
				return 2;
			break;
		case 'd':
			if (add_port("--dns-port", optarg, fc.dns_ports, &fc.n_dns_ports) < 0)
				return 2;
			break;
		case 's':
			if (add_port("--supervisor-port", optarg, fc.supervisor_ports, &fc.n_supervisor_ports) < 0)
				return 2;
			break;
		case 'v':
			fc.kind = FENCE_VETH;
			fc.iface = optarg;
			break;
		case 'a':
			if (fc.n_addrs >= FENCE_MAX_ADDRS) {
				log_error("at most %d --addr", FENCE_MAX_ADDRS);
				return 2;
			}
			fc.addrs[fc.n_addrs++] = optarg;
			break;
		case 'P': print = true; break;
		case 't':
			if (parse_num("--transparent-port", optarg, 65535, &v) < 0 || v == 0) {
				if (v == 0)
					log_error("--transparent-port: 0 is not a port");
				return 2;
			}
			fc.transparent_port = (uint16_t)v;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc - 1) {
		log_error("fence: unexpected argument '%s'", argv[optind + 1]);
		return 2;
	}
	char table[64];
	if (fc.kind == FENCE_VETH && fence_table_name(FENCE_VETH, fc.iface, table, sizeof(table)) < 0) {
		log_error("--veth: invalid interface name '%s' (up to 15 of A-Z a-z 0-9 _ - .)", fc.iface);
		return 2;
	}
	char err[1024];
	if (!install) {
		if (have_uid || fc.n_ports || fc.n_dns_ports || fc.n_supervisor_ports || fc.n_addrs || print ||
		    fc.transparent_port) {
			log_error("fence remove takes only --netns and --veth");
			return 2;
		}
		if (fence_remove(fc.kind, fc.iface, fc.netns, err, sizeof(err)) < 0) {
			log_error("%s", err);
			return 1;
		}
		return 0;
	}
	if (fc.kind == FENCE_POD) {
		if (!have_uid) {
			log_error("fence install needs --proxy-uid UID (the uid net-supervisor runs as) or --veth IFACE");
			return 2;
		}
		if (fc.n_addrs) {
			log_error("--addr belongs to a veth fence (--veth IFACE)");
			return 2;
		}
	} else {
		if (have_uid || fc.n_supervisor_ports) {
			log_error("a veth fence (--veth) takes no --proxy-uid or --supervisor-port: it admits the "
				  "--allow-port ports from IFACE and nothing else");
			return 2;
		}
		if (!fc.n_ports && !fc.n_dns_ports) {
			log_error("a veth fence needs at least one --allow-port (the proxy's)");
			return 2;
		}
		if (fc.transparent_port && !fc.n_addrs) {
			log_error("--transparent-port on a veth fence needs --addr (where captured flows go)");
			return 2;
		}
	}
	if (print) {
		char *rules = fence_ruleset(&fc);
		if (!rules) {
			log_error("invalid fence: %s", strerror(errno));
			return 2;
		}
		fputs(rules, stdout);
		free(rules);
		return 0;
	}
	if (fence_install(&fc, err, sizeof(err)) < 0) {
		log_error("%s", err);
		if (fc.transparent_port)
			log_error("(--transparent-port needs nftables NAT in this kernel (nf_nat, nft_redirect); "
				  "`tether run --transparent off` runs without capture)");
		return 1;
	}
	return 0;
}
