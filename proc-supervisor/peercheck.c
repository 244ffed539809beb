/* peercheck: see peercheck.h. */
#include "proc-supervisor/peercheck.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
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

int peer_allow_init(struct peer_allow *a, const uid_t *uids, size_t n_uids, const gid_t *gids, size_t n_gids)
{
	*a = (struct peer_allow){ 0 };
	a->uids = calloc(n_uids + 1, sizeof(uid_t));
	a->gids = calloc(n_gids + 1, sizeof(gid_t));
	if (!a->uids || !a->gids) {
		peer_allow_free(a);
		return -ENOMEM;
	}
	if (n_uids)
		memcpy(a->uids, uids, n_uids * sizeof(uid_t));
	if (n_gids)
		memcpy(a->gids, gids, n_gids * sizeof(gid_t));
	a->n_uids = n_uids;
	a->n_gids = n_gids;
	return 0;
}

void peer_allow_free(struct peer_allow *a)
{
	free(a->uids);
	free(a->gids);
	*a = (struct peer_allow){ 0 };
}

bool peer_allow_check(const struct peer_allow *a, uid_t uid, gid_t gid)
{
	return exec_gw_peer_allowed(a->uids, a->n_uids, a->gids, a->n_gids, uid, gid);
}
