#include "proc-supervisor/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "identity/exe.h"

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif
#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

struct listener {
	uv_poll_t poll;
	int fd;
	struct notifier *n;
	struct listener *next, **pprev;
};

/* One calling thread as the fast path knows it. Owned by the cache (or
 * the scratch slot when there is no room). */
struct caller {
	pid_t tid;     /* 0: free */
	pid_t tgid;
	int pidfd;     /* the thread group: key, ref, getfd */
	int tpidfd;    /* the thread, when it is not the leader (its fd table may differ); -1 */
	int lfd;       /* listener it came through (dropped when that tree is gone) */
	size_t slot;   /* index in the cache; SIZE_MAX for the scratch slot */
	uint64_t ino;  /* pidfs inode of pidfd */
	uint64_t used; /* LRU stamp */
	bool complete; /* ref is a completed ProcessRef (else only key/pid/exe) */
	struct procref ref; /* recorded (pidfd -1); ref.exe: the image at the last connect */
	char exe_link[32];  /* "/proc/<tid>/exe" */
};

struct notifier {
	uv_loop_t *loop;
	const struct kernel_caps *caps;
	struct notifier_ops ops;
	struct notifier_stats stats;
	struct seccomp_notif *req; /* sized for the running kernel */
	struct seccomp_notif_resp *resp;
	size_t req_size, resp_size;
	struct listener *listeners;
	bool fast; /* pidfs keys and our own /proc: cache callers, defer ref completion */
	bool closing;
	unsigned pending_close; /* uv_close issued, callback not yet run */
	struct caller **cache;  /* cache_cap slots, entries allocated on first use */
	pid_t *cache_tid;       /* cache[i]->tid, scanned without touching the entries */
	size_t cache_cap;
	uint64_t clock;
	struct caller scratch;  /* a caller that could not be cached */
	struct sockaddr_storage allowed[NOTIFIER_ALLOWED_MAX]; /* bypass reports: the proxy, DNS */
	size_t n_allowed;
};

int notifier_identify_default(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out)
{
	int r = procref_from_pidfd_ex(caps, pidfd, PROCREF_NO_EXE, out);
	if (r < 0)
		return r;
	/* Without an image: identity only (a kernel thread cannot connect). */
	out->exe_err = exe_capture_pid(out->procfs_pid > 0 ? out->procfs_pid : out->pid, EXE_CAPTURE_CHEAP, &out->exe);
	return 0;
}

/* ---- the caller cache ---- */

static void caller_init(struct caller *c, size_t slot)
{
	memset(c, 0, sizeof(*c));
	c->pidfd = c->tpidfd = c->lfd = -1;
	c->ref.pidfd = -1;
	c->slot = slot;
}

static void caller_set_tid(struct notifier *n, struct caller *c, pid_t tid)
{
	c->tid = tid;
	if (c->slot != SIZE_MAX)
		n->cache_tid[c->slot] = tid;
}

static void caller_reset(struct notifier *n, struct caller *c)
{
	if (c->pidfd >= 0)
		close(c->pidfd);
	if (c->tpidfd >= 0)
		close(c->tpidfd);
	c->pidfd = c->tpidfd = -1;
	caller_set_tid(n, c, 0);
	c->complete = false;
}

static struct caller *cache_find(struct notifier *n, pid_t tid)
{
	for (size_t i = 0; i < n->cache_cap; i++)
		if (n->cache_tid[i] == tid)
			return n->cache[i];
	return NULL;
}

/* A slot for a new caller: a free one, else the least recently used;
 * NULL when there is no cache (or no memory). */
static struct caller *cache_slot(struct notifier *n)
{
	struct caller *lru = NULL;
	for (size_t i = 0; i < n->cache_cap; i++) {
		if (!n->cache[i]) {
			n->cache[i] = malloc(sizeof(struct caller));
			if (!n->cache[i])
				break;
			caller_init(n->cache[i], i);
			return n->cache[i];
		}
		if (n->cache[i]->tid == 0)
			return n->cache[i];
		if (!lru || n->cache[i]->used < lru->used)
			lru = n->cache[i];
	}
	if (lru)
		caller_reset(n, lru);
	return lru;
}

/* After CONTINUE: keep the new caller opened in the scratch slot (its fds
 * move along). Allocation and eviction happen here, not while the caller
 * is blocked. */
