#include "identity/exe.h"

#include "common/util.h"
#include "identity/procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

int exe_open_at(int procdirfd)
{
	int fd = openat(procdirfd, "exe", O_RDONLY | O_CLOEXEC | O_NOCTTY);
	return fd < 0 ? -errno : fd;
}

static int64_t ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* Where a process's /proc entries are: names relative to dirfd. By fd
 * ("exe", "root", "maps" under a /proc/<pid> directory fd), or by path
 * (dirfd AT_FDCWD, "/proc/<pid>/exe", ...) so that a capture costs no
 * open of the directory (the notifier). */
struct procdir {
	int dirfd;
	char prefix[32]; /* "" or "/proc/<pid>/" */
};

static const char *procdir_name(const struct procdir *d, const char *leaf, char *buf, size_t size)
{
	if (!d->prefix[0])
		return leaf;
	snprintf(buf, size, "%s%s", d->prefix, leaf);
	return buf;
}

/* Stream maps in chunks, whole lines at a time, until (dev, ino) shows up.
 * Streaming because a big process has megabytes of maps. */
static int maps_has_file(const struct procdir *d, uint64_t dev, uint64_t ino)
{
	char nb[48];
	_cleanup_close_ int fd = openat(d->dirfd, procdir_name(d, "maps", nb, sizeof(nb)),
					O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	const size_t cap = 64 * 1024;
	_cleanup_free_ char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	_cleanup_free_ struct procfs_maps_entry *e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	size_t have = 0;
	for (;;) {
		ssize_t n = read(fd, buf + have, cap - have);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return have == 0 ? 0 : -EINVAL; /* last line without '\n' */
		have += (size_t)n;
		/* Parse every complete line, keep the tail. */
		char *last_nl = NULL;
		for (size_t i = have; i > 0; i--)
			if (buf[i - 1] == '\n') {
				last_nl = buf + i - 1;
				break;
			}
		if (!last_nl) {
			if (have == cap)
				return -EFBIG; /* one line longer than 64 KiB: garbage */
			continue;
		}
		size_t whole = (size_t)(last_nl - buf) + 1;
		int r = procfs_maps_find(buf, whole, dev, ino, e);
		if (r != 0)
			return r;
		memmove(buf, buf + whole, have - whole);
		have -= whole;
	}
}

/* Is the image on shmem (tmpfs, hugetlbfs)? Through exefd, or an O_PATH
 * open of the link when the capture has no fd. */
static bool is_shmem(const struct procdir *d, int exefd)
{
	_cleanup_close_ int own = -1;
	if (exefd < 0) {
		char nb[48];
		own = openat(d->dirfd, procdir_name(d, "exe", nb, sizeof(nb)), O_PATH | O_CLOEXEC);
		if (own < 0)
			return false;
		exefd = own;
	}
	struct statfs sf;
	if (fstatfs(exefd, &sf) < 0)
		return false;
	return (unsigned long)sf.f_type == TMPFS_MAGIC ||
	       (unsigned long)sf.f_type == HUGETLBFS_MAGIC;
}

/* Is the file at `path`, resolved in the PROCESS's root (its mount ns), the
 * same file as *st? Resolution stays inside that root (RESOLVE_IN_ROOT)
 * and follows no magic links. */
static bool literal_name_is(const struct procdir *d, const char *path, const struct stat *st)
{
	char nb[48];
	_cleanup_close_ int root = openat(d->dirfd, procdir_name(d, "root", nb, sizeof(nb)),
					  O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return false;
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	_cleanup_close_ int fd = (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
	struct stat lst;
	if (fd < 0 || fstat(fd, &lst) < 0)
		return false;
	return lst.st_dev == st->st_dev && lst.st_ino == st->st_ino;
}

/* The label and the flags, from the exe link and the image's stat. The
 * rules are the same in every mode (exe.h). */
static int exe_label(const struct procdir *d, int exefd, const struct stat *st, struct exe_tuple *t)
{
	char nb[48], link[PATH_MAX];
	ssize_t n = readlinkat(d->dirfd, procdir_name(d, "exe", nb, sizeof(nb)), link, sizeof(link));
	if (n < 0)
		return -errno;
	if ((size_t)n >= sizeof(link))
		return -ENAMETOOLONG;
	link[n] = '\0';

	static const char suffix[] = " (deleted)";
	size_t slen = sizeof(suffix) - 1;
	bool suffixed = (size_t)n >= slen && memcmp(link + n - slen, suffix, slen) == 0;
	/* A memfd lives on the kernel's internal shmem mount at its root, named
	 * "memfd:<name>", and was never linked anywhere. */
	bool memfd_name = strncmp(link, "/memfd:", 7) == 0;
	bool root_level = strchr(link + 1, '/') == NULL;
	t->memfd = st->st_nlink == 0 && (memfd_name || root_level) && is_shmem(d, exefd);
	if (suffixed) {
		/* " (deleted)" may also be a real file name: only strip it when
		 * the file has no links left, or the literal name is not it. */
		bool literal = st->st_nlink > 0 && literal_name_is(d, link, st);
		if (!literal) {
			link[n - (ssize_t)slen] = '\0';
			t->deleted = !t->memfd;
		}
	}
	return strscpy(t->path, link, sizeof(t->path));
}

/* The one capture: stat of the image (fstat of exefd, else through the
 * link), the label, and in strict mode the maps cross-check. t is zeroed on
 * failure. */
static int capture(const struct procdir *d, int exefd, enum exe_capture_mode mode, struct exe_tuple *t)
{
	memset(t, 0, sizeof(*t));
	struct stat st;
	char nb[48];
	if ((exefd >= 0 ? fstat(exefd, &st) : fstatat(d->dirfd, procdir_name(d, "exe", nb, sizeof(nb)), &st, 0)) < 0)
		return -errno;
	t->dev = st.st_dev;
	t->ino = st.st_ino;
	t->size = st.st_size;
	t->mtime_ns = ts_ns(&st.st_mtim);
	t->ctime_ns = ts_ns(&st.st_ctim);
	int r = exe_label(d, exefd, &st, t);
	if (r < 0 || mode == EXE_CAPTURE_CHEAP)
		goto out;

	/* exec installs the new exe link (and a fresh mm) before it maps the
	 * image, so an observer racing an exec sees no mapping for a moment.
	 * Only a real mismatch pays for the few short retries. */
	for (int attempt = 0;; attempt++) {
		r = maps_has_file(d, t->dev, t->ino);
		if (r < 0)
			goto out;
		if (r == 1 || attempt == 3)
			break;
		struct timespec ts = { 0, 1000000L };
		nanosleep(&ts, NULL);
	}
	t->maps_mismatch = r == 0;
	r = 0;
out:
	if (r < 0)
		memset(t, 0, sizeof(*t));
	return r;
}

int exe_capture_at(int procdirfd, int exefd, enum exe_capture_mode mode, struct exe_tuple *t)
{
	struct procdir d = { .dirfd = procdirfd };
	if (mode == EXE_CAPTURE_STRICT && exefd < 0) {
		_cleanup_close_ int fd = exe_open_at(procdirfd);
		if (fd < 0) {
			memset(t, 0, sizeof(*t));
			return fd;
		}
		return capture(&d, fd, mode, t);
	}
	return capture(&d, exefd, mode, t);
}

int exe_capture_pid(pid_t procfs_pid, enum exe_capture_mode mode, struct exe_tuple *t)
{
	struct procdir d = { .dirfd = AT_FDCWD };
	snprintf(d.prefix, sizeof(d.prefix), "/proc/%d/", (int)procfs_pid);
	if (mode == EXE_CAPTURE_STRICT) {
		char nb[48];
		_cleanup_close_ int fd = openat(AT_FDCWD, procdir_name(&d, "exe", nb, sizeof(nb)),
						O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (fd < 0) {
			memset(t, 0, sizeof(*t));
			return -errno;
		}
		return capture(&d, fd, mode, t);
	}
	return capture(&d, -1, mode, t);
}

bool exe_tuple_matches_stat(const struct exe_tuple *t, const struct stat *st)
{
	/* Unlinking changes ctime too; the link count is checked as well so
	 * that a filesystem which does not cannot keep a stale label. */
	return t->dev == (uint64_t)st->st_dev && t->ino == (uint64_t)st->st_ino && t->size == st->st_size &&
	       t->mtime_ns == ts_ns(&st->st_mtim) && t->ctime_ns == ts_ns(&st->st_ctim) &&
	       (st->st_nlink == 0 ? (t->deleted || t->memfd) : !t->memfd);
}

int exe_tuple_from_fd(int procdirfd, int exefd, struct exe_tuple *t)
{
	return exe_capture_at(procdirfd, exefd, EXE_CAPTURE_STRICT, t);
}

int exe_tuple_read_at(int procdirfd, struct exe_tuple *t)
{
	return exe_capture_at(procdirfd, -1, EXE_CAPTURE_STRICT, t);
}

int exe_tuple_read(pid_t pid, struct exe_tuple *t)
{
	char dir[32];
	snprintf(dir, sizeof(dir), "/proc/%d", (int)pid);
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	return exe_tuple_read_at(dfd, t);
}

bool exe_tuple_same_file(const struct exe_tuple *a, const struct exe_tuple *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

int exe_hash_fd(int fd, uint8_t out[32])
{
	if (sodium_init() < 0)
		return -EIO;
	const size_t cap = 128 * 1024;
	_cleanup_free_ unsigned char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	crypto_hash_sha256_state st;
	crypto_hash_sha256_init(&st);
	off_t off = 0;
	for (;;) {
		ssize_t n = pread(fd, buf, cap, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
		off += n;
	}
	crypto_hash_sha256_final(&st, out);
	return 0;
}

/* ---- cache: hash table (chained by index) + LRU list, under one mutex ---- */

struct cache_entry {
	uint64_t dev, ino;
	int64_t size, mtime_ns, ctime_ns;
	uint8_t sha256[32];
	uint32_t chain;          /* next in bucket, or NIL */
	uint32_t lru_prev, lru_next;
	bool used;
};

#define NIL UINT32_MAX

struct exe_hash_cache {
	pthread_mutex_t lock;
	size_t cap, n, nbuckets;
	struct cache_entry *e;
	uint32_t *bucket;
	uint32_t lru_head, lru_tail; /* head = most recent */
	uint64_t hits, misses, evictions;
};

struct exe_hash_cache *exe_hash_cache_new(size_t capacity)
{
	if (capacity == 0 || capacity > (1u << 24))
		return NULL;
	struct exe_hash_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	size_t nb = 1;
	while (nb < capacity * 2)
		nb <<= 1;
	c->cap = capacity;
	c->nbuckets = nb;
	c->e = calloc(capacity, sizeof(*c->e));
	c->bucket = malloc(nb * sizeof(*c->bucket));
	if (!c->e || !c->bucket || pthread_mutex_init(&c->lock, NULL) != 0) {
		free(c->e);
		free(c->bucket);
		free(c);
		return NULL;
	}
	for (size_t i = 0; i < nb; i++)
		c->bucket[i] = NIL;
	c->lru_head = c->lru_tail = NIL;
	return c;
}

void exe_hash_cache_free(struct exe_hash_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->e);
	free(c->bucket);
	free(c);
}

static size_t cache_slot(const struct exe_hash_cache *c, const struct exe_tuple *t)
{
	uint64_t h = t->dev * 0x9e3779b97f4a7c15ULL;
	h ^= t->ino + 0x632be59bd9b4e019ULL + (h << 6) + (h >> 2);
	h ^= (uint64_t)t->size + (h << 6) + (h >> 2);
	h ^= (uint64_t)t->mtime_ns + (h << 6) + (h >> 2);
	h ^= (uint64_t)t->ctime_ns + (h << 6) + (h >> 2);
	h ^= h >> 31;
	return (size_t)(h & (c->nbuckets - 1));
}

static bool entry_is(const struct cache_entry *e, const struct exe_tuple *t)
{
	return e->dev == t->dev && e->ino == t->ino && e->size == t->size &&
	       e->mtime_ns == t->mtime_ns && e->ctime_ns == t->ctime_ns;
}

static void lru_unlink(struct exe_hash_cache *c, uint32_t i)
{
	struct cache_entry *e = &c->e[i];
	if (e->lru_prev != NIL)
		c->e[e->lru_prev].lru_next = e->lru_next;
	else
		c->lru_head = e->lru_next;
	if (e->lru_next != NIL)
		c->e[e->lru_next].lru_prev = e->lru_prev;
	else
		c->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NIL;
}

static void lru_push_front(struct exe_hash_cache *c, uint32_t i)
{
	struct cache_entry *e = &c->e[i];
	e->lru_prev = NIL;
	e->lru_next = c->lru_head;
	if (c->lru_head != NIL)
		c->e[c->lru_head].lru_prev = i;
	c->lru_head = i;
	if (c->lru_tail == NIL)
		c->lru_tail = i;
}

static uint32_t cache_find(struct exe_hash_cache *c, const struct exe_tuple *t)
{
	for (uint32_t i = c->bucket[cache_slot(c, t)]; i != NIL; i = c->e[i].chain)
		if (entry_is(&c->e[i], t))
			return i;
	return NIL;
}

int exe_hash_cache_get(struct exe_hash_cache *c, const struct exe_tuple *t, uint8_t out[32])
{
	pthread_mutex_lock(&c->lock);
	uint32_t i = cache_find(c, t);
	if (i != NIL) {
		memcpy(out, c->e[i].sha256, 32);
		lru_unlink(c, i);
		lru_push_front(c, i);
		c->hits++;
	} else {
		c->misses++;
	}
	pthread_mutex_unlock(&c->lock);
	return i != NIL;
}

static void bucket_remove(struct exe_hash_cache *c, uint32_t victim)
{
	struct exe_tuple t = {
		.dev = c->e[victim].dev, .ino = c->e[victim].ino, .size = c->e[victim].size,
		.mtime_ns = c->e[victim].mtime_ns, .ctime_ns = c->e[victim].ctime_ns,
	};
	uint32_t *pp = &c->bucket[cache_slot(c, &t)];
	while (*pp != NIL && *pp != victim)
		pp = &c->e[*pp].chain;
	if (*pp == victim)
		*pp = c->e[victim].chain;
}

void exe_hash_cache_put(struct exe_hash_cache *c, const struct exe_tuple *t, const uint8_t h[32])
{
	pthread_mutex_lock(&c->lock);
	uint32_t i = cache_find(c, t);
	if (i == NIL) {
		if (c->n < c->cap) {
			i = (uint32_t)c->n++;
		} else {
			i = c->lru_tail; /* least recently used */
			lru_unlink(c, i);
			bucket_remove(c, i);
			c->evictions++;
		}
		struct cache_entry *e = &c->e[i];
		e->dev = t->dev;
		e->ino = t->ino;
		e->size = t->size;
		e->mtime_ns = t->mtime_ns;
		e->ctime_ns = t->ctime_ns;
		e->used = true;
		size_t s = cache_slot(c, t);
		e->chain = c->bucket[s];
		c->bucket[s] = i;
	} else {
		lru_unlink(c, i);
	}
	memcpy(c->e[i].sha256, h, 32);
	lru_push_front(c, i);
	pthread_mutex_unlock(&c->lock);
}

void exe_hash_cache_stats(struct exe_hash_cache *c, struct exe_hash_cache_stats *out)
{
	pthread_mutex_lock(&c->lock);
	out->hits = c->hits;
	out->misses = c->misses;
	out->evictions = c->evictions;
	out->entries = c->n;
	out->capacity = c->cap;
	pthread_mutex_unlock(&c->lock);
}

int exe_hash_cached(struct exe_hash_cache *cache, int fd, struct exe_tuple *t)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	struct exe_tuple now = {
		.dev = st.st_dev, .ino = st.st_ino, .size = st.st_size,
		.mtime_ns = ts_ns(&st.st_mtim), .ctime_ns = ts_ns(&st.st_ctim),
	};
	if (!exe_tuple_same_file(&now, t))
		return -ESTALE;
	uint8_t h[32];
	if (cache && exe_hash_cache_get(cache, t, h) == 1) {
		memcpy(t->sha256, h, 32);
		t->hashed = true;
		return 0;
	}
	int r = exe_hash_fd(fd, h);
	if (r < 0)
		return r;
	/* Written while we read? Then the hash may mix versions: refuse it. */
	if (fstat(fd, &st) < 0)
		return -errno;
	now.size = st.st_size;
	now.mtime_ns = ts_ns(&st.st_mtim);
	now.ctime_ns = ts_ns(&st.st_ctim);
	if (!exe_tuple_same_file(&now, t))
		return -ESTALE;
	if (cache)
		exe_hash_cache_put(cache, t, h);
	memcpy(t->sha256, h, 32);
	t->hashed = true;
	return 0;
}

int exe_tuple_hash(int procdirfd, struct exe_tuple *t, struct exe_hash_cache *cache)
{
	_cleanup_close_ int fd = exe_open_at(procdirfd);
	if (fd < 0)
		return fd;
	return exe_hash_cached(cache, fd, t);
}

/* ---- libuv job ---- */

void exe_hash_job_init(struct exe_hash_job *job, int exe_fd, const struct exe_tuple *t,
		       struct exe_hash_cache *cache, void (*done)(struct exe_hash_job *job),
		       void *userdata)
{
	memset(job, 0, sizeof(*job));
	job->exe_fd = exe_fd;
	job->tuple = *t;
	job->tuple.hashed = false;
	job->cache = cache;
	job->done = done;
	job->userdata = userdata;
	job->result = -EINPROGRESS;
}

void exe_hash_job_work(uv_work_t *req)
{
	struct exe_hash_job *job = (struct exe_hash_job *)((char *)req - offsetof(struct exe_hash_job, req));
	job->result = job->exe_fd < 0 ? -EBADF : exe_hash_cached(job->cache, job->exe_fd, &job->tuple);
}

void exe_hash_job_after(uv_work_t *req, int status)
{
	struct exe_hash_job *job = (struct exe_hash_job *)((char *)req - offsetof(struct exe_hash_job, req));
	if (status == UV_ECANCELED)
		job->result = -ECANCELED;
	if (job->exe_fd >= 0) {
		close(job->exe_fd);
		job->exe_fd = -1;
	}
	if (job->done)
		job->done(job);
}

int exe_hash_job_queue(uv_loop_t *loop, struct exe_hash_job *job)
{
	int r = uv_queue_work(loop, &job->req, exe_hash_job_work, exe_hash_job_after);
	if (r < 0 && job->exe_fd >= 0) {
		close(job->exe_fd);
		job->exe_fd = -1;
	}
	return r;
}
