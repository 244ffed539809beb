/* Integration tests for identity/exe.c (root): the exe tuple and hash
 * describe the RUNNING image, whatever happens to the path.
 *
 * exe-swap, deleted exe, memfd exe, bind-mount masquerade (each also
 * through the notifier's cheap capture, which must agree), exec after the
 * ref was opened, the maps cross-check, the hash cache (LRU, threads) and
 * the libuv thread-pool job. Every procref case runs with fast caps and with
 * pidfs_ino + pidfd_info forced off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/kernel.h"
#include "common/util.h"
#include "identity/exe.h"
#include "identity/procref.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

struct fx {
	struct kernel_caps caps[2]; /* fast, fallback */
	char dir[64];
	char sleep_bin[PATH_MAX], true_bin[PATH_MAX];
	uint8_t sleep_sha[32], true_sha[32];
	pid_t kids[4];
	int nkids;
};

static void sha_of_path(const char *path, uint8_t out[32])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(exe_hash_fd(fd, out), 0);
	close(fd);
}

static void copy_file(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	assert_true(in >= 0);
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	assert_true(out >= 0);
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	close(in);
	assert_int_equal(close(out), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	unsetenv("TETHER_FORCE_FALLBACK");
	if (kernel_caps_probe(&f->caps[0]) < 0)
		return -1;
	f->caps[1] = f->caps[0];
	if (kernel_caps_force_fallback(&f->caps[1], "pidfs_ino,pidfd_info") < 0)
		return -1;
	strcpy(f->dir, "/tmp/tether-core-exe-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	if (!realpath("/bin/sleep", f->sleep_bin) || !realpath("/bin/true", f->true_bin))
		return -1;
	sha_of_path(f->sleep_bin, f->sleep_sha);
	sha_of_path(f->true_bin, f->true_sha);
	if (memcmp(f->sleep_sha, f->true_sha, 32) == 0)
		return -1; /* the tests need two different binaries */
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	for (int i = 0; i < f->nkids; i++) {
		kill(f->kids[i], SIGKILL);
		waitpid(f->kids[i], NULL, 0);
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", f->dir);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return '?';
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' ? rp[2] : '?';
}

/* Wait (bounded) until pid runs the file with this inode, or whose exe link
 * starts with prefix. */
static void wait_exec(pid_t pid, uint64_t ino, const char *prefix)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	for (int i = 0; i < 5000; i++) {
		struct stat st;
		char link[PATH_MAX];
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n > 0)
			link[n] = '\0';
		bool there = (ino && stat(path, &st) == 0 && st.st_ino == ino) ||
			     (prefix && n > 0 && strncmp(link, prefix, strlen(prefix)) == 0);
		/* ... and has finished exec: sleep(1) is asleep in nanosleep */
		if (there && proc_state(pid) == 'S')
			return;
		sleep_ms(1);
	}
	fail_msg("pid %d did not exec in time", (int)pid);
}

static pid_t fork_kid(struct fx *f)
{
	assert_true(f->nkids < 4);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(30);
	} else {
		f->kids[f->nkids++] = pid;
	}
	return pid;
}

static pid_t exec_sleep(struct fx *f, const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	pid_t pid = fork_kid(f);
	if (pid == 0) {
		execl(path, path, "30", (char *)NULL);
		_exit(127);
	}
	wait_exec(pid, st.st_ino, NULL);
	return pid;
}

/* The notifier's cheap capture (exe.h) agrees with the strict one on
 * everything but maps_mismatch, which it does not compute. */
static void cheap_agrees(pid_t pid, const struct exe_tuple *strict)
{
	struct exe_tuple t;
	assert_int_equal(exe_capture_pid(pid, EXE_CAPTURE_CHEAP, &t), 0);
	assert_string_equal(t.path, strict->path);
	assert_int_equal(t.deleted, strict->deleted);
	assert_int_equal(t.memfd, strict->memfd);
	assert_true(exe_tuple_same_file(&t, strict));
	assert_false(t.maps_mismatch);
	struct stat st;
	char link[64];
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	assert_int_equal(stat(link, &st), 0);
	assert_true(exe_tuple_matches_stat(&t, &st));
	assert_int_equal(exe_capture_pid(pid, EXE_CAPTURE_STRICT, &t), 0);
	assert_string_equal(t.path, strict->path);
	assert_int_equal(t.deleted, strict->deleted);
	assert_int_equal(t.memfd, strict->memfd);
}

