/* Internal helpers for handling protobuf-c messages at the edge. */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>

/* Does m, or any message nested in it, carry fields this build does not
 * know? Within a known minor version that is a malformed message. */
bool pb_has_unknown_fields(const ProtobufCMessage *m);
/* Unknown fields are tolerated only from a newer minor version (it may add
 * fields); from our own or an older minor they mean the peer is confused. */
bool pb_unknown_fields_ok(const ProtobufCMessage *m, unsigned minor);
