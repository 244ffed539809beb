/* The values the process must never print: the secrets of the
 * `credentials:` section (policy/credentials.h) as far as this process
 * knows them (the net-supervisor's credential store registers each value
 * it reads; `tether run` registers the ones its own environment and files
 * hold). Every line that leaves through common/log.h or the audit writer
 * (common/audit.h), and every line of the redactor
 * (proc-supervisor/env_redact.h: --dry-run, argv in audit events) has each
 * registered value replaced by "[REDACTED]", wherever it occurs, whatever
 * its length. A value stays registered after its source rotates (the old
 * secret is still a secret) until secrets_clear(); at most SECRETS_MAX are
 * kept, the oldest forgotten first (counted). Thread-safe. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SECRETS_MAX 1024
#define SECRETS_REDACTED "[REDACTED]"

/* Register the len bytes at v (copied; a value already known is not added
 * twice; len 0 is ignored). 0 or -ENOMEM. */
int secrets_add(const char *v, size_t len);
/* Forget (and wipe) every value. */
void secrets_clear(void);
/* How many values are registered, and how many were forgotten for room. */
size_t secrets_count(void);
uint64_t secrets_forgotten(void);
/* The len bytes at s with every registered value replaced: 0 when there
 * was none (*out NULL: use s as it is), 1 with *out a malloc'd copy
 * (NUL-terminated, *out_len its length without the NUL), -ENOMEM when a
 * copy was needed and could not be made (the caller must not print s). */
int secrets_scrub(const char *s, size_t len, char **out, size_t *out_len);
