#include "proto/signer.h"

#include <string.h>

int context_sign(const struct sign_key *instance, const struct context_input *in,
		 struct signed_context *out)
{
	memset(out, 0, sizeof(*out));
	int r = context_encode(in, &out->context, &out->context_len);
	if (r < 0)
		return r;
	sign_detached(instance, SIGN_DOMAIN_CONTEXT, out->context, out->context_len, out->signature);
	memcpy(out->key_id, instance->id, PROTO_KEY_ID_LEN);
	return 0;
}
