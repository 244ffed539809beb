/* The local launcher (`tether run`). See launcher.h for the arrangement. */
#include "launcher/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pwd.h>
#include <stdarg.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <linux/vm_sockets.h>
#include <unistd.h>

#include <sodium.h>

#include "common/fdpass.h"
#include "common/kernel.h"
#include "common/log.h"
#include "common/util.h"
#include "launcher/cleanup.h"
#include "launcher/netns.h"

#define PROXY_PORT 3128
/* the transparent capture's listener (launcher.h transparent_listen) */
#define TRANSPARENT_PORT 3129
#define RUN_DIR_BASE "/run/tether"

#define CONTROL_PORT 3129

/* How the processes are arranged (launcher.h has the pictures). */
enum layout {
	LAYOUT_SANDBOX = 0, /* combined, vm-local: N is P's child in one PID namespace */
	LAYOUT_PAUSE,       /* shared-pid: pause is PID 1, P and N siblings started into it */
	LAYOUT_SPLIT,       /* split-*: P and N each PID 1 of their own namespace */
	LAYOUT_VM_HOST,     /* vm-delegated: the guest without N; N host-side */
};

static enum layout layout_of(const struct topology *t)
{
	switch (t->id) {
	case TOPOLOGY_SHARED_PID: return LAYOUT_PAUSE;
	case TOPOLOGY_SPLIT_SHARED_NETNS:
	case TOPOLOGY_SPLIT_VETH: return LAYOUT_SPLIT;
	case TOPOLOGY_VM_DELEGATED: return LAYOUT_VM_HOST;
	default: return LAYOUT_SANDBOX;
	}
}

bool launcher_supports(const struct topology *t)
{
	return t && (unsigned)t->id < TOPOLOGY__COUNT;
}

static char *strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strdup_printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	int r = vasprintf(&s, fmt, ap);
	va_end(ap);
	return r < 0 ? NULL : s;
}

/* A user name or number → uid (a number without a passwd entry is fine:
 * proc-supervisor --user takes it as it is). */
static int user_uid(const char *user, uid_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(user, &end, 10);
	if (*user && !*end && user[0] != '-' && errno == 0 && v < 0xffffffffUL) {
		*out = (uid_t)v;
		return 0;
	}
	char name[256];
	size_t len = strcspn(user, ":");
	if (len == 0 || len >= sizeof(name))
		return -EINVAL;
	memcpy(name, user, len);
	name[len] = '\0';
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return -ENOENT;
	*out = res->pw_uid;
	return 0;
}

/* Whether AF_VSOCK works on this host without a VM: a listener on the
 * local CID (1) that a connect reaches (the vsock_loopback transport). */
static bool vsock_loopback(void)
{
	_cleanup_close_ int l = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return false;
	struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_LOCAL,
				 .svm_port = VMADDR_PORT_ANY };
	socklen_t len = sizeof(a);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0)
		return false;
	_cleanup_close_ int c = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	a.svm_cid = VMADDR_CID_LOCAL;
	return c >= 0 && connect(c, (struct sockaddr *)&a, sizeof(a)) == 0;
}

/* Whether IPv6 works in the caller's netns: the stack is there and not
 * disabled for new links (the veth's outer end is made here). A host
 * without IPv6 gets an IPv4-only sandbox, as before. */
static bool ipv6_usable(void)
{
	static const char *const knobs[] = { "/proc/sys/net/ipv6/conf/all/disable_ipv6",
					     "/proc/sys/net/ipv6/conf/default/disable_ipv6" };
	for (size_t i = 0; i < ARRAY_SIZE(knobs); i++) {
		char buf[16];
		ssize_t n = read_file_at(AT_FDCWD, knobs[i], buf, sizeof(buf));
		if (n <= 0 || buf[0] != '0')
			return false;
	}
	_cleanup_close_ int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	return fd >= 0;
}

static unsigned long long mono_ms(void)
{
	return now_mono_ns() / 1000000ULL;
}

static char *plan_keep(struct launch_plan *p, char *s)
{
	if (!s)
		return NULL;
	if (p->n_strings == sizeof(p->strings) / sizeof(p->strings[0])) {
		free(s);
		return NULL;
	}
	p->strings[p->n_strings++] = s;
	return s;
}

void launch_plan_done(struct launch_plan *plan)
{
	if (plan->slot_fd >= 0)
		close(plan->slot_fd);
	plan->slot_fd = -1;
	for (size_t i = 0; i < plan->n_strings; i++)
		free(plan->strings[i]);
	plan->n_strings = 0;
}

static int find_binary(const struct launch_config *cfg, const char *name, char *out, size_t size,
		       struct topology_error *err)
{
	char dir[PATH_MAX];
	const char *d = cfg->bin_dir ? cfg->bin_dir : getenv("TETHER_BIN_DIR");
	if (d && *d) {
		if (strscpy(dir, d, sizeof(dir)) < 0)
			return topology_error_set(err, -ENAMETOOLONG, "TETHER_BIN_DIR is too long");
	} else {
		ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
		if (n < 0)
			return topology_error_errno(err, -errno, "cannot read /proc/self/exe");
		dir[n] = '\0';
		char *slash = strrchr(dir, '/');
		if (!slash)
			return topology_error_set(err, -EINVAL, "cannot locate the tether binary's directory");
		*slash = '\0';
	}
	int r = snprintf(out, size, "%s/%s", dir, name);
	if (r < 0 || (size_t)r >= size)
		return topology_error_set(err, -ENAMETOOLONG, "path of %s is too long", name);
	if (access(out, X_OK) < 0)
		return topology_error_errno(err, -errno, "cannot execute %s", out);
	return 0;
}

static int hash_file(const char *path, char hex[65], struct topology_error *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return topology_error_errno(err, -errno, "cannot open %s", path);
	crypto_hash_sha256_state st;
	crypto_hash_sha256_init(&st);
	unsigned char buf[65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return topology_error_errno(err, -errno, "cannot read %s", path);
		}
		if (n == 0)
			break;
		crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
	}
	unsigned char md[crypto_hash_sha256_BYTES];
	crypto_hash_sha256_final(&st, md);
	hex_encode(md, sizeof(md), hex);
	return 0;
}

/* The daemon's --features (bounded): one word a line, each an option this
 * build of it has. The launcher composes separately built binaries and must
 * not pass a flag a daemon does not know. A daemon without --features
 * prints nothing on stdout (its complaint goes to /dev/null): no features. */
static int daemon_features(const char *path, char *buf, size_t size)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return r;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		dup2(pfd[1], STDOUT_FILENO);
		if (null >= 0)
			dup2(null, STDERR_FILENO);
		execl(path, path, "--features", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	size_t got = 0;
	unsigned long long deadline = mono_ms() + 3000;
	for (;;) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		int left = (int)(deadline - mono_ms());
		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		ssize_t n = read(pfd[0], buf + got, size - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == size - 1)
			break;
	}
	buf[got] = '\0';
	close(pfd[0]);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return 0;
}

/* Whether a --features answer lists word (a whole line). */
static bool has_feature(const char *features, const char *word)
{
	size_t len = strlen(word);
	for (const char *l = features; *l;) {
		const char *nl = strchrnul(l, '\n');
		if ((size_t)(nl - l) == len && memcmp(l, word, len) == 0)
			return true;
		l = *nl ? nl + 1 : nl;
	}
	return false;
}

/* A free TCP port on 127.0.0.1 in our netns (bound and released: the daemon
 * binds it a moment later; a clash makes it fail, which we report). */
static int free_port(void)
{
	_cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		return -errno;
	return ntohs(a.sin_port);
}

/* Append "NAME VALUE" to an argv under construction; nothing when VALUE
 * is NULL or empty (an option the plan does not use). */
static void opt(const char **v, size_t *n, const char *name, const char *value)
{
	if (!value || !*value)
		return;
	v[(*n)++] = name;
	v[(*n)++] = value;
}

/* The three (vm: four) binaries, next to tether or in $TETHER_BIN_DIR, and
 * the digest of the proc-supervisor the net-supervisor will pin. */
static int plan_binaries(const struct launch_config *cfg, struct launch_plan *p, bool vm,
			 struct topology_error *err)
{
	int r = find_binary(cfg, "proc-supervisor", p->procsup_path, sizeof(p->procsup_path), err);
	if (r < 0)
		return r;
	r = find_binary(cfg, "net-supervisor", p->netsup_path, sizeof(p->netsup_path), err);
	if (r < 0)
		return r;
	if (vm) {
		r = find_binary(cfg, "tether-runtime-init", p->runtime_init_path,
				sizeof(p->runtime_init_path), err);
		if (r < 0)
			return r;
	}
	if (cfg->self_exe) {
		if (strscpy(p->self_path, cfg->self_exe, sizeof(p->self_path)) < 0)
			return topology_error_set(err, -ENAMETOOLONG, "tether path too long");
	} else {
		ssize_t n = readlink("/proc/self/exe", p->self_path, sizeof(p->self_path) - 1);
		if (n < 0)
			return topology_error_errno(err, -errno, "cannot read /proc/self/exe");
		p->self_path[n] = '\0';
	}
	r = hash_file(p->procsup_path, p->procsup_sha256, err);
	if (r < 0)
		return r;
	return 0;
}

static int plan_user(const struct launch_config *cfg, struct launch_plan *p, struct topology_error *err)
{
	/* The workload's uid. In a fenced pod netns the fence exempts uid 0
	 * (both daemons): a root workload would pass it. */
	const char *user = cfg->user ? cfg->user : (p->pod ? "nobody" : NULL);
	if (user) {
		uid_t uid;
		int r = user_uid(user, &uid);
		if (r < 0)
			return topology_error_set(err, r, "--user %s: no such user", user);
		if (p->pod && uid == 0)
			return topology_error_set(err, -EINVAL,
						  "topology %s fences the pod netns by uid and exempts uid 0 (the "
						  "proxy): the workload cannot run as root (--user)", cfg->topo->name);
		if (strscpy(p->user, user, sizeof(p->user)) < 0)
			return topology_error_set(err, -ENAMETOOLONG, "--user too long");
	}
	return 0;
}

