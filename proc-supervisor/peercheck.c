/* peercheck: see peercheck.h. */
#include "proc-supervisor/peercheck.h"

#include <unistd.h>

bool exec_gw_peer_allowed(const uid_t *uids, size_t n_uids, const gid_t *gids, size_t n_gids,
			  uid_t uid, gid_t gid)
{
	/* The supervisor's own uid can do anything the gateway could anyway. */
	if (uid == geteuid())
		return true;
	for (size_t i = 0; i < n_uids; i++)
		if (uids[i] == uid)
			return true;
	for (size_t i = 0; i < n_gids; i++)
		if (gids[i] == gid)
			return true;
	return false;
}
