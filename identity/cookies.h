/* Cookie registry: socket cookie -> the ProcessRef that connected it.
 *
 * Fed at connect time (the proc-supervisor's seccomp listener records the
 * caller before the connect proceeds), consulted first by attribution. The
 * registry is bounded: when full, the oldest entry is evicted; cookies are
 * never reused by the kernel, so a stale entry can only be missing, never
 * wrong. Thread-safe (one mutex). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "identity/procref.h"

struct cookie_registry;

struct cookie_registry *cookie_registry_new(size_t capacity);
void cookie_registry_free(struct cookie_registry *reg);
/* Record (or replace) cookie -> a recorded copy of ref (pidfd not kept). */
int cookie_registry_put(struct cookie_registry *reg, uint64_t cookie, const struct procref *ref);
/* 0 and a recorded copy in *out, or -ENOENT. */
int cookie_registry_get(struct cookie_registry *reg, uint64_t cookie, struct procref *out);
int cookie_registry_remove(struct cookie_registry *reg, uint64_t cookie);
size_t cookie_registry_size(struct cookie_registry *reg);
