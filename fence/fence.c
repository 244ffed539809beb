#include "fence/fence.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <nftables/libnftables.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* "a, b, c" of n ports into buf. */
static void port_list(const uint16_t *ports, size_t n, char *buf, size_t size)
{
	size_t o = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && i < FENCE_MAX_PORTS && o < size; i++)
		o += (size_t)snprintf(buf + o, size - o, "%s%u", i ? ", " : "", ports[i]);
}

int fence_table_name(enum fence_kind kind, const char *iface, char *out, size_t size)
{
	if (kind == FENCE_POD)
		return snprintf(out, size, "%s", FENCE_TABLE) < (int)size ? 0 : -ENAMETOOLONG;
	if (!iface || !*iface || strlen(iface) >= 16)
		return -EINVAL;
	/* Interface names may carry '-' and '.'; nft identifiers take '_'. */
	char id[16];
	size_t i = 0;
	for (; iface[i]; i++) {
		char c = iface[i];
		if (!isalnum((unsigned char)c) && c != '_' && c != '-' && c != '.')
			return -EINVAL;
		id[i] = isalnum((unsigned char)c) ? c : '_';
	}
	id[i] = '\0';
	return snprintf(out, size, "%s_%s", FENCE_TABLE, id) < (int)size ? 0 : -ENAMETOOLONG;
}

/* The proxy's addresses by family, normalised: "{ a, b }" or "" when none. */
static int addr_sets(const struct fence_config *cfg, char *v4, char *v6, size_t size)
{
	size_t o4 = 0, o6 = 0;
	v4[0] = v6[0] = '\0';
	for (size_t i = 0; i < cfg->n_addrs && i < FENCE_MAX_ADDRS; i++) {
		unsigned char bin[16];
		char txt[INET6_ADDRSTRLEN];
		if (!cfg->addrs[i])
			return -EINVAL;
		if (inet_pton(AF_INET, cfg->addrs[i], bin) == 1) {
			inet_ntop(AF_INET, bin, txt, sizeof(txt));
			o4 += (size_t)snprintf(v4 + o4, size - o4, "%s%s", o4 ? ", " : "{ ", txt);
		} else if (inet_pton(AF_INET6, cfg->addrs[i], bin) == 1) {
			inet_ntop(AF_INET6, bin, txt, sizeof(txt));
			o6 += (size_t)snprintf(v6 + o6, size - o6, "%s%s", o6 ? ", " : "{ ", txt);
		} else {
			return -EINVAL;
		}
		if (o4 >= size - 3 || o6 >= size - 3)
			return -ENAMETOOLONG;
	}
	if (o4)
		strcat(v4, " }");
	if (o6)
		strcat(v6, " }");
	return 0;
}

/* Pod: an output chain keyed on the sending socket's uid. */
static char *pod_ruleset(const struct fence_config *cfg)
{
	char ports[FENCE_MAX_PORTS * 7 + 8], dns[FENCE_MAX_PORTS * 7 + 8], sup[FENCE_MAX_PORTS * 7 + 8];
	port_list(cfg->ports, cfg->n_ports, ports, sizeof(ports));
	port_list(cfg->dns_ports, cfg->n_dns_ports, dns, sizeof(dns));
	port_list(cfg->supervisor_ports, cfg->n_supervisor_ports, sup, sizeof(sup));
	unsigned uid = (unsigned)cfg->proxy_uid;
	char rule_ports[sizeof(ports) + 64] = "", rule_dns[sizeof(dns) + 96] = "", rule_sup[2 * sizeof(sup) + 256] = "";
	if (cfg->n_ports)
		snprintf(rule_ports, sizeof(rule_ports), "    oifname \"lo\" tcp dport { %s } accept\n", ports);
	if (cfg->n_dns_ports)
		snprintf(rule_dns, sizeof(rule_dns),
			 "    oifname \"lo\" meta l4proto { tcp, udp } th dport { %s } accept\n", dns);
	if (cfg->n_supervisor_ports)
		snprintf(rule_sup, sizeof(rule_sup),
			 "    oifname \"lo\" tcp dport { %s } counter reject with tcp reset\n"
			 "    oifname \"lo\" udp dport { %s } counter reject with icmpx type admin-prohibited\n",
			 sup, sup);
	char rule_tp[128] = "", chain_tp[512] = "";
	if (cfg->transparent_port) {
		/* before the loopback mark: the proxy's socket answers it */
		snprintf(rule_tp, sizeof(rule_tp), "    meta l4proto tcp tcp dport %u ct status dnat accept\n",
			 cfg->transparent_port);
		snprintf(chain_tp, sizeof(chain_tp),
			 "  chain capture {\n"
			 "    type nat hook output priority -100; policy accept;\n"
			 "    meta skuid %u return\n"
			 "    oifname \"lo\" return\n"
			 "    meta l4proto tcp counter redirect to :%u\n"
			 "  }\n",
			 uid, cfg->transparent_port);
	}
	char *out = NULL;
	/* "add + delete + define" in one buffer is one transaction: the old
	 * table (if any) is replaced without a window where nothing applies.
	 * The first two rules: a supervisor's socket (the skuid of a SYN-ACK
	 * is its listener's) never answers a loopback flow the workload
	 * started, whatever the port: its SYN-ACK leaves as a RST|ACK (the
	 * workload's connect is refused at once, the handshake never
	 * completes) and any other answer (UDP) is dropped. */
	int n = asprintf(&out,
		"add table inet " FENCE_TABLE "\n"
		"delete table inet " FENCE_TABLE "\n"
		"table inet " FENCE_TABLE " {\n"
		"  chain output {\n"
		"    type filter hook output priority filter; policy accept;\n"
		"    oifname \"lo\" ct direction reply ct mark 0x%08x meta skuid %u tcp flags & (syn | ack) == syn | ack counter tcp flags set rst | ack accept\n"
		"    oifname \"lo\" ct direction reply ct mark 0x%08x meta skuid %u counter drop\n"
		"    ct state established,related accept\n"
		"    meta skuid %u accept\n"
		"%s%s%s%s"
		"    oifname \"lo\" ct state new ct mark set 0x%08x accept\n"
		"    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept\n"
		"    meta l4proto tcp counter reject with tcp reset\n"
		"    counter reject with icmpx type admin-prohibited\n"
		"  }\n"
		"%s"
		"}\n",
		FENCE_CT_WORKLOAD, uid, FENCE_CT_WORKLOAD, uid, uid, rule_ports, rule_dns, rule_sup, rule_tp,
		FENCE_CT_WORKLOAD, chain_tp);
	return n < 0 ? NULL : out;
}

