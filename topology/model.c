/* The topology table. Adding a topology = adding one entry here, one word
 * to the names list and a section in docs/topologies.md. */
#include "topology/model.h"

#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define P TOPOLOGY_ROLE_PROC_SUPERVISOR
#define RI TOPOLOGY_ROLE_RUNTIME_INIT
#define TBIT TOPOLOGY_TRANSPORT_BIT

static const struct topology table[TOPOLOGY__COUNT] = {
	[TOPOLOGY_COMBINED] = {
		.id = TOPOLOGY_COMBINED,
		.name = "combined",
		.family = "combined",
		.summary = "one PID namespace; workload in its own netns behind a veth to the proxy",
		.roles = {
			[TOPOLOGY_ROLE_PROC_SUPERVISOR] = { .present = true, .pid1 = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "PID 1 of the sandbox PID namespace, outer netns" },
			[TOPOLOGY_ROLE_NET_SUPERVISOR] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "child of proc-supervisor, outer end of the veth" },
			[TOPOLOGY_ROLE_WORKLOAD] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 2, .mnt_group = 1,
				.where = "child of proc-supervisor, own netns behind the veth" },
		},
		.identity = TOPOLOGY_IDENTITY_LOCAL_PROCFS,
		.transport = TOPOLOGY_TRANSPORT_NONE,
		.transports = TBIT(TOPOLOGY_TRANSPORT_NONE) | TBIT(TOPOLOGY_TRANSPORT_UNIX),
		.anchor = TOPOLOGY_ANCHOR_SPAWNED_PIDFD_HASH,
		.foreign_pid1 = false,
		.fence = TOPOLOGY_FENCE_VETH_ONLY_ROUTE,
	},
	[TOPOLOGY_SHARED_PID] = {
		.id = TOPOLOGY_SHARED_PID,
		.name = "shared-pid",
		.family = "shared-pid",
		.summary = "pod with shareProcessNamespace: pause is PID 1, one pod netns fenced by nftables",
		.roles = {
			[TOPOLOGY_ROLE_PAUSE] = { .present = true, .pid1 = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "pod infrastructure container, holds the pod netns" },
			[TOPOLOGY_ROLE_PROC_SUPERVISOR] = { .present = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 2,
				.where = "entrypoint of the agent container (child subreaper)" },
			[TOPOLOGY_ROLE_NET_SUPERVISOR] = { .present = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 3,
				.where = "sidecar container, its own uid" },
			[TOPOLOGY_ROLE_WORKLOAD] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 1, .mnt_group = 2,
				.where = "child of proc-supervisor in the agent container" },
		},
		.identity = TOPOLOGY_IDENTITY_LOCAL_PROCFS,
		.transport = TOPOLOGY_TRANSPORT_UNIX,
		.transports = TBIT(TOPOLOGY_TRANSPORT_UNIX),
		.anchor = TOPOLOGY_ANCHOR_PEER_PIDFD_EXE_HASH,
		.foreign_pid1 = true,
		.fence = TOPOLOGY_FENCE_NFT_UID,
	},
	[TOPOLOGY_VM_LOCAL] = {
		.id = TOPOLOGY_VM_LOCAL,
		.name = "vm-local",
		.family = "vm",
		.summary = "guest: runtime init is PID 1, both supervisors inside, workload behind a veth",
		.roles = {
			[TOPOLOGY_ROLE_RUNTIME_INIT] = { .present = true, .pid1 = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "guest PID 1 (/init.krun); never inspected" },
			[TOPOLOGY_ROLE_PROC_SUPERVISOR] = { .present = true, .has_parent = true, .parent = RI,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "child of the runtime init (child subreaper)" },
			[TOPOLOGY_ROLE_NET_SUPERVISOR] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "child of proc-supervisor in the guest netns" },
			[TOPOLOGY_ROLE_WORKLOAD] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 2, .mnt_group = 1,
				.where = "child of proc-supervisor, own netns behind the veth" },
		},
		.identity = TOPOLOGY_IDENTITY_LOCAL_PROCFS,
		.transport = TOPOLOGY_TRANSPORT_NONE,
		.transports = TBIT(TOPOLOGY_TRANSPORT_NONE) | TBIT(TOPOLOGY_TRANSPORT_UNIX),
		.anchor = TOPOLOGY_ANCHOR_SPAWNED_PIDFD_HASH,
		.foreign_pid1 = true,
		.fence = TOPOLOGY_FENCE_VETH_ONLY_ROUTE,
	},
	[TOPOLOGY_VM_DELEGATED] = {
		.id = TOPOLOGY_VM_DELEGATED,
		.name = "vm-delegated",
		.family = "vm",
		.summary = "guest: runtime init is PID 1, proc-supervisor inside; net-supervisor on the host, identity over vsock",
		.roles = {
			[TOPOLOGY_ROLE_RUNTIME_INIT] = { .present = true, .pid1 = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "guest PID 1 (/init.krun); never inspected" },
			[TOPOLOGY_ROLE_PROC_SUPERVISOR] = { .present = true, .has_parent = true, .parent = RI,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "child of the runtime init (child subreaper)" },
			[TOPOLOGY_ROLE_NET_SUPERVISOR] = { .present = true,
				.pid_group = 2, .net_group = 2, .mnt_group = 2,
				.where = "host side, outside the guest PID namespace" },
			[TOPOLOGY_ROLE_WORKLOAD] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "child of proc-supervisor in the guest netns" },
		},
		.identity = TOPOLOGY_IDENTITY_DELEGATED,
		.transport = TOPOLOGY_TRANSPORT_VSOCK,
		.transports = TBIT(TOPOLOGY_TRANSPORT_VSOCK) | TBIT(TOPOLOGY_TRANSPORT_UNIX),
		.anchor = TOPOLOGY_ANCHOR_CERTIFICATE,
		.foreign_pid1 = true,
		.fence = TOPOLOGY_FENCE_VETH_ONLY_ROUTE,
	},
	[TOPOLOGY_SPLIT_SHARED_NETNS] = {
		.id = TOPOLOGY_SPLIT_SHARED_NETNS,
		.name = "split-shared-netns",
		.family = "split",
		.summary = "sidecar without a shared PID namespace: one pod netns fenced by nftables, delegated identity",
		.roles = {
			[TOPOLOGY_ROLE_PROC_SUPERVISOR] = { .present = true, .pid1 = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "PID 1 of the agent container's PID namespace" },
			[TOPOLOGY_ROLE_NET_SUPERVISOR] = { .present = true, .pid1 = true,
				.pid_group = 2, .net_group = 1, .mnt_group = 2,
				.where = "sidecar with its own PID namespace, same pod netns, its own uid" },
			[TOPOLOGY_ROLE_WORKLOAD] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "child of proc-supervisor in the agent container" },
		},
		.identity = TOPOLOGY_IDENTITY_DELEGATED,
		.transport = TOPOLOGY_TRANSPORT_UNIX,
		.transports = TBIT(TOPOLOGY_TRANSPORT_UNIX) | TBIT(TOPOLOGY_TRANSPORT_TCP),
		.anchor = TOPOLOGY_ANCHOR_CERTIFICATE,
		.foreign_pid1 = false,
		.fence = TOPOLOGY_FENCE_NFT_UID,
	},
	[TOPOLOGY_SPLIT_VETH] = {
		.id = TOPOLOGY_SPLIT_VETH,
		.name = "split-veth",
		.family = "split",
		.summary = "separate pods in separate netns joined by a veth, delegated identity over TCP",
		.roles = {
			[TOPOLOGY_ROLE_PROC_SUPERVISOR] = { .present = true, .pid1 = true,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "PID 1 of the agent pod" },
			[TOPOLOGY_ROLE_NET_SUPERVISOR] = { .present = true, .pid1 = true,
				.pid_group = 2, .net_group = 2, .mnt_group = 2,
				.where = "PID 1 of the network pod, the other end of the veth" },
			[TOPOLOGY_ROLE_WORKLOAD] = { .present = true, .has_parent = true, .parent = P,
				.pid_group = 1, .net_group = 1, .mnt_group = 1,
				.where = "child of proc-supervisor in the agent pod" },
		},
		.identity = TOPOLOGY_IDENTITY_DELEGATED,
		.transport = TOPOLOGY_TRANSPORT_TCP,
		.transports = TBIT(TOPOLOGY_TRANSPORT_TCP) | TBIT(TOPOLOGY_TRANSPORT_UNIX),
		.anchor = TOPOLOGY_ANCHOR_CERTIFICATE,
		.foreign_pid1 = false,
		.fence = TOPOLOGY_FENCE_VETH_ONLY_ROUTE,
	},
};

