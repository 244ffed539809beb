/* peercheck: who may use the supervisor's local sockets.
 *
 * The exec gateway and the status socket share one rule, checked on the
 * SO_PEERCRED of each connection: the supervisor's own effective uid, or a
 * uid / primary gid in the allow lists (--exec-allow-uid, --exec-allow-gid). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Is (uid, gid) allowed: the supervisor's own euid, or a uid / primary gid
 * in these lists? */
bool exec_gw_peer_allowed(const uid_t *uids, size_t n_uids, const gid_t *gids, size_t n_gids,
			  uid_t uid, gid_t gid);

/* The allow lists a socket server keeps: its own copies, so the caller's
 * arrays may go. */
struct peer_allow {
	uid_t *uids;
	size_t n_uids;
	gid_t *gids;
	size_t n_gids;
};

/* Copy the lists into a (either may be NULL with n 0). 0 or -ENOMEM. */
int peer_allow_init(struct peer_allow *a, const uid_t *uids, size_t n_uids, const gid_t *gids, size_t n_gids);
void peer_allow_free(struct peer_allow *a);
/* exec_gw_peer_allowed() over a's lists. */
bool peer_allow_check(const struct peer_allow *a, uid_t uid, gid_t gid);
