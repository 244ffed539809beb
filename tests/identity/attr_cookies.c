/* Cookie registry: put/get/replace/remove, FIFO eviction at capacity,
 * recorded copies only (no pidfd kept), and concurrent use. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "identity/cookies.h"

static void fake_ref(struct procref *r, pid_t pid)
{
	memset(r, 0, sizeof(*r));
	r->pidfd = -1;
	r->pid = pid;
	r->key_kind = PROCREF_KEY_PID_START;
	r->start_time = (uint64_t)pid * 10;
	snprintf(r->key, sizeof(r->key), "boot:%d:%llu", pid, (unsigned long long)r->start_time);
	snprintf(r->exe.path, sizeof(r->exe.path), "/usr/bin/fake%d", pid);
}

static void test_put_get_remove(void **state)
{
	struct cookie_registry *reg = cookie_registry_new(8);
	struct procref r, got;
	assert_non_null(reg);

	assert_int_equal(cookie_registry_get(reg, 1, &got), -ENOENT);
	fake_ref(&r, 100);
	assert_int_equal(cookie_registry_put(reg, 1, &r), 0);
	assert_int_equal(cookie_registry_size(reg), 1);
	memset(&got, 0x55, sizeof(got));
	assert_int_equal(cookie_registry_get(reg, 1, &got), 0);
	assert_string_equal(got.key, r.key);
	assert_string_equal(got.exe.path, "/usr/bin/fake100");
	assert_int_equal(got.pid, 100);
	assert_int_equal(got.pidfd, -1);

	/* Replace keeps one entry, newest wins. */
	fake_ref(&r, 200);
	assert_int_equal(cookie_registry_put(reg, 1, &r), 0);
	assert_int_equal(cookie_registry_size(reg), 1);
	assert_int_equal(cookie_registry_get(reg, 1, &got), 0);
	assert_int_equal(got.pid, 200);

	/* Cookie 0 and UINT64_MAX are just values. */
	assert_int_equal(cookie_registry_put(reg, 0, &r), 0);
	assert_int_equal(cookie_registry_put(reg, UINT64_MAX, &r), 0);
	assert_int_equal(cookie_registry_get(reg, UINT64_MAX, &got), 0);
	assert_int_equal(cookie_registry_size(reg), 3);

	assert_int_equal(cookie_registry_remove(reg, 1), 0);
	assert_int_equal(cookie_registry_remove(reg, 1), -ENOENT);
	assert_int_equal(cookie_registry_get(reg, 1, &got), -ENOENT);
	assert_int_equal(cookie_registry_size(reg), 2);
	cookie_registry_free(reg);
}

/* Entries are stored compactly (the path by length): every byte of the
 * ref outside exe.path, and the path itself, come back as they went in. */
static void test_compact_roundtrip(void **state)
{
	(void)state;
	struct cookie_registry *reg = cookie_registry_new(4);
	assert_non_null(reg);
	static struct procref in, got;
	unsigned char *b = (unsigned char *)&in;
	for (size_t i = 0; i < sizeof(in); i++)
		b[i] = (unsigned char)(i * 131 + 7);
	in.pidfd = -1;
	snprintf(in.exe.path, sizeof(in.exe.path), "/opt/tool/bin/a-rather-long-name-%d", 42);
	memset(in.exe.path + strlen(in.exe.path), 0, sizeof(in.exe.path) - strlen(in.exe.path));
	in.exe.hashed = true;
	memset(in.exe.sha256, 0xab, sizeof(in.exe.sha256));
	assert_int_equal(cookie_registry_put(reg, 77, &in), 0);
	memset(&got, 0, sizeof(got));
	assert_int_equal(cookie_registry_get(reg, 77, &got), 0);
	assert_int_equal(got.pidfd, -1);
	assert_string_equal(got.exe.path, in.exe.path);
	size_t path_off = offsetof(struct procref, exe.path), path_end = path_off + sizeof(in.exe.path);
	assert_memory_equal(&got, &in, path_off);
	assert_memory_equal((unsigned char *)&got + path_end, (unsigned char *)&in + path_end, sizeof(in) - path_end);
	/* the longest path fits too */
	memset(in.exe.path, 'p', sizeof(in.exe.path) - 1);
	in.exe.path[sizeof(in.exe.path) - 1] = '\0';
	assert_int_equal(cookie_registry_put(reg, 78, &in), 0);
	assert_int_equal(cookie_registry_get(reg, 78, &got), 0);
	assert_int_equal(strlen(got.exe.path), sizeof(in.exe.path) - 1);
	cookie_registry_free(reg);
}

