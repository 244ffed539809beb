/* holders: which member processes hold a given socket in their fd table.
 *
 * Only the pids the caller passes are read (in production the anchor's
 * member set, members_live_pids); /proc is never enumerated. A pid is a
 * holder when an entry of /proc/<pid>/fd reads "socket:[inode]". Every holder
 * returned is VERIFIED: a pidfd is opened (procref_open), the fd link is
 * read again, and the pidfd is still alive afterwards — so the process that
 * showed the link is the one the returned ref pins, even if the pid is
 * reused meanwhile.
 *
 * The cache maps (inode, cookie) -> the holders found by the last full scan
 * and is never trusted as is: a hit is used only when the member set is the
 * one that scan covered (count and order-independent hash), and every
 * cached holder still is the same process (procref key) and still holds
 * the inode. Anything else drops the entry and rescans. Keying by the
 * cookie, which the kernel never reuses, means a wrapped 32-bit inode
 * number cannot hit another socket's entry. What a hit cannot see: a member
 * that received the socket by SCM_RIGHTS after the scan, without the
 * member set changing — callers that must catch that pass cookie 0 (no
 * cache).
 *
 * Not thread-safe: one struct holders per thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/kernel.h"
#include "identity/procref.h"

struct holders;

struct holder_list {
	struct procref *refs; /* live refs (own a pidfd each) */
	size_t n;
	bool from_cache;     /* answered by a revalidated cache entry */
	size_t n_pinned;     /* holders verified as one of the caller's pinned processes */
	size_t pids_scanned; /* fd tables read (diagnostics, benchmarks) */
	int first_fd;        /* the fd slot in which refs[0] was seen holding it; -1 unknown */
};

/* caps is borrowed and must outlive the handle. cache_capacity 0 disables
 * the cache. NULL with errno on failure. */
struct holders *holders_new(const struct kernel_caps *caps, size_t cache_capacity);
void holders_free(struct holders *h);
/* Forget every cached entry (benchmarks measure the cold path with it). */
void holders_cache_clear(struct holders *h);

/* Processes the caller keeps pinned: a pidfd taken after a full
 * verification, and the exe tuple proved then. When the search finds
 * procfs pid `pid` holding the socket it asks first; 0 means *out is that
 * process (a copy with its own pidfd, alive, its exe re-proved unchanged
 * by the callback just now), and the search then confirms only the fd
 * link and liveness after it instead of opening the process in full.
 * Anything else: the full open. */
typedef int (*holders_pinned_fn)(void *userdata, pid_t pid, struct procref *out);
void holders_set_pinned(struct holders *h, holders_pinned_fn fn, void *userdata);

/* Bound the work of each holders_find: at most `links` fd links read in
 * the full scan (a cache hit reads none beyond its holders'); past that
 * it fails with -E2BIG and returns nothing. 0 (the default): no bound.
 * For a caller that must not spend long, e.g. an event loop answering
 * the cheap cases itself and handing the rest to a thread. */
void holders_set_link_budget(struct holders *h, size_t links);

/* Find every verified holder of socket:[inode] among members[0..n_members).
 * cookie identifies the socket for the cache (0: do not use the cache).
 * 0 with out->n >= 0 (0 = nobody among the members holds it); -errno on a
 * system failure, -E2BIG past the link budget (out is then empty).
 * Release with holder_list_release. */
int holders_find(struct holders *h, uint32_t inode, uint64_t cookie, const pid_t *members,
		 size_t n_members, struct holder_list *out);
void holder_list_release(struct holder_list *l);

/* Does pid's fd table hold socket:[inode]? 1 yes (and *fd_out, may be
 * NULL), 0 no, -ESRCH no such process, other -errno. Unverified: the
 * caller pins the process first. */
int holders_pid_holds(int proc_dirfd, pid_t pid, uint32_t inode, int *fd_out);
