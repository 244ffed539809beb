/* Cookie registry: chained hash map for lookup plus a doubly linked list in
 * insertion order for eviction. Entries are allocated one by one (a
 * procref is ~4.5 KiB with its exe path), so memory follows use, not
 * capacity; only the bucket array is sized up front. */
#include "identity/cookies.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct cookie_entry {
	uint64_t cookie;
	struct cookie_entry *hnext;        /* bucket chain */
	struct cookie_entry *older, *newer; /* FIFO list */
	struct procref ref;                /* recorded: pidfd == -1 */
};

struct cookie_registry {
	pthread_mutex_t lock;
	size_t capacity, size;
	size_t nbuckets; /* power of two */
	struct cookie_entry **buckets;
	struct cookie_entry *oldest, *newest;
};

/* Cookies are a global counter, so their low bits are dense; mix them so
 * neighbouring cookies do not share buckets in runs (splitmix64 finalizer). */
static size_t bucket_of(const struct cookie_registry *reg, uint64_t c)
{
	c ^= c >> 30;
	c *= 0xbf58476d1ce4e5b9ULL;
	c ^= c >> 27;
	c *= 0x94d049bb133111ebULL;
	c ^= c >> 31;
	return (size_t)(c & (reg->nbuckets - 1));
}

struct cookie_registry *cookie_registry_new(size_t capacity)
{
	struct cookie_registry *reg;
	size_t nb = 16;

	if (capacity == 0 || capacity > (SIZE_MAX / 4) / sizeof(void *))
		return NULL;
	while (nb < capacity && nb < ((size_t)1 << 30))
		nb <<= 1;
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		return NULL;
	reg->buckets = calloc(nb, sizeof(*reg->buckets));
	if (!reg->buckets) {
		free(reg);
		return NULL;
	}
	reg->nbuckets = nb;
	reg->capacity = capacity;
	pthread_mutex_init(&reg->lock, NULL);
	return reg;
}

void cookie_registry_free(struct cookie_registry *reg)
{
	if (!reg)
		return;
	struct cookie_entry *e = reg->oldest;
	while (e) {
		struct cookie_entry *n = e->newer;
		free(e);
		e = n;
	}
	free(reg->buckets);
	pthread_mutex_destroy(&reg->lock);
	free(reg);
}

static struct cookie_entry **find_slot(struct cookie_registry *reg, uint64_t cookie)
{
	struct cookie_entry **p = &reg->buckets[bucket_of(reg, cookie)];
	while (*p && (*p)->cookie != cookie)
		p = &(*p)->hnext;
	return p;
}

static void list_unlink(struct cookie_registry *reg, struct cookie_entry *e)
{
	if (e->older)
		e->older->newer = e->newer;
	else
		reg->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		reg->newest = e->older;
	e->older = e->newer = NULL;
}

static void list_append(struct cookie_registry *reg, struct cookie_entry *e)
{
	e->older = reg->newest;
	e->newer = NULL;
	if (reg->newest)
		reg->newest->newer = e;
	else
		reg->oldest = e;
	reg->newest = e;
}

/* Caller holds the lock; e is in the map. */
static void entry_drop(struct cookie_registry *reg, struct cookie_entry *e)
{
	struct cookie_entry **p = find_slot(reg, e->cookie);
	*p = e->hnext;
	list_unlink(reg, e);
	reg->size--;
	free(e);
}

int cookie_registry_put(struct cookie_registry *reg, uint64_t cookie, const struct procref *ref)
{
	if (!reg || !ref)
		return -EINVAL;

	/* Allocate and copy outside the lock: the copy is the expensive part. */
	struct cookie_entry *fresh = calloc(1, sizeof(*fresh));
	if (!fresh)
		return -ENOMEM;
	fresh->cookie = cookie;
	procref_copy_recorded(&fresh->ref, ref);

	pthread_mutex_lock(&reg->lock);
	struct cookie_entry **p = find_slot(reg, cookie);
	if (*p) {
		/* Replace: the newest record wins and counts as new. */
		struct cookie_entry *old = *p;
		fresh->hnext = old->hnext;
		*p = fresh;
		list_unlink(reg, old);
		list_append(reg, fresh);
		pthread_mutex_unlock(&reg->lock);
		free(old);
		return 0;
	}
	if (reg->size >= reg->capacity)
		entry_drop(reg, reg->oldest);
	/* The slot may have moved if eviction touched this bucket. */
	p = find_slot(reg, cookie);
	*p = fresh;
	list_append(reg, fresh);
	reg->size++;
	pthread_mutex_unlock(&reg->lock);
	return 0;
}

int cookie_registry_get(struct cookie_registry *reg, uint64_t cookie, struct procref *out)
{
	if (!reg || !out)
		return -EINVAL;
	pthread_mutex_lock(&reg->lock);
	struct cookie_entry *e = *find_slot(reg, cookie);
	if (e) {
		*out = e->ref; /* already recorded: pidfd -1 */
		out->pidfd = -1;
	}
	pthread_mutex_unlock(&reg->lock);
	return e ? 0 : -ENOENT;
}

int cookie_registry_remove(struct cookie_registry *reg, uint64_t cookie)
{
	if (!reg)
		return -EINVAL;
	pthread_mutex_lock(&reg->lock);
	struct cookie_entry *e = *find_slot(reg, cookie);
	if (e)
		entry_drop(reg, e);
	pthread_mutex_unlock(&reg->lock);
	return e ? 0 : -ENOENT;
}

size_t cookie_registry_size(struct cookie_registry *reg)
{
	if (!reg)
		return 0;
	pthread_mutex_lock(&reg->lock);
	size_t n = reg->size;
	pthread_mutex_unlock(&reg->lock);
	return n;
}
