/* Unit tests for identity/procfs.c: every parser on real-looking and
 * hostile buffers (truncations, garbage, overflow, embedded NULs, oversize).
 * Buffers are passed with explicit lengths and are copied into exact-size
 * heap blocks so ASan catches any read past the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "identity/procfs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <fcntl.h>
#include <unistd.h>

/* Exact-size copy (no NUL after it) so over-reads are ASan errors. */
static char *exact(const char *s, size_t len)
{
	char *p = malloc(len ? len : 1);
	assert_non_null(p);
	memcpy(p, s, len);
	return p;
}

/* len bytes of c (no NUL): one byte over a parser's limit must be -EFBIG
 * before any of it is looked at. */
static char *filled(size_t len, char c)
{
	char *p = malloc(len);
	assert_non_null(p);
	memset(p, c, len);
	return p;
}

static int stat_of(const char *s, size_t len, struct procfs_stat *st)
{
	char *b = exact(s, len);
	int r = procfs_parse_stat(b, len, st);
	free(b);
	return r;
}
#define STAT(s, st) stat_of((s), sizeof(s) - 1, (st))

static const char real_stat[] =
	"1234 (sleep) S 1000 1234 1000 34816 1234 4194304 95 0 0 0 0 0 0 0 20 0 1 0 "
	"987654 5636096 229 18446744073709551615 94 95 96 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 "
	"97 98 99 100 101 102 103 0\n";

static void stat_real(void **state)
{
	struct procfs_stat st;
	assert_int_equal(STAT(real_stat, &st), 0);
	assert_int_equal(st.pid, 1234);
	assert_string_equal(st.comm, "sleep");
	assert_int_equal(st.state, 'S');
	assert_int_equal(st.ppid, 1000);
	assert_int_equal(st.start_time, 987654);
}

static void stat_hostile_comm(void **state)
{
	struct procfs_stat st;
	/* spaces and a fake field list inside comm: the LAST ')' wins */
	static const char a[] = "77 (a) R 1 2 3) Z 4242 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 5555 9\n";
	assert_int_equal(STAT(a, &st), 0);
	assert_string_equal(st.comm, "a) R 1 2 3");
	assert_int_equal(st.state, 'Z');
	assert_int_equal(st.ppid, 4242);
	assert_int_equal(st.start_time, 5555);
	/* a newline and parentheses in comm (PR_SET_NAME allows them) */
	static const char b[] = "8 (x\n(y)) S 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 321 0\n";
	assert_int_equal(STAT(b, &st), 0);
	assert_string_equal(st.comm, "x\n(y)");
	assert_int_equal(st.start_time, 321);
	/* empty comm */
	static const char c[] = "9 () S 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n";
	assert_int_equal(STAT(c, &st), 0);
	assert_string_equal(st.comm, "");
	/* 64-byte kernel thread name is fine, 65 is not */
	char buf[256];
	char name[66];
	memset(name, 'k', 64);
	name[64] = '\0';
	int n = snprintf(buf, sizeof(buf), "5 (%s) I 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 7 0\n", name);
	assert_int_equal(stat_of(buf, (size_t)n, &st), 0);
	assert_int_equal(strlen(st.comm), 64);
	name[64] = 'k';
	name[65] = '\0';
	n = snprintf(buf, sizeof(buf), "5 (%s) I 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 7 0\n", name);
	assert_int_equal(stat_of(buf, (size_t)n, &st), -EINVAL);
	/* NUL inside comm */
	static const char d[] = "9 (a\0b) S 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n";
	assert_int_equal(STAT(d, &st), -EINVAL);
}

