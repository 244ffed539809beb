/* envb_build and the redactor on an arbitrary parent environment: the
 * input, split on NUL, is the parent envp. Invariants: the result never
 * holds a hard-denied or TETHER_* name from the parent, never a name twice,
 * and the redactor never crashes on any entry. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proc-supervisor/env_build.h"
#include "proc-supervisor/env_redact.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char pol[] = "version: 1\nenvironment:\n  pass_through: [\"A*\", \"L*\", \"T*\", BASH_ENV, TZ]\n"
				  "  deny: [\"AB*\"]\n";
	struct policy *p = NULL;
	struct policy_diag d;
	if (policy_load_buffer("f.yaml", pol, sizeof(pol) - 1, NULL, 0, &p, &d) < 0)
		abort();
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	char *envp[65];
	size_t n = 0;
	for (size_t off = 0; off <= size && n < 64;) {
		envp[n++] = buf + off;
		off += strlen(buf + off) + 1;
	}
	envp[n] = NULL;
	struct envb_result r;
	if (envb_build(p, envp, NULL, &r) == 0) {
		for (size_t i = 0; i < r.envc; i++) {
			const char *eq = strchr(r.envp[i], '=');
			if (!eq)
				abort();
			char name[300];
			size_t nl = (size_t)(eq - r.envp[i]);
			if (nl >= sizeof(name))
				abort();
			memcpy(name, r.envp[i], nl);
			name[nl] = '\0';
			if (envb_hard_denied(name))
				abort();
			for (size_t j = i + 1; j < r.envc; j++)
				if (strncmp(r.envp[j], r.envp[i], nl + 1) == 0)
					abort();
		}
	}
	envb_result_done(&r);
	for (size_t i = 0; i < n; i++)
		free(redact_line(envp[i]));
	redact_argv_free(redact_argv(envp));
	free(buf);
	policy_free(p);
	return 0;
}
