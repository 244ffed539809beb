/* exe: what binary a process is running, verified through the open file.
 *
 * The tuple (dev, ino, size, mtime, ctime) comes from fstat of the file
 * opened through /proc/<pid>/exe, i.e. the running image, never a path
 * lookup: a file renamed over the path after exec, a bind mount in a private
 * mount namespace or an unlinked binary cannot change it. The path is only a
 * label (readlink, " (deleted)" stripped). The tuple is cross-checked against
 * /proc/<pid>/maps: a process that unmapped its image and re-pointed its exe
 * link (PR_SET_MM_MAP, possible only with CAP_SYS_RESOURCE in its own user
 * namespace) has no mapping of that (dev, ino) and gets maps_mismatch.
 *
 * HASHING IS BLOCKING I/O OVER A WHOLE BINARY (tens of milliseconds for a
 * large one). Never call exe_hash_fd, exe_hash_cached, exe_tuple_hash or
 * procref_hash_exe on an event-loop thread: from libuv, queue an
 * exe_hash_job with exe_hash_job_queue (its work half runs in the thread
 * pool and touches no loop state). */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <uv.h>

/* A running image as captured (below): the file version, the label, and
 * its hash once hashed. */
struct exe_tuple {
	uint64_t dev;
	uint64_t ino;
	int64_t size;
	int64_t mtime_ns;
	int64_t ctime_ns;
	char path[PATH_MAX]; /* readlink of /proc/<pid>/exe, " (deleted)" stripped */
	bool deleted;        /* the image was unlinked after exec */
	bool memfd;          /* the image is a memfd (path "/memfd:...") */
	bool maps_mismatch;  /* (dev, ino) differs from the main mapping in maps */
	bool hashed;         /* sha256 is valid */
	uint8_t sha256[32];  /* of the opened running image */
};

/* Open the running image: /proc/<pid>/exe relative to a /proc/<pid>
 * directory fd, O_RDONLY|O_CLOEXEC. Returns the fd or -errno (-ENOENT for a
 * kernel thread or a zombie, -EACCES without ptrace-read access). */
int exe_open_at(int procdirfd);

/* ---- The capture: one set of rules, two costs ----
 *
 * Every exe tuple in tether is captured here, by the strict readers below
 * (procref, the identity service, the local strategy) and by the seccomp
 * connect notifier (proc-supervisor/notify.c), whose records reach decisions
 * through the cookie registry. The rules are the same in both modes:
 *   - file: dev, ino, size, mtime, ctime of the running image (through the
 *     exe link or an fd opened from it, never a path lookup);
 *   - path: readlink of the exe link; " (deleted)" is stripped only when the
 *     file has no links left or the literal name (resolved in the process's
 *     own root) is not that file: a file really named "x (deleted)" keeps it;
 *   - memfd: no links, on shmem (tmpfs/hugetlbfs), and named "/memfd:..." or
 *     at the root of its (unmounted) filesystem; a memfd is never `deleted`,
 *     and a deleted binary on a tmpfs is not a memfd.
 * The one difference, and why:
 *   EXE_CAPTURE_STRICT  opens the image and cross-checks /proc/<pid>/maps
 *                       (maps_mismatch, see above): a read of the whole maps
 *                       file, too slow for a caller blocked in connect().
 *   EXE_CAPTURE_CHEAP   stats through the link, no open, no maps read:
 *                       maps_mismatch is always false. Cost for an ordinary
 *                       binary: one stat and one readlink (the shmem and
 *                       literal-name checks run only for an unlinked image
 *                       or a " (deleted)" name). The notifier's records are
 *                       a claim about who connected; whoever verifies a flow
 *                       re-reads the image strictly and hashes it. */
enum exe_capture_mode {
	EXE_CAPTURE_STRICT = 0,
	EXE_CAPTURE_CHEAP,
};

/* Capture the image of the process whose /proc/<pid> directory is
 * procdirfd. exefd: the image already opened from it (exe_open_at), or -1
 * (STRICT opens it, CHEAP stats through the link). 0, or -errno with t
 * zeroed (-ENOENT kernel thread or zombie, -EACCES no ptrace-read access). */
int exe_capture_at(int procdirfd, int exefd, enum exe_capture_mode mode, struct exe_tuple *t);
/* The same, naming the process by "/proc/<procfs_pid>/..." paths: no open
 * of the directory (the notifier's way; pid in the procfs mount's pidns). */