static void stat_truncated_everywhere(void **state)
{
	/* Every strict prefix fails: a cut "987654" must never read as 98765. */
	struct procfs_stat st;
	for (size_t len = 0; len < sizeof(real_stat) - 1; len++)
		assert_int_equal(stat_of(real_stat, len, &st), -EINVAL);
	assert_int_equal(stat_of(real_stat, sizeof(real_stat) - 1, &st), 0);
	/* ... also when a '\n' happens to end the cut (comm with newline) */
	static const char nl[] = "8 (a\n) S 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 321 0\n";
	assert_int_equal(stat_of(nl, 5, &st), -EINVAL);
	/* the kernel always prints more fields after 22; 22 + '\n' is enough */
	assert_int_equal(STAT("1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 9\n", &st), 0);
	assert_int_equal(st.start_time, 9);
}

static void stat_garbage(void **state)
{
	struct procfs_stat st;
	assert_int_equal(procfs_parse_stat(NULL, 0, &st), -EINVAL);
	assert_int_equal(STAT("", &st), -EINVAL);
	assert_int_equal(STAT("\n", &st), -EINVAL);
	assert_int_equal(STAT("hello world", &st), -EINVAL);
	assert_int_equal(STAT("1 (x S 1", &st), -EINVAL); /* no ')' */
	assert_int_equal(STAT("(x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n", &st), -EINVAL);
	assert_int_equal(STAT("-1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n", &st), -EINVAL);
	assert_int_equal(STAT("1 (x) S -1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n", &st), -EINVAL);
	assert_int_equal(STAT("1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 -1 0\n", &st), -EINVAL);
	assert_int_equal(STAT("1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 12a 0\n", &st), -EINVAL);
	assert_int_equal(STAT("1 (x) 5 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n", &st), -EINVAL);
	assert_int_equal(STAT("1 (x) S  1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n", &st), -EINVAL);
	assert_int_equal(STAT("1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 x 0\n", &st), -EINVAL);
	/* overflowing numbers */
	assert_int_equal(STAT("1 (x) S 99999999999 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n", &st), -EINVAL);
	assert_int_equal(STAT("1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "
			      "99999999999999999999999 0\n", &st), -EINVAL);
	assert_int_equal(STAT("4294967296 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\n", &st),
			 -EINVAL);
	/* largest u64 start_time is accepted */
	assert_int_equal(STAT("1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 18446744073709551615\n", &st), 0);
	assert_true(st.start_time == UINT64_MAX);
	assert_int_equal(STAT("1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 18446744073709551616\n", &st),
			 -EINVAL);
	/* NUL after the fields */
	static const char z[] = "1 (x) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0\0\n";
	assert_int_equal(STAT(z, &st), -EINVAL);
}

/* The host fork counter of /proc/stat, as the local strategy reads it. */
static void forks_counter(void **state)
{
	(void)state;
	assert_int_equal(procfs_parse_forks("cpu 1 2 3\nctxt 9\nprocesses 12345\nprocs_running 1\n"), 12345);
	assert_int_equal(procfs_parse_forks("cpu 1\nprocesses \n"), 0);
	assert_int_equal(procfs_parse_forks("cpu 1\nprocesses 12x\n"), 0);
	assert_int_equal(procfs_parse_forks("cpu 1\nprocesses 77"), 0); /* truncated */
	assert_int_equal(procfs_parse_forks("processes 5\n"), 0);       /* not a line of its own */
	assert_int_equal(procfs_parse_forks(""), 0);
}

static void stat_oversized(void **state)
{
	struct procfs_stat st;
	size_t len = PROCFS_STAT_MAX + 1;
	char *b = filled(len, '1');
	assert_int_equal(procfs_parse_stat(b, len, &st), -EFBIG);
	free(b);
}

static int status_of(const char *s, size_t len, struct procfs_status *st)
{
	char *b = exact(s, len);
	int r = procfs_parse_status(b, len, st);
	free(b);
	return r;
}
#define STATUS(s, st) status_of((s), sizeof(s) - 1, (st))