/* Veth: input and forward chains on the proxy's end of the veth. */
static char *veth_ruleset(const struct fence_config *cfg)
{
	char table[64], v4[FENCE_MAX_ADDRS * 20 + 8], v6[FENCE_MAX_ADDRS * 48 + 8];
	if (fence_table_name(FENCE_VETH, cfg->iface, table, sizeof(table)) < 0 ||
	    addr_sets(cfg, v4, v6, sizeof(v4) < sizeof(v6) ? sizeof(v4) : sizeof(v6)) < 0) {
		errno = EINVAL;
		return NULL;
	}
	char ports[FENCE_MAX_PORTS * 7 + 8], dns[FENCE_MAX_PORTS * 7 + 8];
	port_list(cfg->ports, cfg->n_ports, ports, sizeof(ports));
	port_list(cfg->dns_ports, cfg->n_dns_ports, dns, sizeof(dns));
	/* The open ports, per family of the proxy's addresses (or on any local
	 * address when no address is given). */
	char open[2048] = "";
	size_t o = 0;
	const char *fam[2][2] = { { "ip daddr ", v4 }, { "ip6 daddr ", v6 } };
	bool any = !v4[0] && !v6[0];
	for (int f = 0; f < 2; f++) {
		if (!any && !fam[f][1][0])
			continue;
		char match[FENCE_MAX_ADDRS * 48 + 32] = "";
		if (!any)
			snprintf(match, sizeof(match), "%s%s ", fam[f][0], fam[f][1]);
		if (cfg->n_ports)
			o += (size_t)snprintf(open + o, sizeof(open) - o, "    %stcp dport { %s } accept\n", match,
					      ports);
		if (cfg->n_dns_ports)
			o += (size_t)snprintf(open + o, sizeof(open) - o,
					      "    %smeta l4proto { tcp, udp } th dport { %s } accept\n", match, dns);
		if (any)
			break;
	}
	if (o >= sizeof(open)) {
		errno = E2BIG;
		return NULL;
	}
	char rule_tp[128] = "", chain_tp[sizeof(open) + 1024] = "";
	if (cfg->transparent_port) {
		char first4[INET6_ADDRSTRLEN] = "", first6[INET6_ADDRSTRLEN] = "";
		for (size_t i = 0; i < cfg->n_addrs; i++) {
			unsigned char bin[16];
			if (!first4[0] && inet_pton(AF_INET, cfg->addrs[i], bin) == 1)
				inet_ntop(AF_INET, bin, first4, sizeof(first4));
			else if (!first6[0] && inet_pton(AF_INET6, cfg->addrs[i], bin) == 1)
				inet_ntop(AF_INET6, bin, first6, sizeof(first6));
		}
		if (!first4[0] && !first6[0]) {
			errno = EINVAL; /* capture needs an address to send flows to */
			return NULL;
		}
		char d4[128] = "", d6[160] = "";
		if (first4[0])
			snprintf(d4, sizeof(d4), "    iifname \"%s\" meta nfproto ipv4 meta l4proto tcp counter dnat ip to %s:%u\n",
				 cfg->iface, first4, cfg->transparent_port);
		if (first6[0])
			snprintf(d6, sizeof(d6), "    iifname \"%s\" meta nfproto ipv6 meta l4proto tcp counter dnat ip6 to [%s]:%u\n",
				 cfg->iface, first6, cfg->transparent_port);
		snprintf(rule_tp, sizeof(rule_tp), "    meta l4proto tcp tcp dport %u ct status dnat accept\n",
			 cfg->transparent_port);
		snprintf(chain_tp, sizeof(chain_tp),
			 "  chain capture {\n"
			 "    type nat hook prerouting priority dstnat - 10; policy accept;\n"
			 "    iifname != \"%s\" accept\n"
			 "%s%s%s"
			 "  }\n",
			 cfg->iface, open, d4, d6);
	}
	char *out = NULL;
	/* Priority filter - 10: before any filter table of the host's own. */
	int n = asprintf(&out,
		"add table inet %s\n"
		"delete table inet %s\n"
		"table inet %s {\n"
		"  chain input {\n"
		"    type filter hook input priority filter - 10; policy accept;\n"
		"    iifname != \"%s\" accept\n"
		"    ct state established,related accept\n"
		"    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept\n"
		"%s%s"
		"    meta l4proto tcp counter reject with tcp reset\n"
		"    counter reject with icmpx type admin-prohibited\n"
		"  }\n"
		"%s"
		"  chain forward {\n"
		"    type filter hook forward priority filter - 10; policy accept;\n"
		"    iifname \"%s\" meta l4proto tcp counter reject with tcp reset\n"
		"    iifname \"%s\" counter reject with icmpx type admin-prohibited\n"
		"    oifname \"%s\" counter drop\n"
		"  }\n"
		"}\n",
		table, table, table, cfg->iface, open, rule_tp, chain_tp, cfg->iface, cfg->iface, cfg->iface);
	return n < 0 ? NULL : out;
}

