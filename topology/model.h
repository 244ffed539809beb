/* The topology model: one const description per supported arrangement of
 * tether's processes (combined, shared-pid, vm-local, vm-delegated,
 * split-shared-netns, split-veth).
 *
 * Both daemons and the local launcher (`tether run`) read the *same* table,
 * so a deployment and a local run cannot drift: who runs, who is PID 1,
 * which namespaces two roles share, how the control channel is carried,
 * where identity comes from, how the anchor is verified and what fences the
 * workload's network are facts of the topology, not flags scattered over
 * daemons. Everything here is immutable data plus pure lookups.
 *
 * Namespace sharing is expressed as small "group" numbers per role and
 * namespace kind: two present roles share a namespace iff their group
 * numbers are equal. Groups only relate roles to each other; the host or
 * the launcher is not a role. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum topology_id {
	TOPOLOGY_COMBINED = 0,
	TOPOLOGY_SHARED_PID,
	TOPOLOGY_VM_LOCAL,
	TOPOLOGY_VM_DELEGATED,
	TOPOLOGY_SPLIT_SHARED_NETNS,
	TOPOLOGY_SPLIT_VETH,
	TOPOLOGY__COUNT
};

enum topology_role {
	TOPOLOGY_ROLE_PAUSE = 0,        /* Kubernetes pause: PID 1 of a shared pod PID ns */
	TOPOLOGY_ROLE_RUNTIME_INIT,     /* VM runtime init (/init.krun, tether-runtime-init) */
	TOPOLOGY_ROLE_PROC_SUPERVISOR,  /* the process-side trust anchor */
	TOPOLOGY_ROLE_NET_SUPERVISOR,   /* the egress proxy */
	TOPOLOGY_ROLE_WORKLOAD,         /* entrypoint and everything it spawns */
	TOPOLOGY_ROLE__COUNT
};

/* Namespace kinds, usable as a bit mask. */
enum topology_ns {
	TOPOLOGY_NS_PID = 1u << 0,
	TOPOLOGY_NS_NET = 1u << 1,
	TOPOLOGY_NS_MNT = 1u << 2,
};

enum topology_transport {
	TOPOLOGY_TRANSPORT_NONE = 0, /* no control channel: the anchor is the spawner */
	TOPOLOGY_TRANSPORT_UNIX,
	TOPOLOGY_TRANSPORT_VSOCK,
	TOPOLOGY_TRANSPORT_TCP,
};
#define TOPOLOGY_TRANSPORT_BIT(t) (1u << (t))

enum topology_identity {
	TOPOLOGY_IDENTITY_NONE = 0,     /* the role takes no part in identity */
	TOPOLOGY_IDENTITY_LOCAL_PROCFS, /* audit word "local_procfs" */
	TOPOLOGY_IDENTITY_DELEGATED,    /* audit word "delegated" */
};

enum topology_anchor_check {
	/* net-supervisor was spawned by proc-supervisor: its parent pidfd,
	 * taken before anything else runs, plus the parent's exe SHA-256 */
	TOPOLOGY_ANCHOR_SPAWNED_PIDFD_HASH = 1,
	/* SO_PEERPIDFD of the control-socket peer + expected exe SHA-256 */
	TOPOLOGY_ANCHOR_PEER_PIDFD_EXE_HASH,
	/* AnchorCertificate signed by the pinned provisioning key */
	TOPOLOGY_ANCHOR_CERTIFICATE,
};

enum topology_fence {
	TOPOLOGY_FENCE_VETH_ONLY_ROUTE = 1, /* workload netns whose only route is the proxy's veth */
	TOPOLOGY_FENCE_NFT_UID,             /* nftables in a shared netns: egress only for the proxy uid */
};

struct topology_placement {
	bool present;
	bool pid1;                    /* PID 1 of its PID namespace */
	enum topology_role parent;    /* spawner among roles; ignored when !has_parent */
	bool has_parent;              /* false: started by the runtime/launcher/kubelet */
	unsigned char pid_group;      /* equal numbers = same namespace (see header) */
	unsigned char net_group;
	unsigned char mnt_group;
	const char *where;            /* one phrase for docs and --dry-run */
};

struct topology {
	enum topology_id id;
	const char *name;             /* canonical, also the audit `topology` word */
	const char *family;           /* combined | shared-pid | vm | split */
	const char *summary;          /* one line for --help */
	struct topology_placement roles[TOPOLOGY_ROLE__COUNT];
	enum topology_identity identity;        /* what the net-supervisor uses */
	enum topology_transport transport;      /* default control channel */
	unsigned transports;                    /* every accepted transport (bit mask) */
	enum topology_anchor_check anchor;
	/* PID 1 of the anchor's PID namespace is not ours (pause, /init.krun):
	 * the ancestry walk must stop at the anchor and never inspect it. */
	bool foreign_pid1;
	enum topology_fence fence;
};

/* Name → description. Accepts canonical names and the family aliases
 * "vm" (= vm-local) and "split" (= split-shared-netns); NULL when unknown. */
const struct topology *topology_by_name(const char *name);
const struct topology *topology_by_id(enum topology_id id);
/* All descriptions, TOPOLOGY__COUNT entries, in enum order. */
const struct topology *topology_all(size_t *count);
/* NULL-terminated list of every accepted --topology word (aliases too). */
const char *const *topology_names(void);
/* "combined|shared-pid|vm|..." into buf; -ENAMETOOLONG if it does not fit. */
int topology_names_format(char *buf, size_t size, const char *sep);

/* Which namespaces (TOPOLOGY_NS_* mask) roles a and b share; 0 when either
 * is absent. A role shares every namespace with itself. */
unsigned topology_shared_ns(const struct topology *t, enum topology_role a, enum topology_role b);
bool topology_has_role(const struct topology *t, enum topology_role role);

struct topology_channel {
	enum topology_identity identity;   /* strategy this role uses (or serves) */
	enum topology_transport transport; /* default transport */
	unsigned transports;               /* accepted transports (bit mask) */
	enum topology_anchor_check anchor; /* how the anchor is verified */
};
/* The identity strategy and control-channel transport for a role: for the
 * net-supervisor the strategy it consumes, for the proc-supervisor the one
 * it serves. -ENOENT when the role is absent from t, -EOPNOTSUPP for roles
 * that take no part in identity (pause, runtime init, workload). */
int topology_role_channel(const struct topology *t, enum topology_role role,
			  struct topology_channel *out);

/* A human-readable plan of t for `tether run --dry-run` and debugging:
 * one line of facts, then one line per present role with where it runs
 * and what it shares with the proc-supervisor. -errno on write failure. */
int topology_plan_write(const struct topology *t, FILE *f);

/* Stable words for enums (docs, audit, --dry-run, error messages). */
const char *topology_role_name(enum topology_role role);
const char *topology_transport_name(enum topology_transport t);
const char *topology_identity_name(enum topology_identity s);
const char *topology_anchor_name(enum topology_anchor_check a);
const char *topology_fence_name(enum topology_fence f);
const char *topology_ns_name(enum topology_ns ns);
/* "unix" → TOPOLOGY_TRANSPORT_UNIX etc.; -EINVAL when unknown. */
int topology_transport_from_name(const char *word, enum topology_transport *out);
