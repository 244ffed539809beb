/* The registry of values never to print: a short list under a mutex, and
 * a left-to-right scan that, at each byte, takes the longest registered
 * value starting there. */
#include "common/secrets.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct secret {
	char *v;
	size_t len;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct secret list[SECRETS_MAX];
static size_t n_list;
static uint64_t forgotten;

static void wipe(struct secret *s)
{
	explicit_bzero(s->v, s->len);
	free(s->v);
	s->v = NULL;
	s->len = 0;
}

int secrets_add(const char *v, size_t len)
{
	if (!len)
		return 0;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n_list; i++)
		if (list[i].len == len && memcmp(list[i].v, v, len) == 0) {
			pthread_mutex_unlock(&lock);
			return 0;
		}
	char *c = malloc(len);
	if (!c) {
		pthread_mutex_unlock(&lock);
		return -ENOMEM;
	}
	memcpy(c, v, len);
	if (n_list == SECRETS_MAX) {
		wipe(&list[0]);
		memmove(list, list + 1, (SECRETS_MAX - 1) * sizeof(list[0]));
		n_list--;
		forgotten++;
	}
	list[n_list++] = (struct secret){ .v = c, .len = len };
	pthread_mutex_unlock(&lock);
	return 0;
}

void secrets_clear(void)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n_list; i++)
		wipe(&list[i]);
	n_list = 0;
	pthread_mutex_unlock(&lock);
}

size_t secrets_count(void)
{
	pthread_mutex_lock(&lock);
	size_t n = n_list;
	pthread_mutex_unlock(&lock);
	return n;
}

uint64_t secrets_forgotten(void)
{
	pthread_mutex_lock(&lock);
	uint64_t n = forgotten;
	pthread_mutex_unlock(&lock);
	return n;
}

/* The length of the longest registered value at s[i..len), 0 if none. */
static size_t match_at(const char *s, size_t i, size_t len)
{
	size_t best = 0;
	for (size_t k = 0; k < n_list; k++) {
		const struct secret *x = &list[k];
		if (x->len > best && x->len <= len - i && x->v[0] == s[i] && memcmp(s + i, x->v, x->len) == 0)
			best = x->len;
	}
	return best;
}

int secrets_scrub(const char *s, size_t len, char **out, size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	pthread_mutex_lock(&lock);
	size_t first = len, m = 0;
	for (size_t i = 0; n_list && i < len; i++)
		if ((m = match_at(s, i, len))) {
			first = i;
			break;
		}
	if (first == len) {
		pthread_mutex_unlock(&lock);
		return 0;
	}
	/* at most one "[REDACTED]" per input byte */
	size_t rl = strlen(SECRETS_REDACTED), cap = len + 1 + (len - first) * rl;
	char *o = malloc(cap);
	if (!o) {
		pthread_mutex_unlock(&lock);
		return -ENOMEM;
	}
	memcpy(o, s, first);
	size_t n = first;
	for (size_t i = first; i < len;) {
		m = match_at(s, i, len);
		if (m) {
			memcpy(o + n, SECRETS_REDACTED, rl);
			n += rl;
			i += m;
		} else {
			o[n++] = s[i++];
		}
	}
	pthread_mutex_unlock(&lock);
	o[n] = '\0';
	*out = o;
	*out_len = n;
	return 1;
}
