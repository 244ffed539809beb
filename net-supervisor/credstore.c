#include "net-supervisor/credstore.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "net-supervisor/credsub.h"

#define SECRET_MAX 8192

struct entry {
	char *name;
	char *value;
	size_t value_len;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	bool failed; /* the file as it is now gave no secret (logged) */
};

struct credstore {
	struct entry *v;
	size_t n;
};

struct credstore *credstore_new(void) { return calloc(1, sizeof(struct credstore)); }

static void wipe(struct entry *e)
{
	if (e->value) {
		sodium_memzero(e->value, e->value_len);
		free(e->value);
	}
	e->value = NULL;
	e->value_len = 0;
}

void credstore_free(struct credstore *cs)
{
	if (!cs)
		return;
	for (size_t i = 0; i < cs->n; i++) {
		wipe(&cs->v[i]);
		free(cs->v[i].name);
	}
	free(cs->v);
	free(cs);
}

static struct entry *entry_for(struct credstore *cs, const char *name)
{
	for (size_t i = 0; i < cs->n; i++)
		if (strcmp(cs->v[i].name, name) == 0)
			return &cs->v[i];
	struct entry *v = realloc(cs->v, (cs->n + 1) * sizeof(*v));
	if (!v)
		return NULL;
	cs->v = v;
	struct entry *e = &cs->v[cs->n];
	memset(e, 0, sizeof(*e));
	if (!(e->name = strdup(name)))
		return NULL;
	cs->n++;
	return e;
}

static bool set_value(struct entry *e, const char *buf, size_t n, const char *cred, const char *where)
{
	if (n && buf[n - 1] == '\n')
		n--;
	if (n && buf[n - 1] == '\r')
		n--;
	if (!credsub_secret_ok(buf, n)) {
		log_error("credential %s: %s is empty, too long or holds CR, LF or NUL", cred, where);
		return false;
	}
	char *v = malloc(n + 1);
	if (!v)
		return false;
	memcpy(v, buf, n);
	v[n] = '\0';
	wipe(e);
	e->value = v;
	e->value_len = n;
	/* never printed from now on, even after it rotates (common/secrets.h) */
	int r = audit_secret_add(v);
	if (r == -ENOMEM) {
		wipe(e);
		log_error("credential %s: out of memory registering the value with the redactor", cred);
		return false;
	}
	return true;
}

static const char *from_file(struct entry *e, const struct credential *cred)
{
	_cleanup_close_ int fd = open(cred->source_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (!e->failed)
			log_error("credential %s: cannot read %s: %s", cred->name, cred->source_file, strerror(errno));
		e->failed = true;
		wipe(e);
		return NULL;
	}
	if (e->value && st.st_dev == e->dev && st.st_ino == e->ino && st.st_size == e->size &&
	    st.st_mtim.tv_sec == e->mtime.tv_sec && st.st_mtim.tv_nsec == e->mtime.tv_nsec)
		return e->value;
	bool same = st.st_dev == e->dev && st.st_ino == e->ino && st.st_size == e->size &&
		    st.st_mtim.tv_sec == e->mtime.tv_sec && st.st_mtim.tv_nsec == e->mtime.tv_nsec;
	if (e->failed && same)
		return NULL; /* unchanged since it failed: said once */
	e->dev = st.st_dev;
	e->ino = st.st_ino;
	e->size = st.st_size;
	e->mtime = st.st_mtim;
	e->failed = true;
	wipe(e);
	if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
		log_error("credential %s: %s must be a regular file only its owner can read (mode 0600 or "
			  "stricter)", cred->name, cred->source_file);
		return NULL;
	}
	if (st.st_size <= 0 || st.st_size > SECRET_MAX) {
		log_error("credential %s: %s is empty or larger than %d bytes", cred->name, cred->source_file,
			  SECRET_MAX);
		return NULL;
	}
	char buf[SECRET_MAX + 1];
	ssize_t n = read(fd, buf, sizeof(buf));
	bool ok = n > 0 && set_value(e, buf, (size_t)n, cred->name, cred->source_file);
	sodium_memzero(buf, sizeof(buf));
	if (!ok)
		return NULL;
	e->failed = false;
	log_info("credential %s: read from %s", cred->name, cred->source_file);
	return e->value;
}

const char *credstore_secret(struct credstore *cs, const struct credential *cred)
{
	struct entry *e = entry_for(cs, cred->name);
	if (!e)
		return NULL;
	if (cred->source_file)
		return from_file(e, cred);
	const char *v = getenv(cred->source_env);
	if (!v) {
		if (!e->failed)
			log_error("credential %s: the net-supervisor has no variable %s", cred->name, cred->source_env);
		e->failed = true;
		return NULL;
	}
	if (e->value && strcmp(e->value, v) == 0)
		return e->value;
	if (!set_value(e, v, strlen(v), cred->name, cred->source_env))
		return NULL;
	e->failed = false;
	return e->value;
}

void credstore_prime(struct credstore *cs, const struct credential_set *set)
{
	for (size_t i = 0; set && i < set->n; i++)
		(void)credstore_secret(cs, &set->v[i]);
}
