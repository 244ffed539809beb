/* Cleanup that survives a crash of the launcher.
 *
 * A cleanup_registry is a list of things that were created and must go
 * away: processes (by pidfd), named netns, links, mounts, cgroup dirs,
 * nftables tables, temp dirs, files. cleanup_registry_run() removes them:
 * processes first (SIGKILL by pidfd, then wait for exit), the rest in
 * reverse order of registration. Already-gone resources count as removed.
 *
 * The cleanup guardian is a forked child that owns such a registry. The
 * launcher registers each resource right after creating it, over a
 * SOCK_SEQPACKET socketpair (fds such as pidfds and netns fds travel with
 * SCM_RIGHTS). The guardian blocks reading its end; EOF means the launcher
 * is gone — normal exit, crash or SIGKILL — and the guardian removes
 * everything it was told about, then exits. PR_SET_PDEATHSIG is not used:
 * it fires on the death of the parent *thread*, and a signal to a process
 * that may have exec'd is not a cleanup. Normal teardown uses the same path
 * (cleanup_guardian_finish), so the crash path is the tested path.
 *
 * The guardian also holds a pidfd of the launcher: a forked child that never
 * execs keeps the launcher's (O_CLOEXEC) end open, so EOF alone could come
 * late; the launcher's exit is seen either way, and whatever it sent before
 * dying is drained and honoured. Start the guardian early, before threads. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "topology/error.h"

enum cleanup_kind {
	CLEANUP_PID = 1,   /* fd: pidfd; SIGKILL, then wait for exit (bounded) */
	CLEANUP_NETNS,     /* name: netns name under /run/netns */
	CLEANUP_LINK,      /* name: ifname; fd: netns fd (-1 = guardian's netns) */
	CLEANUP_MOUNT,     /* name: mount point; detached (MNT_DETACH) */
	CLEANUP_CGROUP,    /* name: cgroup dir; cgroup.kill, then rmdir depth-first */
	CLEANUP_NFT_TABLE, /* name: "FAMILY TABLE" e.g. "inet tether"; fd: netns or -1 */
	CLEANUP_TEMP_DIR,  /* name: absolute dir; removed recursively, never crossing mounts */
	CLEANUP_FILE,      /* name: path; unlinked (sockets, pid files) */
};

const char *cleanup_kind_name(enum cleanup_kind kind);

/* Remove one resource now. 0 also when it was already gone. */
int cleanup_remove(enum cleanup_kind kind, const char *name, int fd, struct topology_error *err);

struct cleanup_entry {
	enum cleanup_kind kind;
	uint64_t id;
	char *name; /* owned, may be NULL */
	int fd;     /* owned, -1 when none */
};

struct cleanup_registry {
	struct cleanup_entry *v;
	size_t n, cap;
};
#define CLEANUP_REGISTRY_INIT { 0 }

/* Takes ownership of fd (closed on error too). -EINVAL on a malformed entry. */
int cleanup_registry_add(struct cleanup_registry *r, enum cleanup_kind kind, uint64_t id,
			 const char *name, int fd);
/* Drop an entry without removing the resource; -ENOENT when unknown. */
int cleanup_registry_forget(struct cleanup_registry *r, uint64_t id);
/* Remove everything and empty the registry. Keeps going past failures;
 * returns 0 or the first failure's -errno (err says which). */
int cleanup_registry_run(struct cleanup_registry *r, struct topology_error *err);
/* Forget everything (close fds) without removing anything. */
void cleanup_registry_clear(struct cleanup_registry *r);

struct cleanup_guardian {
	pid_t pid;     /* the guardian, our child */
	int sock;      /* our end, O_CLOEXEC */
	uint64_t next_id;
};
#define CLEANUP_GUARDIAN_INIT { .pid = -1, .sock = -1, .next_id = 1 }

int cleanup_guardian_start(struct cleanup_guardian *g, struct topology_error *err);
/* Register a resource; fd is borrowed (a copy is sent). *id (optional) is
 * what cleanup_guardian_forget() takes. -EPIPE when the guardian is gone. */
int cleanup_guardian_add(struct cleanup_guardian *g, enum cleanup_kind kind, const char *name,
			 int fd, uint64_t *id);
int cleanup_guardian_forget(struct cleanup_guardian *g, uint64_t id);
/* Normal teardown: the guardian removes everything now, reports, exits and
 * is reaped. -ETIMEDOUT after timeout_ms (it keeps working; sock closed). */
int cleanup_guardian_finish(struct cleanup_guardian *g, int timeout_ms, struct topology_error *err);
/* Keep everything: the guardian forgets its list and exits; reaped. */
int cleanup_guardian_release(struct cleanup_guardian *g);
