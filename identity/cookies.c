/* Cookie registry: chained hash map for lookup plus a doubly linked list in
 * insertion order for eviction. Entries are allocated one by one, so memory
 * follows use, not capacity; only the bucket array is sized up front.
 *
 * An entry stores the procref compactly: the bytes before and after the
 * exe path as they are, the path by its length. A whole procref is
 * 4.4 KiB (PATH_MAX for the path), which made every insert touch a fresh
 * page while the registry filled (a page fault per connect on a
 * paravirtualised VM) and ~290 MB at the default capacity; a compact entry
 * is 360 bytes plus the path. */
#include "identity/cookies.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define REF_HEAD_LEN offsetof(struct procref, exe.path)
#define REF_TAIL_OFF (REF_HEAD_LEN + sizeof(((struct procref *)0)->exe.path))
#define REF_TAIL_LEN (sizeof(struct procref) - REF_TAIL_OFF)

struct cookie_entry {
	uint64_t cookie;
	struct cookie_entry *hnext;        /* bucket chain */
	struct cookie_entry *older, *newer; /* FIFO list */
	unsigned char head[REF_HEAD_LEN];  /* the recorded procref (pidfd -1) up to exe.path */
	unsigned char tail[REF_TAIL_LEN];  /* and after it */
	char path[];                       /* exe.path, NUL-terminated */
};

static struct cookie_entry *entry_new(uint64_t cookie, const struct procref *ref)
{
	size_t plen = strnlen(ref->exe.path, sizeof(ref->exe.path) - 1);
	struct cookie_entry *e = calloc(1, sizeof(*e) + plen + 1);
	if (!e)
		return NULL;
	e->cookie = cookie;
	const unsigned char *b = (const unsigned char *)ref;
	memcpy(e->head, b, REF_HEAD_LEN);
	memcpy(e->tail, b + REF_TAIL_OFF, REF_TAIL_LEN);
	memcpy(e->path, ref->exe.path, plen);
	e->path[plen] = '\0';
	return e;
}

static void entry_to_ref(const struct cookie_entry *e, struct procref *out)
{
	unsigned char *b = (unsigned char *)out;
	memcpy(b, e->head, REF_HEAD_LEN);
	memcpy(b + REF_TAIL_OFF, e->tail, REF_TAIL_LEN);
	strscpy(out->exe.path, e->path, sizeof(out->exe.path));
	out->pidfd = -1; /* recorded */
}

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
	return (size_t)(mix64(c) & (reg->nbuckets - 1));
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
	struct cookie_entry *fresh = entry_new(cookie, ref);
	if (!fresh)
		return -ENOMEM;

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
	if (e)
		entry_to_ref(e, out);
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