int exe_capture_pid(pid_t procfs_pid, enum exe_capture_mode mode, struct exe_tuple *t);
/* Would a capture now give t again? A stat of the exe link (st) against
 * t: same file version, and still (un)linked as when labelled. The
 * notifier's check for a cached caller, before it captures again. */
bool exe_tuple_matches_stat(const struct exe_tuple *t, const struct stat *st);

/* Strict capture (EXE_CAPTURE_STRICT) from an open image fd and the
 * /proc/<pid> directory. t->hashed is false afterwards. */
int exe_tuple_from_fd(int procdirfd, int exefd, struct exe_tuple *t);
/* Open + fill. pid is in the procfs mount's pidns; the caller confirms the
 * process is still the one it meant (procref_open does). */
int exe_tuple_read_at(int procdirfd, struct exe_tuple *t);
int exe_tuple_read(pid_t pid, struct exe_tuple *t);

/* Do two tuples name the same file content version (dev, ino, size, mtime,
 * ctime)? The path and flags are not compared. */
bool exe_tuple_same_file(const struct exe_tuple *a, const struct exe_tuple *b);

/* SHA-256 of everything readable through fd (pread from offset 0, so the fd
 * position is irrelevant and concurrent use is safe). Blocking. */
int exe_hash_fd(int fd, uint8_t out[32]);

/* Bounded, thread-safe cache of hashes keyed by (dev, ino, size, mtime,
 * ctime): a file whose content changes in place changes mtime/ctime, so a
 * stale hit needs a deliberately preserved timestamp *and* size — root can
 * do that, so pin-critical callers may bypass the cache (cache = NULL). */
struct exe_hash_cache;
struct exe_hash_cache *exe_hash_cache_new(size_t capacity); /* capacity >= 1 */
void exe_hash_cache_free(struct exe_hash_cache *c);
/* Look up; 1 hit (out filled), 0 miss. */
int exe_hash_cache_get(struct exe_hash_cache *c, const struct exe_tuple *t, uint8_t out[32]);
void exe_hash_cache_put(struct exe_hash_cache *c, const struct exe_tuple *t, const uint8_t h[32]);
struct exe_hash_cache_stats {
	uint64_t hits, misses, evictions;
	size_t entries, capacity;
};
void exe_hash_cache_stats(struct exe_hash_cache *c, struct exe_hash_cache_stats *out);

/* Hash fd whose fstat matches t (else -ESTALE), through cache (may be NULL).
 * Fills t->sha256 and sets t->hashed. Blocking. */
int exe_hash_cached(struct exe_hash_cache *cache, int fd, struct exe_tuple *t);
/* Open /proc/<pid>/exe under procdirfd, check it is still t's file
 * (-ESTALE: the process exec'd meanwhile) and hash it. Blocking. */
int exe_tuple_hash(int procdirfd, struct exe_tuple *t, struct exe_hash_cache *cache);

/* libuv thread-pool job. Fill the inputs, exe_hash_job_queue() it from the
 * loop thread; `done` runs on the loop thread with result (0 or -errno) and
 * tuple.sha256/tuple.hashed set. The job owns exe_fd (closed when done).
 * work() uses only the job's own fields and the thread-safe cache. */
struct exe_hash_job {
	uv_work_t req; /* req.data is free for the caller */
	/* in */
	int exe_fd;               /* the opened image (exe_open_at), owned */
	struct exe_tuple tuple;   /* the tuple the fd must still match */
	struct exe_hash_cache *cache; /* may be NULL */
	void (*done)(struct exe_hash_job *job);
	void *userdata;
	/* out */
	int result;
};
/* Initialise inputs; takes ownership of exe_fd. */
void exe_hash_job_init(struct exe_hash_job *job, int exe_fd, const struct exe_tuple *t,
		       struct exe_hash_cache *cache, void (*done)(struct exe_hash_job *job),
		       void *userdata);
/* The two halves, usable directly with uv_queue_work(loop, &job->req,
 * exe_hash_job_work, exe_hash_job_after). */
void exe_hash_job_work(uv_work_t *req);
void exe_hash_job_after(uv_work_t *req, int status);
/* uv_queue_work with the above; a libuv error (negative errno) when it
 * cannot queue, in which case done is not called and exe_fd is already
 * closed (set to -1). Call on the loop thread. */
int exe_hash_job_queue(uv_loop_t *loop, struct exe_hash_job *job);
