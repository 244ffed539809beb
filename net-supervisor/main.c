/* net-supervisor: the egress proxy daemon. Flags only; see --help and
 * docs/net-supervisor.md.
 *
 * Built twice: `net-supervisor` (installed) and, with
 * TETHER_NETSUP_TESTING, `net-supervisor-testing` (build/bin only, never
 * installed or packaged), which adds the test-only `--identity static`
 * strategy (identity_static.c: trusts every flow). The production binary
 * knows those flags only to refuse them. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/fdlimit.h"
#include "common/harden.h"
#include "common/log.h"
#include "common/util.h"
#include "net-supervisor/audit_line.h"
#include "fence/fence.h"
#include "net-supervisor/identity_static.h"
#include "net-supervisor/netsup.h"

#ifdef TETHER_NETSUP_TESTING
#define NETSUP_TESTING 1
#define NETSUP_PROG "net-supervisor-testing"
#else
#define NETSUP_TESTING 0
#define NETSUP_PROG "net-supervisor"
#endif
#define NETSUP_NO_STATIC \
	"not built into this binary; the test build is net-supervisor-testing"

static void usage(FILE *out)
{
	fprintf(out,
"usage: " NETSUP_PROG " [OPTIONS]\n"
"\n"
"The tether egress proxy: HTTP CONNECT and absolute-form HTTP, one policy\n"
"decision per flow from the verified identity of the process that owns it.\n"
"\n"
"  --listen ADDR:PORT         proxy address (repeatable; default 127.0.0.1:3128)\n"
"  --admin ADDR:PORT          /metrics, /healthz, /readyz (default: none)\n"
"  --listen-netns PATH        create the --listen sockets in this netns (nsfs path),\n"
"                             e.g. a pod netns; upstream connections stay in ours\n"
"  --policy FILE              policy file (repeatable, layered in order)\n"
"  --policy-layer LAYER:FILE  a file of a lower layer (system, user, project),\n"
"                             before every --policy, as `tether run` found it\n"
"                             (optional: a missing one is skipped)\n"
"  --console denials|all|off  a line per denied (all: also allowed) flow on\n"
"                             stderr for the person at the terminal, rate-limited\n"
"                             (default off; the audit file stays the record)\n"
"  --log-level LEVEL          error, warning, info (the default) or debug\n"
"  --audit FILE               JSONL audit log ('-' = stdout, the default)\n"
"  --topology NAME            recorded in every audit event (default combined); when\n"
"                             given, also checked: its identity strategy must be the\n"
"                             one chosen, and a local anchor must share (or not) our\n"
"                             PID namespace as the topology says\n"
"  --max-header-bytes N       request head limit (default 16384; over → 431)\n"
"  --max-headers N            header line limit (default 100; over → 431)\n"
"  --max-connections N        concurrent clients (default 1024; over → 503)\n"
"  --header-timeout-ms N      time to send the whole head (default 10000; → 408)\n"
"  --connect-timeout-ms N     upstream connect (default 10000; → 504)\n"
"  --idle-timeout-ms N        relay idle (default 300000)\n"
"  --revoke-grace-ms N        an anchor lost or replaced: its tunnels are closed\n"
"                             after this (default 3000; audit tunnel_revoked)\n"
"  --max-tunnel-lifetime-ms N close tunnels older than this (default 0: off)\n"
"  --identity-timeout-ms N    identity resolution (default 2000; → 403 identity_timeout)\n"
"  --resolve-timeout-ms N     upstream name lookup (default 5000; → 504 resolve_timeout)\n"
"  --relay-buffer BYTES       read size (default 262144)\n"
"  --relay-memory BYTES       buffers all tunnels may hold for slow readers (default\n"
"                             67108864); past half of it each gets a fair share\n"
"  --audit-queue N            queued audit events before drops (default 8192)\n"
"  --audit-failure deny|allow while a decision cannot be written to the audit file\n"
"                             (disk full, I/O error): deny answers new flows 503\n"
"                             audit_unavailable (the default); allow answers them\n"
"                             as decided, counted in tether_audit_unrecorded_flows_total\n"
"  --learn                    learn mode: NOTHING IS ENFORCED; every flow is allowed\n"
"                             and audited with \"learn\":true and \"would\" (the\n"
"                             policy's decision); runs without --policy too\n"
"  --workers N                event loops on their own threads, each accepting on\n"
"                             its own SO_REUSEPORT socket of every --listen and\n"
"                             --transparent-listen address (default: the online\n"
"                             CPUs, at most 8; 1: one loop, as before). Limits,\n"
"                             relay memory and metrics stay global\n"
"  --splice                   relay tunnels with splice(2): less proxy CPU, but\n"
"                             lower throughput on loopback in our measurements\n"
"  --install-fence            install the nftables egress fence in this netns\n"
"                             (proxy uid = this process's uid; the listen and\n"
"                             admin ports are reachable on loopback)\n"
"  --fence-allow-port PORT    another loopback port to leave open (repeatable)\n"
"  --dns-listen ADDR:PORT     the workload's resolver, UDP and TCP (repeatable; in\n"
"                             --listen-netns like --listen); default: none\n"
"  --dns-upstream ADDR[:PORT] where it forwards (default: the first nameserver\n"
"                             of our /etc/resolv.conf, port 53)\n"
"  --dns-timeout-ms N         upstream answer (default 3000; → SERVFAIL)\n"
"  --dns-max-outstanding N    queries in flight (default 256; more UDP ones dropped)\n"
"  --dns-records N            name/address pairs remembered (default 4096, LRU)\n"
"  --upstream-proxy http://HOST:PORT  reach allowed destinations through this\n"
"                             corporate HTTP proxy (CONNECT), after the decision and\n"
"                             the blocked-range checks on the real destination\n"
"  --upstream-proxy-auth-file FILE  USER:PASSWORD for it (Proxy-Authorization:\n"
"                             Basic); refused unless mode 0600 or stricter; keep it\n"
"                             outside the sandbox\n"
"  --upstream-proxy-connect address|name  what our CONNECT names: the checked\n"
"                             address (default), or the host name for proxies that\n"
"                             resolve names themselves (then the address reached is\n"
"                             the proxy's choice, not one our checks saw)\n"
"  --no-upstream-proxy LIST   destinations reached directly: host names, .suffix\n"
"                             (every name below), addresses, CIDRs; comma-separated,\n"
"                             repeatable\n"
"  --transparent-listen ADDR:PORT\n"
"                             take TCP flows nftables redirected here (the fence's\n"
"                             transparent capture; repeatable; in --listen-netns\n"
"                             like --listen); the original destination is kept\n"
"  --transparent on|off       off: ignore --transparent-listen (default on)\n"
"  --transparent-peek-ms N    wait this long for a captured flow's first bytes\n"
"                             (TLS SNI, HTTP Host; default 1000)\n"
"  --tls-ca-out FILE          write the sandbox CA certificate here (PEM; TLS\n"
"                             inspection, endpoint `tls: inspect`); its key stays in\n"
"                             this process's memory only\n"
"  --tls-bundle-out FILE      write the system CAs followed by the sandbox CA here:\n"
"                             the workload's trust bundle\n"
"  --tls-system-bundle FILE   the system CAs for --tls-bundle-out (default\n"
"                             /etc/ssl/certs/ca-certificates.crt)\n"
"  --upstream-ca FILE         verify inspected servers against these CAs (PEM)\n"
"                             instead of the system trust store\n"
"  -v, --verbose              debug logging\n"
"  --features                 what this build offers a launcher, one word a line\n"
"  -h, --help\n"
"\n"
"Identity (which verified process owns a flow):\n"
"  --identity local|delegated%s\n"
"  local (combined, shared-pid, vm): the proc-supervisor shares our PID namespace\n"
"    --anchor-pid PID|parent  the anchor (combined: our parent)\n"
"    --anchor-socket unix:PATH  or the peer of this Unix socket (SO_PEERPIDFD)\n"
"    --expected-anchor-sha256 HEX  the anchor image's digest (default: that of\n"
"                             the proc-supervisor installed beside this binary)\n"
"    --workload-netns PATH    netns of the workload's sockets (e.g. /proc/PID/ns/net)\n"
"    --sandbox-cgroup PATH    members must also be in this cgroup (as /proc/PID/cgroup)\n"
"    --identity-feed unix:PATH  connect-time identities from the anchor's feed\n"
"                             (proc-supervisor --identity-feed): a flow whose socket\n"
"                             it names is a table lookup; others take the path above\n"
"    --identity-feed-wait MS  how long a flow waits for a record the feed has not\n"
"                             announced yet (default 3; 1-60000)\n"
"  delegated (split, vm with a host-side proxy): signed contexts\n"
"    --control unix:PATH|tcp:HOST:PORT|vsock:CID:PORT  the identity service\n"
"    --provisioning-pubkey FILE  pinned provisioning key (repeatable, up to 4)\n"
"    --max-clock-skew SECONDS  how far the proc side's clock may be from ours\n"
"                             (default 60); past it: not ready, flows denied clock_skew\n"
"    --no-identity-mac        offer no per-channel MAC key: every answer is checked\n"
"                             by its Ed25519 signature on the connect path (protocol\n"
"                             1.1 behaviour; by default a 1.2 proc side's answers are\n"
"                             MAC'd and the signature follows for the audit)\n"
"  --identity-timeout MS      same as --identity-timeout-ms\n"
"\n"
"%s"
"\n"
"Signals: SIGHUP reloads the policy (so does a change of a policy file);\n"
"SIGUSR1 reopens the --audit file (log rotation); SIGTERM/SIGINT stop.\n",
		NETSUP_TESTING ? "|static" : "",
		NETSUP_TESTING ?
"TESTING ONLY (no identity verification at all; this test build is never\n"
"installed):\n"
"  --identity static, --identity-static PATH  every flow comes from binary PATH\n"
"                             (identity_source \"static_test\")\n"
"  --identity-static-sha256 HEX, --identity-static-ancestor PATH (repeatable),\n"
"  --identity-static-delay-ms N, --identity-static-anchor-delay-ms N\n"
		:
"--identity static and --identity-static*: test-only (every flow trusted), not\n"
"built into this binary; the test build is net-supervisor-testing (build/bin).\n");
}

enum {
	O_LISTEN = 256, O_ADMIN, O_POLICY, O_AUDIT, O_TOPOLOGY, O_MAXHB, O_MAXH, O_MAXC,
	O_HTO, O_CTO, O_ITO, O_IDTO, O_RBUF, O_RMEM, O_AQ, O_FENCE, O_FENCEPORT, O_IDS, O_IDSHA,
	O_IDANC, O_IDDELAY, O_IDANCHOR, O_NOSPLICE, O_IDMODE, O_ANCPID, O_ANCSOCK, O_ANCSHA, O_WNETNS, O_LISTEN_NETNS,
	O_SBXCG, O_IDFEED, O_IDFEEDWAIT, O_CONTROL, O_PROVPUB, O_RTO, O_AFAIL,
	O_MAXSKEW, O_NOMAC, O_REVGRACE, O_MAXLIFE, O_FEATURES, O_LEARN, O_POLICY_LAYER, O_CONSOLE, O_LOG_LEVEL,
	O_DNSLISTEN, O_DNSUP, O_DNSTO, O_DNSMAX, O_DNSREC, O_TLISTEN, O_TON, O_TPEEK,
	O_UPPROXY, O_UPAUTH, O_UPCONNECT, O_NOUP, O_TLSCA, O_TLSBUNDLE, O_TLSSYS, O_UPCA, O_WORKERS,
};

/* --features: the machine-readable answer to "can this build do what a
 * topology needs" (`tether run` asks before composing a command line;
 * --help is for people). One word a line; each is an option the launcher
 * may pass, without its dashes, or "identity-MODE". Add a word when a
 * launcher-facing option lands; never rename one. */
