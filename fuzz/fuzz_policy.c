/* The policy loader on arbitrary bytes: either a policy or exactly one
 * "t.yaml:LINE:COL: ..." error; never a crash, leak or hang. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy *p = NULL;
	struct policy_diag d;
	int r = policy_load_buffer("t.yaml", (const char *)data, size, NULL, 0, &p, &d);
	if (r < 0) {
		if (p || (r == -EINVAL && strncmp(d.msg, "t.yaml:", 7) != 0))
			abort();
	} else if (!p) {
		abort();
	}
	policy_free(p);
	return 0;
}
