/* idpublish: the proc-supervisor's identity feed (--identity-feed PATH).
 *
 * Connect-time identity for the local strategy (combined, shared-pid,
 * vm-local): for every socket the connect notifier recorded, the
 * identity the verifier gives its connector, pushed to the net-supervisor
 * keyed by the socket's cookie (wire format: identity/idfeed.h).
 *
 * Nothing here runs while the caller is blocked. idpublish_note() is
 * called from the notifier's record step, after CONTINUE, and only appends
 * the cookie to a bounded queue under a mutex, waking the worker when it
 * sleeps (when nobody subscribes, not even that). One worker thread takes the queue in
 * batches: it announces each cookie ("due"), then verifies each connector
 * with flow_verifier_verify_cookie (the registry's record, the live
 * process re-opened and its image hashed, the ancestry walk or a pinned
 * chain re-proved; identity/verify.h) and writes the identity, or a
 * refusal with its reason word. A full queue drops the cookie (counted):
 * the reader then falls back to its holder search, as for a socket the
 * notifier never saw.
 *
 * A process's published identity is kept 1 s under its key and image:
 * a note for a connect of the same process with the same image (the
 * notifier's record of this connect) writes its line from the loop at
 * once, without the worker (TETHER_IDFEED_NO_CACHE turns that off). The
 * record was made from the live caller blocked in this connect (pidfs
 * keys are never reused), so a hit is that process running that image;
 * the cache skips only re-proving its chain within the second.
 *
 * Subscribers connect to the Unix socket at PATH (mode 0600 unless
 * socket_mode says otherwise; the same uid/gid allow lists as the status
 * socket). A subscriber that does not keep up (its socket buffer full) is
 * disconnected rather than waited for. The reader must prove that the
 * process at this end is its anchor (SO_PEERPIDFD): the feed itself
 * carries no authentication. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/kernel.h"
#include "identity/cookies.h"
#include "identity/members.h"
#include "identity/procref.h"

#define IDPUBLISH_QUEUE 8192

struct idpublish_opts {
	const char *path;
	const struct kernel_caps *caps;
	struct members *members;          /* borrowed, thread-safe */
	struct cookie_registry *cookies;  /* borrowed, thread-safe */
	const struct procref *anchor;     /* ourselves (recorded), copied */
	const uid_t *allow_uids;
	size_t n_allow_uids;
	const gid_t *allow_gids;
	size_t n_allow_gids;
	unsigned socket_mode;             /* 0: 0600 */
};

struct idpublish_stats {
	uint64_t noted, dropped, published, refused, subscribers, subscriber_drops;
	uint64_t cached; /* published from the loop from the per-process cache */
	uint64_t verify_ns; /* worker wall time verifying (sum over noted) */
};

struct idpublish;

int idpublish_start(uv_loop_t *loop, const struct idpublish_opts *opts, struct idpublish **out);
/* From the record step (the loop thread): queue cookie. Never blocks on
 * I/O; a no-op without subscribers. */
void idpublish_note(struct idpublish *p, uint64_t cookie);
void idpublish_get_stats(struct idpublish *p, struct idpublish_stats *out);
/* Stop the worker (joined), close every socket, unlink PATH, free. */
void idpublish_stop(struct idpublish *p);
