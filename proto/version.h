/* The delegation protocol's version (docs/protocol.md): both sides send
 * it in Hello; a peer of another major is refused, and fields of a newer
 * minor are tolerated (pbutil.h). */
#pragma once

#define PROTO_VERSION_MAJOR 1
/* 1.1: signed clock samples in Hello/HelloAck and ClockRequest/Response
 * 1.2: per-channel MAC key (kx in Hello/HelloAck), MacContext answers and
 *      ContextSignature frames (proto/mac.h)
 * 1.3: connect-time identity pushes (Hello.push_seed, HelloAck.push,
 *      IdentityPush frames) */
#define PROTO_VERSION_MINOR 3