/* p->unsupported says what a daemon lacks for this topology (the run
 * refuses, --dry-run warns). */
static int plan_features(const struct launch_config *cfg, struct launch_plan *p, bool *netsup_pins,
			 struct topology_error *err)
{
	const struct topology *t = cfg->topo;
	bool delegated = t->identity == TOPOLOGY_IDENTITY_DELEGATED;
	/* What each daemon must offer for this topology, from its --features:
	 * the launcher composes separately built binaries. */
	static char features[4096];
	int r = daemon_features(p->netsup_path, features, sizeof(features));
	if (r < 0)
		return topology_error_errno(err, r, "cannot run %s --features", p->netsup_path);
	const char *need_n[4] = { 0 };
	if (delegated) {
		need_n[0] = "control";
		need_n[1] = "provisioning-pubkey";
	} else {
		need_n[0] = t->id == TOPOLOGY_SHARED_PID ? "anchor-socket" : "anchor-pid";
		need_n[1] = "workload-netns";
	}
	if (p->pod)
		need_n[2] = "listen-netns";
	if (cfg->learn)
		need_n[p->pod ? 3 : 2] = "learn";
	if (cfg->tls_inspect && !p->unsupported[0] && !has_feature(features, "tls-inspect"))
		snprintf(p->unsupported, sizeof(p->unsupported),
			 "%.3000s cannot inspect TLS (an endpoint says tls: inspect)", p->netsup_path);
	if (cfg->upstream_proxy && !p->unsupported[0] && !has_feature(features, "upstream-proxy"))
		snprintf(p->unsupported, sizeof(p->unsupported), "%.3000s has no --upstream-proxy",
			 p->netsup_path);
	for (size_t i = 0; i < ARRAY_SIZE(need_n) && need_n[i] && !p->unsupported[0]; i++)
		if (!has_feature(features, need_n[i]))
			snprintf(p->unsupported, sizeof(p->unsupported),
				 "%.3000s has no --%s, which topology %s needs", p->netsup_path, need_n[i], t->name);
	*netsup_pins = has_feature(features, "expected-anchor-sha256");
	p->netsup_console = has_feature(features, "console");
	p->netsup_log_level = has_feature(features, "log-level");
	p->netsup_policy_layer = has_feature(features, "policy-layer");
	p->netsup_transparent = has_feature(features, "transparent-listen");
	/* Connect-time identity wherever the net-supervisor reads procfs
	 * beside the proc-supervisor (combined, shared-pid, vm-local). */
	bool feed_n = !delegated && has_feature(features, "identity-feed");
	if (!has_feature(features, "dns-listen"))
		snprintf(p->dns_off, sizeof(p->dns_off), "the net-supervisor has no --dns-listen");
	const char *need_p[6] = { 0 };
	size_t np = 0;
	if (cfg->exec_socket)
		need_p[np++] = "exec-socket";
	if (delegated)
		need_p[np++] = "provisioning-key";
	if (p->user[0])
		need_p[np++] = "user";
	if (cfg->wait_all && np < ARRAY_SIZE(need_p))
		need_p[np++] = "wait-all";
	if (!p->unsupported[0] && daemon_features(p->procsup_path, features, sizeof(features)) >= 0)
		p->procsup_transparent = has_feature(features, "transparent-capture");
	if (cfg->tls_inspect && np < ARRAY_SIZE(need_p))
		need_p[np++] = "trust-bundle";
	if (np && !p->unsupported[0]) {
		r = daemon_features(p->procsup_path, features, sizeof(features));
		if (r < 0)
			return topology_error_errno(err, r, "cannot run %s --features", p->procsup_path);
		for (size_t i = 0; i < np && !p->unsupported[0]; i++)
			if (!has_feature(features, need_p[i]))
				snprintf(p->unsupported, sizeof(p->unsupported),
					 "%.3000s has no --%s in this build", p->procsup_path, need_p[i]);
	}
	if (feed_n && !p->unsupported[0] && daemon_features(p->procsup_path, features, sizeof(features)) >= 0)
		p->feed_ok = has_feature(features, "identity-feed");
	return 0;
}

static int plan_slot(const struct launch_config *cfg, struct launch_plan *p, unsigned *slot,
		     struct topology_error *err)
{
	/* Per-run names and a /30 picked by pid: concurrent runs get distinct
	 * interfaces, and (mostly) distinct links; the fake internet of the
	 * demo and tests uses 198.51.100.0/24, never this range. */
	unsigned k = (unsigned)getpid() % 63u;
	/* Skip /30s another run holds: its slot lock (runs starting at the
	 * same time), or the address already on a link here (bind succeeds
	 * only on a local address: a run of an older tether, or a leftover). */
	if (cfg->reserve_slot && mkdir(RUN_DIR_BASE, 0711) < 0 && errno != EEXIST)
		return topology_error_errno(err, -errno, "cannot create %s", RUN_DIR_BASE);
	bool found = false;
	for (unsigned tries = 0; tries < 63 && !found; tries++, k = (k + 1) % 63u) {
		if (cfg->reserve_slot) {
			char lock[64];
			snprintf(lock, sizeof(lock), RUN_DIR_BASE "/slot-%u.lock", k);
			int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
			if (lfd < 0)
				return topology_error_errno(err, -errno, "cannot open %s", lock);
			if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
				close(lfd);
				continue;
			}
			p->slot_fd = lfd;
		}
		_cleanup_close_ int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0xC0000200u | (4 * k + 1)) };
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			found = true;
			break;
		}
		if (p->slot_fd >= 0) {
			close(p->slot_fd);
			p->slot_fd = -1;
		}
	}
	if (!found)
		return topology_error_set(err, -EADDRINUSE,
					  "every /30 of 192.0.2.0/24 is taken by another tether run");
	*slot = k;
	return 0;
}

/* Names, addresses and endpoints of run `me` on /30 number k. */
static int plan_names(const struct launch_config *cfg, struct launch_plan *p, unsigned k, pid_t me,
		      struct topology_error *err)
{
	const struct topology *t = cfg->topo;
	bool delegated = t->identity == TOPOLOGY_IDENTITY_DELEGATED;
	snprintf(p->netns_name, sizeof(p->netns_name), "tt%dw", (int)me);
	snprintf(p->veth_outer, sizeof(p->veth_outer), "tt%da", (int)me);
	snprintf(p->veth_inner, sizeof(p->veth_inner), "tt%db", (int)me);
	snprintf(p->addr_outer, sizeof(p->addr_outer), "192.0.2.%u/30", 4 * k + 1);
	snprintf(p->addr_inner, sizeof(p->addr_inner), "192.0.2.%u/30", 4 * k + 2);
	if (p->pod)
		snprintf(p->proxy_listen, sizeof(p->proxy_listen), "127.0.0.1:%d", PROXY_PORT);
	else
		snprintf(p->proxy_listen, sizeof(p->proxy_listen), "192.0.2.%u:%d", 4 * k + 1, PROXY_PORT);
	snprintf(p->proxy_url, sizeof(p->proxy_url), "http://%s", p->proxy_listen);
	/* IPv6: the same slot's 2001:db8:0:K::/64 (documentation prefix, as
	 * 192.0.2.0/24 is), a second proxy listener; the workload's
	 * HTTP_PROXY stays the IPv4 one. */
	p->ipv6 = ipv6_usable();
	if (p->ipv6) {
		snprintf(p->addr6_outer, sizeof(p->addr6_outer), "2001:db8:0:%x::1/64", k);
		snprintf(p->addr6_inner, sizeof(p->addr6_inner), "2001:db8:0:%x::2/64", k);
		if (p->pod)
			snprintf(p->proxy_listen6, sizeof(p->proxy_listen6), "[::1]:%d", PROXY_PORT);
		else
			snprintf(p->proxy_listen6, sizeof(p->proxy_listen6), "[2001:db8:0:%x::1]:%d", k,
				 PROXY_PORT);
	}
	int port = free_port();
	if (port < 0)
		return topology_error_errno(err, port, "cannot pick an admin port on 127.0.0.1");
	snprintf(p->admin, sizeof(p->admin), "127.0.0.1:%d", port);
	snprintf(p->run_dir, sizeof(p->run_dir), RUN_DIR_BASE "/run-%d", (int)me);
	snprintf(p->ready_file, sizeof(p->ready_file), "%s/ready", p->run_dir);
	if (cfg->tls_inspect)
		snprintf(p->tls_bundle, sizeof(p->tls_bundle), "%s/tls-bundle.pem", p->run_dir);
	snprintf(p->netns_path, sizeof(p->netns_path), NETNS_RUN_DIR "/%s", p->netns_name);
	/* the anchor's pid in its own PID namespace: PID 1 when it is init
	 * (combined, split), 2 behind a runtime init or a pause process */
	int anchor_pid = t->roles[TOPOLOGY_ROLE_PROC_SUPERVISOR].pid1 ? 1 : 2;
	snprintf(p->anchor_pid, sizeof(p->anchor_pid), "%d", anchor_pid);
	if (t->id == TOPOLOGY_SHARED_PID)
		snprintf(p->anchor_socket, sizeof(p->anchor_socket), "%s/anchor.sock", p->run_dir);
	if (p->anchor_socket[0])
		strscpy(p->status_socket, p->anchor_socket, sizeof(p->status_socket));
	else
		snprintf(p->status_socket, sizeof(p->status_socket), "%s/status.sock", p->run_dir);
	if (p->feed_ok)
		snprintf(p->identity_feed, sizeof(p->identity_feed), "%s/idfeed.sock", p->run_dir);
	if (delegated) {
		snprintf(p->key_dir, sizeof(p->key_dir), "%s/keys", p->run_dir);
		snprintf(p->key_file, sizeof(p->key_file), "%s/provisioning.key", p->key_dir);
		snprintf(p->pub_file, sizeof(p->pub_file), "%s/provisioning.pub", p->key_dir);
		if (t->id == TOPOLOGY_SPLIT_VETH) {
			snprintf(p->control, sizeof(p->control), "tcp:192.0.2.%u:%d", 4 * k + 2, CONTROL_PORT);
			/* only the net side's end of the veth may ask */
			snprintf(p->control_allow, sizeof(p->control_allow), "192.0.2.%u", 4 * k + 1);
			strscpy(p->control_kind, "TCP over the veth", sizeof(p->control_kind));
		} else if (t->id == TOPOLOGY_VM_DELEGATED && vsock_loopback()) {
			snprintf(p->control, sizeof(p->control), "vsock:1:%u", 40000u + (unsigned)me % 20000u);
			strscpy(p->control_kind, "vsock loopback", sizeof(p->control_kind));
		} else {
			snprintf(p->control, sizeof(p->control), "unix:%s/control.sock", p->run_dir);
			strscpy(p->control_kind,
				t->id == TOPOLOGY_VM_DELEGATED ? "unix socket (no vsock loopback in this kernel)"
							      : "unix socket",
				sizeof(p->control_kind));
		}
	}
	return 0;
}

