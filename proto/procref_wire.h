/* Conversion between struct procref / struct proto_tuple and the wire.
 *
 * struct procref (identity/procref.h) and the wire
 * ProcessRef. Only the recorded part of a ref travels: a ref decoded from the
 * wire has pidfd == -1 and proves nothing about a live process.
 *
 * procref_from_pb() is the validation edge for every ref a peer sends:
 * boot_id must be a 36-character UUID, the key non-empty, printable, shorter
 * than PROCREF_KEY_MAX and prefixed by "<boot_id>:", key_kind known, pidfs
 * inode non-zero for PIDFS keys, pid positive, exe path shorter than
 * PATH_MAX without NUL, comm at most 16 bytes, sha256 exactly 32 bytes or
 * absent. The wire carries real and effective uid/gid; saved and fs ids of
 * a decoded ref are set to the effective ones. */
#pragma once

#include "identity.pb-c.h"
#include "identity/procref.h"
#include "proto/tuple.h"

/* Storage for an encoded ref; fields point into the procref, so it must
 * outlive the buffer's use. */
struct pb_procref_buf {
	Tether__ProcessRef ref;
	Tether__Exe exe;
};

void procref_to_pb(const struct procref *r, struct pb_procref_buf *buf);
/* 0, or -EBADMSG when any field is out of its limits. */
int procref_from_pb(const Tether__ProcessRef *m, struct procref *out);
/* Is s a canonical boot_id (8-4-4-4-12 hex, 36 characters)? */
bool boot_id_valid(const char *s);

/* Flow tuples: to_pb points into t; from_pb validates (proto 1..255,
 * ports <= 65535, both addresses 4 or both 16 bytes). */
void proto_tuple_to_pb(const struct proto_tuple *t, Tether__FlowTuple *m);
int proto_tuple_from_pb(const Tether__FlowTuple *m, struct proto_tuple *t);