static void test_pidfd_not_kept(void **state)
{
	struct cookie_registry *reg = cookie_registry_new(4);
	struct procref r, got;
	fake_ref(&r, 7);
	/* A live-looking ref: the registry must record, not keep, the fd. */
	r.pidfd = dup(0);
	assert_true(r.pidfd >= 0);
	assert_int_equal(cookie_registry_put(reg, 9, &r), 0);
	assert_int_equal(cookie_registry_get(reg, 9, &got), 0);
	assert_int_equal(got.pidfd, -1);
	close(r.pidfd);
	cookie_registry_free(reg);
}

static void test_fifo_eviction(void **state)
{
	const size_t cap = 100;
	struct cookie_registry *reg = cookie_registry_new(cap);
	struct procref r, got;
	assert_non_null(reg);

	for (uint64_t c = 1; c <= 250; c++) {
		fake_ref(&r, (pid_t)c);
		assert_int_equal(cookie_registry_put(reg, c << 20, &r), 0);
		assert_true(cookie_registry_size(reg) <= cap);
	}
	assert_int_equal(cookie_registry_size(reg), cap);
	/* The oldest 150 are gone, the newest 100 are there and correct. */
	for (uint64_t c = 1; c <= 150; c++)
		assert_int_equal(cookie_registry_get(reg, c << 20, &got), -ENOENT);
	for (uint64_t c = 151; c <= 250; c++) {
		assert_int_equal(cookie_registry_get(reg, c << 20, &got), 0);
		assert_int_equal(got.pid, (pid_t)c);
	}

	/* Re-putting an old entry makes it the newest: the next eviction
	 * takes 152, not 151. */
	fake_ref(&r, 151);
	assert_int_equal(cookie_registry_put(reg, 151ULL << 20, &r), 0);
	fake_ref(&r, 999);
	assert_int_equal(cookie_registry_put(reg, 999ULL << 20, &r), 0);
	assert_int_equal(cookie_registry_get(reg, 151ULL << 20, &got), 0);
	assert_int_equal(cookie_registry_get(reg, 152ULL << 20, &got), -ENOENT);
	assert_int_equal(cookie_registry_size(reg), cap);

	/* Removing frees room without evicting. */
	assert_int_equal(cookie_registry_remove(reg, 153ULL << 20), 0);
	fake_ref(&r, 1000);
	assert_int_equal(cookie_registry_put(reg, 1000ULL << 20, &r), 0);
	assert_int_equal(cookie_registry_get(reg, 154ULL << 20, &got), 0);
	cookie_registry_free(reg);
}

static void test_capacity_one_and_bad_args(void **state)
{
	struct cookie_registry *reg = cookie_registry_new(1);
	struct procref r, got;
	fake_ref(&r, 1);
	assert_null(cookie_registry_new(0));
	assert_int_equal(cookie_registry_put(reg, 1, &r), 0);
	assert_int_equal(cookie_registry_put(reg, 2, &r), 0);
	assert_int_equal(cookie_registry_size(reg), 1);
	assert_int_equal(cookie_registry_get(reg, 1, &got), -ENOENT);
	assert_int_equal(cookie_registry_get(reg, 2, &got), 0);
	assert_int_equal(cookie_registry_put(reg, 3, NULL), -EINVAL);
	assert_int_equal(cookie_registry_put(NULL, 3, &r), -EINVAL);
	assert_int_equal(cookie_registry_get(NULL, 3, &got), -EINVAL);
	assert_int_equal(cookie_registry_remove(NULL, 3), -EINVAL);
	assert_int_equal(cookie_registry_size(NULL), 0);
	cookie_registry_free(reg);
	cookie_registry_free(NULL);
}

struct worker {
	struct cookie_registry *reg;
	uint64_t base;
	int errors;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct procref r, got;
	for (uint64_t i = 0; i < 20000; i++) {
		uint64_t c = w->base + i;
		fake_ref(&r, (pid_t)(c & 0x7fffffff));
		if (cookie_registry_put(w->reg, c, &r) < 0)
			w->errors++;
		/* Our own entry may already be evicted by the others, but when
		 * present it must be ours. */
		if (cookie_registry_get(w->reg, c, &got) == 0 && got.pid != r.pid)
			w->errors++;
		if (i % 3 == 0)
			cookie_registry_remove(w->reg, c);
	}
	return NULL;
}

static void test_concurrent(void **state)
{
	struct cookie_registry *reg = cookie_registry_new(512);
	struct worker w[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .reg = reg, .base = (uint64_t)(i + 1) << 40 };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
	}
	assert_true(cookie_registry_size(reg) <= 512);
	cookie_registry_free(reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_get_remove),
		cmocka_unit_test(test_pidfd_not_kept),
		cmocka_unit_test(test_compact_roundtrip),
		cmocka_unit_test(test_fifo_eviction),
		cmocka_unit_test(test_capacity_one_and_bad_args),
		cmocka_unit_test(test_concurrent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