static void cache_adopt(struct notifier *n)
{
	struct caller *c = cache_slot(n);
	if (!c) {
		caller_reset(n, &n->scratch);
		return;
	}
	size_t slot = c->slot;
	memcpy(c, &n->scratch, sizeof(*c));
	c->slot = slot;
	caller_set_tid(n, c, n->scratch.tid);
	caller_init(&n->scratch, SIZE_MAX); /* fds now c's */
}

static void cache_drop_listener(struct notifier *n, int lfd)
{
	for (size_t i = 0; i < n->cache_cap; i++)
		if (n->cache_tid[i] && n->cache[i]->lfd == lfd)
			caller_reset(n, n->cache[i]);
}

int notifier_set_cache(struct notifier *n, size_t entries)
{
	if (entries > NOTIFIER_CACHE_MAX)
		return -EINVAL;
	for (size_t i = entries; i < n->cache_cap; i++) {
		if (n->cache[i]) {
			caller_reset(n, n->cache[i]);
			free(n->cache[i]);
			n->cache[i] = NULL;
		}
	}
	if (entries == 0) {
		free(n->cache);
		free(n->cache_tid);
		n->cache = NULL;
		n->cache_tid = NULL;
		n->cache_cap = 0;
		return 0;
	}
	if (entries < n->cache_cap) {
		n->cache_cap = entries; /* the arrays stay as large as they were */
		return 0;
	}
	struct caller **c = calloc(entries, sizeof(*c));
	pid_t *t = calloc(entries, sizeof(*t));
	if (!c || !t) {
		free(c);
		free(t);
		return -ENOMEM;
	}
	if (n->cache_cap) {
		memcpy(c, n->cache, n->cache_cap * sizeof(*c));
		memcpy(t, n->cache_tid, n->cache_cap * sizeof(*t));
	}
	free(n->cache);
	free(n->cache_tid);
	n->cache = c;
	n->cache_tid = t;
	n->cache_cap = entries;
	return 0;
}

static void notifier_free(struct notifier *n)
{
	notifier_set_cache(n, 0);
	caller_reset(n, &n->scratch);
	free(n->req);
	free(n->resp);
	free(n);
}

int notifier_new(uv_loop_t *loop, const struct kernel_caps *caps, const struct notifier_ops *ops,
		 struct notifier **out)
{
	struct seccomp_notif_sizes sz = { 0 };
	if (syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0)
		return -errno;
	struct notifier *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	caller_init(&n->scratch, SIZE_MAX);
	/* The kernel may know a larger struct than our headers do. */
	n->req_size = sz.seccomp_notif > sizeof(*n->req) ? sz.seccomp_notif : sizeof(*n->req);
	n->resp_size = sz.seccomp_notif_resp > sizeof(*n->resp) ? sz.seccomp_notif_resp : sizeof(*n->resp);
	n->req = calloc(1, n->req_size);
	n->resp = calloc(1, n->resp_size);
	if (!n->req || !n->resp || notifier_set_cache(n, NOTIFIER_CACHE_DEFAULT) < 0) {
		notifier_free(n);
		return -ENOMEM;
	}
	n->loop = loop;
	n->caps = caps;
	/* /proc/<tid> names the caller only if /proc is our pid namespace's. */
	char self[32];
	ssize_t sl = readlink("/proc/self", self, sizeof(self) - 1);
	if (sl > 0) {
		self[sl] = '\0';
		n->fast = caps->pidfs_ino && atoi(self) == getpid();
	}
	n->ops = *ops;
	*out = n;
	return 0;
}

const struct notifier_stats *notifier_stats(const struct notifier *n)
{
	return &n->stats;
}

static void listener_closed(uv_handle_t *h)
{
	struct listener *l = h->data;
	struct notifier *n = l->n;
	close(l->fd);
	free(l);
	n->stats.listeners--;
	if (--n->pending_close == 0 && n->closing && !n->listeners)
		notifier_free(n);
}

static void listener_stop(struct listener *l)
{
	*l->pprev = l->next;
	if (l->next)
		l->next->pprev = l->pprev;
	/* Its tree is gone: so are the callers that came through it (and the
	 * fd number is still ours, so no new listener can share the tag). */
	cache_drop_listener(l->n, l->fd);
	uv_poll_stop(&l->poll);
	l->n->pending_close++;
	uv_close((uv_handle_t *)&l->poll, listener_closed);
}