/* Open the ref under both caps and hash its image. */
static void ref_hashed(struct fx *f, int i, pid_t pid, struct procref *r)
{
	assert_int_equal(procref_open(&f->caps[i], pid, r), 0);
	assert_int_equal(r->exe_err, 0);
	assert_false(r->exe.hashed);
	assert_int_equal(procref_hash_exe(r, NULL), 0);
	assert_true(r->exe.hashed);
}

static void exe_swap(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX], tmp[PATH_MAX];
	snprintf(path, sizeof(path), "%s/swap-bin", f->dir);
	snprintf(tmp, sizeof(tmp), "%s/swap-bin.new", f->dir);
	copy_file(f->sleep_bin, path);
	struct stat orig;
	assert_int_equal(stat(path, &orig), 0);
	pid_t pid = exec_sleep(f, path);

	/* Replace the binary on disk: a different program now sits at path. */
	copy_file(f->true_bin, tmp);
	assert_int_equal(rename(tmp, path), 0);
	uint8_t now_sha[32];
	sha_of_path(path, now_sha);
	assert_memory_equal(now_sha, f->true_sha, 32);

	for (int i = 0; i < 2; i++) {
		struct procref r;
		ref_hashed(f, i, pid, &r);
		assert_true(r.exe.ino == orig.st_ino && r.exe.dev == orig.st_dev);
		assert_int_equal(r.exe.size, orig.st_size);
		assert_string_equal(r.exe.path, path);
		assert_true(r.exe.deleted); /* its last link went with the rename */
		assert_false(r.exe.memfd);
		assert_false(r.exe.maps_mismatch);
		assert_memory_equal(r.exe.sha256, f->sleep_sha, 32);
		assert_memory_not_equal(r.exe.sha256, now_sha, 32);
		procref_close(&r);
	}
}

static void deleted_exe(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/deleted-bin", f->dir);
	copy_file(f->sleep_bin, path);
	pid_t pid = exec_sleep(f, path);
	assert_int_equal(unlink(path), 0);
	for (int i = 0; i < 2; i++) {
		struct procref r;
		ref_hashed(f, i, pid, &r);
		assert_true(r.exe.deleted);
		assert_false(r.exe.memfd);
		assert_string_equal(r.exe.path, path);
		assert_false(r.exe.maps_mismatch);
		assert_memory_equal(r.exe.sha256, f->sleep_sha, 32);
		cheap_agrees(pid, &r.exe);
		procref_close(&r);
	}
}

/* A deleted binary on a tmpfs is deleted, not a memfd (both have no links
 * and live on shmem; only the memfd sits at the root of an unmounted fs). */
static void deleted_on_tmpfs(void **state)
{
	struct fx *f = *state;
	char mnt[256], path[PATH_MAX];
	snprintf(mnt, sizeof(mnt), "%s/tmpfs", f->dir);
	snprintf(path, sizeof(path), "%s/bin", mnt);
	assert_int_equal(mkdir(mnt, 0755), 0);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t kid = fork_kid(f);
	if (kid == 0) {
		close(p[0]);
		/* the tmpfs lives in this private mount ns and dies with it */
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", mnt, "tmpfs", 0, "size=4m") < 0)
			_exit(120);
		copy_file(f->sleep_bin, path);
		struct stat st;
		if (stat(path, &st) < 0)
			_exit(121);
		pid_t g = fork();
		if (g == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			execl(path, path, "30", (char *)NULL);
			_exit(127);
		}
		wait_exec(g, st.st_ino, NULL);
		if (unlink(path) < 0)
			_exit(122);
		if (write(p[1], &g, sizeof(g)) != sizeof(g))
			_exit(123);
		for (;;)
			pause();
	}
	close(p[1]);
	pid_t g = -1;
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 10000), 1);
	assert_int_equal(read(p[0], &g, sizeof(g)), (ssize_t)sizeof(g));
	close(p[0]);
	for (int i = 0; i < 2; i++) {
		struct procref r;
		ref_hashed(f, i, g, &r);
		assert_true(r.exe.deleted);
		assert_false(r.exe.memfd);
		assert_string_equal(r.exe.path, path);
		assert_memory_equal(r.exe.sha256, f->sleep_sha, 32);
		cheap_agrees(g, &r.exe);
		procref_close(&r);
	}
}

