/* The identity feed's line reader (identity/idfeed.h) on arbitrary bytes:
 * idfeed_decode (its own reader of the encoders' compact shape, jansson
 * for anything else) must give exactly what jansson alone gives
 * (idfeed_decode_json): the same result, and for a decoded line the same
 * message, field by field. A difference aborts. Never a crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "identity/idfeed.h"

static int same_id(const struct flow_identity *x, const struct flow_identity *y)
{
	if (x->pid != y->pid || x->source != y->source || strcmp(x->sha256, y->sha256) ||
	    strcmp(x->binary_path, y->binary_path) || strcmp(x->process_key, y->process_key) ||
	    x->n_ancestors != y->n_ancestors)
		return 0;
	for (size_t i = 0; i < x->n_ancestors; i++)
		if (x->ancestors[i].pid != y->ancestors[i].pid || strcmp(x->ancestors[i].path, y->ancestors[i].path) ||
		    strcmp(x->ancestors[i].sha256, y->ancestors[i].sha256))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idfeed_msg a, b;
	int ra = idfeed_decode((const char *)data, size, &a);
	int rb = idfeed_decode_json((const char *)data, size, &b);
	if (ra != rb)
		abort();
	if (ra == 0 && (a.kind != b.kind || a.cookie != b.cookie || a.reason != b.reason || !a.id != !b.id ||
			(a.id && !same_id(a.id, b.id))))
		abort();
	idfeed_msg_release(&a);
	idfeed_msg_release(&b);
	return 0;
}
