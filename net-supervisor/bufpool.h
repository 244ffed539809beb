/* A free list of equal-sized read buffers (the relay's relay_buffer reads):
 * a buffer given back is reused by the next read instead of being freed and
 * page-faulted in again. Up to cap buffers are kept; more are freed. Loop
 * thread only. */
#pragma once

#include <stddef.h>

struct bufpool {
	char **free;
	size_t n, cap, size;
};

/* Room for cap free buffers of size bytes each. -ENOMEM. */
int bufpool_init(struct bufpool *p, size_t size, size_t cap);
/* A buffer of p->size bytes (reused or malloc'd), NULL when out of memory. */
char *bufpool_get(struct bufpool *p);
/* Give b back (NULL is ignored). */
void bufpool_put(struct bufpool *p, char *b);
/* Free every kept buffer and the list. */
void bufpool_done(struct bufpool *p);