/* A per-run cgroup parent that the guardian removes (cgroup.kill, then
 * rmdir) even when the proc-supervisor is SIGKILLed; its own tether-<pid>
 * name would collide across runs, since it is always PID 1. Left "" when
 * there is no cgroup v2. */
static void plan_cgroup(struct launch_plan *p, int anchor_pid, pid_t me)
{
	struct kernel_caps caps;
	if (kernel_caps_probe(&caps) == 0 && caps.cgroup_v2) {
		char self[PATH_MAX] = "";
		char buf[4096];
		ssize_t len = read_file_at(AT_FDCWD, "/proc/self/cgroup", buf, sizeof(buf));
		for (char *line = len > 0 ? buf : NULL, *next; line && *line; line = next) {
			next = strchr(line, '\n');
			if (next)
				*next++ = '\0';
			if (strncmp(line, "0::", 3) == 0)
				strscpy(self, line + 3, sizeof(self));
		}
		const char *rel = strcmp(self, "/") == 0 ? "" : self;
		/* Where the proc-supervisor (PID anchor_pid in its namespace) puts
		 * its workloads, as /proc/<pid>/cgroup prints it for the
		 * net-supervisor: proc-supervisor/cgroup.c names it
		 * <parent>/tether-<pid>/workload. A path too long for either
		 * buffer means no per-run cgroup (lineage membership). */
		int n1 = snprintf(p->cgroup_parent, sizeof(p->cgroup_parent), "%s%s/tether-run-%d",
				  caps.cgroup_root, rel, (int)me);
		int n2 = snprintf(p->sandbox_cgroup, sizeof(p->sandbox_cgroup),
				  "%s/tether-run-%d/tether-%d/workload", rel, (int)me, anchor_pid);
		if (n1 < 0 || (size_t)n1 >= sizeof(p->cgroup_parent) || n2 < 0 ||
		    (size_t)n2 >= sizeof(p->sandbox_cgroup)) {
			p->cgroup_parent[0] = '\0';
			p->sandbox_cgroup[0] = '\0';
		}
	}
}

/* Does our /etc/resolv.conf name a nameserver (the net-supervisor, which
 * sees this file, forwards the workload's queries there)? */
static bool have_nameserver(void)
{
	_cleanup_fclose_ FILE *f = fopen("/etc/resolv.conf", "re");
	char line[256];
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "nameserver", 10) == 0 && (line[10] == ' ' || line[10] == '\t'))
			return true;
	return false;
}

/* The workload's resolver: the proxy's hosts, port 53. */
static void plan_dns(struct launch_plan *p)
{
	if (!p->dns_off[0] && !have_nameserver())
		snprintf(p->dns_off, sizeof(p->dns_off), "no nameserver in /etc/resolv.conf to forward to");
	if (p->dns_off[0])
		return;
	size_t h = strrchr(p->proxy_listen, ':') - p->proxy_listen;
	snprintf(p->dns_listen, sizeof(p->dns_listen), "%.*s:53", (int)h, p->proxy_listen);
	if (p->proxy_listen6[0]) {
		h = strrchr(p->proxy_listen6, ':') - p->proxy_listen6;
		snprintf(p->dns_listen6, sizeof(p->dns_listen6), "%.*s:53", (int)h, p->proxy_listen6);
	}
	snprintf(p->resolv_file, sizeof(p->resolv_file), "%s/resolv.conf", p->run_dir);
}

/* Transparent capture: the proxy's hosts, TRANSPARENT_PORT. */
static void plan_transparent(const struct launch_config *cfg, struct launch_plan *p)
{
	if (cfg->transparent_off)
		snprintf(p->transparent_off, sizeof(p->transparent_off), "--transparent off");
	else if (!p->netsup_transparent)
		snprintf(p->transparent_off, sizeof(p->transparent_off),
			 "the net-supervisor has no --transparent-listen");
	if (p->transparent_off[0])
		return;
	size_t h = strrchr(p->proxy_listen, ':') - p->proxy_listen;
	snprintf(p->transparent_listen, sizeof(p->transparent_listen), "%.*s:%d", (int)h, p->proxy_listen,
		 TRANSPARENT_PORT);
	if (p->proxy_listen6[0]) {
		h = strrchr(p->proxy_listen6, ':') - p->proxy_listen6;
		snprintf(p->transparent_listen6, sizeof(p->transparent_listen6), "%.*s:%d", (int)h,
			 p->proxy_listen6, TRANSPARENT_PORT);
	}
}

/* resolv.conf for the workload: our listeners, nothing of the host's
 * (its search domains would leak names upstream). */
static int write_resolv(const struct launch_plan *p)
{
	_cleanup_fclose_ FILE *f = fopen(p->resolv_file, "we");
	if (!f)
		return -errno;
	fprintf(f, "# tether: the workload's resolver (the net-supervisor)\nnameserver %.*s\n",
		(int)(strrchr(p->dns_listen, ':') - p->dns_listen), p->dns_listen);
	if (p->dns_listen6[0])
		fprintf(f, "nameserver %.*s\n", (int)(strrchr(p->dns_listen6, ']') - p->dns_listen6 - 1),
			p->dns_listen6 + 1);
	if (fchmod(fileno(f), 0644) < 0 || fflush(f) != 0)
		return -EIO;
	return 0;
}

/* In the proc-supervisor's mount namespace, before it execs: its own
 * copy of the namespace (a net-supervisor sharing the old one keeps the
 * host's resolver), with the run's resolv.conf over /etc/resolv.conf. A
 * failure is reported and the run goes on without it (the fence still
 * holds; names just do not resolve). */
static void workload_resolv(const char *file)
{
	if (!file || !*file)
		return;
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 ||
	    mount(file, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0)
		fprintf(stderr, "tether: sandbox setup: cannot bind %s over /etc/resolv.conf (the workload "
				"keeps the host's, which the fence makes unreachable): %s\n", file, strerror(errno));
}

static int plan_netsup_argv(const struct launch_config *cfg, struct launch_plan *p, bool netsup_pins,
			    struct topology_error *err)
{
	const struct topology *t = cfg->topo;
	bool delegated = t->identity == TOPOLOGY_IDENTITY_DELEGATED;
	const char *audit = cfg->audit ? cfg->audit : "/dev/null";
	size_t n = 0;
	const char **v = p->netsup_argv;
	v[n++] = p->netsup_path;
	opt(v, &n, "--listen", p->proxy_listen);
	opt(v, &n, "--listen", p->proxy_listen6);
	opt(v, &n, "--dns-listen", p->dns_listen);
	opt(v, &n, "--dns-listen", p->dns_listen6);
	opt(v, &n, "--transparent-listen", p->transparent_listen);
	opt(v, &n, "--transparent-listen", p->transparent_listen6);
	if (p->pod)
		opt(v, &n, "--listen-netns", p->netns_path);
	opt(v, &n, "--admin", p->admin);
	opt(v, &n, "--topology", t->name);
	opt(v, &n, "--audit", audit);
	opt(v, &n, "--audit-failure", cfg->audit_failure);
	if (cfg->learn)
		v[n++] = "--learn";
	if (p->netsup_console)
		opt(v, &n, "--console",
		    cfg->console == LAUNCH_CONSOLE_OFF ? "off" : cfg->console == LAUNCH_CONSOLE_ALL ? "all" : "denials");
	if (p->netsup_log_level)
		opt(v, &n, "--log-level", cfg->verbose ? "info" : "error");
	if (cfg->upstream_proxy) {
		if (cfg->n_no_upstream_proxy > 8)
			return topology_error_set(err, -E2BIG, "too many --no-upstream-proxy lists (max 8)");
		opt(v, &n, "--upstream-proxy", cfg->upstream_proxy);
		opt(v, &n, "--upstream-proxy-auth-file", cfg->upstream_proxy_auth_file);
		opt(v, &n, "--upstream-proxy-connect", cfg->upstream_proxy_connect);
		for (size_t i = 0; i < cfg->n_no_upstream_proxy; i++)
			opt(v, &n, "--no-upstream-proxy", cfg->no_upstream_proxy[i]);
	}
	if (p->tls_bundle[0]) {
		opt(v, &n, "--tls-bundle-out", p->tls_bundle);
		opt(v, &n, "--tls-system-bundle", cfg->trust_bundle);
		opt(v, &n, "--upstream-ca", cfg->upstream_ca);
	}
	/* every layer's rules add up (docs/network-policy.md): the lower
	 * layers' files first, in their layers */
	for (size_t i = 0; i < cfg->n_layer_files; i++) {
		if (n + 2 >= LAUNCH_ARGV_MAX - 14)
			return topology_error_set(err, -E2BIG, "too many policy files");
		const char *lf = p->netsup_policy_layer ? plan_keep(p, strdup_printf("%s:%s", cfg->layer_files[i].layer,
										  cfg->layer_files[i].path))
							: cfg->layer_files[i].path;
		if (!lf)
			return topology_error_set(err, -ENOMEM, "out of memory");
		opt(v, &n, p->netsup_policy_layer ? "--policy-layer" : "--policy", lf);
	}
	for (size_t i = 0; i < cfg->n_policy_files; i++) {
		if (n + 2 >= LAUNCH_ARGV_MAX - 14)
			return topology_error_set(err, -E2BIG, "too many --policy files");
		opt(v, &n, "--policy", cfg->policy_files[i]);
	}
	v[n++] = "--identity";
	if (delegated) {
		v[n++] = "delegated";
		opt(v, &n, "--control", p->control);
		opt(v, &n, "--provisioning-pubkey", p->pub_file);
	} else {
		v[n++] = "local";
		if (p->anchor_socket[0]) {
			const char *a = plan_keep(p, strdup_printf("unix:%s", p->anchor_socket));
			if (!a)
				return topology_error_set(err, -ENOMEM, "out of memory");
			opt(v, &n, "--anchor-socket", a);
		} else {
			opt(v, &n, "--anchor-pid", p->anchor_pid);
		}
		/* Without the flag the net-supervisor pins the proc-supervisor
		 * installed beside itself, which is the one we start. */
		if (netsup_pins)
			opt(v, &n, "--expected-anchor-sha256", p->procsup_sha256);
		opt(v, &n, "--workload-netns", p->netns_path);
		opt(v, &n, "--sandbox-cgroup", p->sandbox_cgroup);
		if (p->identity_feed[0]) {
			const char *f = plan_keep(p, strdup_printf("unix:%s", p->identity_feed));
			if (!f)
				return topology_error_set(err, -ENOMEM, "out of memory");
			opt(v, &n, "--identity-feed", f);
		}
	}
	v[n] = NULL;
	return 0;
}