static const char *const netsup_features[] = {
	"listen-netns", "audit-failure", "learn",
	"identity-local", "anchor-pid", "anchor-socket", "expected-anchor-sha256",
	"workload-netns", "sandbox-cgroup", "identity-feed",
	"identity-delegated", "control", "provisioning-pubkey",
	"policy-layer", "console", "log-level",
	"dns-listen", "dns-upstream",
	"transparent-listen",
	"upstream-proxy", "upstream-proxy-auth-file", "upstream-proxy-connect", "no-upstream-proxy",
#ifdef TETHER_NETSUP_TESTING
	"identity-static", /* the test build only */
#endif
	"tls-inspect", "workers",
};

#ifdef TETHER_NETSUP_TESTING
/* netsup_config.identity_test_new: the static strategy of this test build. */
static int static_identity_new(uv_loop_t *loop, const void *arg, struct identity_strategy **out)
{
	const struct identity_static_config *sc = arg;
	log_warn("TESTING MODE: --identity-static %s attributes EVERY flow to that binary "
		 "without verifying anything (audit identity_source \"static_test\"); never "
		 "use this in production", sc->binary_path);
	return identity_static_new(loop, sc, out);
}
#endif

static int parse_u64(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || !*s || *end || v > max || s[0] == '-') {
		log_error("%s: expected a number up to %llu, got '%s'", opt, (unsigned long long)max, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static uint16_t port_of(const char *addr)
{
	struct sockaddr_storage ss;
	if (netsup_parse_hostport(addr, &ss) < 0)
		return 0;
	return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					      : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

int main(int argc, char **argv)
{
	log_set_program("net-supervisor");
	log_set_never_block(true);
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "admin", required_argument, NULL, O_ADMIN },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "policy-layer", required_argument, NULL, O_POLICY_LAYER },
		{ "console", required_argument, NULL, O_CONSOLE },
		{ "log-level", required_argument, NULL, O_LOG_LEVEL },
		{ "audit", required_argument, NULL, O_AUDIT },
		{ "topology", required_argument, NULL, O_TOPOLOGY },
		{ "max-header-bytes", required_argument, NULL, O_MAXHB },
		{ "max-headers", required_argument, NULL, O_MAXH },
		{ "max-connections", required_argument, NULL, O_MAXC },
		{ "header-timeout-ms", required_argument, NULL, O_HTO },
		{ "connect-timeout-ms", required_argument, NULL, O_CTO },
		{ "idle-timeout-ms", required_argument, NULL, O_ITO },
		{ "revoke-grace-ms", required_argument, NULL, O_REVGRACE },
		{ "revoke-grace", required_argument, NULL, O_REVGRACE },
		{ "max-tunnel-lifetime-ms", required_argument, NULL, O_MAXLIFE },
		{ "max-tunnel-lifetime", required_argument, NULL, O_MAXLIFE },
		{ "identity-timeout-ms", required_argument, NULL, O_IDTO },
		{ "resolve-timeout-ms", required_argument, NULL, O_RTO },
		{ "relay-buffer", required_argument, NULL, O_RBUF },
		{ "relay-memory", required_argument, NULL, O_RMEM },
		{ "audit-queue", required_argument, NULL, O_AQ },
		{ "audit-failure", required_argument, NULL, O_AFAIL },
		{ "install-fence", no_argument, NULL, O_FENCE },
		{ "listen-netns", required_argument, NULL, O_LISTEN_NETNS },
		{ "splice", no_argument, NULL, O_NOSPLICE },
		{ "learn", no_argument, NULL, O_LEARN },
		{ "fence-allow-port", required_argument, NULL, O_FENCEPORT },
		{ "identity", required_argument, NULL, O_IDMODE },
		{ "identity-timeout", required_argument, NULL, O_IDTO },
		{ "anchor-pid", required_argument, NULL, O_ANCPID },
		{ "anchor-socket", required_argument, NULL, O_ANCSOCK },
		{ "identity-feed", required_argument, NULL, O_IDFEED },
		{ "identity-feed-wait", required_argument, NULL, O_IDFEEDWAIT },
		{ "expected-anchor-sha256", required_argument, NULL, O_ANCSHA },
		{ "workload-netns", required_argument, NULL, O_WNETNS },
		{ "sandbox-cgroup", required_argument, NULL, O_SBXCG },
		{ "control", required_argument, NULL, O_CONTROL },
		{ "provisioning-pubkey", required_argument, NULL, O_PROVPUB },
		{ "max-clock-skew", required_argument, NULL, O_MAXSKEW },
		{ "no-identity-mac", no_argument, NULL, O_NOMAC },
		{ "identity-static", required_argument, NULL, O_IDS },
		{ "identity-static-sha256", required_argument, NULL, O_IDSHA },
		{ "identity-static-ancestor", required_argument, NULL, O_IDANC },
		{ "identity-static-delay-ms", required_argument, NULL, O_IDDELAY },
		{ "identity-static-anchor-delay-ms", required_argument, NULL, O_IDANCHOR },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "features", no_argument, NULL, O_FEATURES },
		{ "dns-listen", required_argument, NULL, O_DNSLISTEN },
		{ "dns-upstream", required_argument, NULL, O_DNSUP },
		{ "dns-timeout-ms", required_argument, NULL, O_DNSTO },
		{ "dns-max-outstanding", required_argument, NULL, O_DNSMAX },
		{ "dns-records", required_argument, NULL, O_DNSREC },
		{ "upstream-proxy", required_argument, NULL, O_UPPROXY },
		{ "upstream-proxy-auth-file", required_argument, NULL, O_UPAUTH },
		{ "upstream-proxy-connect", required_argument, NULL, O_UPCONNECT },
		{ "no-upstream-proxy", required_argument, NULL, O_NOUP },
		{ "transparent-listen", required_argument, NULL, O_TLISTEN },
		{ "transparent", required_argument, NULL, O_TON },
		{ "transparent-peek-ms", required_argument, NULL, O_TPEEK },
		{ "tls-ca-out", required_argument, NULL, O_TLSCA },
		{ "tls-bundle-out", required_argument, NULL, O_TLSBUNDLE },
		{ "tls-system-bundle", required_argument, NULL, O_TLSSYS },
		{ "upstream-ca", required_argument, NULL, O_UPCA },
		{ "workers", required_argument, NULL, O_WORKERS },
		{ NULL, 0, NULL, 0 },
	};
	struct netsup_config cfg;
	netsup_config_defaults(&cfg);
	bool install_fence = false;
	struct fence_config fc = { .proxy_uid = geteuid() };
	/* --identity-static*: parsed in both builds, used by the test build
	 * only (static_flag: the first one given). */
	struct identity_static_config sc = { 0 };
	const char *sc_ancestors[NETSUP_MAX_ANCESTORS];
	const char *static_flag = NULL;
	uint64_t v;
	int c;
	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case O_LISTEN:
			if (cfg.n_listen >= NETSUP_MAX_LISTEN) {
				log_error("at most %d --listen", NETSUP_MAX_LISTEN);
				return 2;
			}
			cfg.listen[cfg.n_listen++] = optarg;
			break;
		case O_ADMIN: cfg.admin = optarg; break;
		case O_POLICY:
			if (cfg.n_policy >= NETSUP_MAX_POLICY) {
				log_error("at most %d --policy", NETSUP_MAX_POLICY);
				return 2;
			}
			cfg.policy_layer[cfg.n_policy] = POLICY_LAYER_COMMAND;
			cfg.policy[cfg.n_policy++] = optarg;
			break;
		case O_POLICY_LAYER: {
			static const char *const names[] = { [POLICY_LAYER_SYSTEM] = "system",
							     [POLICY_LAYER_USER] = "user",
							     [POLICY_LAYER_PROJECT] = "project" };
			const char *colon = strchr(optarg, ':');
			enum policy_layer layer = POLICY_LAYER__COUNT;
			for (size_t i = POLICY_LAYER_SYSTEM; colon && i <= POLICY_LAYER_PROJECT; i++)
				if (strlen(names[i]) == (size_t)(colon - optarg) &&
				    !strncmp(optarg, names[i], (size_t)(colon - optarg)))
					layer = (enum policy_layer)i;
			if (layer == POLICY_LAYER__COUNT || !colon[1]) {
				log_error("--policy-layer: expected system|user|project:FILE, got '%s'", optarg);
				return 2;
			}
			if (cfg.n_policy >= NETSUP_MAX_POLICY) {
				log_error("at most %d --policy and --policy-layer", NETSUP_MAX_POLICY);
				return 2;
			}
			if (cfg.n_policy > 0 && cfg.policy_layer[cfg.n_policy - 1] > layer) {
				log_error("--policy-layer %s: layers go system, user, project, then every --policy",
					  optarg);
				return 2;
			}
			cfg.policy_layer[cfg.n_policy] = layer;
			cfg.policy[cfg.n_policy++] = colon + 1;
			break;
		}
		case O_CONSOLE:
			if (!strcmp(optarg, "denials"))
				cfg.console = CONSOLE_DENIALS;
			else if (!strcmp(optarg, "all"))
				cfg.console = CONSOLE_ALL;
			else if (!strcmp(optarg, "off"))
				cfg.console = CONSOLE_OFF;
			else {
				log_error("--console: expected denials, all or off, got '%s'", optarg);
				return 2;
			}
			break;
		case O_LOG_LEVEL: {
			enum log_level lvl;
			if (log_level_parse(optarg, &lvl) < 0) {
				log_error("--log-level: expected error, warning, info or debug, got '%s'", optarg);
				return 2;
			}
			log_set_level(lvl);
			break;
		}
		case O_AUDIT: cfg.audit_path = optarg; break;
		case O_TOPOLOGY: cfg.topology = optarg; cfg.topology_given = true; break;
		case O_MAXHB:
			if (parse_u64("--max-header-bytes", optarg, 1 << 20, &v) < 0 || v < 256)
				return 2;
			cfg.max_header_bytes = v;
			break;
		case O_MAXH:
			if (parse_u64("--max-headers", optarg, 10000, &v) < 0 || v == 0)
				return 2;
			cfg.max_headers = v;
			break;
		case O_MAXC:
			if (parse_u64("--max-connections", optarg, 1000000, &v) < 0 || v == 0)
				return 2;
			cfg.max_conns = v;
			break;
		case O_HTO:
			if (parse_u64("--header-timeout-ms", optarg, 3600000, &v) < 0 || v == 0)
				return 2;
			cfg.header_timeout_ms = v;
			break;
		case O_RTO:
			if (parse_u64("--resolve-timeout-ms", optarg, 3600000, &v) < 0 || v == 0)
				return 2;
			cfg.resolve_timeout_ms = v;
			break;
		case O_CTO:
			if (parse_u64("--connect-timeout-ms", optarg, 3600000, &v) < 0 || v == 0)
				return 2;
			cfg.connect_timeout_ms = v;
			break;
		case O_REVGRACE:
			if (parse_u64("--revoke-grace-ms", optarg, 3600000, &v) < 0)
				return 2;
			cfg.revoke_grace_ms = v;
			break;
		case O_MAXLIFE:
			if (parse_u64("--max-tunnel-lifetime-ms", optarg, 30ULL * 86400000, &v) < 0)
				return 2;
			cfg.max_tunnel_lifetime_ms = v;
			break;
		case O_ITO:
			if (parse_u64("--idle-timeout-ms", optarg, 86400000, &v) < 0 || v == 0)
				return 2;
			cfg.idle_timeout_ms = v;
			break;
		case O_IDTO:
			if (parse_u64("--identity-timeout-ms", optarg, 600000, &v) < 0 || v == 0)
				return 2;
			cfg.identity_timeout_ms = v;
			break;
		case O_RBUF:
			if (parse_u64("--relay-buffer", optarg, 16 << 20, &v) < 0 || v < 4096)
				return 2;
			cfg.relay_buffer = v;
			break;
		case O_RMEM:
			if (parse_u64("--relay-memory", optarg, (uint64_t)1 << 40, &v) < 0 || v < (1 << 20))
				return 2;
			cfg.relay_memory = v;
			break;
		case O_AQ:
			if (parse_u64("--audit-queue", optarg, 1 << 24, &v) < 0 || v == 0)
				return 2;
			cfg.audit_queue = v;
			break;
		case O_AFAIL:
			if (strcmp(optarg, "deny") != 0 && strcmp(optarg, "allow") != 0) {
				log_error("--audit-failure: expected deny or allow, got '%s'", optarg);
				return 2;
			}
			cfg.audit_failure_allow = strcmp(optarg, "allow") == 0;
			break;
		case O_FENCE: install_fence = true; break;
		case O_LISTEN_NETNS: cfg.listen_netns = optarg; break;
		case O_NOSPLICE: cfg.splice = true; break;
		case O_LEARN: cfg.learn = true; break;
		case O_FENCEPORT:
			if (parse_u64("--fence-allow-port", optarg, 65535, &v) < 0 || v == 0 ||
			    fc.n_ports >= FENCE_MAX_PORTS - NETSUP_MAX_LISTEN - 1)
				return 2;
			fc.ports[fc.n_ports++] = (uint16_t)v;
			break;
		case O_IDMODE: cfg.identity_mode = optarg; break;
		case O_ANCPID:
			if (strcmp(optarg, "parent") == 0) {
				cfg.anchor_pid = (int)getppid();
			} else {
				if (parse_u64("--anchor-pid", optarg, 4194304, &v) < 0 || v == 0)
					return 2;
				cfg.anchor_pid = (int)v;
			}
			break;
		case O_ANCSOCK: cfg.anchor_socket = optarg; break;
		case O_IDFEED: cfg.identity_feed = optarg; break;
		case O_IDFEEDWAIT:
			if (parse_u64("--identity-feed-wait", optarg, 60000, &v) < 0 || v == 0)
				return 2;
			cfg.identity_feed_wait_ms = v;
			break;
		case O_ANCSHA: cfg.expected_anchor_sha256 = optarg; break;
		case O_WNETNS: cfg.workload_netns = optarg; break;
		case O_SBXCG: cfg.sandbox_cgroup = optarg; break;
		case O_CONTROL: cfg.control = optarg; break;
		case O_PROVPUB:
			if (cfg.n_provisioning_pubkey >= 4) {
				log_error("at most 4 --provisioning-pubkey");
				return 2;
			}
			cfg.provisioning_pubkey[cfg.n_provisioning_pubkey++] = optarg;
			break;
		case O_MAXSKEW:
			if (parse_u64("--max-clock-skew", optarg, 86400, &v) < 0 || v == 0)
				return 2;
			cfg.max_clock_skew_s = v;
			break;
		case O_NOMAC:
			cfg.no_identity_mac = true;
			break;
		case O_IDS:
			sc.binary_path = optarg;
			static_flag = static_flag ? static_flag : "--identity-static";
			break;
		case O_IDSHA:
			sc.sha256 = optarg;
			static_flag = static_flag ? static_flag : "--identity-static-sha256";
			break;
		case O_IDANC:
			static_flag = static_flag ? static_flag : "--identity-static-ancestor";
			if (sc.n_ancestors >= NETSUP_MAX_ANCESTORS) {
				log_error("at most %d --identity-static-ancestor", NETSUP_MAX_ANCESTORS);
				return 2;
			}
			sc_ancestors[sc.n_ancestors++] = optarg;
			sc.ancestors = sc_ancestors;
			break;
		case O_IDDELAY:
			static_flag = static_flag ? static_flag : "--identity-static-delay-ms";
			if (parse_u64("--identity-static-delay-ms", optarg, 600000, &v) < 0)
				return 2;
			sc.delay_ms = v;
			break;
		case O_IDANCHOR:
			static_flag = static_flag ? static_flag : "--identity-static-anchor-delay-ms";
			if (parse_u64("--identity-static-anchor-delay-ms", optarg, 600000, &v) < 0)
				return 2;
			sc.anchor_delay_ms = v;
			break;
		case O_DNSLISTEN:
			if (cfg.n_dns_listen >= NETSUP_MAX_LISTEN) {
				log_error("at most %d --dns-listen", NETSUP_MAX_LISTEN);
				return 2;
			}
			cfg.dns_listen[cfg.n_dns_listen++] = optarg;
			break;
		case O_DNSUP: cfg.dns_upstream = optarg; break;
		case O_DNSTO:
			if (parse_u64("--dns-timeout-ms", optarg, 600000, &v) < 0 || v == 0)
				return 2;
			cfg.dns_timeout_ms = v;
			break;
		case O_DNSMAX:
			if (parse_u64("--dns-max-outstanding", optarg, 65536, &v) < 0 || v == 0)
				return 2;
			cfg.dns_max_outstanding = v;
			break;
		case O_DNSREC:
			if (parse_u64("--dns-records", optarg, 1 << 20, &v) < 0 || v == 0)
				return 2;
			cfg.dns_record_max = v;
			break;
		case O_UPPROXY: cfg.upstream_proxy = optarg; break;
		case O_TLSCA: cfg.tls_ca_out = optarg; break;
		case O_TLSBUNDLE: cfg.tls_bundle_out = optarg; break;
		case O_TLSSYS: cfg.tls_system_bundle = optarg; break;
		case O_UPCA: cfg.upstream_ca = optarg; break;
		case O_WORKERS: {
			uint64_t nw;
			if (parse_u64("--workers", optarg, NETSUP_MAX_WORKERS, &nw) < 0)
				return 2;
			if (nw == 0) {
				log_error("--workers: at least 1 (1: everything on one event loop)");
				return 2;
			}
			cfg.workers = (unsigned)nw;
			break;
		}
		case O_UPAUTH: cfg.upstream_proxy_auth_file = optarg; break;
		case O_UPCONNECT: cfg.upstream_proxy_connect = optarg; break;
		case O_NOUP:
			if (cfg.n_no_upstream_proxy >= NETSUP_MAX_LISTEN) {
				log_error("at most %d --no-upstream-proxy", NETSUP_MAX_LISTEN);
				return 2;
			}
			cfg.no_upstream_proxy[cfg.n_no_upstream_proxy++] = optarg;
			break;
		case O_TLISTEN:
			if (cfg.n_transparent_listen >= NETSUP_MAX_LISTEN) {
				log_error("at most %d --transparent-listen", NETSUP_MAX_LISTEN);
				return 2;
			}
			cfg.transparent_listen[cfg.n_transparent_listen++] = optarg;
			break;
		case O_TON:
			if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
				log_error("--transparent takes on or off");
				return 2;
			}
			cfg.transparent_off = strcmp(optarg, "off") == 0;
			break;
		case O_TPEEK:
			if (parse_u64("--transparent-peek-ms", optarg, 60000, &v) < 0 || v == 0)
				return 2;
			cfg.transparent_peek_ms = v;
			break;
		case 'v': log_set_level(LOG_LVL_DEBUG); break;
		case 'h': usage(stdout); return 0;
		case O_FEATURES:
			for (size_t i = 0; i < ARRAY_SIZE(netsup_features); i++)
				printf("%s\n", netsup_features[i]);
			return fflush(stdout) == 0 ? 0 : 1;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s' (see --help)", argv[optind]);
		return 2;
	}
	if (cfg.n_listen == 0)
		cfg.listen[cfg.n_listen++] = "127.0.0.1:3128";
	if (!NETSUP_TESTING && cfg.identity_mode && !strcmp(cfg.identity_mode, "static")) {
		log_error("--identity static: " NETSUP_NO_STATIC);
		return 2;
	}
	if (!NETSUP_TESTING && static_flag) {
		log_error("%s: " NETSUP_NO_STATIC, static_flag);
		return 2;
	}
	if (cfg.identity_mode) {
		const char *m = cfg.identity_mode;
		if (strcmp(m, "local") && strcmp(m, "delegated") && strcmp(m, "static")) {
			log_error(NETSUP_TESTING ? "--identity must be local, delegated or static"
						 : "--identity must be local or delegated");
			return 2;
		}
		if (!strcmp(m, "static") && !sc.binary_path) {
			log_error("--identity static needs --identity-static PATH (testing only)");
			return 2;
		}
		if (strcmp(m, "static") && sc.binary_path) {
			log_error("--identity-static is only for --identity static");
			return 2;
		}
		if (!strcmp(m, "local") && (cfg.anchor_pid > 0) == (cfg.anchor_socket != NULL)) {
			log_error("--identity local needs exactly one of --anchor-pid, --anchor-socket");
			return 2;
		}
		if (!strcmp(m, "local") && cfg.expected_anchor_sha256 &&
		    (strlen(cfg.expected_anchor_sha256) != 64 ||
		     strspn(cfg.expected_anchor_sha256, "0123456789abcdefABCDEF") != 64)) {
			log_error("--expected-anchor-sha256 needs 64 hex digits");
			return 2;
		}
		if (!strcmp(m, "delegated") && (!cfg.control || cfg.n_provisioning_pubkey == 0)) {
			log_error("--identity delegated needs --control ENDPOINT and --provisioning-pubkey FILE");
			return 2;
		}
	}
	if (sc.binary_path && sc.binary_path[0] != '/') {
		log_error("--identity-static needs an absolute path");
		return 2;
	}
	if (sc.sha256 && (strlen(sc.sha256) != 64 || strspn(sc.sha256, "0123456789abcdef") != 64)) {
		log_error("--identity-static-sha256 needs 64 lower-case hex digits");
		return 2;
	}
