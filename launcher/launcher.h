/* The local launcher behind `tether run`: builds one topology on this
 * machine with namespaces, starts both daemons where the model
 * (topology/model.h) puts them, runs the entrypoint, and tears everything
 * down when it ends.
 *
 * Every resource (processes by pidfd, the workload netns, the veth, the run
 * directory) is registered with the cleanup guardian right after it is
 * created, so a crash or SIGKILL of the launcher, or of either daemon,
 * still leaves nothing behind. The daemons are separate binaries found next
 * to the running `tether` (or in $TETHER_BIN_DIR); the launcher knows their
 * command lines, never their internals.
 *
 * Four process layouts (launcher.c `enum layout`, each built by its own
 * start_<layout>(): start_sandbox, start_pause, start_split, start_vm_host):
 * combined and vm-local (one PID namespace holds both daemons):
 *   launcher ── clone(NEWPID|NEWNS) ──► P = PID 1: mounts /proc, forks N, joins the workload netns and
 *   execs proc-supervisor. N waits until P has exec'd (a CLOEXEC pipe's EOF),
 *   then execs net-supervisor in the outer netns: N is the proc-supervisor's
 *   own child, as the model says, and sees its anchor's final image.
 *   vm-local: PID 1 execs tether-runtime-init (the /init.krun stand-in)
 *   whose CMD is `tether run --internal-stage2 W,R,P`: that stage (pid 2)
 *   does what P does in combined, from a plan passed in a memfd; the
 *   anchor is pid 2 and nothing inspects PID 1.
 *   The workload netns has one veth end and no default route; the proxy
 *   listens on the other end. The proc-supervisor sits in the workload netns
 *   too: it makes no network connections in these topologies, and it has no
 *   way (yet) to place only its children into a netns (workloads cannot
 *   setns: the seccomp profile denies it).
 *
 * shared-pid: a pause process is PID 1 of a new PID namespace; the launcher
 *   enters it (setns on the pause's pidfd, CLONE_NEWPID for children only)
 *   and starts proc-supervisor and net-supervisor as siblings, each in its
 *   own mount namespace with the pod's /proc, as a container runtime does
 *   (their parent is outside the namespace). Local identity, the anchor
 *   found through the proc-supervisor's status socket (SO_PEERPIDFD + exe
 *   digest).
 * split-shared-netns, split-veth: each daemon is PID 1 of its own PID
 *   namespace; delegated identity with a provisioning key generated for
 *   the run (unix socket in the run directory, or TCP across the veth).
 * vm-delegated: the guest as in vm-local but without a net-supervisor
 *   inside; the launcher starts it host-side (our PID namespace), delegated
 *   identity over vsock when the kernel has a vsock loopback, else a unix
 *   socket.
 * Network: combined, vm-*, split-veth put the workload in a netns whose one
 *   route is the /30 to the proxy's veth end. shared-pid and
 *   split-shared-netns build a pod netns with a default route (through the
 *   caller's netns) fenced by nftables (`tether fence`): only uid 0 (the
 *   daemons) may send anything but loopback TCP to the proxy, so the
 *   workload runs as --user (default nobody). The proxy listens on the
 *   pod's 127.0.0.1 (net-supervisor --listen-netns) while its upstream
 *   connections leave from the caller's netns, which is what a node's
 *   routing does for a real pod.
 *
 * The entrypoint starts only once the proxy is ready (/readyz on an admin
 * port bound to the outer loopback): proc-supervisor runs
 * `tether run --wait-ready FILE -- CMD...`, which waits for FILE and then
 * execs CMD (same process, so ancestry is unchanged). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "topology/error.h"
#include "topology/model.h"

/* A policy file of a layer below the command line (system, user,
 * project), as `tether run` found it: the net-supervisor loads it in that
 * layer (--policy-layer), the proc-supervisor finds its layers itself. */
struct launch_layer_file {
	const char *layer; /* "system", "user", "project" */
	const char *path;
};

/* What `tether run` prints of the flows on its stderr. */
enum launch_console {
	LAUNCH_CONSOLE_DENIALS = 0, /* the default: a line per denial */
	LAUNCH_CONSOLE_OFF,         /* --quiet */
	LAUNCH_CONSOLE_ALL,         /* -v: allowed flows too */
};

