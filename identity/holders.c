/* Holder search over the members' fd tables, with a revalidated cache. */
#include "identity/holders.h"

#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "identity/members.h"

/* Sockets shared by more processes than this are searched every time:
 * they are rare (fork sharing) and caching them buys little. */
#define HOLDERS_CACHE_MAX 4
/* The cache is 4-way set associative: a cookie may live in any of the 4
 * slots of its set, so a few colliding hot flows do not evict each other. */
#define HOLDERS_CACHE_WAYS 4

struct cached_holder {
	pid_t pid;
	int fd;
	char key[PROCREF_KEY_MAX];
};

struct cache_entry {
	uint64_t cookie; /* 0 = empty */
	uint32_t inode;
	size_t members_n;
	uint64_t members_hash;
	size_t n;
	struct cached_holder h[HOLDERS_CACHE_MAX];
};

struct holders {
	const struct kernel_caps *caps;
	holders_pinned_fn pinned;
	void *pinned_ud;
	int proc_fd;
	size_t cap;
	struct cache_entry *cache;
	size_t link_budget; /* fd links one holders_find may read; 0: no limit */
};

struct holders *holders_new(const struct kernel_caps *caps, size_t cache_capacity)
{
	if (!caps) {
		errno = EINVAL;
		return NULL;
	}
	struct holders *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->caps = caps;
	h->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (h->proc_fd < 0) {
		int e = errno;
		free(h);
		errno = e;
		return NULL;
	}
	if (cache_capacity) {
		/* whole sets of HOLDERS_CACHE_WAYS */
		cache_capacity = (cache_capacity + HOLDERS_CACHE_WAYS - 1) / HOLDERS_CACHE_WAYS *
				 HOLDERS_CACHE_WAYS;
		h->cache = calloc(cache_capacity, sizeof(*h->cache));
		if (!h->cache) {
			close(h->proc_fd);
			free(h);
			errno = ENOMEM;
			return NULL;
		}
		h->cap = cache_capacity;
	}
	return h;
}

void holders_free(struct holders *h)
{
	if (!h)
		return;
	if (h->proc_fd >= 0)
		close(h->proc_fd);
	free(h->cache);
	free(h);
}

void holders_set_link_budget(struct holders *h, size_t links)
{
	if (h)
		h->link_budget = links;
}

void holders_set_pinned(struct holders *h, holders_pinned_fn fn, void *userdata)
{
	if (!h)
		return;
	h->pinned = fn;
	h->pinned_ud = userdata;
}

void holders_cache_clear(struct holders *h)
{
	if (h && h->cache)
		memset(h->cache, 0, h->cap * sizeof(*h->cache));
}

void holder_list_release(struct holder_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		procref_close(&l->refs[i]);
	free(l->refs);
	l->refs = NULL;
	l->n = 0;
}

static int socket_link(uint32_t inode, char *buf, size_t size)
{
	return snprintf(buf, size, "socket:[%u]", inode);
}

/* Does /proc/<pid>/fd/<fd> read socket:[inode]? */
static bool fd_is(int proc_fd, pid_t pid, int fd, const char *want, int wlen)
{
	char path[64], link[64];
	snprintf(path, sizeof(path), "%d/fd/%d", pid, fd);
	ssize_t n = readlinkat(proc_fd, path, link, sizeof(link));
	return n == wlen && memcmp(link, want, (size_t)wlen) == 0;
}

/* The fd directory is read with getdents64 on an O_DIRECTORY fd rather
 * than opendir/readdir: this is the hot loop of a cold search (one pass per
 * member), and fdopendir's extra fcntl+fstat are a third of its syscalls. */
struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* holders_pid_holds, reading at most *budget fd links when budget is
 * given (decremented; -E2BIG once it would be exceeded). */