/* vm: it runs under tether-runtime-init; the entrypoint behind
 * `tether run --wait-ready`. */
static int plan_procsup_argv(const struct launch_config *cfg, struct launch_plan *p,
			     struct topology_error *err)
{
	const struct topology *t = cfg->topo;
	bool delegated = t->identity == TOPOLOGY_IDENTITY_DELEGATED;
	const char *audit = cfg->audit ? cfg->audit : "/dev/null";
	size_t n = 0;
	const char **v = p->procsup_argv;
	v[n++] = p->procsup_path;
	opt(v, &n, "--topology", t->name);
	opt(v, &n, "--audit", audit);
	opt(v, &n, "--proxy", p->proxy_url);
	if (p->transparent_listen[0] && p->procsup_transparent)
		v[n++] = "--transparent-capture";
	opt(v, &n, "--grace", "2");
	if (cfg->wait_all)
		v[n++] = "--wait-all";
	opt(v, &n, "--cgroup", p->cgroup_parent);
	opt(v, &n, "--user", p->user);
	opt(v, &n, "--status-socket", p->status_socket);
	opt(v, &n, "--identity-feed", p->identity_feed);
	if (delegated) {
		opt(v, &n, "--control", p->control);
		opt(v, &n, "--control-allow", p->control_allow);
		opt(v, &n, "--provisioning-key", p->key_file);
	}
	for (size_t i = 0; i < cfg->n_policy_files; i++) {
		if (n + 2 >= LAUNCH_ARGV_MAX - 14)
			return topology_error_set(err, -E2BIG, "too many --policy files");
		opt(v, &n, "--policy", cfg->policy_files[i]);
	}
	opt(v, &n, "--agent", cfg->agent);
	if (p->tls_bundle[0])
		opt(v, &n, "--trust-bundle", p->tls_bundle);
	opt(v, &n, "--exec-socket", cfg->exec_socket);
	v[n++] = "--";
	v[n++] = p->self_path;
	v[n++] = "run";
	v[n++] = "--wait-ready";
	v[n++] = p->ready_file;
	v[n++] = "--";
	size_t argc = 0;
	while (cfg->argv[argc])
		argc++;
	if (n + argc + 1 > sizeof(p->procsup_argv) / sizeof(p->procsup_argv[0]))
		return topology_error_set(err, -E2BIG, "too many arguments");
	for (size_t i = 0; i < argc; i++)
		v[n++] = cfg->argv[i];
	v[n] = NULL;
	return 0;
}

int launch_plan_resolve(const struct launch_config *cfg, struct launch_plan *p,
			struct topology_error *err)
{
	memset(p, 0, sizeof(*p));
	p->slot_fd = -1;
	if (!cfg->topo)
		return topology_error_set(err, -EINVAL, "no topology");
	if (!cfg->argv || !cfg->argv[0])
		return topology_error_set(err, -EINVAL, "no command to run");
	const struct topology *t = cfg->topo;
	p->layout = layout_of(t);
	p->pod = t->fence == TOPOLOGY_FENCE_NFT_UID;
	bool vm = t->id == TOPOLOGY_VM_LOCAL || t->id == TOPOLOGY_VM_DELEGATED;
	bool netsup_pins = false;
	unsigned k = 0;
	pid_t me = getpid();
	int r;
	if ((r = plan_binaries(cfg, p, vm, err)) < 0 || (r = plan_user(cfg, p, err)) < 0 ||
	    (r = plan_features(cfg, p, &netsup_pins, err)) < 0 || (r = plan_slot(cfg, p, &k, err)) < 0 ||
	    (r = plan_names(cfg, p, k, me, err)) < 0)
		return r;
	plan_cgroup(p, atoi(p->anchor_pid), me);
	plan_dns(p);
	plan_transparent(cfg, p);
	if ((r = plan_netsup_argv(cfg, p, netsup_pins, err)) < 0)
		return r;
	return plan_procsup_argv(cfg, p, err);
}

int launch_plan_write(const struct launch_config *cfg, const struct launch_plan *p, FILE *f)
{
	if (p->unsupported[0])
		fprintf(f, "WARNING: %s\n", p->unsupported);
	if (p->pod)
		fprintf(f, "pod netns: %s (veth %s %s <-> %s %s; default route via %s, fenced by nftables: "
			   "only uid 0 sends off loopback; on loopback the workload reaches port %d and its own "
			   "sockets, never uid 0's)\n",
			p->netns_name, p->veth_outer, p->addr_outer, p->veth_inner, p->addr_inner,
			p->veth_outer, PROXY_PORT);
	else
		fprintf(f, "workload netns: %s (veth %s %s <-> %s %s; %s; veth fence: table inet "
			   "tether_fence_%s admits only TCP %d to the proxy's addresses from %s%s)\n",
			p->netns_name, p->veth_outer, p->addr_outer, p->veth_inner, p->addr_inner,
			p->transparent_listen[0] ? "default route via the proxy's end" : "no default route",
			p->veth_outer, PROXY_PORT, p->veth_outer,
			p->transparent_listen[0] ? " and captures every other TCP flow" : "");
	fprintf(f, "proxy: %s%s (HTTP_PROXY/HTTPS_PROXY/ALL_PROXY for the workload)\n", p->proxy_url,
		p->pod ? " in the pod netns; upstream leaves from ours" : "");
	if (p->dns_listen[0])
		fprintf(f, "dns: the workload's resolver on %s%s%s (UDP, TCP; its /etc/resolv.conf)\n", p->dns_listen,
			p->dns_listen6[0] ? " and " : "", p->dns_listen6);
	else
		fprintf(f, "dns: off (%s)\n", p->dns_off);
	if (p->transparent_listen[0])
		fprintf(f, "transparent: TCP flows that bypass the proxy are captured (%s) to %s%s%s\n",
			p->pod ? "nftables redirect by uid" : "nftables DNAT on the veth, default route via it",
			p->transparent_listen, p->transparent_listen6[0] ? " and " : "", p->transparent_listen6);
	else
		fprintf(f, "transparent: off (%s)\n", p->transparent_off);
	if (p->ipv6)
		fprintf(f, "ipv6: %s %s <-> %s %s%s; proxy also on http://%s\n", p->veth_outer, p->addr6_outer,
			p->veth_inner, p->addr6_inner, p->pod ? "; default route via the outer end" : "",
			p->proxy_listen6);
	else
		fprintf(f, "ipv6: off (disabled or absent in this netns)\n");
	fprintf(f, "admin: %s (outer loopback; /readyz gates the entrypoint)\n", p->admin);
	fprintf(f, "anchor: proc-supervisor sha256 %s, pid %s in its PID namespace\n", p->procsup_sha256,
		p->anchor_pid);
	if (p->control[0])
		fprintf(f, "control channel: %s (%s); provisioning key pair generated in %s\n", p->control,
			p->control_kind, p->key_dir);
	fprintf(f, "status socket: %s (tether ps)\n", p->status_socket);
	if (p->anchor_socket[0])
		fprintf(f, "anchor socket: %s (the proc-supervisor's status socket; SO_PEERPIDFD)\n",
			p->anchor_socket);
	if (p->user[0])
		fprintf(f, "workload user: %s\n", p->user);
	if (p->runtime_init_path[0])
		fprintf(f, "pid1: %s (runtime init stand-in)\n", p->runtime_init_path);
	else if (p->layout == LAYOUT_PAUSE)
		fprintf(f, "pid1: a pause process (tether's own, as in a pod with shareProcessNamespace)\n");
	/* argv of both daemons; the entrypoint's own argv is printed redacted
	 * by the caller (it may carry secrets), so stop at "--" here */
	fprintf(f, "net-supervisor:");
	for (size_t i = 0; p->netsup_argv[i]; i++)
		fprintf(f, " %s", p->netsup_argv[i]);
	fputc('\n', f);
	fprintf(f, "proc-supervisor:");
	for (size_t i = 0; p->procsup_argv[i]; i++) {
		fprintf(f, " %s", p->procsup_argv[i]);
		if (strcmp(p->procsup_argv[i], "--") == 0 && i > 0 &&
		    strcmp(p->procsup_argv[i - 1], p->ready_file) == 0) {
			fprintf(f, " <command>");
			break;
		}
	}
	fputc('\n', f);
	return ferror(f) ? -EIO : 0;
}

