#include "net-supervisor/dnsrec.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/netaddr.h"

#define DNSREC_NAME_MAX 254 /* 253 characters and the NUL */

struct entry {
	char name[DNSREC_NAME_MAX];
	struct netaddr addr;
	uint64_t expires_ms;
	uint64_t seq; /* when added or refreshed: the LRU order */
	bool used;
};

struct dnsrec {
	/* the DNS server (main loop) writes, transparent flows (every
	 * worker's loop) read: every call takes it */
	pthread_mutex_t lock;
	struct entry *e;
	size_t n;
	uint64_t now_ms;
	uint64_t seq;
};

struct dnsrec *dnsrec_new(size_t max_entries)
{
	if (max_entries == 0) {
		errno = EINVAL;
		return NULL;
	}
	struct dnsrec *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->e = calloc(max_entries, sizeof(*r->e));
	if (!r->e) {
		free(r);
		return NULL;
	}
	r->n = max_entries;
	pthread_mutex_init(&r->lock, NULL);
	return r;
}

void dnsrec_free(struct dnsrec *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	free(r->e);
	free(r);
}

#define LOCK(r) pthread_mutex_lock((pthread_mutex_t *)&(r)->lock)
#define UNLOCK(r) pthread_mutex_unlock((pthread_mutex_t *)&(r)->lock)

void dnsrec_set_now(struct dnsrec *r, uint64_t now_ms)
{
	LOCK(r);
	r->now_ms = now_ms;
	UNLOCK(r);
}

static bool key_of(const struct sockaddr *sa, struct netaddr *out)
{
	struct netaddr a;
	if (!sa || netaddr_from_sockaddr(sa, &a) < 0)
		return false;
	netaddr_unmap(&a, out);
	return true;
}

static bool live(const struct dnsrec *r, const struct entry *e) { return e->used && e->expires_ms > r->now_ms; }

static int add_locked(struct dnsrec *r, const char *name, const struct sockaddr *addr, uint32_t ttl_s)
{
	struct netaddr a;
	size_t nl = name ? strlen(name) : 0;
	if (!r || nl == 0 || nl >= DNSREC_NAME_MAX || !key_of(addr, &a))
		return -EINVAL;
	/* The same pair, or else a free or expired slot, or else the oldest. */
	struct entry *slot = NULL, *oldest = NULL;
	for (size_t i = 0; i < r->n; i++) {
		struct entry *e = &r->e[i];
		if (e->used && netaddr_equal(&e->addr, &a) && strcmp(e->name, name) == 0) {
			slot = e;
			break;
		}
		if (!live(r, e)) {
			if (!slot)
				slot = e;
		} else if (!oldest || e->seq < oldest->seq) {
			oldest = e;
		}
	}
	if (!slot)
		slot = oldest;
	memcpy(slot->name, name, nl + 1);
	slot->addr = a;
	slot->expires_ms = r->now_ms + (uint64_t)ttl_s * 1000;
	slot->seq = ++r->seq;
	slot->used = true;
	return 0;
}

static bool has_locked(const struct dnsrec *r, const char *name, const struct sockaddr *addr)
{
	struct netaddr a;
	if (!r || !name || !key_of(addr, &a))
		return false;
	for (size_t i = 0; i < r->n; i++) {
		const struct entry *e = &r->e[i];
		if (live(r, e) && netaddr_equal(&e->addr, &a) && strcmp(e->name, name) == 0)
			return true;
	}
	return false;
}

static size_t names_locked(const struct dnsrec *r, const struct sockaddr *addr, const char **out, size_t max)
{
	struct netaddr a;
	if (!r || !key_of(addr, &a) || max == 0)
		return 0;
	/* Insertion into a sorted prefix of out (max is small in practice). */
	uint64_t seqs[max];
	size_t n = 0;
	for (size_t i = 0; i < r->n; i++) {
		const struct entry *e = &r->e[i];
		if (!live(r, e) || !netaddr_equal(&e->addr, &a))
			continue;
		size_t at = n;
		while (at > 0 && seqs[at - 1] < e->seq)
			at--;
		if (at >= max)
			continue;
		size_t last = n < max ? n : max - 1;
		for (size_t j = last; j > at; j--) {
			out[j] = out[j - 1];
			seqs[j] = seqs[j - 1];
		}
		out[at] = e->name;
		seqs[at] = e->seq;
		if (n < max)
			n++;
	}
	return n;
}

static size_t count_locked(const struct dnsrec *r)
{
	size_t n = 0;
	for (size_t i = 0; i < r->n; i++)
		n += live(r, &r->e[i]);
	return n;
}

int dnsrec_add(struct dnsrec *r, const char *name, const struct sockaddr *addr, uint32_t ttl_s)
{
	LOCK(r);
	int ret = add_locked(r, name, addr, ttl_s);
	UNLOCK(r);
	return ret;
}

bool dnsrec_has(const struct dnsrec *r, const char *name, const struct sockaddr *addr)
{
	if (!r)
		return false;
	LOCK(r);
	bool ret = has_locked(r, name, addr);
	UNLOCK(r);
	return ret;
}

size_t dnsrec_names(const struct dnsrec *r, const struct sockaddr *addr, const char **out, size_t max)
{
	if (!r)
		return 0;
	LOCK(r);
	size_t ret = names_locked(r, addr, out, max);
	UNLOCK(r);
	return ret;
}

bool dnsrec_first_name(const struct dnsrec *r, const struct sockaddr *addr, char *buf, size_t size)
{
	if (!r || size == 0)
		return false;
	const char *name[1];
	LOCK(r);
	bool ok = names_locked(r, addr, name, 1) == 1 && strlen(name[0]) < size;
	if (ok)
		memcpy(buf, name[0], strlen(name[0]) + 1);
	UNLOCK(r);
	return ok;
}

size_t dnsrec_count(const struct dnsrec *r)
{
	LOCK(r);
	size_t ret = count_locked(r);
	UNLOCK(r);
	return ret;
}
