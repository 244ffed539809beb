/* The secrets of the `credentials:` section (policy/credentials.h), as the
 * net-supervisor reads them: a source file is read on first use and again
 * whenever it changed (inode, size or mtime: rotation needs no reload), a
 * source variable is read from our own environment. A file that the group
 * or others may read, that is not a regular file, is empty or larger than
 * 8 KiB, or whose value holds CR, LF or NUL, gives no secret (logged once
 * per change). One trailing newline is dropped. Single-threaded. */
#pragma once

#include "policy/credentials.h"

struct credstore;

struct credstore *credstore_new(void);
/* Wipes every value. */
void credstore_free(struct credstore *cs);
/* The current value of cred's source (owned by cs: valid until the next
 * call for this credential), or NULL (logged). */
const char *credstore_secret(struct credstore *cs, const struct credential *cred);
/* Read every credential of set now (failures logged as by
 * credstore_secret), so that each value is registered with the redactor
 * (common/secrets.h) before any request could carry it: called at start
 * and at every policy load. */
void credstore_prime(struct credstore *cs, const struct credential_set *set);
