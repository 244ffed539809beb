/* Topology detection: does this process really sit where the topology says?
 *
 * Namespaces are compared by (st_dev, st_ino) of the nsfs files: ours from
 * /proc/thread-self/ns/<kind> (a thread may have setns'ed), the peer's from
 * its pidfd (PIDFD_GET_<KIND>_NAMESPACE, kernel >= 6.11) or, as a fallback,
 * /proc/<pid>/ns/<kind> confirmed against the pidfd afterwards so a reused
 * pid cannot answer for the process we asked about.
 *
 * topology_check_environment() is what a daemon calls at start: told
 * `--topology X` and given what it knows of its peers (pid from config,
 * pidfd from SO_PEERPIDFD), it refuses to run in an arrangement that X does
 * not describe, with a message that names the mismatch and suggests the
 * topology that matches. Strict for PID and network namespaces in both
 * directions (they decide the identity source and the fence); mount
 * namespaces are checked only where the model requires sharing. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "topology/error.h"
#include "topology/model.h"

struct topology_ns_id {
	uint64_t dev;
	uint64_t ino;
};

/* Skip the pidfd namespace ioctls and use procfs (tests the fallback). */
#define TOPOLOGY_DETECT_NO_IOCTL 1u
/* Check the PID namespace only (the identity source), not network or
 * mount placement. */
#define TOPOLOGY_DETECT_PID_ONLY 2u

/* Our own namespace of one kind (TOPOLOGY_NS_PID/NET/MNT). */
int topology_ns_self(enum topology_ns kind, struct topology_ns_id *out);
/* Namespace of the process behind pidfd. -ESRCH when it has exited,
 * -EREMOTE when it cannot be resolved from here (procfs fallback and the
 * process is not visible in our PID namespace). */
int topology_ns_of_pidfd(int pidfd, enum topology_ns kind, unsigned flags,
			 struct topology_ns_id *out);

/* 1 when pid is visible in our PID namespace (pidfd_open works), 0 when it
 * is not (ESRCH), -errno otherwise. */
int topology_pid_visible(pid_t pid);

/* 1 = same namespace as ours, 0 = different, -errno. pid is in our PID
 * namespace; -ESRCH when it is not visible here. */
int topology_same_ns_pid(pid_t pid, enum topology_ns kind);
int topology_same_ns_pidfd(int pidfd, enum topology_ns kind, unsigned flags);
static inline int topology_same_pidns(pid_t pid) { return topology_same_ns_pid(pid, TOPOLOGY_NS_PID); }
static inline int topology_same_netns(pid_t pid) { return topology_same_ns_pid(pid, TOPOLOGY_NS_NET); }
static inline int topology_same_mntns(pid_t pid) { return topology_same_ns_pid(pid, TOPOLOGY_NS_MNT); }

/* What a daemon knows about one peer. pid (in our PID namespace) and/or
 * pidfd (e.g. from SO_PEERPIDFD); pid 0 and pidfd -1 = unknown, skipped. */
struct topology_peer {
	enum topology_role role;
	pid_t pid;
	int pidfd; /* borrowed */
};

/* 0 when every known peer sits where t says relative to `self`; else
 * -ESRCH (a peer that must share our PID namespace is not visible),
 * -EXDEV (namespaces shared/separate contrary to t), -EINVAL (role not in
 * t), or another -errno from probing; err->msg then says what is wrong and
 * which --topology would match. */
int topology_check_environment(const struct topology *t, enum topology_role self,
			       const struct topology_peer *peers, size_t npeers,
			       unsigned flags, struct topology_error *err);

/* The first --topology word (families before variants) whose model gives
 * roles a and b exactly the sharing `shared` on the bits in `known`
 * (TOPOLOGY_NS_* masks); NULL when none does. */
const char *topology_suggest(enum topology_role a, enum topology_role b,
			     unsigned shared, unsigned known);
