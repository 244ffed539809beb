/* procfs: parsers for the /proc/<pid> files identity needs.
 *
 * Every parser is a pure function over (buf, len): the buffer need not be
 * NUL-terminated but a whole file must end in '\n' (a short read would cut
 * the last number silently), and the contents are treated as hostile (a process chooses
 * its own comm, cgroup names and mapped paths). Anything truncated, empty,
 * malformed, duplicated or out of range is -EINVAL; a buffer larger than the
 * parser's limit is -EFBIG. Parsers never allocate and never crash.
 *
 * The readers (procfs_read_at) are the only functions here that touch the
 * file system. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Longest comm the kernel prints in stat (kernel threads get up to 64). */
#define PROCFS_COMM_MAX 64
/* PID namespaces nest at most 32 deep. */
#define PROCFS_NSPID_MAX 32

/* Input limits: a real file is far smaller; more is garbage. */
#define PROCFS_STAT_MAX 4096
#define PROCFS_STATUS_MAX (1024 * 1024) /* Groups: may list 65536 gids */
#define PROCFS_CGROUP_MAX (64 * 1024)
#define PROCFS_FDINFO_MAX 4096
#define PROCFS_MAPS_LINE_MAX (PATH_MAX + 256)

struct procfs_stat {
	pid_t pid;                      /* field 1, in the procfs mount's pidns */
	char comm[PROCFS_COMM_MAX + 1]; /* field 2 without the parentheses */
	char state;                     /* field 3 */
	pid_t ppid;                     /* field 4 */
	uint64_t start_time;            /* field 22, clock ticks since boot */
};
/* /proc/<pid>/stat. comm may contain spaces, '(' , ')' and newlines: the
 * comm ends at the LAST ')' in the buffer. */
int procfs_parse_stat(const char *buf, size_t len, struct procfs_stat *out);
/* The host's fork count, "processes" of /proc/stat (NUL-terminated buf);
 * 0 when the line is missing or malformed. */
uint64_t procfs_parse_forks(const char *buf);

struct procfs_status {
	pid_t tgid, pid, ppid;
	uid_t uid[4]; /* real, effective, saved, fs */
	gid_t gid[4];
	size_t n_nspid; /* 0 when the kernel has no NSpid: line */
	pid_t nspid[PROCFS_NSPID_MAX]; /* outermost (procfs mount's ns) first */
};
/* /proc/<pid>/status. Uid:, Gid: and PPid: are required (exactly once). */
int procfs_parse_status(const char *buf, size_t len, struct procfs_status *out);

struct procfs_cgroup {
	char path[PATH_MAX]; /* v2 path, " (deleted)" stripped; starts with '/' */
	bool deleted;
	bool escapes; /* has a ".." component: outside the reader's cgroup ns */
};
/* /proc/<pid>/cgroup: finds the single v2 line "0::/path" among any v1
 * lines ("N:ctrl,ctrl:/path"). -ENOENT when the file is well-formed but has
 * no v2 line (a pure v1 host). */
int procfs_parse_cgroup(const char *buf, size_t len, struct procfs_cgroup *out);

struct procfs_maps_entry {
	uint64_t start, end, offset;
	char perms[5];
	unsigned int dev_major, dev_minor; /* as printed, hex */
	uint64_t ino;
	char path[PATH_MAX]; /* "" for anonymous; " (deleted)" stripped */
	bool deleted;
};
/* One line of /proc/<pid>/maps (without or with its trailing '\n'). */
int procfs_parse_maps_line(const char *line, size_t len, struct procfs_maps_entry *out);
/* Scan a whole maps buffer for the first mapping of (dev, ino) — dev as in
 * st_dev. 1 found (out filled), 0 not found, -EINVAL on any bad line. A
 * buffer that ends in the middle of a line is bad: callers that read maps
 * in chunks pass whole lines. */
int procfs_maps_find(const char *buf, size_t len, uint64_t dev, uint64_t ino,
		     struct procfs_maps_entry *out);

/* The "Pid:" line of a pidfd's /proc/<self>/fdinfo/<fd>: the process's pid
 * in the procfs mount's pidns; -1 (exited) and 0 (not visible there) are
 * returned as-is for the caller to judge. */
int procfs_parse_fdinfo_pid(const char *buf, size_t len, pid_t *out);

/* Read dirfd/name into a fresh heap buffer (NUL-terminated, *len without the
 * NUL), growing as needed: a file of max bytes or more is -EFBIG. Free *buf
 * with free(). */
int procfs_read_at(int dirfd, const char *name, size_t max, char **buf, size_t *len);

/* procfs_read_at + procfs_parse_stat of dirfd/name (a process's "stat"):
 * 0, -ESRCH when the file is gone (the process exited), other -errno. */
int procfs_read_stat_at(int dirfd, const char *name, struct procfs_stat *out);