/* ---------- readiness ---------- */

/* 1 when GET /readyz on addr ("127.0.0.1:PORT") answers 200, 0 otherwise. */
static int readyz(const char *addr, const char *path)
{
	char host[48];
	strscpy(host, addr, sizeof(host));
	char *colon = strrchr(host, ':');
	if (!colon)
		return 0;
	*colon = '\0';
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1)) };
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return 0;
	_cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	struct timeval tv = { .tv_sec = 0, .tv_usec = 300000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return 0;
	char req[128];
	int len = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: tether\r\n\r\n", path);
	if (len < 0 || send(fd, req, (size_t)len, MSG_NOSIGNAL) != len)
		return 0;
	char buf[64];
	size_t got = 0;
	while (got < 12) {
		ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
		if (r <= 0)
			return 0;
		got += (size_t)r;
	}
	buf[got] = '\0';
	return strncmp(buf, "HTTP/1.", 7) == 0 && strncmp(buf + 9, "200", 3) == 0;
}

int launcher_wait_ready_exec(const char *file, int timeout_ms, char *const *argv)
{
	unsigned long long deadline = mono_ms() + (unsigned long long)(timeout_ms > 0 ? timeout_ms : 15000);
	struct stat st;
	while (stat(file, &st) < 0) {
		if (mono_ms() > deadline) {
			fprintf(stderr, "tether: the proxy did not become ready in time\n");
			return 125;
		}
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	/* execvp would run a non-executable text file through /bin/sh
	 * (ENOEXEC fallback); search PATH ourselves and use execv. */
	int e = ENOENT;
	if (strchr(argv[0], '/')) {
		execv(argv[0], argv);
		e = errno;
	} else {
		const char *path = getenv("PATH");
		char buf[PATH_MAX];
		for (const char *s = path ? path : "/usr/bin:/bin"; *s;) {
			const char *colon = strchrnul(s, ':');
			int n = snprintf(buf, sizeof(buf), "%.*s/%s", (int)(colon - s), s, argv[0]);
			if (colon > s && n > 0 && (size_t)n < sizeof(buf)) {
				execv(buf, argv);
				if (errno != ENOENT && errno != ENOTDIR)
					e = errno; /* remember EACCES/ENOEXEC, keep looking */
			}
			s = *colon ? colon + 1 : colon;
		}
	}
	fprintf(stderr, "tether: cannot execute %s: %s\n", argv[0], strerror(e));
	return (e == ENOENT || e == ENOTDIR) ? 127 : 126;
}

/* ---------- the sandbox's PID 1 side ---------- */

/* The report socket carries one byte with one fd. */
static int recv_fd(int sock, int timeout_ms)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	int r = poll(&pfd, 1, timeout_ms);
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return -errno;
	char c;
	int fd;
	ssize_t n = fdpass_recv(sock, &c, 1, &fd, 0);
	if (n <= 0)
		return n == 0 ? -EPIPE : (int)n;
	return fd >= 0 ? fd : -EBADMSG;
}

static void __attribute__((noreturn)) child_die(const char *what)
{
	/* one line; the launcher reports the exit status */
	fprintf(stderr, "tether: sandbox setup: %s: %s\n", what, strerror(errno));
	_exit(125);
}

/* The sandbox's own mount view: receive the host's mounts, send none, and a
 * /proc for the new PID namespace (the net-supervisor reads pids from it). */
static void sandbox_mounts(void)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		child_die("cannot make / a slave mount");
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		child_die("cannot mount /proc for the sandbox PID namespace");
}

/* Inside the sandbox PID namespace. Never returns: forks the net-supervisor
 * (which stays in the outer netns), joins the workload netns and becomes
 * the proc-supervisor. combined: we are PID 1; vm-local: the runtime
 * init's child. */
static void __attribute__((noreturn)) sandbox_start(const char *netsup_path, char *const *netsup_argv,
						    const char *procsup_path, char *const *procsup_argv,
						    int wns_fd, int report_sock, const char *resolv)
{
	if (!netsup_path) {
		/* vm-delegated: the net-supervisor runs host-side */
		workload_resolv(resolv);
		close(report_sock);
		if (setns(wns_fd, CLONE_NEWNET) < 0)
			child_die("cannot join the workload netns");
		close(wns_fd);
		execv(procsup_path, procsup_argv);
		child_die("cannot execute proc-supervisor");
	}
	int gate[2];
	if (pipe2(gate, O_CLOEXEC) < 0)
		child_die("pipe");
	pid_t n = fork();
	if (n < 0)
		child_die("cannot fork the net-supervisor");
	if (n == 0) {
		/* N: wait until our parent has exec'd the proc-supervisor (its
		 * CLOEXEC write end closes), so the anchor it hashes is final. */
		close(gate[1]);
		char b;
		ssize_t r;
		do
			r = read(gate[0], &b, 1);
		while (r < 0 && errno == EINTR);
		close(gate[0]);
		close(wns_fd);
		close(report_sock);
		execv(netsup_path, netsup_argv);
		fprintf(stderr, "tether: cannot execute %s: %s\n", netsup_path, strerror(errno));
		_exit(125);
	}
	close(gate[0]);
	int nfd = sys_pidfd_open(n, 0);
	if (nfd < 0 || fdpass_send(report_sock, "N", 1, nfd, 0) != 1)
		child_die("cannot report the net-supervisor");
	close(nfd);
	close(report_sock);
	workload_resolv(resolv);
	if (setns(wns_fd, CLONE_NEWNET) < 0)
		child_die("cannot join the workload netns");
	close(wns_fd);
	execv(procsup_path, procsup_argv);
	child_die("cannot execute proc-supervisor");
}

/* vm-local: both daemons' argv travel to the stage behind the runtime init
 * in a memfd: a count line, then that many NUL-terminated strings, twice
 * (argv may hold empty strings, so no terminator convention). */
static int plan_memfd(const struct launch_plan *p)
{
	int fd = memfd_create("tether-plan", 0); /* inherited across the runtime init */
	if (fd < 0)
		return -errno;
	FILE *f = fdopen(dup(fd), "w");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	static const char *const none[] = { NULL };
	const char *resolv[] = { p->resolv_file, NULL };
	const char *const *vs[3] = { p->layout == LAYOUT_VM_HOST ? none : p->netsup_argv, p->procsup_argv,
				     p->resolv_file[0] ? resolv : none };
	for (int k = 0; k < 3; k++) {
		size_t n = 0;
		while (vs[k][n])
			n++;
		fprintf(f, "%zu\n", n);
		for (size_t i = 0; i < n; i++)
			fwrite(vs[k][i], 1, strlen(vs[k][i]) + 1, f);
	}
	if (fclose(f) != 0 || lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return -EIO;
	}
	return fd;
}

static char **read_argv(FILE *f)
{
	size_t n;
	if (fscanf(f, "%zu", &n) != 1 || fgetc(f) != '\n' || n > 4096)
		return NULL;
	char **v = calloc(n + 1, sizeof(char *));
	for (size_t i = 0; v && i < n; i++) {
		size_t cap = 0;
		if (getdelim(&v[i], &cap, '\0', f) < 0)
			return NULL; /* the process execs or exits right after */
	}
	return v;
}

int launcher_stage2(int wns_fd, int report_fd, int plan_fd)
{
	FILE *f = fdopen(plan_fd, "r");
	if (!f)
		return 125;
	char **nv = read_argv(f), **pv = read_argv(f), **rv = read_argv(f);
	fclose(f);
	if (!nv || !pv || !pv[0]) {
		fprintf(stderr, "tether: sandbox setup: malformed plan\n");
		return 125;
	}
	fcntl(wns_fd, F_SETFD, FD_CLOEXEC);
	fcntl(report_fd, F_SETFD, FD_CLOEXEC);
	sandbox_start(nv[0], nv, pv[0], pv, wns_fd, report_fd, rv ? rv[0] : NULL);
}

