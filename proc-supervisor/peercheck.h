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