/* The thread group of a notifying thread: notif.pid is a thread id. While
 * that thread is blocked in the notification its group leader's pid stays
 * reserved, so the tgid read here names the same process. */
static pid_t tgid_of(pid_t tid)
{
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	if (read_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
		return -1;
	const char *p = strstr(buf, "\nTgid:");
	if (!p)
		return -1;
	long v = strtol(p + 6, NULL, 10);
	return v > 0 && v <= INT32_MAX ? (pid_t)v : -1;
}

/* pidfds for the calling thread tid: its group, plus the thread itself
 * when it is not the leader. -errno (-ESRCH: gone). */
static int open_caller(pid_t tid, int *pidfd, int *tpidfd, pid_t *tgid)
{
	*tgid = tid;
	*tpidfd = -1;
	*pidfd = sys_pidfd_open(tid, 0);
	if (*pidfd == -EINVAL || *pidfd == -ENOENT) { /* not a group leader (6.9+: ENOENT) */
		*tgid = tgid_of(tid);
		*pidfd = *tgid > 0 ? sys_pidfd_open(*tgid, 0) : -ESRCH;
		/* The socket lives in the calling thread's fd table, which can
		 * differ from the leader's after unshare(CLONE_FILES). */
		*tpidfd = sys_pidfd_open(tid, PIDFD_THREAD);
		/* EINVAL: a kernel without PIDFD_THREAD (< 6.9), where only the
		 * leader's table can be read (same process, same exe). Any other
		 * failure (no fds left, the thread gone) must not quietly read
		 * the leader's table instead: that could be another socket. */
		if (*tpidfd < 0 && *tpidfd != -EINVAL && *pidfd >= 0) {
			int r = *tpidfd;
			close(*pidfd);
			*pidfd = -1;
			return r;
		}
	}
	return *pidfd < 0 ? *pidfd : 0;
}

/* One notification's state across the two phases. */
struct pending {
	struct caller *c;   /* fast path: the caller's cache entry (or scratch) */
	bool drop;          /* fast path: forget c afterwards (gone, or not cacheable) */
	int pidfd, tpidfd;  /* slow path (owned) */
	pid_t tgid;
	int dup;
	bool have_cookie;
	uint64_t cookie;
	bool have_ref;        /* slow path: ref filled while blocked */
	struct procref ref;
	bool have_dst;        /* dst read from the caller while it was blocked */
	bool bypass;          /* dst is an inet destination neither loopback nor allowed */
	int sotype;
	struct sockaddr_storage dst;
};

int notifier_allow_destination(struct notifier *n, const struct sockaddr *sa, socklen_t len)
{
	if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
	    len < (sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)))
		return -EAFNOSUPPORT;
	if (n->n_allowed >= NOTIFIER_ALLOWED_MAX)
		return -E2BIG;
	memset(&n->allowed[n->n_allowed], 0, sizeof(n->allowed[0]));
	memcpy(&n->allowed[n->n_allowed++], sa,
	       sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
	return 0;
}

/* The connect's sockaddr, from the blocked caller's memory (bypass reports
 * only; read before ID_VALID so the tid was the caller's). */
static void read_dst(struct notifier *n, const struct seccomp_notif *req, struct pending *p)
{
	if (!n->ops.bypass || !n->n_allowed)
		return;
	size_t len = (size_t)req->data.args[2];
	if (len > sizeof(p->dst))
		len = sizeof(p->dst);
	if (len < sizeof(sa_family_t))
		return;
	memset(&p->dst, 0, sizeof(p->dst));
	struct iovec local = { .iov_base = &p->dst, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)req->data.args[1], .iov_len = len };
	if (process_vm_readv((pid_t)req->pid, &local, 1, &remote, 1, 0) != (ssize_t)len) {
		n->stats.dst_unread++;
		return;
	}
	p->have_dst = true;
}

static bool v4_loopback(uint32_t be)
{
	uint32_t a = ntohl(be);
	return (a >> 24) == 127 || a == 0; /* 0.0.0.0 reaches the local host */
}