static int wait_child_exit(pid_t pid, int *wstatus, int timeout_ms)
{
	unsigned long long deadline = mono_ms() + (unsigned long long)timeout_ms;
	for (;;) {
		pid_t r = waitpid(pid, wstatus, WNOHANG);
		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (mono_ms() > deadline)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* The exit status of a process that is not our child (the net-supervisor
 * is the proc-supervisor's), via PIDFD_GET_INFO's exit info (kernel >=
 * 6.15, available once it is reaped). -ENODATA when unknown. */
static int pidfd_exit_status(int pidfd, int wait_ms)
{
	unsigned long long deadline = mono_ms() + (unsigned long long)wait_ms;
	for (;;) {
		struct tether_pidfd_info info = { .mask = TETHER_PIDFD_INFO_EXIT };
		if (ioctl(pidfd, TETHER_PIDFD_GET_INFO, &info) < 0 && errno != ESRCH)
			return -ENODATA;
		if (info.mask & TETHER_PIDFD_INFO_EXIT)
			return info.exit_code;
		if (mono_ms() > deadline)
			return -ENODATA;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* Remove "OPT VALUE" from a NULL-terminated argv, up to the first "--"
 * (what follows is the entrypoint's). */
static void argv_drop(const char **v, const char *opt)
{
	for (size_t i = 0; v[i] && strcmp(v[i], "--") != 0; i++) {
		if (strcmp(v[i], opt) != 0 || !v[i + 1])
			continue;
		size_t j = i;
		for (; v[j + 2]; j++)
			v[j] = v[j + 2];
		v[j] = NULL;
		return;
	}
}

static int mkdir_p_run(const char *dir, mode_t mode, struct topology_error *err)
{
	if (mkdir(RUN_DIR_BASE, 0711) < 0 && errno != EEXIST)
		return topology_error_errno(err, -errno, "cannot create %s", RUN_DIR_BASE);
	if (mkdir(dir, mode) < 0 || chmod(dir, mode) < 0) /* chmod: not the umask's */
		return topology_error_errno(err, -errno, "cannot create %s", dir);
	return 0;
}

static int describe_status(int ws, char *buf, size_t size)
{
	if (WIFEXITED(ws))
		return snprintf(buf, size, "exited with status %d", WEXITSTATUS(ws));
	if (WIFSIGNALED(ws))
		return snprintf(buf, size, "was killed by signal %d", WTERMSIG(ws));
	return snprintf(buf, size, "ended (status 0x%x)", ws);
}

/* Run a tether subcommand of ours (keygen, fence) to completion, quietly;
 * its stderr is ours so a failure explains itself. */
static int run_self(const char *const *argv, const char *what, struct topology_error *err)
{
	pid_t pid = fork();
	if (pid < 0)
		return topology_error_errno(err, -errno, "cannot fork for %s", what);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (null >= 0)
			dup2(null, STDOUT_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int ws;
	int r = wait_child_exit(pid, &ws, 10000);
	if (r < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return topology_error_errno(err, r, "%s did not finish", what);
	}
	if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
		char d[64];
		describe_status(ws, d, sizeof(d));
		return topology_error_set(err, -EIO, "%s %s (see its message above)", what, d);
	}
	return 0;
}

/* clone3 with CLONE_PIDFD and flags (namespaces): like fork, the child
 * returns 0; the parent the pid, or -errno; *pidfd is the child's pidfd
 * (-1 on failure). */
static pid_t clone_pidfd(unsigned long flags, int *pidfd)
{
	*pidfd = -1;
	struct tether_clone_args ca = { .flags = flags | CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)pidfd,
					.exit_signal = SIGCHLD };
	pid_t pid = sys_clone3(&ca, sizeof(ca));
	return pid < 0 ? -errno : pid;
}

/* A daemon the launcher starts itself (not from inside a sandbox init):
 * flags CLONE_NEWPID|CLONE_NEWNS makes it PID 1 of its own namespace
 * (split); CLONE_NEWNS alone, after the launcher entered a PID namespace
 * for its children, a container in a shared pod namespace (shared-pid);
 * 0 a plain host-side process (vm-delegated). With CLONE_NEWNS it mounts
 * the /proc of the PID namespace it is in. netns_fd >= 0: joined first. */
static pid_t start_daemon(unsigned long flags, int netns_fd, const char *path, const char *const *argv,
			  const sigset_t *oldmask, int *pidfd, const char *resolv)
{
	pid_t pid = clone_pidfd(flags, pidfd);
	if (pid != 0)
		return pid;
	sigprocmask(SIG_SETMASK, oldmask, NULL);
	if (flags & CLONE_NEWNS)
		sandbox_mounts();
	workload_resolv(resolv);
	if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) < 0)
		child_die("cannot join the workload netns");
	execv(path, (char *const *)argv);
	fprintf(stderr, "tether: cannot execute %s: %s\n", path, strerror(errno));
	_exit(125);
}

/* The pod's pause process (PID 1 of the shared PID namespace, as the
 * Kubernetes pause container is with shareProcessNamespace): reaps what is
 * reparented to it and exits on SIGTERM/SIGINT. PID 1 only receives
 * signals it has a handler for, hence the handlers. */
static void pause_on_signal(int sig)
{
	if (sig != SIGCHLD)
		_exit(0);
}

static _Noreturn void pause_main(void)
{
	close_range(3, ~0U, 0);
	struct sigaction sa = { .sa_handler = pause_on_signal, .sa_flags = SA_NOCLDSTOP };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	sigset_t block, none;
	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &block, NULL);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		sigsuspend(&none);
	}
}

/* Stop a daemon the launcher started (SIGTERM, then SIGKILL after
 * grace_ms) and reap it. */
static void stop_child(pid_t pid, int pidfd, int grace_ms)
{
	int ws;
	if (pid <= 0)
		return;
	sys_pidfd_send_signal(pidfd, SIGTERM, NULL, 0);
	if (wait_child_exit(pid, &ws, grace_ms) == 0)
		return;
	sys_pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
	wait_child_exit(pid, &ws, 3000);
}

static int ip_of(const char *cidr, char *out, size_t size)
{
	size_t len = strcspn(cidr, "/");
	if (len >= size)
		return -ENAMETOOLONG;
	memcpy(out, cidr, len);
	out[len] = '\0';
	return 0;
}

/* Append "OPT VALUE" at the end (the first NULL) of a fence command line
 * that keeps a NULL after it. */
static void fence_opt(const char **v, size_t n, const char *opt, const char *value)
{
	size_t i = 0;
	while (i < n && v[i])
		i++;
	if (i + 2 < n) {
		v[i] = opt;
		v[i + 1] = value;
	}
}

static void fence_dns_port(const char **v, size_t n) { fence_opt(v, n, "--dns-port", "53"); }

/* The network side of the run: the workload (or pod) netns, the veth, its
 * addresses, and for a pod netns its default route and the nftables fence. */
static int build_network(const struct launch_plan *plan, struct cleanup_guardian *g, struct netns *wns,
			 struct topology_error *err)
{
	int r = netns_create(plan->netns_name, wns, err);
	if (r < 0)
		return r;
	r = cleanup_guardian_add(g, CLEANUP_NETNS, plan->netns_name, -1, NULL);
	if (r < 0)
		return topology_error_errno(err, r, "cannot register netns %s", plan->netns_name);
	r = netns_veth_create(-1, plan->veth_outer, wns->fd, plan->veth_inner, err);
	if (r < 0)
		return r;
	r = cleanup_guardian_add(g, CLEANUP_LINK, plan->veth_outer, -1, NULL);
	if (r < 0)
		return topology_error_errno(err, r, "cannot register link %s", plan->veth_outer);
	if ((r = netns_addr_add(-1, plan->veth_outer, plan->addr_outer, err)) < 0 ||
	    (r = netns_addr_add(wns->fd, plan->veth_inner, plan->addr_inner, err)) < 0 ||
	    (r = netns_link_up(-1, plan->veth_outer, err)) < 0 ||
	    (r = netns_link_up(wns->fd, plan->veth_inner, err)) < 0)
		return r;
	if (plan->ipv6 && ((r = netns_addr_add(-1, plan->veth_outer, plan->addr6_outer, err)) < 0 ||
			   (r = netns_addr_add(wns->fd, plan->veth_inner, plan->addr6_inner, err)) < 0))
		return r;
	char port[16], tport[16];
	snprintf(port, sizeof(port), "%d", PROXY_PORT);
	snprintf(tport, sizeof(tport), "%d", TRANSPARENT_PORT);
	if (!plan->pod) {
		/* Deliberately no default route: the on-link /30 (and /64) to the
		 * proxy is all. The proxy's end of the veth sits in our netns,
		 * beside whatever else listens here: the veth fence (in this
		 * netns, which a workload root in its own cannot touch) admits
		 * the proxy's port on the proxy's addresses and refuses the rest.
		 * Registered first, so a crash half-way still removes it. */
		char spec[64], a4[32], a6[48] = "";
		snprintf(spec, sizeof(spec), "inet tether_fence_%s", plan->veth_outer);
		r = cleanup_guardian_add(g, CLEANUP_NFT_TABLE, spec, -1, NULL);
		if (r < 0)
			return topology_error_errno(err, r, "cannot register nftables table %s", spec);
		if ((r = ip_of(plan->addr_outer, a4, sizeof(a4))) < 0 ||
		    (plan->ipv6 && (r = ip_of(plan->addr6_outer, a6, sizeof(a6))) < 0))
			return topology_error_errno(err, r, "bad veth address");
		const char *vf[] = { plan->self_path, "fence", "install", "--veth", plan->veth_outer,
				     "--allow-port", port, "--addr", a4, a6[0] ? "--addr" : NULL, a6, NULL, NULL, NULL,
				     NULL, NULL, NULL };
		if (plan->dns_listen[0])
			fence_dns_port(vf, ARRAY_SIZE(vf));
		if (plan->transparent_listen[0]) {
			/* capture: a default route to the proxy's end, where the
			 * fence DNATs TCP to the capture and refuses the rest */
			if ((r = netns_route_add(wns->fd, "default", a4, plan->veth_inner, err)) < 0 ||
			    (a6[0] && (r = netns_route_add(wns->fd, "::/0", a6, plan->veth_inner, err)) < 0))
				return r;
			fence_opt(vf, ARRAY_SIZE(vf), "--transparent-port", tport);
		}
		return run_self(vf, "tether fence install --veth", err);
	}
	/* A pod netns routes out like a real pod's; the fence, not the
	 * routing table, is what keeps the workload in. Installed before any
	 * process of ours is in the netns. */
	char gw[32];
	if ((r = ip_of(plan->addr_outer, gw, sizeof(gw))) < 0 ||
	    (r = netns_route_add(wns->fd, "default", gw, plan->veth_inner, err)) < 0)
		return r;
	if (plan->ipv6) {
		char gw6[48];
		if ((r = ip_of(plan->addr6_outer, gw6, sizeof(gw6))) < 0 ||
		    (r = netns_route_add(wns->fd, "::/0", gw6, plan->veth_inner, err)) < 0)
			return r;
	}
	const char *fence[] = { plan->self_path, "fence", "install", "--netns", plan->netns_name,
				"--proxy-uid", "0", "--allow-port", port, NULL, NULL, NULL, NULL, NULL };
	if (plan->dns_listen[0])
		fence_dns_port(fence, ARRAY_SIZE(fence));
	if (plan->transparent_listen[0])
		fence_opt(fence, ARRAY_SIZE(fence), "--transparent-port", tport);
	return run_self(fence, "tether fence install", err);
}

/* ---------- one run: prepare, start_<layout>, supervise, finish ---------- */

/* Everything a run holds. launcher_run ends every path with run_finish(),
 * which stops what still runs and takes the guardian's verdict;
 * run_release() (the cleanup attribute on the run) then closes and frees
 * what is left. */
struct run {
	const struct launch_config *cfg;
	struct launch_plan plan;
	struct cleanup_guardian g;
	struct netns wns;
	int sp[2];              /* report socket: the sandbox's init sends N's pidfd */
	int pfd, nfd, sfd, xfd; /* pidfds of P (or the VM's init), N, the pause; the signalfd */
	pid_t ppid, npid, xpid; /* P, N when ours, the pause */
	bool reaped;            /* P waited for; ws is its status */
	int ws;
	sigset_t oldmask;
	bool masked;
	bool vm;
};
#define RUN_INIT                                                                                      \
	{ .plan = { .slot_fd = -1 }, .g = CLEANUP_GUARDIAN_INIT, .wns = NETNS_INIT, .sp = { -1, -1 },  \
	  .pfd = -1, .nfd = -1, .sfd = -1, .xfd = -1, .ppid = -1, .npid = -1, .xpid = -1 }

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Stop whatever of ours still runs, then let the guardian remove the rest.
 * Returns r, or the cleanup's error when the run itself went well. */
static int run_finish(struct run *run, int r, struct topology_error *err)
{
	if (run->ppid > 0 && !run->reaped) {
		/* the PID namespace dies with its init; the guardian kills it too */
		if (run->pfd >= 0)
			sys_pidfd_send_signal(run->pfd, SIGKILL, NULL, 0);
		wait_child_exit(run->ppid, &run->ws, 3000);
		run->reaped = true;
	}
	/* a net-supervisor of ours outlives the sandbox unless stopped */
	stop_child(run->npid, run->nfd, 3000);
	run->npid = -1;
	if (run->xpid > 0) {
		int ws;
		sys_pidfd_send_signal(run->xfd, SIGKILL, NULL, 0);
		wait_child_exit(run->xpid, &ws, 3000);
		run->xpid = -1;
	}
	if (run->g.pid > 0) {
		struct topology_error cerr = { 0 };
		int cr = cleanup_guardian_finish(&run->g, 5000, &cerr);
		if (cr < 0 && r >= 0)
			r = topology_error_set(err, cr, "cleanup: %s", cerr.msg);
		else if (cr < 0)
			log_warn("cleanup: %s", cerr.msg);
	}
	return r;
}

static void run_release(struct run *run)
{
	close_fd(&run->pfd);
	close_fd(&run->nfd);
	close_fd(&run->xfd);
	close_fd(&run->sfd);
	close_fd(&run->sp[0]);
	close_fd(&run->sp[1]);
	netns_close(&run->wns);
	if (run->masked)
		sigprocmask(SIG_SETMASK, &run->oldmask, NULL);
	launch_plan_done(&run->plan);
}

/* Everything before the first daemon: the plan (with a reserved /30), the
 * guardian, the run directory, the cgroup, the network, the run's keys, and
 * the signals we forward taken through a signalfd. */
static int run_prepare(struct run *run, struct topology_error *err)
{
	struct launch_plan *plan = &run->plan;
	struct launch_config rcfg = *run->cfg;
	rcfg.reserve_slot = true;
	int r = launch_plan_resolve(&rcfg, plan, err);
	if (r >= 0 && plan->unsupported[0])
		r = topology_error_set(err, -EOPNOTSUPP, "%s", plan->unsupported);
	if (r >= 0 && run->cfg->no_network_policy && run->cfg->missing_policy)
		r = topology_error_set(err, -ENOENT, "%s", run->cfg->missing_policy);
	if (r < 0)
		return r;
	run->vm = plan->runtime_init_path[0] != '\0';
	/* The guardian first: before any thread (netns helpers) and before
	 * anything exists that it must remove. */
	r = cleanup_guardian_start(&run->g, err);
	if (r < 0)
		return r;

	/* another uid's workload must be able to see the ready file */
	r = mkdir_p_run(plan->run_dir, plan->user[0] ? 0711 : 0700, err);
	if (r < 0)
		return r;
	r = cleanup_guardian_add(&run->g, CLEANUP_TEMP_DIR, plan->run_dir, -1, NULL);
	if (r < 0)
		return topology_error_errno(err, r, "cannot register %s with the cleanup guardian", plan->run_dir);
	if (plan->resolv_file[0] && (r = write_resolv(plan)) < 0)
		return topology_error_errno(err, r, "cannot write %s", plan->resolv_file);

	const char *forced = getenv("TETHER_FORCE_FALLBACK");
	if (!plan->cgroup_parent[0] && !(forced && strstr(forced, "cgroup")))
		/* weaker than the topology promises: say why and how to avoid it */
		log_warn("no cgroup v2 hierarchy at /sys/fs/cgroup in this mount namespace (`ip netns exec` "
			 "mounts a /sys of its own without it): membership falls back to lineage; run tether "
			 "under `nsenter --net=/run/netns/NAME` instead (docs/topologies.md)");
	if (plan->cgroup_parent[0]) {
		if (mkdir(plan->cgroup_parent, 0755) < 0) {
			/* not fatal: the proc-supervisor falls back to lineage */
			log_warn("cannot create cgroup %s: %m; running without --cgroup", plan->cgroup_parent);
			plan->cgroup_parent[0] = '\0';
			plan->sandbox_cgroup[0] = '\0';
			argv_drop(plan->procsup_argv, "--cgroup");
			argv_drop(plan->netsup_argv, "--sandbox-cgroup");
		} else {
			r = cleanup_guardian_add(&run->g, CLEANUP_CGROUP, plan->cgroup_parent, -1, NULL);
			if (r < 0)
				return topology_error_errno(err, r, "cannot register cgroup %s", plan->cgroup_parent);
		}
	}

	r = build_network(plan, &run->g, &run->wns, err);
	if (r < 0)
		return r;
	if (plan->key_dir[0]) {
		/* a provisioning key pair for this run only: the proc-supervisor
		 * signs its certificate with it, the net-supervisor pins it */
		const char *kg[] = { plan->self_path, "keygen", "--out", plan->key_dir, NULL };
		r = run_self(kg, "tether keygen", err);
		if (r < 0)
			return r;
	}

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, run->sp) < 0)
		return topology_error_errno(err, -errno, "socketpair");
	/* Signals we forward are taken through a signalfd; block them before
	 * the clone so none is lost, and unblock in the child before exec. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGQUIT);
	sigaddset(&mask, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &mask, &run->oldmask) < 0)
		return topology_error_errno(err, -errno, "sigprocmask");
	run->masked = true;
	run->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (run->sfd < 0)
		return topology_error_errno(err, -errno, "signalfd");
	fflush(NULL);
	return 0;
}

/* P runs: it no longer needs our end of the report socket, and the
 * guardian kills it if we die. */
