/* ProcessRef: a verified reference to one process.
 *
 * A ref is opened through a pidfd, so the kernel pins *which* process it
 * names; everything read from procfs is confirmed against that pidfd after
 * reading (pidfd still alive => /proc/<pid> was that process). The textual
 * key is stable across PID namespaces when the pidfs inode is available
 * ("<boot_id>:<ino>"), else "<boot_id>:<pid>:<start_time>" and key_kind says
 * so. A ref with pidfd == -1 is a *recorded* ref (from the process table or
 * the wire): it describes a process but proves nothing about a live one. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/kernel.h"
#include "identity/exe.h" /* struct exe_tuple */

enum procref_key_kind {
	PROCREF_KEY_PIDFS = 1,     /* boot_id + pidfs inode */
	PROCREF_KEY_PID_START = 2, /* boot_id + pid + start_time (pre-6.9 fallback) */
};

/* Where a field came from, so a ref can say which fallback it used. */
enum procref_source { PROCREF_SRC_PIDFD_INFO = 1, PROCREF_SRC_PROCFS = 2 };

#define PROCREF_KEY_MAX 96

struct procref {
	int pidfd; /* owned; -1 for a recorded ref */
	char boot_id[37];
	enum procref_key_kind key_kind;
	uint64_t pidfs_ino; /* 0 when key_kind is PID_START */
	pid_t pid;          /* as seen by the caller */
	pid_t ppid;         /* live parent as seen by the caller; 0 if outside the pidns */
	uint64_t start_time; /* stat field 22, clock ticks since boot */
	uid_t ruid, euid, suid, fsuid;
	gid_t rgid, egid, sgid, fsgid;
	uint64_t cgroup_id; /* 0 when unknown (no cgroup v2) */
	enum procref_source info_source; /* pid/creds/cgroup: ioctl or procfs */
	char comm[17];
	struct exe_tuple exe; /* exe.hashed false until procref_hash_exe() */
	char key[PROCREF_KEY_MAX];
	/* Extensions (appended; nothing above changed). */
	pid_t procfs_pid; /* the same process under /proc (the procfs mount's pidns) */
	char state;       /* stat field 3 when read */
	int exe_err;      /* 0, or -errno: why exe is unknown (kernel thread: -ENOENT) */
};

struct exe_hash_cache;

/* Open pid (in the caller's PID namespace). Fills everything but the exe
 * hash (an unreadable exe is exe_err, not a failure). -ESRCH when the
 * process is gone, is a zombie, or exits while being read; -EREMOTE when it
 * is not visible in our /proc; -EINVAL for pid <= 0 or caps without boot_id.
 * Blocking procfs reads (tens of µs): fine on a loop thread, hashing is not.
 * On any error *out is safe to procref_close (pidfd -1). */
int procref_open(const struct kernel_caps *caps, pid_t pid, struct procref *out);
/* procref_open without the exe tuple when flags has PROCREF_NO_EXE (for
 * scans that only need identity: saves the exe open and maps scan; the ref
 * then has exe_err = -ENODATA). */
#define PROCREF_NO_EXE 1u
int procref_open_ex(const struct kernel_caps *caps, pid_t pid, unsigned flags, struct procref *out);
int procref_from_pidfd_ex(const struct kernel_caps *caps, int pidfd, unsigned flags,
			  struct procref *out);
/* Same, from a pidfd the caller owns; the ref takes a dup of it (the
 * caller's fd stays theirs). pid is PIDFD_GET_INFO's, or NSpid-translated. */
int procref_from_pidfd(const struct kernel_caps *caps, int pidfd, struct procref *out);
/* A fresh copy of the live ref `known` (known->pidfd >= 0), for a caller
 * that filled it moments ago and needs its parent now: the pidfd is
 * duplicated, pid, ppid, credentials and cgroup id are read again with
 * PIDFD_GET_INFO, the rest (start time, comm, exe tuple) is kept; the
 * process must still be alive. Without the ioctl: procref_from_pidfd with
 * PROCREF_NO_EXE. 0; -ESRCH exited; -EBADF no pidfd. */
int procref_refresh(const struct kernel_caps *caps, const struct procref *known, struct procref *out);
/* Is the pidfd still the process described? 0 yes; -ESRCH exited;
 * -ESTALE when the identifying fields no longer match (must not happen
 * with a pidfd, but recorded refs opened anew are checked this way). */
int procref_revalidate(const struct kernel_caps *caps, const struct procref *ref);
/* Does a live process at `pid` match recorded ref `rec` (same key)? Opens a
 * fresh pidfd; 0 on match, -ESRCH gone, -ESTALE a different process (pid reused). */
int procref_match_pid(const struct kernel_caps *caps, const struct procref *rec, pid_t pid);
/* Copy without the pidfd (a recorded ref). */
void procref_copy_recorded(struct procref *dst, const struct procref *src);
void procref_close(struct procref *ref);
/* Same process? Compares key only. */
bool procref_same(const struct procref *a, const struct procref *b);

/* Hash the running image of a live ref into ref->exe (sha256, hashed) —
 * BLOCKING (reads the whole binary): never on an event-loop thread; see
 * exe.h for the thread-pool job. The file opened must still carry ref->exe's
 * (dev, ino, size, mtime, ctime) and the pidfd must still be alive after
 * hashing, else -ESTALE / -ESRCH. cache may be NULL. */
int procref_hash_exe(struct procref *ref, struct exe_hash_cache *cache);
/* The hash of the image whose tuple `ref` read (moments ago, from the live
 * process): a cache hit for that tuple answers without opening the image
 * again; a miss (or no cache) is procref_hash_exe. For callers that check
 * the process is still the same one afterwards (the walk's liveness check,
 * procref_revalidate). Same returns as procref_hash_exe. */
int procref_hash_exe_read(struct procref *ref, struct exe_hash_cache *cache);
/* Key of `ref` as `kind` would spell it (PIDFS needs pidfs_ino != 0):
 * lets a ref recorded under one key kind be compared on a host whose caps
 * differ. -EINVAL when the ref cannot be spelled that way. */
int procref_format_key(const struct procref *ref, enum procref_key_kind kind, char *buf,
		       size_t size);
const char *procref_key_kind_name(enum procref_key_kind kind); /* "pidfs", "pid_start" */
const char *procref_source_name(enum procref_source src);      /* "pidfd_info", "procfs" */