/* Not loopback and not an allowed destination. */
static bool dst_is_bypass(const struct notifier *n, const struct sockaddr_storage *d)
{
	if (d->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)d;
		if (v4_loopback(a->sin_addr.s_addr))
			return false;
		for (size_t i = 0; i < n->n_allowed; i++) {
			const struct sockaddr_in *w = (const struct sockaddr_in *)&n->allowed[i];
			if (w->sin_family == AF_INET && w->sin_port == a->sin_port &&
			    (w->sin_addr.s_addr == INADDR_ANY || w->sin_addr.s_addr == a->sin_addr.s_addr))
				return false;
		}
		return true;
	}
	if (d->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)d;
		if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) || IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr))
			return false;
		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
			struct sockaddr_storage v4 = { 0 };
			struct sockaddr_in *m = (struct sockaddr_in *)&v4;
			m->sin_family = AF_INET;
			m->sin_port = a->sin6_port;
			memcpy(&m->sin_addr, &a->sin6_addr.s6_addr[12], 4);
			return dst_is_bypass(n, &v4);
		}
		for (size_t i = 0; i < n->n_allowed; i++) {
			const struct sockaddr_in6 *w = (const struct sockaddr_in6 *)&n->allowed[i];
			if (w->sin6_family == AF_INET6 && w->sin6_port == a->sin6_port &&
			    (IN6_IS_ADDR_UNSPECIFIED(&w->sin6_addr) ||
			     memcmp(&w->sin6_addr, &a->sin6_addr, sizeof(a->sin6_addr)) == 0))
				return false;
		}
		return true;
	}
	return false; /* AF_UNSPEC (disconnect), AF_UNIX, ...: not a way out */
}

static void count_pidfd_error(struct notifier *n, int r)
{
	if (r == -ESRCH)
		n->stats.stale++;
	else
		n->stats.failures++;
}

/* Take the socket argument. EBADF: not an fd at all; connect fails on its own. */
static int take_socket(struct notifier *n, int pidfd, const struct seccomp_notif *req, struct pending *p)
{
	int sockfd = (int)(uint32_t)req->data.args[0];
	p->dup = sys_pidfd_getfd(pidfd, sockfd, 0);
	return p->dup < 0 ? p->dup : 0;
}

/* Only after the pidfd and the fd were taken: the caller is still that task
 * blocked in this connect, so both were the caller's. */
static bool still_valid(struct notifier *n, int fd, const struct seccomp_notif *req)
{
	uint64_t id = req->id;
	if (ioctl(fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) < 0) {
		n->stats.stale++;
		return false;
	}
	return true;
}

/* The cookie of the socket we now hold (the kernel never reuses one; a
 * non-socket fails with ENOTSOCK). The family, which cannot change, is
 * checked after CONTINUE. */
static void read_cookie(struct notifier *n, struct pending *p)
{
	socklen_t len = sizeof(p->cookie);
	if (getsockopt(p->dup, SOL_SOCKET, SO_COOKIE, &p->cookie, &len) < 0 || p->cookie == 0) {
		if (errno == ENOTSOCK)
			n->stats.not_inet++;
		else
			n->stats.failures++;
		return;
	}
	p->have_cookie = true;
}

/* First thing after CONTINUE: is it inet, then drop our duplicate. We hold
 * a workload's socket only for the few microseconds around its connect. */