char *fence_ruleset(const struct fence_config *cfg)
{
	if (cfg->n_ports > FENCE_MAX_PORTS || cfg->n_dns_ports > FENCE_MAX_PORTS ||
	    cfg->n_supervisor_ports > FENCE_MAX_PORTS || cfg->n_addrs > FENCE_MAX_ADDRS) {
		errno = E2BIG;
		return NULL;
	}
	switch (cfg->kind) {
	case FENCE_POD: return pod_ruleset(cfg);
	case FENCE_VETH: return veth_ruleset(cfg);
	}
	errno = EINVAL;
	return NULL;
}

static int enter_netns(const char *name, char *err, size_t errsize)
{
	if (!name)
		return 0;
	if (strchr(name, '/') || !*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
		snprintf(err, errsize, "invalid netns name '%s'", name);
		return -EINVAL;
	}
	char path[300];
	snprintf(path, sizeof(path), "/run/netns/%s", name);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int r = -errno;
		snprintf(err, errsize, "cannot open %s: %s", path, strerror(errno));
		return r;
	}
	if (setns(fd, CLONE_NEWNET) < 0) {
		int r = -errno;
		snprintf(err, errsize, "cannot enter netns %s: %s", name, strerror(errno));
		return r;
	}
	return 0;
}

static int run_nft(const char *script, char *err, size_t errsize)
{
	struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!ctx) {
		snprintf(err, errsize, "cannot create an nftables context");
		return -ENOMEM;
	}
	nft_ctx_buffer_output(ctx);
	nft_ctx_buffer_error(ctx);
	int rc = nft_run_cmd_from_buffer(ctx, script);
	int r = 0;
	if (rc != 0) {
		const char *e = nft_ctx_get_error_buffer(ctx);
		snprintf(err, errsize, "nftables refused the fence: %s", e && *e ? e : "(no message)");
		/* Trim the trailing newline nft leaves. */
		size_t l = strlen(err);
		while (l && (err[l - 1] == '\n'))
			err[--l] = '\0';
		r = -EPERM;
	}
	nft_ctx_free(ctx);
	return r;
}

int fence_install(const struct fence_config *cfg, char *err, size_t errsize)
{
	err[0] = '\0';
	_cleanup_free_ char *script = fence_ruleset(cfg);
	if (!script) {
		int r = -errno;
		snprintf(err, errsize, "invalid fence: %s",
			 r == -E2BIG ? "too many ports or addresses" :
			 cfg->kind == FENCE_VETH ? "a veth fence needs a valid --iface and addresses" : strerror(-r));
		return r;
	}
	int r = enter_netns(cfg->netns, err, errsize);
	if (r < 0)
		return r;
	return run_nft(script, err, errsize);
}

int fence_remove(enum fence_kind kind, const char *iface, const char *netns, char *err, size_t errsize)
{
	err[0] = '\0';
	char table[64];
	if (fence_table_name(kind, iface, table, sizeof(table)) < 0) {
		snprintf(err, errsize, "invalid interface name '%s'", iface ? iface : "");
		return -EINVAL;
	}
	int r = enter_netns(netns, err, errsize);
	if (r < 0)
		return r;
	/* add-then-delete: removing an absent fence is not an error. */
	char script[200];
	snprintf(script, sizeof(script), "add table inet %s\ndelete table inet %s\n", table, table);
	return run_nft(script, err, errsize);
}