/* A file really named "... (deleted)" is not a deleted file. */
static void literal_deleted_name(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/fake (deleted)", f->dir);
	copy_file(f->sleep_bin, path);
	pid_t pid = exec_sleep(f, path);
	struct exe_tuple t;
	assert_int_equal(exe_tuple_read(pid, &t), 0);
	assert_false(t.deleted);
	assert_string_equal(t.path, path);
	cheap_agrees(pid, &t);
	/* ... until it is unlinked */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(exe_tuple_read(pid, &t), 0);
	assert_true(t.deleted);
	assert_string_equal(t.path, path);
	cheap_agrees(pid, &t);
}

static void memfd_exe(void **state)
{
	struct fx *f = *state;
	pid_t pid = fork_kid(f);
	if (pid == 0) {
		int mfd = memfd_create("tether-core-img", MFD_CLOEXEC);
		int in = open(f->sleep_bin, O_RDONLY | O_CLOEXEC);
		if (mfd < 0 || in < 0)
			_exit(120);
		char buf[65536];
		ssize_t n;
		while ((n = read(in, buf, sizeof(buf))) > 0)
			if (write(mfd, buf, (size_t)n) != n)
				_exit(121);
		/* exec refuses an image open for writing (ETXTBSY): reopen r/o */
		char self[64];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", mfd);
		int ro = open(self, O_RDONLY | O_CLOEXEC);
		close(mfd);
		char *const argv[] = { "sleep", "30", NULL };
		char *const envp[] = { NULL };
		fexecve(ro, argv, envp);
		_exit(122);
	}
	wait_exec(pid, 0, "/memfd:tether-core-img");
	for (int i = 0; i < 2; i++) {
		struct procref r;
		ref_hashed(f, i, pid, &r);
		assert_true(r.exe.memfd);
		assert_false(r.exe.deleted);
		assert_string_equal(r.exe.path, "/memfd:tether-core-img");
		assert_false(r.exe.maps_mismatch);
		assert_memory_equal(r.exe.sha256, f->sleep_sha, 32);
		cheap_agrees(pid, &r.exe);
		procref_close(&r);
	}
}

/* Bind-mount sleep over a copy of true in a private mount ns and exec the
 * path: the path lies, dev/ino/hash do not. */
static void masquerade(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/looks-like-true", f->dir);
	copy_file(f->true_bin, path);
	struct stat sleep_st;
	assert_int_equal(stat(f->sleep_bin, &sleep_st), 0);
	pid_t pid = fork_kid(f);
	if (pid == 0) {
		/* The mount namespace (and the bind mount) die with this process. */
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount(f->sleep_bin, path, NULL, MS_BIND, NULL) < 0)
			_exit(120);
		execl(path, path, "30", (char *)NULL);
		_exit(127);
	}
	wait_exec(pid, sleep_st.st_ino, NULL);
	uint8_t outside[32];
	sha_of_path(path, outside); /* what the path holds in OUR namespace */
	assert_memory_equal(outside, f->true_sha, 32);
	for (int i = 0; i < 2; i++) {
		struct procref r;
		ref_hashed(f, i, pid, &r);
		assert_string_equal(r.exe.path, path); /* the lie */
		assert_true(r.exe.dev == sleep_st.st_dev && r.exe.ino == sleep_st.st_ino);
		assert_memory_equal(r.exe.sha256, f->sleep_sha, 32);
		assert_memory_not_equal(r.exe.sha256, outside, 32);
		assert_false(r.exe.deleted);
		assert_false(r.exe.maps_mismatch);
		cheap_agrees(pid, &r.exe);
		procref_close(&r);
	}
}

/* The process execs after its ref was taken: hashing the ref's tuple must
 * refuse the new image rather than label it with the old tuple. */
