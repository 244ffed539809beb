/* A small process tree for identity-cache tests, driven by one-byte
 * commands: anchor A -> mid M -> leaf L, L holding a TCP connection to a
 * listener the test owns. With anchor_self the test process itself is the
 * anchor (M is its child: the proc-side identity service anchors on its
 * own process). Commands, written to cmd_m or cmd_l:
 *   'c'  one more connection, held      'n'  the same, closing the previous extra one
 *   'x'  exec /bin/sleep, keeping the socket (L's has no CLOEXEC)
 *   'w'  exec ident_workload (built beside the test), which connects anew
 *   'f'  fork a child that execs /bin/sleep (inheriting the socket)
 *   'k'  fork a child that opens a connection of its own and holds it
 *   'd'  open 300 more fds (dups of stdin)
 *   'q'  exit
 * Every process is in M's (or A's) process group, killed by tree_stop. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "net-supervisor/identity_strategy.h"

struct tree {
	pid_t a, m, l;    /* a: 0 with anchor_self */
	pid_t pgid;       /* the tree's process group */
	int cmd_m, cmd_l; /* write ends */
	int conn;         /* our accepted end of L's connection */
	struct proxy_flow flow;
};

/* 0, or -1 when the tree could not be set up (tree_stop still cleans up). */
int tree_start(struct tree *t, int lfd, int port, bool anchor_self);
void tree_stop(struct tree *t);

/* The changes the cache tests make, each waited for (bounded): M or L
 * execs /bin/sleep (it runs); M or L exits (gone; for L also its FIN on
 * our end of its connection). False when it did not happen. */
bool tree_exec_sleep(struct tree *t, bool mid);
bool tree_exit(struct tree *t, bool mid);

/* Bounded waits (3 s): /proc/<pid>/exe ends with suffix; pid has exited;
 * a child of parent runs an exe ending with suffix. */
bool wait_exe(pid_t pid, const char *suffix);
bool wait_gone(pid_t pid);
bool wait_child_exe(pid_t parent, const char *suffix);
/* The children of pid other than `not` (first one), 0 if none within 3 s. */
pid_t wait_other_child(pid_t pid, pid_t not);
