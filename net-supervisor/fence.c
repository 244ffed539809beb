#include "net-supervisor/fence.h"

#include <fcntl.h>
#include <nftables/libnftables.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

char *fence_ruleset(const struct fence_config *cfg)
{
	char ports[FENCE_MAX_PORTS * 7 + 8] = "";
	size_t o = 0;
	for (size_t i = 0; i < cfg->n_ports && i < FENCE_MAX_PORTS; i++)
		o += (size_t)snprintf(ports + o, sizeof(ports) - o, "%s%u", i ? ", " : "", cfg->ports[i]);
	char *out = NULL;
	/* "add + delete + define" in one buffer is one transaction: the old
	 * table (if any) is replaced without a window where nothing applies. */
	int n = asprintf(&out,
		"add table inet " FENCE_TABLE "\n"
		"delete table inet " FENCE_TABLE "\n"
		"table inet " FENCE_TABLE " {\n"
		"  chain output {\n"
		"    type filter hook output priority filter; policy accept;\n"
		"    ct state established,related accept\n"
		"    meta skuid %u accept\n"
		"%s%s%s"
		"    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept\n"
		"    meta l4proto tcp reject with tcp reset\n"
		"    reject with icmpx type admin-prohibited\n"
		"  }\n"
		"}\n",
		(unsigned)cfg->proxy_uid,
		cfg->n_ports ? "    oifname \"lo\" tcp dport { " : "", ports,
		cfg->n_ports ? " } accept\n" : "");
	return n < 0 ? NULL : out;
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
	int r = enter_netns(cfg->netns, err, errsize);
	if (r < 0)
		return r;
	_cleanup_free_ char *script = fence_ruleset(cfg);
	if (!script)
		return -ENOMEM;
	return run_nft(script, err, errsize);
}

int fence_remove(const char *netns, char *err, size_t errsize)
{
	err[0] = '\0';
	int r = enter_netns(netns, err, errsize);
	if (r < 0)
		return r;
	/* add-then-delete: removing an absent fence is not an error. */
	return run_nft("add table inet " FENCE_TABLE "\ndelete table inet " FENCE_TABLE "\n", err, errsize);
}
