/* status: the local status socket `tether ps` reads.
 *
 * A Unix socket (0600 by default; the same uid/gid allow lists as the exec
 * gateway). Each connection gets one JSON document — the snapshot callback's
 * result (members_to_json() plus whatever the daemon adds), a newline — and
 * is closed; the server reads nothing from the client. One libuv loop. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "common/kernel.h"

struct status_srv;

struct status_opts {
	const char *path;               /* required */
	unsigned socket_mode;           /* 0: 0600 */
	const struct kernel_caps *caps; /* required */
	const uid_t *allow_uids;
	size_t n_allow_uids;
	const gid_t *allow_gids;
	size_t n_allow_gids;
	/* A new reference (the server decrefs it) or NULL on failure. */
	json_t *(*snapshot)(void *userdata);
	void *userdata;
};

int status_start(uv_loop_t *loop, const struct status_opts *opts, struct status_srv **out);
/* Close the listener and pending writes; done(userdata) once freed. */
void status_stop(struct status_srv *s, void (*done)(void *userdata), void *userdata);
