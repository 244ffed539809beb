/* Small helpers shared by every tether module: ownership through
 * __attribute__((cleanup)), -errno conventions, bounded string copies. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
static inline void fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Hand ownership of an fd out of a _cleanup_close_ variable. */
static inline int fd_steal(int *fd)
{
	int r = *fd;
	*fd = -1;
	return r;
}

/* splitmix64's finalizer: a cheap, well-mixing 64-bit hash of x (hash
 * buckets, set fingerprints). Not for anything an adversary may choose to
 * collide where it matters. */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* Copy with truncation detection: -ENAMETOOLONG when src does not fit. */
static inline int strscpy(char *dst, const char *src, size_t size)
{
	size_t n = strlen(src);
	if (size == 0)
		return -ENAMETOOLONG;
	if (n >= size) {
		memcpy(dst, src, size - 1);
		dst[size - 1] = '\0';
		return -ENAMETOOLONG;
	}
	memcpy(dst, src, n + 1);
	return 0;
}

/* Write all len bytes to a blocking fd (retrying EINTR and short writes):
 * 0, or -errno of the failing write. */
int write_all(int fd, const void *buf, size_t len);

/* Read a whole small file (procfs) into buf; returns bytes read or -errno.
 * The result is NUL-terminated; a file larger than size-1 is -EFBIG. */
ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size);

/* Lower-case hex of len bytes into out (2*len+1 bytes). */
void hex_encode(const unsigned char *in, size_t len, char *out);
/* Parse exactly 2*len hex digits; -EINVAL otherwise. */
int hex_decode(const char *in, unsigned char *out, size_t len);

/* Monotonic nanoseconds and wall-clock nanoseconds since the epoch. */
unsigned long long now_mono_ns(void);
unsigned long long now_real_ns(void);

/* Write a sentence into err[size] (a caller's message buffer) and return rc:
 * `return err_set(err, size, -EINVAL, "bad %s", what);` */
__attribute__((format(printf, 4, 5)))
int err_set(char *err, size_t size, int rc, const char *fmt, ...);