static const struct {
	const char *word;
	enum topology_id id;
} aliases[] = {
	{ "combined", TOPOLOGY_COMBINED },
	{ "shared-pid", TOPOLOGY_SHARED_PID },
	{ "vm", TOPOLOGY_VM_LOCAL },
	{ "vm-local", TOPOLOGY_VM_LOCAL },
	{ "vm-delegated", TOPOLOGY_VM_DELEGATED },
	{ "split", TOPOLOGY_SPLIT_SHARED_NETNS },
	{ "split-shared-netns", TOPOLOGY_SPLIT_SHARED_NETNS },
	{ "split-veth", TOPOLOGY_SPLIT_VETH },
};

static const char *const names[] = {
	"combined", "shared-pid", "vm", "vm-local", "vm-delegated",
	"split", "split-shared-netns", "split-veth", NULL,
};
_Static_assert(ARRAY_SIZE(names) == ARRAY_SIZE(aliases) + 1, "every alias is listed for --help");

const struct topology *topology_by_name(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < ARRAY_SIZE(aliases); i++)
		if (strcmp(aliases[i].word, name) == 0)
			return &table[aliases[i].id];
	return NULL;
}

const struct topology *topology_by_id(enum topology_id id)
{
	if ((unsigned)id >= TOPOLOGY__COUNT)
		return NULL;
	return &table[id];
}