static const char real_status[] =
	"Name:\tsleep\n"
	"Umask:\t0022\n"
	"State:\tS (sleeping)\n"
	"Tgid:\t4321\n"
	"Ngid:\t0\n"
	"Pid:\t4321\n"
	"PPid:\t77\n"
	"TracerPid:\t0\n"
	"Uid:\t1000\t1001\t1002\t1003\n"
	"Gid:\t2000\t2001\t2002\t2003\n"
	"FDSize:\t64\n"
	"Groups:\t4 24 27 \n"
	"NStgid:\t4321\t5\t1\n"
	"NSpid:\t4321\t5\t1\n"
	"NSpgid:\t4321\t5\t1\n"
	"Seccomp:\t0\n";

static void status_real(void **state)
{
	struct procfs_status st;
	assert_int_equal(STATUS(real_status, &st), 0);
	assert_int_equal(st.pid, 4321);
	assert_int_equal(st.tgid, 4321);
	assert_int_equal(st.ppid, 77);
	assert_int_equal(st.uid[0], 1000);
	assert_int_equal(st.uid[3], 1003);
	assert_int_equal(st.gid[1], 2001);
	assert_int_equal(st.n_nspid, 3);
	assert_int_equal(st.nspid[0], 4321);
	assert_int_equal(st.nspid[2], 1);
	/* old kernels: no NSpid line */
	static const char old[] = "PPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
	assert_int_equal(STATUS(old, &st), 0);
	assert_int_equal(st.n_nspid, 0);
	/* uid 4294967295 (-1 as unsigned, "no uid") fits */
	static const char maxid[] = "PPid:\t1\nUid:\t4294967295\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
	assert_int_equal(STATUS(maxid, &st), 0);
	assert_true(st.uid[0] == 4294967295u);
}

