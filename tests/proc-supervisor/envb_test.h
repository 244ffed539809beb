/* Shared helpers for the env boundary tests: build a layered policy from
 * YAML strings, look names up in an envp. */
#pragma once

#include <stdbool.h>
#include <string.h>

#include "policy/policy.h"

/* Any layer may be NULL. Fails the test (cmocka) on a load error unless
 * want_error is set, in which case the diag is copied there and NULL
 * returned. */
struct policy *mkpol_full(const char *sys, const char *proj, const char *agent, const char *cmd,
			  char *want_error, size_t errlen);
#define mkpol(sys, proj, agent, cmd) mkpol_full(sys, proj, agent, cmd, NULL, 0)

const char *envp_get(char *const *envp, const char *name);