const struct topology *topology_all(size_t *count)
{
	if (count)
		*count = TOPOLOGY__COUNT;
	return table;
}

const char *const *topology_names(void)
{
	return names;
}

int topology_names_format(char *buf, size_t size, const char *sep)
{
	if (!buf || size == 0)
		return -EINVAL;
	if (!sep)
		sep = "|";
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; names[i]; i++) {
		int n = snprintf(buf + off, size - off, "%s%s", i ? sep : "", names[i]);
		if (n < 0)
			return -EINVAL;
		if ((size_t)n >= size - off)
			return -ENAMETOOLONG;
		off += (size_t)n;
	}
	return 0;
}

bool topology_has_role(const struct topology *t, enum topology_role role)
{
	return t && (unsigned)role < TOPOLOGY_ROLE__COUNT && t->roles[role].present;
}

unsigned topology_shared_ns(const struct topology *t, enum topology_role a, enum topology_role b)
{
	if (!topology_has_role(t, a) || !topology_has_role(t, b))
		return 0;
	const struct topology_placement *pa = &t->roles[a], *pb = &t->roles[b];
	unsigned m = 0;
	if (pa->pid_group == pb->pid_group)
		m |= TOPOLOGY_NS_PID;
	if (pa->net_group == pb->net_group)
		m |= TOPOLOGY_NS_NET;
	if (pa->mnt_group == pb->mnt_group)
		m |= TOPOLOGY_NS_MNT;
	return m;
}

int topology_role_channel(const struct topology *t, enum topology_role role,
			  struct topology_channel *out)
{
	if (!t || !out)
		return -EINVAL;
	if (!topology_has_role(t, role))
		return -ENOENT;
	if (role != TOPOLOGY_ROLE_PROC_SUPERVISOR && role != TOPOLOGY_ROLE_NET_SUPERVISOR)
		return -EOPNOTSUPP;
	out->identity = t->identity;
	out->transport = t->transport;
	out->transports = t->transports;
	out->anchor = t->anchor;
	return 0;
}

const char *topology_role_name(enum topology_role role)
{
	switch (role) {
	case TOPOLOGY_ROLE_PAUSE: return "pause";
	case TOPOLOGY_ROLE_RUNTIME_INIT: return "runtime-init";
	case TOPOLOGY_ROLE_PROC_SUPERVISOR: return "proc-supervisor";
	case TOPOLOGY_ROLE_NET_SUPERVISOR: return "net-supervisor";
	case TOPOLOGY_ROLE_WORKLOAD: return "workload";
	case TOPOLOGY_ROLE__COUNT: break;
	}
	return "unknown";
}

static const char *const transport_words[] = {
	[TOPOLOGY_TRANSPORT_NONE] = "none",
	[TOPOLOGY_TRANSPORT_UNIX] = "unix",
	[TOPOLOGY_TRANSPORT_VSOCK] = "vsock",
	[TOPOLOGY_TRANSPORT_TCP] = "tcp",
};