static void status_hostile(void **state)
{
	struct procfs_status st;
	assert_int_equal(procfs_parse_status(NULL, 0, &st), -EINVAL);
	assert_int_equal(STATUS("", &st), -EINVAL);
	assert_int_equal(STATUS("\n\n\n", &st), -EINVAL);
	/* missing required lines */
	assert_int_equal(STATUS("PPid:\t1\nUid:\t0\t0\t0\t0\n", &st), -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	assert_int_equal(STATUS("Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	/* three values, five values, garbage, overflow, negative */
	assert_int_equal(STATUS("PPid:\t1\nUid:\t0\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nUid:\t0\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nUid:\t0\tx\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nUid:\t4294967296\t0\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nUid:\t-1\t0\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nUid:0\t0\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	/* duplicated keys: a forged second Uid: line must not win or merge */
	assert_int_equal(STATUS("PPid:\t1\nUid:\t0\t0\t0\t0\nUid:\t1\t1\t1\t1\nGid:\t0\t0\t0\t0\n", &st),
			 -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nPPid:\t2\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n", &st), -EINVAL);
	/* keys are matched at line start only: "Name:\tUid:\t..." is a name */
	static const char name_trick[] = "Name:\tUid:\t5\t5\t5\t5\nPPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
	assert_int_equal(STATUS(name_trick, &st), 0);
	assert_int_equal(st.uid[0], 0);
	/* NSpid: empty, too deep, garbage, disagreeing with Pid: */
	assert_int_equal(STATUS("PPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nNSpid:\t\n", &st), -EINVAL);
	assert_int_equal(STATUS("PPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nNSpid:\t1x\n", &st), -EINVAL);
	assert_int_equal(STATUS("Pid:\t5\nPPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nNSpid:\t6\t1\n", &st),
			 -EINVAL);
	char deep[1024] = "PPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nNSpid:";
	for (int i = 0; i < PROCFS_NSPID_MAX + 1; i++)
		strcat(deep, "\t7");
	strcat(deep, "\n");
	assert_int_equal(status_of(deep, strlen(deep), &st), -EINVAL);
	/* NUL byte */
	static const char nul[] = "PPid:\t1\nUid:\t0\t0\0\t0\t0\nGid:\t0\t0\t0\t0\n";
	assert_int_equal(STATUS(nul, &st), -EINVAL);
	/* truncated real file: every prefix either parses or fails, never crashes,
	 * and one missing Gid: is a failure */
	size_t gid_at = (size_t)(strstr(real_status, "Gid:") - real_status);
	for (size_t len = 0; len < sizeof(real_status); len++) {
		int r = status_of(real_status, len, &st);
		if (len <= gid_at + 12 || real_status[len - 1] != '\n')
			assert_int_equal(r, -EINVAL);
		else
			assert_true(r == 0 || r == -EINVAL);
	}
}

static void status_oversized(void **state)
{
	struct procfs_status st;
	size_t len = PROCFS_STATUS_MAX + 1;
	char *b = filled(len, '\n');
	assert_int_equal(procfs_parse_status(b, len, &st), -EFBIG);
	free(b);
}

static int cgroup_of(const char *s, size_t len, struct procfs_cgroup *cg)
{
	char *b = exact(s, len);
	int r = procfs_parse_cgroup(b, len, cg);
	free(b);
	return r;
}
#define CGROUP(s, cg) cgroup_of((s), sizeof(s) - 1, (cg))

static void cgroup_cases(void **state)
{
	static struct procfs_cgroup cg;
	assert_int_equal(CGROUP("0::/\n", &cg), 0);
	assert_string_equal(cg.path, "/");
	assert_int_equal(CGROUP("0::/system.slice/tether.service\n", &cg), 0);
	assert_string_equal(cg.path, "/system.slice/tether.service");
	assert_false(cg.deleted);
	/* no trailing newline: truncated, the path may be cut */
	assert_int_equal(CGROUP("0::/a", &cg), -EINVAL);
	/* hybrid: v1 lines around the v2 one */
	static const char hybrid[] = "12:cpu,cpuacct:/user.slice\n"
				     "11:name=systemd:/user.slice/session-1.scope\n"
				     "0::/user.slice/session-1.scope\n"
				     "3:memory:/x\n";
	assert_int_equal(CGROUP(hybrid, &cg), 0);
	assert_string_equal(cg.path, "/user.slice/session-1.scope");
	/* pure v1: well-formed, no v2 line */
	assert_int_equal(CGROUP("4:pids:/a\n2:cpu:/b\n", &cg), -ENOENT);
	/* ':' inside the path is part of it */
	assert_int_equal(CGROUP("0::/we:ird:name\n", &cg), 0);
	assert_string_equal(cg.path, "/we:ird:name");
	/* deleted, escapes */
	assert_int_equal(CGROUP("0::/gone (deleted)\n", &cg), 0);
	assert_string_equal(cg.path, "/gone");
	assert_true(cg.deleted);
	assert_int_equal(CGROUP("0::/../../outside\n", &cg), 0);
	assert_true(cg.escapes);
	assert_int_equal(CGROUP("0::/a..b/c\n", &cg), 0);
	assert_false(cg.escapes);
	assert_int_equal(CGROUP("0::/a/..\n", &cg), 0);
	assert_true(cg.escapes);
	/* hostile */
	assert_int_equal(procfs_parse_cgroup(NULL, 0, &cg), -EINVAL);
	assert_int_equal(CGROUP("", &cg), -EINVAL);
	assert_int_equal(CGROUP("\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("0::\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("0::relative\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("0:/x\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("0:cpu:/x\n", &cg), -EINVAL);     /* v2 has no controllers */
	assert_int_equal(CGROUP("3::/x\n0::/y\n", &cg), -EINVAL); /* v1 without controllers */
	assert_int_equal(CGROUP("0::/x\n0::/y\n", &cg), -EINVAL); /* two v2 lines */
	assert_int_equal(CGROUP("x::/y\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("-1::/y\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("99999999999::/y\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("0::/x\n\n", &cg), -EINVAL);
	assert_int_equal(CGROUP("0:: (deleted)\n", &cg), -EINVAL);
	static const char nul[] = "0::/a\0b\n";
	assert_int_equal(CGROUP(nul, &cg), -EINVAL);
	/* path longer than PATH_MAX */
	size_t n = PATH_MAX + 16;
	char *big = filled(n, 'a');
	memcpy(big, "0::/", 4);
	big[n - 1] = '\n';
	assert_int_equal(cgroup_of(big, n, &cg), -EINVAL);
	free(big);
	/* oversized */
	n = PROCFS_CGROUP_MAX + 1;
	big = filled(n, 'x');
	assert_int_equal(procfs_parse_cgroup(big, n, &cg), -EFBIG);
	free(big);
}

static int mline(const char *s, struct procfs_maps_entry *e)
{
	size_t len = strlen(s);
	char *b = exact(s, len);
	int r = procfs_parse_maps_line(b, len, e);
	free(b);
	return r;
}

static void maps_lines(void **state)
{
	static struct procfs_maps_entry e;
	assert_int_equal(mline("55d0c4a00000-55d0c4a02000 r--p 00000000 fd:01 1311834                    /usr/bin/sleep\n", &e), 0);
	assert_true(e.start == 0x55d0c4a00000ULL);
	assert_true(e.end == 0x55d0c4a02000ULL);
	assert_string_equal(e.perms, "r--p");
	assert_int_equal(e.dev_major, 0xfd);
	assert_int_equal(e.dev_minor, 1);
	assert_int_equal(e.ino, 1311834);
	assert_string_equal(e.path, "/usr/bin/sleep");
	assert_false(e.deleted);
	/* anonymous, [heap], deleted, memfd, spaces in path, big minor */
	assert_int_equal(mline("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 \n", &e), 0);
	assert_string_equal(e.path, "");
	assert_int_equal(mline("7ffd1000-7ffd2000 rw-p 00000000 00:00 0", &e), 0);
	assert_int_equal(mline("01000000-01021000 rw-p 00000000 00:00 0                          [heap]", &e), 0);
	assert_string_equal(e.path, "[heap]");
	assert_int_equal(mline("400000-401000 r-xp 00000000 00:2a 77 /tmp/x y (deleted)\n", &e), 0);
	assert_string_equal(e.path, "/tmp/x y");
	assert_true(e.deleted);
	assert_int_equal(mline("400000-401000 r-xp 00001000 00:01 2049 /memfd:img (deleted)\n", &e), 0);
	assert_string_equal(e.path, "/memfd:img");
	assert_int_equal(e.offset, 0x1000);
	assert_int_equal(mline("400000-401000 r-xp 00000000 103:fffff 5 /x\n", &e), 0);
	assert_int_equal(e.dev_major, 0x103);
	assert_int_equal(e.dev_minor, 0xfffff);
	/* hostile */
	const char *bad[] = {
		"",
		"\n",
		"400000 r-xp 00000000 00:01 5 /x",
		"401000-400000 r-xp 00000000 00:01 5 /x", /* end < start */
		"400000-401000 rwxq 00000000 00:01 5 /x",
		"400000-401000 r-x 00000000 00:01 5 /x",
		"400000-401000 r-xp 00000000 0001 5 /x",
		"400000-401000 r-xp 00000000 00:01 -5 /x",
		"400000-401000 r-xp 00000000 00:01 x /x",
		"400000-401000 r-xp 00000000 1000:01 5 /x", /* major > 12 bits */
		"400000-401000 r-xp 00000000 00:100000 5 /x",
		"400000-401000 r-xp 00000000 00:01 5/x",
		"g00000-401000 r-xp 00000000 00:01 5 /x",
		"10000000000000000-401000 r-xp 00000000 00:01 5 /x",
		"400000-401000 r-xp 00000000 00:01 99999999999999999999 /x",
		"400000-401000 r-xp 00000000 00:01 5 /x\n/y",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = mline(bad[i], &e);
		if (r != -EINVAL)
			fail_msg("maps line %zu accepted: \"%s\"", i, bad[i]);
	}
	static const char nul[] = "400000-401000 r-xp 00000000 00:01 5 /a\0b";
	char *b = exact(nul, sizeof(nul) - 1);
	assert_int_equal(procfs_parse_maps_line(b, sizeof(nul) - 1, &e), -EINVAL);
	free(b);
	size_t n = PROCFS_MAPS_LINE_MAX + 1;
	b = filled(n, '1');
	assert_int_equal(procfs_parse_maps_line(b, n, &e), -EFBIG);
	free(b);
}

static void maps_find(void **state)
{
	static struct procfs_maps_entry e;
	static const char maps[] =
		"55d0c4a00000-55d0c4a02000 r--p 00000000 fd:01 1311834 /usr/bin/sleep\n"
		"55d0c4a02000-55d0c4a06000 r-xp 00002000 fd:01 1311834 /usr/bin/sleep\n"
		"55d0c5000000-55d0c5021000 rw-p 00000000 00:00 0 [heap]\n"
		"7f0000000000-7f0000020000 r--p 00000000 fd:01 99 /usr/lib/libc.so.6\n"
		"7f1000000000-7f1000001000 r-xp 00000000 00:01 1024 /memfd:x (deleted)\n";
	size_t len = sizeof(maps) - 1;
	char *b = exact(maps, len);
	assert_int_equal(procfs_maps_find(b, len, makedev(0xfd, 1), 1311834, &e), 1);
	assert_true(e.start == 0x55d0c4a00000ULL);
	assert_int_equal(procfs_maps_find(b, len, makedev(0xfd, 1), 99, &e), 1);
	assert_string_equal(e.path, "/usr/lib/libc.so.6");
	assert_int_equal(procfs_maps_find(b, len, makedev(0, 1), 1024, &e), 1);
	assert_true(e.deleted);
	/* same ino on another device, or another ino: not found */
	assert_int_equal(procfs_maps_find(b, len, makedev(0xfd, 2), 1311834, &e), 0);
	assert_int_equal(procfs_maps_find(b, len, makedev(0xfd, 1), 1311835, &e), 0);
	/* anonymous mappings (ino 0) never match */
	assert_int_equal(procfs_maps_find(b, len, makedev(0, 0), 0, &e), 0);
	/* a truncated last line is an error, not a silent miss */
	assert_int_equal(procfs_maps_find(b, len - 3, makedev(0xfd, 1), 7, &e), -EINVAL);
	free(b);
	/* a garbage line anywhere fails the scan */
	static const char bad[] = "400000-401000 r-xp 00000000 00:01 5 /x\nzzz\n";
	b = exact(bad, sizeof(bad) - 1);
	assert_int_equal(procfs_maps_find(b, sizeof(bad) - 1, makedev(0, 9), 9, &e), -EINVAL);
	free(b);
	assert_int_equal(procfs_maps_find("", 0, 1, 1, &e), 0);
	/* dev encoding: large minor numbers round-trip through makedev */
	static const char big[] = "400000-401000 r-xp 00000000 103:12345 5 /x\n";
	b = exact(big, sizeof(big) - 1);
	assert_int_equal(procfs_maps_find(b, sizeof(big) - 1, makedev(0x103, 0x12345), 5, &e), 1);
	free(b);
}

static int fdinfo_of(const char *s, pid_t *p)
{
	size_t len = strlen(s);
	char *b = exact(s, len);
	int r = procfs_parse_fdinfo_pid(b, len, p);
	free(b);
	return r;
}

static void fdinfo_cases(void **state)
{
	pid_t p = 0;
	assert_int_equal(fdinfo_of("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1234\nPid:\t42\nNSpid:\t42\n", &p), 0);
	assert_int_equal(p, 42);
	assert_int_equal(fdinfo_of("Pid:\t-1\n", &p), 0);
	assert_int_equal(p, -1);
	assert_int_equal(fdinfo_of("Pid:\t0\n", &p), 0);
	assert_int_equal(p, 0);
	assert_int_equal(fdinfo_of("", &p), -EINVAL);
	assert_int_equal(fdinfo_of("pos:\t0\n", &p), -EINVAL);
	assert_int_equal(fdinfo_of("Pid:\t-2\n", &p), -EINVAL);
	assert_int_equal(fdinfo_of("Pid:\t1x\n", &p), -EINVAL);
	assert_int_equal(fdinfo_of("Pid:\t\n", &p), -EINVAL);
	assert_int_equal(fdinfo_of("Pid:\t1\nPid:\t2\n", &p), -EINVAL);
	assert_int_equal(fdinfo_of("Pid:\t99999999999\n", &p), -EINVAL);
}

/* Deterministic pseudo-random garbage through every parser: nothing but
 * 0 / -EINVAL / -ENOENT / -EFBIG, and no sanitizer report. */
static void random_garbage(void **state)
{
	uint64_t x = 0x243f6a8885a308d3ULL;
	static struct procfs_stat st;
	static struct procfs_status ss;
	static struct procfs_cgroup cg;
	static struct procfs_maps_entry me;
	static const char alphabet[] = "0123456789abcdef ()-:/\n\t:SRZp-rwx0::/ (deleted)Uid:Gid:PPid:NSpid:";
	for (int iter = 0; iter < 20000; iter++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t len = (size_t)(x % 200);
		char *b = malloc(len ? len : 1);
		for (size_t i = 0; i < len; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			b[i] = (x & 7) == 0 ? (char)(x >> 8) : alphabet[(x >> 8) % (sizeof(alphabet) - 1)];
		}
		int r;
		pid_t p;
		r = procfs_parse_stat(b, len, &st);
		assert_true(r == 0 || r == -EINVAL);
		r = procfs_parse_status(b, len, &ss);
		assert_true(r == 0 || r == -EINVAL);
		r = procfs_parse_cgroup(b, len, &cg);
		assert_true(r == 0 || r == -EINVAL || r == -ENOENT);
		r = procfs_parse_maps_line(b, len, &me);
		assert_true(r == 0 || r == -EINVAL);
		r = procfs_maps_find(b, len, 1, 1, &me);
		assert_true(r == 0 || r == 1 || r == -EINVAL);
		r = procfs_parse_fdinfo_pid(b, len, &p);
		assert_true(r == 0 || r == -EINVAL);
		free(b);
	}
}

static void read_at_limits(void **state)
{
	char path[] = "/tmp/tether-core-procfs-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	char data[10000];
	memset(data, 'q', sizeof(data));
	assert_int_equal(write(fd, data, sizeof(data)), (ssize_t)sizeof(data));
	close(fd);
	char *buf = NULL;
	size_t len = 0;
	assert_int_equal(procfs_read_at(AT_FDCWD, path, 20000, &buf, &len), 0);
	assert_int_equal(len, sizeof(data));
	assert_int_equal(buf[len], '\0');
	free(buf);
	buf = NULL;
	assert_int_equal(procfs_read_at(AT_FDCWD, path, 9000, &buf, &len), -EFBIG);
	assert_null(buf);
	assert_int_equal(procfs_read_at(AT_FDCWD, path, 10000, &buf, &len), -EFBIG);
	unlink(path);
	assert_int_equal(procfs_read_at(AT_FDCWD, path, 10000, &buf, &len), -ENOENT);
	/* the real thing */
	assert_int_equal(procfs_read_at(AT_FDCWD, "/proc/self/stat", PROCFS_STAT_MAX, &buf, &len), 0);
	assert_int_equal(procfs_parse_stat(buf, len, &(struct procfs_stat){ 0 }), 0);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stat_real),
		cmocka_unit_test(stat_hostile_comm),
		cmocka_unit_test(stat_truncated_everywhere),
		cmocka_unit_test(stat_garbage), cmocka_unit_test(forks_counter),
		cmocka_unit_test(stat_oversized),
		cmocka_unit_test(status_real),
		cmocka_unit_test(status_hostile),
		cmocka_unit_test(status_oversized),
		cmocka_unit_test(cgroup_cases),
		cmocka_unit_test(maps_lines),
		cmocka_unit_test(maps_find),
		cmocka_unit_test(fdinfo_cases),
		cmocka_unit_test(random_garbage),
		cmocka_unit_test(read_at_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