#ifdef TETHER_NETSUP_TESTING
	if (sc.binary_path) {
		cfg.identity_test_new = static_identity_new;
		cfg.identity_test_arg = &sc;
	}
#endif
	/* The sandbox CA key and credential values live in this process:
	 * no core file, no same-uid peer reading its memory or environ, and a
	 * credential given in the environment no longer in
	 * /proc/<pid>/environ (before any thread exists). */
	int hr = harden_hide_environ();
	if (hr == 0)
		hr = harden_no_dumps(true);
	if (hr < 0) {
		log_error("cannot protect the process (environ, PR_SET_DUMPABLE, RLIMIT_CORE): %s", strerror(-hr));
		return 1;
	}
	if (install_fence) {
		for (size_t i = 0; i < cfg.n_listen; i++)
			if ((fc.ports[fc.n_ports] = port_of(cfg.listen[i])))
				fc.n_ports++;
		/* The admin port is ours, not the workload's: refused to it. */
		for (size_t i = 0; i < cfg.n_dns_listen && fc.n_dns_ports < FENCE_MAX_PORTS; i++)
			if ((fc.dns_ports[fc.n_dns_ports] = port_of(cfg.dns_listen[i])))
				fc.n_dns_ports++;
		if (cfg.n_transparent_listen && !cfg.transparent_off)
			fc.transparent_port = port_of(cfg.transparent_listen[0]);
		if (cfg.admin && (fc.supervisor_ports[fc.n_supervisor_ports] = port_of(cfg.admin)))
			fc.n_supervisor_ports++;
		char err[1024];
		int r = fence_install(&fc, err, sizeof(err));
		if (r < 0) {
			log_error("%s", err);
			return 1;
		}
		log_info("egress fence installed (table inet %s, proxy uid %u)", FENCE_TABLE,
			 (unsigned)fc.proxy_uid);
	}
	/* Two descriptors a connection: the inherited soft limit (often 1024)
	 * would cap us near 500 (netsup_start lowers --max-connections to fit). */
	(void)fdlimit_raise(NULL);
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct netsup ns;
	int r = netsup_start(&ns, &loop, &cfg);
	if (r < 0)
		return 1;
	netsup_run(&ns);
	audit_line_console_flush(&ns);
	uv_loop_close(&loop);
	return 0;
}