static int procsup_started(struct run *run, struct topology_error *err)
{
	if (run->ppid < 0)
		return topology_error_errno(err, run->ppid, "cannot start the proc-supervisor");
	close_fd(&run->sp[1]);
	int r = cleanup_guardian_add(&run->g, CLEANUP_PID, NULL, run->pfd, NULL);
	if (r < 0)
		return topology_error_errno(err, r, "cannot register the proc-supervisor");
	return 0;
}

static int netsup_started(struct run *run, struct topology_error *err)
{
	int r = cleanup_guardian_add(&run->g, CLEANUP_PID, NULL, run->nfd, NULL);
	if (r < 0)
		return topology_error_errno(err, r, "cannot register the net-supervisor");
	return 0;
}

/* The sandbox's init: PID 1 of a new PID namespace, P itself (combined,
 * vm-delegated's guest) or the runtime init whose CMD is our stage 2
 * (vm-local). */
static int start_sandbox_init(struct run *run, struct topology_error *err)
{
	const struct launch_plan *plan = &run->plan;
	run->ppid = clone_pidfd(CLONE_NEWPID | CLONE_NEWNS, &run->pfd);
	if (run->ppid < 0)
		return topology_error_errno(err, run->ppid, "cannot create the sandbox PID namespace");
	if (run->ppid > 0)
		return procsup_started(run, err);
	sigprocmask(SIG_SETMASK, &run->oldmask, NULL);
	close(run->sp[0]);
	sandbox_mounts();
	if (run->vm) {
		/* PID 1 is the runtime init stand-in (a binary that is not
		 * ours, never inspected); its CMD is our stage 2, which does
		 * what combined's PID 1 does. */
		int mfd = plan_memfd(plan);
		if (mfd < 0)
			child_die("cannot write the plan");
		fcntl(run->wns.fd, F_SETFD, 0);
		fcntl(run->sp[1], F_SETFD, 0);
		char fds[64];
		snprintf(fds, sizeof(fds), "%d,%d,%d", run->wns.fd, run->sp[1], mfd);
		execl(plan->runtime_init_path, plan->runtime_init_path, "--", plan->self_path, "run",
		      "--internal-stage2", fds, "--", "-", (char *)NULL);
		child_die("cannot execute tether-runtime-init");
	}
	sandbox_start(plan->netsup_path, (char *const *)plan->netsup_argv, plan->procsup_path,
		      (char *const *)plan->procsup_argv, run->wns.fd, run->sp[1], plan->resolv_file);
}

