#include "net-supervisor/bufpool.h"

#include <errno.h>
#include <stdlib.h>

int bufpool_init(struct bufpool *p, size_t size, size_t cap)
{
	p->size = size;
	p->cap = cap;
	p->n = 0;
	p->free = calloc(cap, sizeof(char *));
	return p->free ? 0 : -ENOMEM;
}

char *bufpool_get(struct bufpool *p)
{
	if (p->n > 0)
		return p->free[--p->n];
	return malloc(p->size);
}

void bufpool_put(struct bufpool *p, char *b)
{
	if (!b)
		return;
	if (p->n < p->cap) {
		p->free[p->n++] = b;
		return;
	}
	free(b);
}

void bufpool_done(struct bufpool *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->free[i]);
	free(p->free);
	p->free = NULL;
	p->n = 0;
}