static int pid_holds(int proc_dirfd, pid_t pid, uint32_t inode, int *fd_out, size_t *budget)
{
	char path[32], want[32];
	int wlen = socket_link(inode, want, sizeof(want));
	/* 8 KiB: ~300 entries per call; aligned for the dirent casts. */
	union {
		char buf[8192];
		uint64_t align;
	} u;

	if (pid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "%d/fd", pid);
	_cleanup_close_ int dfd = openat(proc_dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	for (;;) {
		long n = syscall(SYS_getdents64, dfd, u.buf, sizeof(u.buf));
		if (n < 0)
			return errno == ENOENT ? -ESRCH : -errno;
		if (n == 0)
			return 0;
		for (long off = 0; off < n;) {
			struct linux_dirent64 *de = (void *)(u.buf + off);
			if (de->d_reclen == 0 || off + de->d_reclen > n)
				return -EIO;
			off += de->d_reclen;
			if (de->d_name[0] == '.')
				continue;
			if (budget) {
				if (*budget == 0)
					return -E2BIG;
				(*budget)--;
			}
			char link[64];
			ssize_t ln = readlinkat(dfd, de->d_name, link, sizeof(link));
			if (ln == wlen && memcmp(link, want, (size_t)wlen) == 0) {
				if (fd_out)
					*fd_out = atoi(de->d_name);
				return 1;
			}
		}
	}
}

int holders_pid_holds(int proc_dirfd, pid_t pid, uint32_t inode, int *fd_out)
{
	return pid_holds(proc_dirfd, pid, inode, fd_out, NULL);
}

static bool already_listed(const struct holder_list *l, const struct procref *r)
{
	for (size_t i = 0; i < l->n; i++)
		if (procref_same(&l->refs[i], r))
			return true;
	return false;
}

static int list_push(struct holder_list *l, size_t *alloc, struct procref *r)
{
	if (l->n == *alloc) {
		size_t na = *alloc ? *alloc * 2 : 4;
		struct procref *nr = realloc(l->refs, na * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		l->refs = nr;
		*alloc = na;
	}
	l->refs[l->n++] = *r;
	r->pidfd = -1; /* ownership moved */
	return 0;
}

/* Pin pid with a pidfd, then confirm it still holds the socket: the link
 * read after the pidfd was opened, with the pidfd alive after the read,
 * belongs to the pinned process. 1 verified (*ref filled, owns a pidfd),
 * 0 not a holder (any more), -errno when it cannot be verified. With
 * `pinned` the process comes from the caller's pinned set (-ENOENT when it
 * is not there) instead of a full open. */
static int verify_holder_as(struct holders *h, pid_t pid, int fd, uint32_t inode, struct procref *ref,
			    int *fd_seen, bool pinned)
{
	*fd_seen = fd;
	char want[32];
	int wlen = socket_link(inode, want, sizeof(want));
	int r = pinned ? h->pinned(h->pinned_ud, pid, ref) : procref_open(h->caps, pid, ref);
	if (r == -ESRCH)
		return 0;
	if (r < 0)
		return r;
	if (!fd_is(h->proc_fd, pid, fd, want, wlen)) {
		/* dup2'd elsewhere in between? Look once more. */
		r = holders_pid_holds(h->proc_fd, pid, inode, fd_seen);
		if (r <= 0) {
			procref_close(ref);
			return r == -ESRCH ? 0 : r;
		}
	}
	if (pidfd_is_alive(ref->pidfd) < 0) {
		procref_close(ref);
		return 0;
	}
	return 1;
}

/* The pinned process when the caller has it, else (or when that did not
 * verify: it exited, its pid now another process's) the full open. */
static int verify_holder(struct holders *h, pid_t pid, int fd, uint32_t inode, struct procref *ref,
			 int *fd_seen, bool *was_pinned)
{
	if (h->pinned && verify_holder_as(h, pid, fd, inode, ref, fd_seen, true) == 1) {
		if (was_pinned)
			*was_pinned = true;
		return 1;
	}
	return verify_holder_as(h, pid, fd, inode, ref, fd_seen, false);
}

static struct cache_entry *cache_set(struct holders *h, uint64_t cookie)
{
	if (!h->cache || cookie == 0)
		return NULL;
	size_t sets = h->cap / HOLDERS_CACHE_WAYS;
	return &h->cache[(mix64(cookie) % sets) * HOLDERS_CACHE_WAYS];
}

static struct cache_entry *cache_lookup(struct cache_entry *set, uint64_t cookie)
{
	for (size_t i = 0; set && i < HOLDERS_CACHE_WAYS; i++)
		if (set[i].cookie == cookie)
			return &set[i];
	return NULL;
}

/* Where to store cookie: its own slot, else an empty one, else a victim
 * chosen by the cookie's bits (no bookkeeping, roughly random). */
static struct cache_entry *cache_victim(struct cache_entry *set, uint64_t cookie)
{
	struct cache_entry *e = cache_lookup(set, cookie);
	if (e || !set)
		return e;
	for (size_t i = 0; i < HOLDERS_CACHE_WAYS; i++)
		if (set[i].cookie == 0)
			return &set[i];
	return &set[(cookie >> 7) % HOLDERS_CACHE_WAYS];
}

/* A cache hit, fully revalidated; 1 used, 0 unusable (entry dropped). */
static int cache_try(struct holders *h, struct cache_entry *e, uint32_t inode, uint64_t cookie,
		     const pid_t *members, size_t n_members, uint64_t mhash, struct holder_list *out)
{
	size_t alloc = 0;
	if (!e || e->cookie != cookie || e->inode != inode || e->members_n != n_members ||
	    e->members_hash != mhash)
		return 0;
	for (size_t i = 0; i < e->n; i++) {
		struct procref ref;
		int seen;
		int r = verify_holder(h, e->h[i].pid, e->h[i].fd, inode, &ref, &seen, NULL);
		if (r <= 0)
			goto stale;
		if (strcmp(ref.key, e->h[i].key) != 0) {
			/* The pid now names another process that happens to
			 * hold the inode: the scan must decide. */
			procref_close(&ref);
			goto stale;
		}
		if (out->n == 0)
			out->first_fd = seen;
		if (list_push(out, &alloc, &ref) < 0) {
			procref_close(&ref);
			goto stale;
		}
	}
	out->from_cache = true;
	return 1;
stale:
	holder_list_release(out);
	out->first_fd = -1;
	memset(e, 0, sizeof(*e));
	return 0;
}

static void cache_store(struct cache_entry *e, uint32_t inode, uint64_t cookie, size_t n_members,
			uint64_t mhash, const struct holder_list *l, const int *fds)
{
	if (!e)
		return;
	memset(e, 0, sizeof(*e));
	if (l->n == 0 || l->n > HOLDERS_CACHE_MAX)
		return; /* nothing worth remembering */
	e->cookie = cookie;
	e->inode = inode;
	e->members_n = n_members;
	e->members_hash = mhash;
	e->n = l->n;
	for (size_t i = 0; i < l->n; i++) {
		e->h[i].pid = l->refs[i].pid;
		e->h[i].fd = fds[i];
		strscpy(e->h[i].key, l->refs[i].key, sizeof(e->h[i].key));
	}
}

int holders_find(struct holders *h, uint32_t inode, uint64_t cookie, const pid_t *members,
		 size_t n_members, struct holder_list *out)
{
	if (!h || !out || (n_members && !members))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->first_fd = -1;
	if (inode == 0)
		return -EINVAL;

	struct cache_entry *set = cache_set(h, cookie);
	struct cache_entry *e = cache_lookup(set, cookie);
	uint64_t mhash = set ? members_pid_set_hash(members, n_members) : 0;
	if (e && cache_try(h, e, inode, cookie, members, n_members, mhash, out))
		return 0;

	/* Full scan of the members' fd tables. */
	size_t alloc = 0;
	int fds[HOLDERS_CACHE_MAX];
	int r = 0;
	size_t budget = h->link_budget;
	for (size_t i = 0; i < n_members; i++) {
		int fd = -1;
		out->pids_scanned++;
		r = pid_holds(h->proc_fd, members[i], inode, &fd, h->link_budget ? &budget : NULL);
		if (r == -ESRCH || r == 0)
			continue; /* exited meanwhile, or not a holder */
		if (r < 0)
			goto fail;
		struct procref ref;
		int seen;
		bool was_pinned = false;
		r = verify_holder(h, members[i], fd, inode, &ref, &seen, &was_pinned);
		if (r < 0)
			goto fail;
		out->n_pinned += r == 1 && was_pinned;
		if (r == 0)
			continue;
		if (already_listed(out, &ref)) { /* a pid listed twice */
			procref_close(&ref);
			continue;
		}
		if (out->n == 0)
			out->first_fd = seen;
		if (out->n < HOLDERS_CACHE_MAX)
			fds[out->n] = seen;
		r = list_push(out, &alloc, &ref);
		if (r < 0) {
			procref_close(&ref);
			goto fail;
		}
	}
	cache_store(cache_victim(set, cookie), inode, cookie, n_members, mhash, out, fds);
	return 0;
fail:
	holder_list_release(out);
	return r;
}
