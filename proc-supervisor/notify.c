#include "proc-supervisor/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

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

struct notifier {
	uv_loop_t *loop;
	const struct kernel_caps *caps;
	struct notifier_ops ops;
	struct notifier_stats stats;
	struct seccomp_notif *req; /* sized for the running kernel */
	struct seccomp_notif_resp *resp;
	size_t req_size, resp_size;
	struct listener *listeners;
	bool fast; /* pidfs keys and our own /proc: defer procfs reads past CONTINUE */
	bool closing;
	unsigned pending_close; /* uv_close issued, callback not yet run */
};

static int exe_capture(pid_t pid, struct exe_tuple *t);

int notifier_identify_default(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out)
{
	int r = procref_from_pidfd_ex(caps, pidfd, PROCREF_NO_EXE, out);
	if (r < 0)
		return r;
	pid_t pp = out->procfs_pid > 0 ? out->procfs_pid : out->pid;
	/* Without an image: identity only (a kernel thread cannot connect). */
	out->exe_err = exe_capture(pp, &out->exe);
	return 0;
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
	/* The kernel may know a larger struct than our headers do. */
	n->req_size = sz.seccomp_notif > sizeof(*n->req) ? sz.seccomp_notif : sizeof(*n->req);
	n->resp_size = sz.seccomp_notif_resp > sizeof(*n->resp) ? sz.seccomp_notif_resp : sizeof(*n->resp);
	n->req = calloc(1, n->req_size);
	n->resp = calloc(1, n->resp_size);
	if (!n->req || !n->resp) {
		free(n->req);
		free(n->resp);
		free(n);
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
	if (--n->pending_close == 0 && n->closing && !n->listeners) {
		free(n->req);
		free(n->resp);
		free(n);
	}
}

static void listener_stop(struct listener *l)
{
	*l->pprev = l->next;
	if (l->next)
		l->next->pprev = l->pprev;
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

/* One notification's state across the two phases. */
struct pending {
	int pidfd, tpidfd, dup;
	pid_t tgid;
	uint64_t ino;         /* pidfs inode of the caller (fast path) */
	bool have_cookie;
	uint64_t cookie;
	bool have_ref;        /* slow path: ref filled while blocked */
	struct procref ref;
	struct exe_tuple exe; /* fast path: the image as of this connect */
	int exe_err;
};

static int exe_capture(pid_t pid, struct exe_tuple *t)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	struct stat st;
	memset(t, 0, sizeof(*t));
	ssize_t n = readlink(path, t->path, sizeof(t->path) - 1);
	if (n < 0 || stat(path, &st) < 0) {
		t->path[0] = '\0';
		return -errno;
	}
	t->path[n] = '\0';
	static const char deleted[] = " (deleted)";
	size_t dl = sizeof(deleted) - 1;
	if ((size_t)n > dl && strcmp(t->path + n - dl, deleted) == 0) {
		t->deleted = true;
		t->path[n - dl] = '\0';
	}
	t->memfd = strncmp(t->path, "/memfd:", 7) == 0;
	t->dev = st.st_dev;
	t->ino = st.st_ino;
	t->size = st.st_size;
	t->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	t->ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
	return 0;
}

/* Phase 1, the caller blocked: pin the caller (pidfd), capture what must be
 * "as of this connect" (the exe), prove it with ID_VALID, and take the
 * cookie. On the fast path (pidfs keys, our own /proc) the procfs reads of
 * the rest of the ref wait until after CONTINUE: the pidfd already pins
 * the process, and the key (pidfs inode) was taken while blocked. */
static void phase_blocked(struct notifier *n, int fd, const struct seccomp_notif *req, struct pending *p)
{
	pid_t tid = (pid_t)req->pid;
	if (tid <= 0) { /* caller outside our pid namespace: cannot be a member */
		n->stats.failures++;
		return;
	}
	p->tgid = tid;
	p->pidfd = sys_pidfd_open(tid, 0);
	if (p->pidfd == -EINVAL || p->pidfd == -ENOENT) { /* not a group leader (6.9+: ENOENT) */
		p->tgid = tgid_of(tid);
		p->pidfd = p->tgid > 0 ? sys_pidfd_open(p->tgid, 0) : -ESRCH;
		/* The socket lives in the calling thread's fd table, which can
		 * differ from the leader's after unshare(CLONE_FILES). */
		p->tpidfd = sys_pidfd_open(tid, PIDFD_THREAD);
	}
	if (p->pidfd < 0) {
		if (p->pidfd == -ESRCH)
			n->stats.stale++;
		else
			n->stats.failures++;
		return;
	}
	if (n->fast) {
		struct stat st;
		if (fstat(p->pidfd, &st) < 0) {
			n->stats.failures++;
			return;
		}
		p->ino = st.st_ino;
		p->exe_err = exe_capture(tid, &p->exe);
	} else {
		int r = n->ops.identify ? n->ops.identify(n->ops.user, n->caps, p->pidfd, &p->ref) : -ENOSYS;
		if (r < 0) {
			n->stats.failures++;
			return;
		}
		p->have_ref = true;
	}
	/* Only now is it certain the pidfd (and what was read) is the caller. */
	uint64_t id = req->id;
	if (ioctl(fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) < 0) {
		n->stats.stale++;
		return;
	}
	int sockfd = (int)(uint32_t)req->data.args[0];
	p->dup = sys_pidfd_getfd(p->tpidfd >= 0 ? p->tpidfd : p->pidfd, sockfd, 0);
	if (p->dup < 0) {
		/* EBADF: not an fd at all; connect will fail on its own. */
		if (p->dup == -EBADF)
			n->stats.not_inet++;
		else
			n->stats.failures++;
		return;
	}
	struct stat st;
	int domain = 0;
	socklen_t len = sizeof(domain);
	if (fstat(p->dup, &st) < 0 || !S_ISSOCK(st.st_mode) ||
	    getsockopt(p->dup, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 || (domain != AF_INET && domain != AF_INET6)) {
		n->stats.not_inet++;
		return;
	}
	len = sizeof(p->cookie);
	if (getsockopt(p->dup, SOL_SOCKET, SO_COOKIE, &p->cookie, &len) < 0 || p->cookie == 0) {
		n->stats.failures++;
		return;
	}
	p->have_cookie = true;
}

/* Phase 2, the caller running again: complete the ref and record it. */
static void phase_after(struct notifier *n, struct pending *p)
{
	if (p->have_cookie && n->fast) {
		int r = n->ops.identify == notifier_identify_default ?
				procref_from_pidfd_ex(n->caps, p->pidfd, PROCREF_NO_EXE, &p->ref) :
			n->ops.identify ? n->ops.identify(n->ops.user, n->caps, p->pidfd, &p->ref) : -ENOSYS;
		if (r == 0 && p->ref.pidfs_ino == p->ino) {
			p->have_ref = true;
		} else {
			/* Gone (e.g. connect-and-exit, already reaped): record what was
			 * proven while it was blocked - key, pid, image. */
			if (r == 0 && n->ops.release)
				n->ops.release(n->ops.user, &p->ref);
			memset(&p->ref, 0, sizeof(p->ref));
			p->ref.pidfd = -1;
			strscpy(p->ref.boot_id, n->caps->boot_id, sizeof(p->ref.boot_id));
			p->ref.key_kind = PROCREF_KEY_PIDFS;
			p->ref.pidfs_ino = p->ino;
			p->ref.pid = p->tgid;
			p->ref.procfs_pid = p->tgid;
			if (procref_format_key(&p->ref, PROCREF_KEY_PIDFS, p->ref.key, sizeof(p->ref.key)) < 0) {
				n->stats.failures++;
				goto out;
			}
			n->stats.late_partial++;
			p->have_ref = true;
		}
		p->ref.exe = p->exe;
		p->ref.exe_err = p->exe_err;
	}
	if (p->have_cookie && p->have_ref) {
		int r = n->ops.record ? n->ops.record(n->ops.user, p->cookie, &p->ref) : -ENOSYS;
		if (r < 0)
			n->stats.failures++;
		else
			n->stats.recorded++;
	}
out:
	if (p->have_ref && n->ops.release)
		n->ops.release(n->ops.user, &p->ref);
	if (p->dup >= 0)
		close(p->dup);
	if (p->tpidfd >= 0)
		close(p->tpidfd);
	if (p->pidfd >= 0)
		close(p->pidfd);
}

static uint64_t cpu_ns(void)
{
	struct timespec c;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
	return (uint64_t)c.tv_sec * 1000000000ULL + (uint64_t)c.tv_nsec;
}

int notifier_handle(struct notifier *n, int fd)
{
	memset(n->req, 0, n->req_size);
	if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, n->req) < 0)
		return -errno; /* ENOENT: the caller was killed before we got it */
	n->stats.notifications++;
	unsigned long long t0 = now_mono_ns();
	uint64_t c0 = cpu_ns();
	struct pending p;
	memset(&p, 0, sizeof(p));
	p.pidfd = p.tpidfd = p.dup = -1;
	p.ref.pidfd = -1;
	phase_blocked(n, fd, n->req, &p);
	/* Whatever happened above, the connect proceeds: attribution is
	 * observation, never a decision (policy is enforced by the proxy). */
	memset(n->resp, 0, n->resp_size);
	n->resp->id = n->req->id;
	n->resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	int sr = ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, n->resp);
	int send_errno = errno;
	n->stats.handle_ns += now_mono_ns() - t0;
	phase_after(n, &p);
	n->stats.handle_cpu_ns += cpu_ns() - c0;
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
	if (status < 0 || (events & UV_DISCONNECT)) {
		listener_stop(l);
		return;
	}
	/* libuv folds POLLHUP (the tree is gone) into "readable", and RECV
	 * with nothing pending would block: ask the kernel which it is. */
	struct pollfd p = { .fd = l->fd, .events = POLLIN };
	if (poll(&p, 1, 0) != 1)
		return;
	if (p.revents & POLLIN) {
		int r = notifier_handle(l->n, l->fd);
		if (r < 0 && r != -ENOENT && r != -EINTR) {
			log_warn("notify: listener %d: %s; closing it", l->fd, strerror(-r));
			listener_stop(l);
		}
		return;
	}
	if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
		listener_stop(l);
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
	if (n->pending_close == 0) {
		free(n->req);
		free(n->resp);
		free(n);
	}
}