struct launch_config {
	const struct topology *topo;
	const char *const *policy_files; /* passed to both daemons, in order */
	size_t n_policy_files;
	const struct launch_layer_file *layer_files; /* to the net-supervisor, before policy_files */
	size_t n_layer_files;
	enum launch_console console;
	const char *agent;               /* NULL: none */
	const char *audit;               /* NULL: audit to /dev/null */
	const char *audit_failure;       /* net-supervisor --audit-failure; NULL: its default */
	const char *exec_socket;         /* NULL: no exec gateway */
	const char *user;                /* workload user (proc-supervisor --user); NULL: pod
	                                  * topologies "nobody", the others ours */
	char *const *argv;               /* the entrypoint, NULL-terminated, argv[0] non-NULL */
	const char *bin_dir;             /* NULL: $TETHER_BIN_DIR, else the dir of /proc/self/exe */
	const char *self_exe;            /* the tether binary for --wait-ready; NULL: /proc/self/exe target */
	int ready_timeout_ms;            /* 0: 10000 */
	/* No network policy at all: the proxy never becomes ready (every flow
	 * is refused not_ready, which is the right answer), so the entrypoint
	 * is gated on /healthz (listening) instead of /readyz. */
	bool no_network_policy;
	bool learn;                      /* net-supervisor --learn (tether run --learn) */
	bool transparent_off;            /* tether run --transparent off: no capture */
	/* With no_network_policy: why, naming the files looked at; the run
	 * refuses at once (125) with it, after the plan's own checks. */
	const char *missing_policy;
	/* -v: the daemons' info lines (else only errors: a clean run prints
	 * nothing of tether's) and allowed flows on the console. */
	bool verbose;
	/* proc-supervisor --wait-all: the run ends when the entrypoint and
	 * every process it left behind have exited, not at the entrypoint's
	 * exit (then the rest are stopped after the grace). */
	bool wait_all;
	/* Hold an flock on /run/tether/slot-K.lock for the /30 the plan picks
	 * (launcher_run sets it; --dry-run does not): two runs starting at
	 * once cannot take the same addresses. */
	bool reserve_slot;
	/* The corporate upstream proxy, passed to the net-supervisor as its
	 * --upstream-proxy* / --no-upstream-proxy flags (NULL / 0: none). */
	const char *upstream_proxy;
	const char *upstream_proxy_auth_file; /* absolute */
	const char *upstream_proxy_connect;
	const char *const *no_upstream_proxy;
	size_t n_no_upstream_proxy;
	/* Some endpoint says `tls: inspect`: the net-supervisor writes its
	 * sandbox CA after trust_bundle (the policy's environment.trust_bundle,
	 * or NULL for the system CAs) into the run directory, and the
	 * proc-supervisor hands the workload that file. */
	bool tls_inspect;
	const char *trust_bundle;
	const char *upstream_ca; /* --upstream-ca: what inspected servers are verified against */
};

/* The concrete, resolved facts of one run (names, addresses, ports, argv of
 * both daemons). Filled by launch_plan_resolve() for --dry-run and by
 * launcher_run() itself. */