/* combined, vm-local: N is P's child inside the sandbox; its pidfd comes
 * back on the report socket. */
static int start_sandbox(struct run *run, struct topology_error *err)
{
	int r = start_sandbox_init(run, err);
	if (r < 0)
		return r;
	run->nfd = recv_fd(run->sp[0], 5000);
	if (run->nfd < 0)
		return topology_error_errno(err, run->nfd, "the sandbox did not report its net-supervisor");
	return netsup_started(run, err);
}

/* vm-delegated: the guest without N; N host-side, in our namespaces. */
static int start_vm_host(struct run *run, struct topology_error *err)
{
	int r = start_sandbox_init(run, err);
	if (r < 0)
		return r;
	run->npid = start_daemon(0, -1, run->plan.netsup_path, run->plan.netsup_argv, &run->oldmask, &run->nfd, NULL);
	if (run->npid < 0)
		return topology_error_errno(err, run->npid, "cannot start the net-supervisor");
	return netsup_started(run, err);
}

/* shared-pid: a pause process is PID 1; P and N start into its PID
 * namespace as siblings, as a container runtime starts containers there. */
static int start_pause(struct run *run, struct topology_error *err)
{
	const struct launch_plan *plan = &run->plan;
	run->xpid = clone_pidfd(CLONE_NEWPID | CLONE_NEWNS, &run->xfd);
	if (run->xpid < 0)
		return topology_error_errno(err, run->xpid, "cannot create the pod PID namespace");
	if (run->xpid == 0) {
		sandbox_mounts();
		pause_main();
	}
	int r = cleanup_guardian_add(&run->g, CLEANUP_PID, NULL, run->xfd, NULL);
	if (r < 0)
		return topology_error_errno(err, r, "cannot register the pause process");
	/* Both daemons into the pod's PID namespace: our children only
	 * (setns on a PID namespace never moves the caller), then back. The
	 * proc-supervisor first: it is pid 2, which --sandbox-cgroup names. */
	_cleanup_close_ int own_pidns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
	if (own_pidns < 0 || setns(run->xfd, CLONE_NEWPID) < 0)
		return topology_error_errno(err, -errno, "cannot enter the pod PID namespace");
	run->ppid = start_daemon(CLONE_NEWNS, run->wns.fd, plan->procsup_path, plan->procsup_argv, &run->oldmask,
				 &run->pfd, plan->resolv_file);
	if (run->ppid > 0)
		run->npid = start_daemon(CLONE_NEWNS, -1, plan->netsup_path, plan->netsup_argv, &run->oldmask,
					 &run->nfd, NULL);
	if (setns(own_pidns, CLONE_NEWPID) < 0)
		return topology_error_errno(err, -errno, "cannot return to our own PID namespace");
	r = procsup_started(run, err);
	if (r < 0)
		return r;
	if (run->npid < 0)
		return topology_error_errno(err, run->npid, "cannot start the net-supervisor");
	return netsup_started(run, err);
}

/* split-*: P and N each PID 1 of their own PID namespace. */
static int start_split(struct run *run, struct topology_error *err)
{
	const struct launch_plan *plan = &run->plan;
	run->ppid = start_daemon(CLONE_NEWPID | CLONE_NEWNS, run->wns.fd, plan->procsup_path, plan->procsup_argv,
				 &run->oldmask, &run->pfd, plan->resolv_file);
	int r = procsup_started(run, err);
	if (r < 0)
		return r;
	run->npid = start_daemon(CLONE_NEWPID | CLONE_NEWNS, -1, plan->netsup_path, plan->netsup_argv,
				 &run->oldmask, &run->nfd, NULL);
	if (run->npid < 0)
		return topology_error_errno(err, run->npid, "cannot start the net-supervisor");
	return netsup_started(run, err);
}

/* N ended while we watch: an error saying how, unless it was the orderly
 * end of a sandbox whose P then exits (returns 1: P reaped, the run is
 * over). */
static int netsup_ended(struct run *run, bool ready, struct topology_error *err)
{
	int ns = -ENODATA;
	bool orderly = false;
	if (run->npid > 0) {
		/* ours: it never stops before we ask it to */
		int nws;
		if (wait_child_exit(run->npid, &nws, 500) == 0) {
			ns = nws;
			run->npid = -1;
		}
	} else {
		/* The proc-supervisor stops its children (us included) when the
		 * entrypoint is done: an orderly exit (0, or SIGTERM) is that,
		 * and its own exit follows. Anything else is a crash: the
		 * sandbox goes down, 125. */
		ns = pidfd_exit_status(run->nfd, 500);
		orderly = ns == -ENODATA || (ns >= 0 && ((WIFEXITED(ns) && WEXITSTATUS(ns) == 0) ||
							 (WIFSIGNALED(ns) && WTERMSIG(ns) == SIGTERM)));
		struct pollfd pp = { .fd = run->pfd, .events = POLLIN };
		if (ready && poll(&pp, 1, orderly ? 5000 : 0) == 1 && wait_child_exit(run->ppid, &run->ws, 5000) == 0) {
			run->reaped = true;
			return 1;
		}
	}
	char d[64] = "";
	if (ns >= 0)
		describe_status(ns, d, sizeof(d));
	return topology_error_set(err, -ECHILD, "net-supervisor %s%s (see its message above)",
				  ns >= 0 ? d : "exited unexpectedly", ready ? "" : " before it was ready");
}

/* Wait for readiness, open the gate (the ready file), then watch both
 * daemons and forward signals to P until P exits. *status: the
 * entrypoint's, as P reports it. */
static int supervise(struct run *run, int *status, struct topology_error *err)
{
	const struct launch_config *cfg = run->cfg;
	const struct launch_plan *plan = &run->plan;
	int timeout_ms = cfg->ready_timeout_ms > 0 ? cfg->ready_timeout_ms : 10000;
	unsigned long long deadline = mono_ms() + (unsigned long long)timeout_ms;
	bool ready = false;
	for (;;) {
		struct pollfd fds[3] = {
			{ .fd = run->pfd, .events = POLLIN },
			{ .fd = run->nfd, .events = POLLIN },
			{ .fd = run->sfd, .events = POLLIN },
		};
		int pr = poll(fds, 3, ready ? -1 : 20);
		if (pr < 0 && errno != EINTR)
			return topology_error_errno(err, -errno, "poll");
		if (fds[2].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(run->sfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo != SIGCHLD)
					sys_pidfd_send_signal(run->pfd, (int)si.ssi_signo, NULL, 0);
			}
		}
		if (fds[0].revents & POLLIN) {
			if (wait_child_exit(run->ppid, &run->ws, 5000) == 0)
				run->reaped = true;
			break;
		}
		if (fds[1].revents & POLLIN) {
			int r = netsup_ended(run, ready, err);
			if (r < 0)
				return r;
			break;
		}
		if (!ready) {
			if (readyz(plan->admin, cfg->no_network_policy ? "/healthz" : "/readyz")) {
				_cleanup_close_ int fd = open(plan->ready_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
				if (fd < 0)
					return topology_error_errno(err, -errno, "cannot create %s", plan->ready_file);
				ready = true;
			} else if (mono_ms() > deadline) {
				return topology_error_set(err, -ETIMEDOUT,
							  "net-supervisor not ready within %d ms (no policy or no anchor; see /readyz on %s)",
							  timeout_ms, plan->admin);
			}
		}
	}
	if (!run->reaped)
		return topology_error_set(err, -ECHILD, "proc-supervisor did not exit cleanly");
	if (WIFSIGNALED(run->ws)) {
		char d[64];
		describe_status(run->ws, d, sizeof(d));
		return topology_error_set(err, -ECHILD, "%s %s", run->vm ? "the VM's runtime init" : "proc-supervisor", d);
	}
	*status = WEXITSTATUS(run->ws);
	return 0;
}

/* `tether connect %h %p` (ssh's ProxyCommand, docs/quickstart.md) must
 * work inside the sandbox: when no `tether` is on our PATH, the directory
 * of this tether goes at its end. The workload's PATH is built from ours
 * by the env boundary, which still checks every entry. */
static void path_with_tether(const char *self)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];
	for (const char *s = path ? path : ""; *s;) {
		const char *colon = strchrnul(s, ':');
		int n = snprintf(buf, sizeof(buf), "%.*s/tether", (int)(colon - s), s);
		if (colon > s && n > 0 && (size_t)n < sizeof(buf) && access(buf, X_OK) == 0)
			return;
		s = *colon ? colon + 1 : colon;
	}
	const char *slash = strrchr(self, '/');
	if (!slash || slash == self)
		return;
	char *np = strdup_printf("%s%s%.*s", path && *path ? path : "", path && *path ? ":" : "",
				 (int)(slash - self), self);
	if (np)
		setenv("PATH", np, 1);
	free(np);
}

int launcher_run(const struct launch_config *cfg, int *status, struct topology_error *err)
{
	static int (*const start[])(struct run *, struct topology_error *) = {
		[LAYOUT_SANDBOX] = start_sandbox,
		[LAYOUT_PAUSE] = start_pause,
		[LAYOUT_SPLIT] = start_split,
		[LAYOUT_VM_HOST] = start_vm_host,
	};
	_cleanup_(run_release) struct run run = RUN_INIT;
	run.cfg = cfg;
	int r = run_prepare(&run, err);
	if (r >= 0)
		path_with_tether(run.plan.self_path);
	if (r >= 0)
		r = start[run.plan.layout](&run, err);
	if (r >= 0)
		r = supervise(&run, status, err);
	return run_finish(&run, r, err);
}