const char *topology_transport_name(enum topology_transport t)
{
	if ((unsigned)t < ARRAY_SIZE(transport_words))
		return transport_words[t];
	return "unknown";
}

int topology_transport_from_name(const char *word, enum topology_transport *out)
{
	if (!word || !out)
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(transport_words); i++)
		if (strcmp(transport_words[i], word) == 0) {
			*out = (enum topology_transport)i;
			return 0;
		}
	return -EINVAL;
}

const char *topology_identity_name(enum topology_identity s)
{
	switch (s) {
	case TOPOLOGY_IDENTITY_NONE: return "none";
	case TOPOLOGY_IDENTITY_LOCAL_PROCFS: return "local_procfs";
	case TOPOLOGY_IDENTITY_DELEGATED: return "delegated";
	}
	return "unknown";
}

const char *topology_anchor_name(enum topology_anchor_check a)
{
	switch (a) {
	case TOPOLOGY_ANCHOR_SPAWNED_PIDFD_HASH: return "spawned-by-proc-supervisor";
	case TOPOLOGY_ANCHOR_PEER_PIDFD_EXE_HASH: return "peer-pidfd-exe-sha256";
	case TOPOLOGY_ANCHOR_CERTIFICATE: return "anchor-certificate";
	}
	return "unknown";
}

const char *topology_fence_name(enum topology_fence f)
{
	switch (f) {
	case TOPOLOGY_FENCE_VETH_ONLY_ROUTE: return "veth-only-route";
	case TOPOLOGY_FENCE_NFT_UID: return "nftables-uid";
	}
	return "unknown";
}

const char *topology_ns_name(enum topology_ns ns)
{
	switch (ns) {
	case TOPOLOGY_NS_PID: return "PID";
	case TOPOLOGY_NS_NET: return "network";
	case TOPOLOGY_NS_MNT: return "mount";
	}
	return "unknown";
}

static void ns_mask_words(unsigned m, char *buf, size_t size)
{
	snprintf(buf, size, "%s%s%s%s%s", (m & TOPOLOGY_NS_PID) ? "pid" : "",
		 (m & TOPOLOGY_NS_PID) && (m & (TOPOLOGY_NS_NET | TOPOLOGY_NS_MNT)) ? "," : "",
		 (m & TOPOLOGY_NS_NET) ? "net" : "",
		 (m & TOPOLOGY_NS_NET) && (m & TOPOLOGY_NS_MNT) ? "," : "",
		 (m & TOPOLOGY_NS_MNT) ? "mnt" : "");
	if (!m)
		snprintf(buf, size, "nothing");
}

int topology_plan_write(const struct topology *t, FILE *f)
{
	if (!t || !f)
		return -EINVAL;
	char accepted[64] = "";
	size_t off = 0;
	for (unsigned tr = TOPOLOGY_TRANSPORT_NONE; tr <= TOPOLOGY_TRANSPORT_TCP; tr++)
		if (t->transports & TOPOLOGY_TRANSPORT_BIT(tr)) {
			int n = snprintf(accepted + off, sizeof(accepted) - off, "%s%s", off ? "," : "",
					 topology_transport_name((enum topology_transport)tr));
			if (n > 0 && (size_t)n < sizeof(accepted) - off)
				off += (size_t)n;
		}
	fprintf(f, "topology %s (%s): identity %s, transport %s (accepts %s), anchor %s, fence %s%s\n",
		t->name, t->family, topology_identity_name(t->identity), topology_transport_name(t->transport),
		accepted, topology_anchor_name(t->anchor), topology_fence_name(t->fence),
		t->foreign_pid1 ? ", PID 1 is foreign: the walk stops at the anchor" : "");
	for (int r = 0; r < TOPOLOGY_ROLE__COUNT; r++) {
		const struct topology_placement *p = &t->roles[r];
		if (!p->present)
			continue;
		char shared[32];
		ns_mask_words(topology_shared_ns(t, (enum topology_role)r, TOPOLOGY_ROLE_PROC_SUPERVISOR),
			      shared, sizeof(shared));
		if (r == TOPOLOGY_ROLE_PROC_SUPERVISOR)
			fprintf(f, "  %-16s %s\n", topology_role_name((enum topology_role)r), p->where);
		else
			fprintf(f, "  %-16s %s; shares %s with proc-supervisor\n",
				topology_role_name((enum topology_role)r), p->where, shared);
	}
	return ferror(f) ? -EIO : 0;
}
