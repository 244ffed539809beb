/* Test helper: a child process parked in fresh namespaces. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

struct nschild {
	pid_t pid;    /* the process in the namespaces (in our PID ns) */
	pid_t direct; /* our direct child (== pid unless CLONE_NEWPID) */
	int pidfd;    /* of pid */
	int result;   /* read end: what fn wrote, -1 when none */
};

/* flags: CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS. fn (may be NULL) runs
 * in the parked process with the write end of the result pipe; then the
 * process sleeps until nschild_stop(). Every child dies with us
 * (PR_SET_PDEATHSIG) and sleeps at most 60 s. */
int nschild_start(struct nschild *c, int flags, void (*fn)(int wfd, void *arg), void *arg);
void nschild_stop(struct nschild *c);
/* Read exactly n bytes from c->result with a timeout; -errno on failure. */
int nschild_read(struct nschild *c, void *buf, size_t n, int timeout_ms);

/* "tt-test-<pid>-<tag>" into buf. */
void tt_name(char *buf, size_t size, const char *tag);
/* Is the test running as root? Skips are reported by the caller. */
bool tt_is_root(void);