static void check_release_socket(struct notifier *n, struct pending *p)
{
	if (p->dup < 0)
		return;
	if (p->have_cookie) {
		int domain = 0;
		socklen_t len = sizeof(domain);
		if (getsockopt(p->dup, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0) {
			n->stats.failures++;
			p->have_cookie = false;
		} else if (domain != AF_INET && domain != AF_INET6) {
			n->stats.not_inet++;
			p->have_cookie = false;
		}
	}
	if (p->have_dst && dst_is_bypass(n, &p->dst)) {
		int domain = 0;
		socklen_t len = sizeof(domain);
		/* an inet socket only (a unix socket handed an inet address fails on its own) */
		if (getsockopt(p->dup, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
		    (domain == AF_INET || domain == AF_INET6)) {
			p->bypass = true;
			len = sizeof(p->sotype);
			if (getsockopt(p->dup, SOL_SOCKET, SO_TYPE, &p->sotype, &len) < 0)
				p->sotype = 0;
		}
	}
	/* record_sock wants the socket: closed at the end of phase_after. */
	if (p->have_cookie && n->ops.record_sock && (!n->ops.wants_sock || n->ops.wants_sock(n->ops.user)))
		return;
	close(p->dup);
	p->dup = -1;
}

/* Fast path, the caller blocked. A cached caller costs getfd + stat +
 * ID_VALID + SO_COOKIE; a new one adds pidfd_open, fstat and readlink. */
static void phase_blocked_fast(struct notifier *n, int fd, const struct seccomp_notif *req, struct pending *p)
{
	pid_t tid = (pid_t)req->pid;
	struct caller *c = cache_find(n, tid);
	if (c) {
		int r = take_socket(n, c->tpidfd >= 0 ? c->tpidfd : c->pidfd, req, p);
		if (r == -ESRCH) {
			/* The cached process is gone and tid was reused. */
			n->stats.cache_stale++;
			caller_reset(n, c);
			c = NULL;
		} else {
			n->stats.cache_hits++;
			p->c = c;
			c->used = ++n->clock;
			if (r < 0) {
				if (r == -EBADF)
					n->stats.not_inet++;
				else
					n->stats.failures++;
				return;
			}
			/* The image now; the label is reread only if the file changed. */
			struct stat st;
			if (stat(c->exe_link, &st) < 0) {
				c->ref.exe_err = -errno;
				memset(&c->ref.exe, 0, sizeof(c->ref.exe));
				c->complete = false;
			} else if (c->ref.exe_err < 0 || !exe_tuple_matches_stat(&c->ref.exe, &st)) {
				if (c->ref.exe.ino) /* not a tuple never read (a failed first connect) */
					n->stats.exe_changed++;
				c->ref.exe_err = exe_capture_pid(tid, EXE_CAPTURE_CHEAP, &c->ref.exe);
				/* exec: comm and the rest are read again after CONTINUE */
				c->complete = false;
			}
		}
	}
	if (!c) {
		/* Opened in the scratch slot: cached after CONTINUE. */
		n->stats.cache_misses++;
		c = &n->scratch;
		caller_reset(n, c);
		p->c = c;
		int r = open_caller(tid, &c->pidfd, &c->tpidfd, &c->tgid);
		if (r < 0) {
			count_pidfd_error(n, r);
			p->drop = true;
			return;
		}
		struct stat st;
		if (fstat(c->pidfd, &st) < 0) {
			n->stats.failures++;
			p->drop = true;
			return;
		}
		caller_set_tid(n, c, tid);
		c->ino = st.st_ino;
		c->lfd = fd;
		c->used = ++n->clock;
		c->complete = false;
		memset(&c->ref, 0, sizeof(c->ref));
		c->ref.pidfd = -1;
		snprintf(c->exe_link, sizeof(c->exe_link), "/proc/%d/exe", (int)tid);
		r = take_socket(n, c->tpidfd >= 0 ? c->tpidfd : c->pidfd, req, p);
		if (r < 0) {
			if (r == -EBADF)
				n->stats.not_inet++;
			else
				count_pidfd_error(n, r);
			p->drop |= r == -ESRCH;
			return;
		}
		c->ref.exe_err = exe_capture_pid(tid, EXE_CAPTURE_CHEAP, &c->ref.exe);
	}
	read_dst(n, req, p);
	if (!still_valid(n, fd, req)) {
		p->have_dst = false;
		p->drop = true;
		return;
	}
	read_cookie(n, p);
}

/* Slow path (no pidfs keys, or /proc of another pid namespace): the whole
 * ref is read before ID_VALID, nothing is cached. */
static void phase_blocked_slow(struct notifier *n, int fd, const struct seccomp_notif *req, struct pending *p)
{
	int r = open_caller((pid_t)req->pid, &p->pidfd, &p->tpidfd, &p->tgid);
	if (r < 0) {
		count_pidfd_error(n, r);
		return;
	}
	r = n->ops.identify ? n->ops.identify(n->ops.user, n->caps, p->pidfd, &p->ref) : -ENOSYS;
	if (r < 0) {
		n->stats.failures++;
		return;
	}
	p->have_ref = true;
	r = take_socket(n, p->tpidfd >= 0 ? p->tpidfd : p->pidfd, req, p);
	if (r < 0) {
		if (r == -EBADF)
			n->stats.not_inet++;
		else
			count_pidfd_error(n, r);
		return;
	}
	read_dst(n, req, p);
	if (!still_valid(n, fd, req)) {
		p->have_dst = false;
		return;
	}
	read_cookie(n, p);
}

/* The rest of the ref, the caller running again (fast path). */
static int complete_ref(struct notifier *n, struct pending *p)
{
	struct caller *c = p->c;
	if (c->complete) {
		/* The fields a live process can change without exec. */
		if (n->caps->pidfd_info) {
			struct tether_pidfd_info info = {
				.mask = TETHER_PIDFD_INFO_PID | TETHER_PIDFD_INFO_CREDS | TETHER_PIDFD_INFO_CGROUPID,
			};
			/* ESRCH: exited since; the cached values were true while it was blocked. */
			if (ioctl(c->pidfd, TETHER_PIDFD_GET_INFO, &info) == 0 &&
			    (info.mask & TETHER_PIDFD_INFO_CREDS)) {
				c->ref.ppid = (pid_t)info.ppid;
				c->ref.ruid = info.ruid;
				c->ref.euid = info.euid;
				c->ref.suid = info.suid;
				c->ref.fsuid = info.fsuid;
				c->ref.rgid = info.rgid;
				c->ref.egid = info.egid;
				c->ref.sgid = info.sgid;
				c->ref.fsgid = info.fsgid;
				if (info.mask & TETHER_PIDFD_INFO_CGROUPID)
					c->ref.cgroup_id = info.cgroupid;
			}
		}
		return 0;
	}
	struct procref full;
	int r = n->ops.identify == notifier_identify_default ?
			procref_from_pidfd_ex(n->caps, c->pidfd, PROCREF_NO_EXE, &full) :
		n->ops.identify ? n->ops.identify(n->ops.user, n->caps, c->pidfd, &full) : -ENOSYS;
	if (r == 0 && full.pidfs_ino == c->ino) {
		/* Keep the image proven while it was blocked. */
		memcpy(&full.exe, &c->ref.exe, sizeof(full.exe));
		full.exe_err = c->ref.exe_err;
		if (n->ops.release)
			n->ops.release(n->ops.user, &full);
		procref_close(&full);
		memcpy(&c->ref, &full, sizeof(full));
		c->complete = true;
		return 0;
	}
	/* Gone (e.g. connect-and-exit, already reaped): record what was proven
	 * while it was blocked - key, pid, image. */
	if (r == 0) {
		if (n->ops.release)
			n->ops.release(n->ops.user, &full);
		procref_close(&full);
	}
	struct exe_tuple *exe = &full.exe; /* reuse the stack space */
	memcpy(exe, &c->ref.exe, sizeof(*exe));
	int exe_err = c->ref.exe_err;
	memset(&c->ref, 0, sizeof(c->ref));
	c->ref.pidfd = -1;
	memcpy(&c->ref.exe, exe, sizeof(*exe));
	c->ref.exe_err = exe_err;
	strscpy(c->ref.boot_id, n->caps->boot_id, sizeof(c->ref.boot_id));
	c->ref.key_kind = PROCREF_KEY_PIDFS;
	c->ref.pidfs_ino = c->ino;
	c->ref.pid = c->tgid;
	c->ref.procfs_pid = c->tgid;
	p->drop = true;
	if (procref_format_key(&c->ref, PROCREF_KEY_PIDFS, c->ref.key, sizeof(c->ref.key)) < 0)
		return -EINVAL;
	n->stats.late_partial++;
	return 0;
}

/* Phase 2, the caller running again: complete the ref and record it.
 * Still inside the loop callback, so the record is in place before any
 * identity request can be served. */
static void phase_after(struct notifier *n, struct pending *p)
{
	check_release_socket(n, p);
	if (p->have_cookie) {
		const struct procref *ref = NULL;
		if (p->c) {
			if (complete_ref(n, p) == 0) {
				/* Live pidfd only for a completed ref (the contract of ops.record). */
				p->c->ref.pidfd = p->c->complete ? p->c->pidfd : -1;
				ref = &p->c->ref;
			}
		} else if (p->have_ref) {
			ref = &p->ref;
		}
		int r = !ref ? -ESRCH : n->ops.record ? n->ops.record(n->ops.user, p->cookie, ref) : -ENOSYS;
		if (p->bypass) {
			n->stats.bypass_attempts++;
			n->ops.bypass(n->ops.user, &p->dst, p->sotype, ref);
			p->bypass = false;
		}
		if (p->c)
			p->c->ref.pidfd = -1;
		if (r >= 0 && n->ops.record_sock && p->dup >= 0)
			n->ops.record_sock(n->ops.user, p->cookie, p->dup);
		if (r < 0)
			n->stats.failures++;
		else
			n->stats.recorded++;
	}
	if (p->bypass) { /* no cookie: reported without the ref */
		n->stats.bypass_attempts++;
		n->ops.bypass(n->ops.user, &p->dst, p->sotype, p->have_ref ? &p->ref : NULL);
	}
	if (p->have_ref && n->ops.release)
		n->ops.release(n->ops.user, &p->ref);
	procref_close(&p->ref);
	if (p->dup >= 0)
		close(p->dup);
	if (p->tpidfd >= 0)
		close(p->tpidfd);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->c == &n->scratch && !p->drop && n->cache_cap)
		cache_adopt(n);
	else if (p->c && (p->drop || p->c == &n->scratch))
		caller_reset(n, p->c);
}

int notifier_handle(struct notifier *n, int fd)
{
	memset(n->req, 0, n->req_size);
	if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, n->req) < 0)
		return -errno; /* ENOENT: the caller was killed before we got it */
	n->stats.notifications++;
	unsigned long long t0 = now_mono_ns();
	struct pending p;
	p.c = NULL;
	p.drop = false;
	p.pidfd = p.tpidfd = p.dup = -1;
	p.have_cookie = p.have_ref = false;
	p.have_dst = p.bypass = false;
	p.sotype = 0;
	p.ref.pidfd = -1;
	if ((pid_t)n->req->pid <= 0) /* caller outside our pid namespace: cannot be a member */
		n->stats.failures++;
	else if (n->fast)
		phase_blocked_fast(n, fd, n->req, &p);
	else
		phase_blocked_slow(n, fd, n->req, &p);
	/* Whatever happened above, the connect proceeds: attribution is
	 * observation, never a decision (policy is enforced by the proxy). */
	memset(n->resp, 0, n->resp_size);
	n->resp->id = n->req->id;
	n->resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	n->stats.handle_ns += now_mono_ns() - t0;
	int sr = ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, n->resp);
	int send_errno = errno;
	unsigned long long t1 = now_mono_ns();
	phase_after(n, &p);
	n->stats.after_ns += now_mono_ns() - t1;
	if (sr < 0) {
		int r = -send_errno;
		if (r == -ENOENT)
			n->stats.stale++;
		else
			n->stats.respond_errors++;
		return r;
	}
	return 0;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct listener *l = h->data;
	/* POLLHUP (the tree is gone) arrives as UV_DISCONNECT: libuv adds it,
	 * with UV_READABLE, to a bare POLLHUP. */
	if (status < 0 || (events & UV_DISCONNECT)) {
		listener_stop(l);
		return;
	}
	if (!(events & UV_READABLE))
		return;
	/* Readable means a notification was pending; RECV does not block on
	 * one whose caller was killed since (it returns ENOENT). */
	int r = notifier_handle(l->n, l->fd);
	if (r < 0 && r != -ENOENT && r != -EINTR) {
		log_warn("notify: listener %d: %s; closing it", l->fd, strerror(-r));
		listener_stop(l);
	}
}

int notifier_add_listener(struct notifier *n, int fd)
{
	if (n->closing) {
		close(fd);
		return -ESHUTDOWN;
	}
	__u64 flags = SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP;
	/* >= 6.6: wake the handler on the caller's CPU; a measurable win. */
	n->stats.sync_wakeup = ioctl(fd, SECCOMP_IOCTL_NOTIF_SET_FLAGS, flags) == 0;
	struct listener *l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return -ENOMEM;
	}
	l->fd = fd;
	l->n = n;
	int r = uv_poll_init(n->loop, &l->poll, fd);
	if (r < 0) {
		close(fd);
		free(l);
		return r;
	}
	l->poll.data = l;
	r = uv_poll_start(&l->poll, UV_READABLE | UV_DISCONNECT, on_poll);
	l->next = n->listeners;
	if (l->next)
		l->next->pprev = &l->next;
	l->pprev = &n->listeners;
	n->listeners = l;
	n->stats.listeners++;
	if (r < 0) {
		listener_stop(l);
		return r;
	}
	return 0;
}

void notifier_close(struct notifier *n)
{
	if (!n)
		return;
	n->closing = true;
	while (n->listeners)
		listener_stop(n->listeners);
	if (n->pending_close == 0)
		notifier_free(n);
}
