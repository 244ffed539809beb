/* The proc side's signer: C structs -> ProcessIdentityContext -> bytes ->
 * Ed25519 signature by the instance key. The result is what an
 * IdentityResponse carries and what the audit log records. */
#pragma once

#include "proto/context.h"
#include "proto/keys.h"
#include "proto/signed.h"

/* 0 and *out filled (owns its bytes; signed_context_clear()), or -EINVAL /
 * -ENOMEM from context_encode(). */
int context_sign(const struct sign_key *instance, const struct context_input *in,
		 struct signed_context *out);