#define LAUNCH_ARGV_MAX 64
struct launch_plan {
	char netns_name[32];       /* workload netns, /run/netns/NAME */
	char veth_outer[16], veth_inner[16];
	char addr_outer[32], addr_inner[32]; /* "192.0.2.X/30" */
	char proxy_listen[48];     /* "192.0.2.X:3128" */
	char proxy_url[64];        /* "http://192.0.2.X:3128" */
	/* IPv6 beside IPv4 when the caller's netns has it (ipv6 true): the
	 * veth's 2001:db8:0:K::/64 (K = the /30's slot) and a second proxy
	 * listener, [2001:db8:0:K::1]:3128 (pod: [::1]:3128). "" when off. */
	bool ipv6;
	char addr6_outer[48], addr6_inner[48]; /* "2001:db8:0:K::1/64", "...::2/64" */
	char proxy_listen6[64];    /* "[2001:db8:0:K::1]:3128" */
	char admin[48];            /* "127.0.0.1:PORT" */
	char run_dir[128];         /* run directory (ready file) */
	char cgroup_parent[4096];  /* per-run cgroup v2 dir for --cgroup; "" when none */
	char sandbox_cgroup[4096]; /* the workload cgroup as procfs prints it; "" when none */
	char ready_file[192];
	char tls_bundle[192];      /* run_dir/tls-bundle.pem when cfg->tls_inspect, else "" */
	char procsup_path[4096], netsup_path[4096], runtime_init_path[4096], self_path[4096];
	char procsup_sha256[65];
	/* what this net-supervisor build offers (--features) beyond the
	 * topology's needs: used when present */
	bool netsup_console, netsup_log_level, netsup_policy_layer;
	const char *procsup_argv[LAUNCH_ARGV_MAX + 8];
	const char *netsup_argv[LAUNCH_ARGV_MAX];
	char anchor_pid[16];
	int layout;                /* launcher.c enum layout */
	bool pod;                  /* shared pod netns fenced by nftables (else veth-only route) */
	char netns_path[64];
	char user[64];             /* --user for the proc-supervisor; "" none */
	char control[192];         /* delegated: the identity service endpoint; "" none */
	char control_allow[48];    /* tcp control: the net side's address (--control-allow); "" none */
	char control_kind[64];     /* "unix socket", "vsock loopback", "TCP over the veth" */
	char key_dir[160];         /* delegated: the run's provisioning key pair */
	char key_file[192], pub_file[192];
	char anchor_socket[160];   /* shared-pid: the proc-supervisor's status socket */
	/* the proc-supervisor's status socket in every topology (`tether ps`
	 * finds it): RUN_DIR/status.sock, shared-pid's anchor socket there */
	char status_socket[160];
	/* local topologies: connect-time identity, the proc-supervisor's
	 * --identity-feed read by the net-supervisor (RUN_DIR/idfeed.sock);
	 * "" when a daemon lacks it */
	char identity_feed[160];
	bool feed_ok;
	char unsupported[3300];    /* non-empty: a daemon lacks what this topology needs (run refuses) */
	int slot_fd;               /* the slot lock (reserve_slot), -1 none; closed by launch_plan_done */
	char *strings[64];         /* owned strings the argv vectors point into */
	size_t n_strings;
	/* The workload's resolver (net-supervisor --dns-listen): on the proxy's
	 * addresses, port 53; the workload's /etc/resolv.conf names them (a
	 * bind mount of resolv_file in the proc-supervisor's mount namespace).
	 * "" when off (a net-supervisor without it, or no nameserver in our
	 * /etc/resolv.conf for it to forward to). */
	char dns_listen[48], dns_listen6[64];
	char resolv_file[192];
	char dns_off[96];          /* why it is off, for the plan */
	/* Transparent capture (net-supervisor --transparent-listen, the
	 * fence's --transparent-port): on the proxy's addresses, port
	 * TRANSPARENT_PORT; "" when off (--transparent off, or a
	 * net-supervisor without it), transparent_off says why. Veth
	 * topologies then give the workload a default route via the
	 * proxy's end, so a direct connect() reaches the capture instead of
	 * failing with ENETUNREACH. */
	char transparent_listen[48], transparent_listen6[64];
	char transparent_off[96];
	bool netsup_transparent;   /* the net-supervisor offers --transparent-listen */
	bool procsup_transparent;  /* the proc-supervisor offers --transparent-capture */
};

/* Which topologies the launcher can build (the rest: -EOPNOTSUPP with a
 * message). */
bool launcher_supports(const struct topology *t);

/* Resolve names, addresses, binaries and both daemons' argv without creating
 * anything. run_dir/ready_file are placeholders until launcher_run. */
int launch_plan_resolve(const struct launch_config *cfg, struct launch_plan *plan,
			struct topology_error *err);
void launch_plan_done(struct launch_plan *plan);
/* The concrete part of --dry-run (after topology_plan_write). */
int launch_plan_write(const struct launch_config *cfg, const struct launch_plan *plan, FILE *f);

/* Build, run, tear down. Returns 0 and *status = the entrypoint's exit
 * status as proc-supervisor reports it (128+N by signal N, 126, 127), or
 * -errno with err->msg one line naming the step (the CLI exits 125).
 * A daemon that dies before the entrypoint ends is -ECHILD ("proc-supervisor
 * was killed by signal 9"). Start it before any thread exists. */
int launcher_run(const struct launch_config *cfg, int *status, struct topology_error *err);

/* `tether run --internal-stage2 WNS_FD,REPORT_FD,PLAN_FD` (vm-local, behind
 * the runtime init). Returns only on failure: the exit status. */
int launcher_stage2(int wns_fd, int report_fd, int plan_fd);

/* `tether run --wait-ready FILE -- CMD...` in the workload: wait (bounded)
 * until FILE exists, then execvp(CMD). Returns only on failure: the exit
 * status to use (125 not ready in time, 126, 127). */
int launcher_wait_ready_exec(const char *file, int timeout_ms, char *const *argv);