static void exec_after_open(void **state)
{
	struct fx *f = *state;
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork_kid(f);
	if (pid == 0) {
		char c;
		close(p[1]);
		if (read(p[0], &c, 1) != 1)
			_exit(120);
		execl(f->sleep_bin, "sleep", "30", (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	struct procref r[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(procref_open(&f->caps[i], pid, &r[i]), 0);
	struct stat sleep_st;
	assert_int_equal(stat(f->sleep_bin, &sleep_st), 0);
	assert_true(r[0].exe.ino != sleep_st.st_ino);
	assert_int_equal(write(p[1], "x", 1), 1);
	close(p[1]);
	wait_exec(pid, sleep_st.st_ino, NULL);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(procref_hash_exe(&r[i], NULL), -ESTALE);
		assert_false(r[i].exe.hashed);
		/* same process (exec keeps identity), new image */
		assert_int_equal(procref_revalidate(&f->caps[i], &r[i]), 0);
		procref_close(&r[i]);
	}
}

/* maps cross-check: an exe tuple that no mapping backs is flagged. */
static void maps_cross_check(void **state)
{
	struct fx *f = *state;
	int dfd = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	int real = exe_open_at(dfd);
	assert_true(real >= 0);
	struct exe_tuple t;
	assert_int_equal(exe_tuple_from_fd(dfd, real, &t), 0);
	assert_false(t.maps_mismatch);
	close(real);
	/* what PR_SET_MM_EXE_FILE would do: exe says "true", nothing maps it */
	int other = open(f->true_bin, O_RDONLY | O_CLOEXEC);
	assert_true(other >= 0);
	assert_int_equal(exe_tuple_from_fd(dfd, other, &t), 0);
	assert_true(t.maps_mismatch);
	close(other);
	close(dfd);
	assert_int_equal(exe_tuple_read(999999999, &t), -ESRCH);
}

static void fill_tuple(struct exe_tuple *t, uint64_t ino, int64_t mtime)
{
	memset(t, 0, sizeof(*t));
	t->dev = 42;
	t->ino = ino;
	t->size = 1000;
	t->mtime_ns = mtime;
	t->ctime_ns = mtime;
}

static void cache_lru(void **state)
{
	assert_null(exe_hash_cache_new(0));
	struct exe_hash_cache *c = exe_hash_cache_new(2);
	assert_non_null(c);
	struct exe_tuple t1, t2, t3, t1b;
	fill_tuple(&t1, 1, 100);
	fill_tuple(&t2, 2, 100);
	fill_tuple(&t3, 3, 100);
	fill_tuple(&t1b, 1, 101); /* same file, touched */
	uint8_t h1[32], h2[32], h3[32], out[32];
	memset(h1, 1, 32);
	memset(h2, 2, 32);
	memset(h3, 3, 32);
	assert_int_equal(exe_hash_cache_get(c, &t1, out), 0);
	exe_hash_cache_put(c, &t1, h1);
	exe_hash_cache_put(c, &t2, h2);
	assert_int_equal(exe_hash_cache_get(c, &t1, out), 1); /* t1 now most recent */
	assert_memory_equal(out, h1, 32);
	assert_int_equal(exe_hash_cache_get(c, &t1b, out), 0); /* mtime differs */
	exe_hash_cache_put(c, &t3, h3);                        /* evicts t2 */
	assert_int_equal(exe_hash_cache_get(c, &t2, out), 0);
	assert_int_equal(exe_hash_cache_get(c, &t1, out), 1);
	assert_memory_equal(out, h1, 32);
	assert_int_equal(exe_hash_cache_get(c, &t3, out), 1);
	assert_memory_equal(out, h3, 32);
	exe_hash_cache_put(c, &t3, h2); /* update in place, no eviction */
	assert_int_equal(exe_hash_cache_get(c, &t3, out), 1);
	assert_memory_equal(out, h2, 32);
	struct exe_hash_cache_stats s;
	exe_hash_cache_stats(c, &s);
	assert_int_equal(s.entries, 2);
	assert_int_equal(s.capacity, 2);
	assert_int_equal(s.evictions, 1);
	assert_int_equal(s.hits, 4);
	assert_int_equal(s.misses, 3);
	exe_hash_cache_free(c);
	exe_hash_cache_free(NULL);
}

static void cache_hash_and_stale(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/data", f->dir);
	copy_file(f->true_bin, path);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	int dfd = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct exe_tuple t;
	assert_int_equal(exe_tuple_from_fd(dfd, fd, &t), 0);
	close(dfd);
	struct exe_hash_cache *c = exe_hash_cache_new(8);
	struct exe_tuple a = t, b = t;
	assert_int_equal(exe_hash_cached(c, fd, &a), 0);
	assert_memory_equal(a.sha256, f->true_sha, 32);
	assert_int_equal(exe_hash_cached(c, fd, &b), 0);
	assert_memory_equal(b.sha256, f->true_sha, 32);
	struct exe_hash_cache_stats s;
	exe_hash_cache_stats(c, &s);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.misses, 1);
	/* the tuple does not describe this file (any more) */
	struct exe_tuple wrong = t;
	wrong.size++;
	assert_int_equal(exe_hash_cached(c, fd, &wrong), -ESTALE);
	assert_false(wrong.hashed);
	/* append (not overwrite): size must change even on a coarse clock */
	assert_int_equal(pwrite(fd, "x", 1, (off_t)t.size), 1);
	struct exe_tuple old = t;
	assert_int_equal(exe_hash_cached(c, fd, &old), -ESTALE);
	assert_int_equal(exe_hash_cached(NULL, fd, &old), -ESTALE);
	close(fd);
	exe_hash_cache_free(c);
}

struct hammer {
	struct exe_hash_cache *c;
	unsigned seed;
	int bad;
};

static void *hammer_thread(void *arg)
{
	struct hammer *h = arg;
	for (int i = 0; i < 20000; i++) {
		h->seed = h->seed * 1103515245u + 12345u;
		struct exe_tuple t;
		fill_tuple(&t, (h->seed >> 16) % 64, 7);
		uint8_t want[32], out[32];
		memset(want, (int)(t.ino & 0xff), 32);
		if ((h->seed >> 8) & 1)
			exe_hash_cache_put(h->c, &t, want);
		else if (exe_hash_cache_get(h->c, &t, out) == 1 && memcmp(out, want, 32) != 0)
			h->bad++;
	}
	return NULL;
}

static void cache_threads(void **state)
{
	struct exe_hash_cache *c = exe_hash_cache_new(16);
	pthread_t th[8];
	struct hammer h[8];
	for (int i = 0; i < 8; i++) {
		h[i] = (struct hammer){ c, (unsigned)i * 7919u + 1, 0 };
		assert_int_equal(pthread_create(&th[i], NULL, hammer_thread, &h[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(h[i].bad, 0);
	}
	struct exe_hash_cache_stats s;
	exe_hash_cache_stats(c, &s);
	assert_int_equal(s.entries, 16);
	assert_true(s.evictions > 0);
	exe_hash_cache_free(c);
}

struct job_result {
	pthread_t loop_thread;
	bool on_loop;
	int calls;
};

static void job_done(struct exe_hash_job *job)
{
	struct job_result *res = job->userdata;
	res->calls++;
	res->on_loop = pthread_equal(pthread_self(), res->loop_thread);
}

static void uv_job(void **state)
{
	struct fx *f = *state;
	uv_loop_t loop;
	assert_int_equal(uv_loop_init(&loop), 0);
	struct exe_hash_cache *c = exe_hash_cache_new(4);
	int dfd = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct exe_tuple t;
	assert_int_equal(exe_tuple_read_at(dfd, &t), 0);
	uint8_t want[32];
	int efd = exe_open_at(dfd);
	assert_int_equal(exe_hash_fd(efd, want), 0);
	close(efd);

	struct exe_hash_job ok, stale;
	struct job_result r1 = { .loop_thread = pthread_self() }, r2 = r1;
	exe_hash_job_init(&ok, exe_open_at(dfd), &t, c, job_done, &r1);
	struct exe_tuple wrong = t;
	wrong.mtime_ns++;
	exe_hash_job_init(&stale, exe_open_at(dfd), &wrong, c, job_done, &r2);
	close(dfd);
	assert_int_equal(exe_hash_job_queue(&loop, &ok), 0);
	assert_int_equal(exe_hash_job_queue(&loop, &stale), 0);
	assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(r1.calls, 1);
	assert_true(r1.on_loop);
	assert_int_equal(ok.result, 0);
	assert_true(ok.tuple.hashed);
	assert_memory_equal(ok.tuple.sha256, want, 32);
	assert_int_equal(ok.exe_fd, -1);
	assert_int_equal(r2.calls, 1);
	assert_int_equal(stale.result, -ESTALE);
	assert_false(stale.tuple.hashed);
	assert_int_equal(stale.exe_fd, -1);
	assert_int_equal(uv_loop_close(&loop), 0);
	exe_hash_cache_free(c);
	(void)f;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(exe_swap, setup, teardown),
		cmocka_unit_test_setup_teardown(deleted_exe, setup, teardown),
		cmocka_unit_test_setup_teardown(deleted_on_tmpfs, setup, teardown),
		cmocka_unit_test_setup_teardown(literal_deleted_name, setup, teardown),
		cmocka_unit_test_setup_teardown(memfd_exe, setup, teardown),
		cmocka_unit_test_setup_teardown(masquerade, setup, teardown),
		cmocka_unit_test_setup_teardown(exec_after_open, setup, teardown),
		cmocka_unit_test_setup_teardown(maps_cross_check, setup, teardown),
		cmocka_unit_test_setup_teardown(cache_lru, setup, teardown),
		cmocka_unit_test_setup_teardown(cache_hash_and_stale, setup, teardown),
		cmocka_unit_test_setup_teardown(cache_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(uv_job, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
