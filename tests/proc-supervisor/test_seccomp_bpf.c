/* The compiled workload profile, judged instruction by instruction: a small
 * classic-BPF interpreter runs the program workload_filter_build() exports
 * against hand-made struct seccomp_data, so every ABI can be asked about -
 * also the ones this machine cannot execute (i386 int $0x80 where IA-32
 * emulation is off, x32 on kernels without it). What the kernel would do
 * with the program is then a matter of reading its return value.
 *
 * Asserted: any foreign architecture and any x32 number (nr with
 * __X32_SYSCALL_BIT, arch x86_64) meets the bad-arch action (kill the
 * process) - never a native rule, never ALLOW, never the connect hook; every
 * unconditional rule in the table has the action its doc row names; and the
 * argument rules match on the low 32 bits of int arguments. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <cmocka.h>

#include "proc-supervisor/seccomp.h"

#ifndef AUDIT_ARCH_I386
#define AUDIT_ARCH_I386 0x40000003U
#endif
#ifndef AUDIT_ARCH_AARCH64
#define AUDIT_ARCH_AARCH64 0xc00000b7U
#endif
#define X32_BIT 0x40000000U
#define RET_FAIL 0xdeadbeefU /* the interpreter met something it does not know */

/* Classic BPF as seccomp accepts it (the kernel's seccomp_check_filter
 * subset): loads of the data (absolute), scratch memory, ALU, jumps, ret. */
static uint32_t bpf_run(const struct sock_fprog *p, const struct seccomp_data *d)
{
	uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = { 0 };
	const unsigned char *data = (const unsigned char *)d;
	for (unsigned pc = 0; pc < p->len; pc++) {
		const struct sock_filter *f = &p->filter[pc];
		switch (f->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			if (f->k > sizeof(*d) - 4 || f->k % 4)
				return RET_FAIL;
			memcpy(&A, data + f->k, 4);
			break;
		case BPF_LD | BPF_W | BPF_LEN: A = sizeof(*d); break;
		case BPF_LDX | BPF_W | BPF_LEN: X = sizeof(*d); break;
		case BPF_LD | BPF_IMM: A = f->k; break;
		case BPF_LDX | BPF_IMM: X = f->k; break;
		case BPF_LD | BPF_MEM: if (f->k >= BPF_MEMWORDS) return RET_FAIL; A = M[f->k]; break;
		case BPF_LDX | BPF_MEM: if (f->k >= BPF_MEMWORDS) return RET_FAIL; X = M[f->k]; break;
		case BPF_ST: if (f->k >= BPF_MEMWORDS) return RET_FAIL; M[f->k] = A; break;
		case BPF_STX: if (f->k >= BPF_MEMWORDS) return RET_FAIL; M[f->k] = X; break;
		case BPF_MISC | BPF_TAX: X = A; break;
		case BPF_MISC | BPF_TXA: A = X; break;
		case BPF_ALU | BPF_ADD | BPF_K: A += f->k; break;
		case BPF_ALU | BPF_SUB | BPF_K: A -= f->k; break;
		case BPF_ALU | BPF_AND | BPF_K: A &= f->k; break;
		case BPF_ALU | BPF_OR | BPF_K: A |= f->k; break;
		case BPF_ALU | BPF_XOR | BPF_K: A ^= f->k; break;
		case BPF_ALU | BPF_LSH | BPF_K: A <<= (f->k & 31); break;
		case BPF_ALU | BPF_RSH | BPF_K: A >>= (f->k & 31); break;
		case BPF_ALU | BPF_ADD | BPF_X: A += X; break;
		case BPF_ALU | BPF_SUB | BPF_X: A -= X; break;
		case BPF_ALU | BPF_AND | BPF_X: A &= X; break;
		case BPF_ALU | BPF_OR | BPF_X: A |= X; break;
		case BPF_ALU | BPF_NEG: A = -A; break;
		case BPF_JMP | BPF_JA: pc += f->k; break;
		case BPF_JMP | BPF_JEQ | BPF_K: pc += A == f->k ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JGT | BPF_K: pc += A > f->k ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JGE | BPF_K: pc += A >= f->k ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JSET | BPF_K: pc += (A & f->k) ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JEQ | BPF_X: pc += A == X ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JGT | BPF_X: pc += A > X ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JGE | BPF_X: pc += A >= X ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JSET | BPF_X: pc += (A & X) ? f->jt : f->jf; break;
		case BPF_RET | BPF_K: return f->k;
		case BPF_RET | BPF_A: return A;
		default: return RET_FAIL;
		}
	}
	return RET_FAIL; /* fell off the end: the kernel refuses such a program */
}

static struct workload_filter F_notify, F_protect;
#define PROTECT_PID 4242
#define PROTECT_PGID 4240

static int setup(void **state)
{
	(void)state;
	struct workload_filter_opts a = { .notify_connect = true };
	struct workload_filter_opts b = { .notify_connect = true, .protect_pid = PROTECT_PID, .protect_pgid = PROTECT_PGID };
	if (workload_filter_build(&a, &F_notify) < 0 || workload_filter_build(&b, &F_protect) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	workload_filter_free(&F_notify);
	workload_filter_free(&F_protect);
	return 0;
}

static uint32_t run(const struct workload_filter *f, uint32_t arch, int nr, int nargs, ...)
{
	struct seccomp_data d;
	memset(&d, 0, sizeof(d));
	d.arch = arch;
	d.nr = nr;
	d.instruction_pointer = 0x400000;
	va_list ap;
	va_start(ap, nargs);
	for (int i = 0; i < nargs && i < 6; i++)
		d.args[i] = va_arg(ap, uint64_t);
	va_end(ap);
	return bpf_run(&f->prog, &d);
}

#define NATIVE AUDIT_ARCH_X86_64
#define ERR(e) (SECCOMP_RET_ERRNO | (e))
#define ARG(x) ((uint64_t)(x))

static void test_native_basics(void **state)
{
	(void)state;
	assert_int_equal(run(&F_notify, NATIVE, SYS_getpid, 0), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_read, 3, ARG(0), ARG(0), ARG(0)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_connect, 3, ARG(3), ARG(0x1000), ARG(16)), SECCOMP_RET_USER_NOTIF);
	/* A syscall number beyond the table is the kernel's ENOSYS, not ours. */
	assert_int_equal(run(&F_notify, NATIVE, 1000, 0), SECCOMP_RET_ALLOW);
}

/* The core claim of the "any non-native ABI" row. */
static void test_foreign_abis_killed(void **state)
{
	(void)state;
	const int i386_nrs[] = { 1 /* exit */, 20 /* getpid */, 26 /* ptrace */, 102 /* socketcall */,
				 120 /* clone */, 310 /* unshare */, 362 /* connect */, 425 /* io_uring_setup */ };
	for (size_t i = 0; i < sizeof(i386_nrs) / sizeof(i386_nrs[0]); i++) {
		assert_int_equal(run(&F_notify, AUDIT_ARCH_I386, i386_nrs[i], 0), SECCOMP_RET_KILL_PROCESS);
		assert_int_equal(run(&F_protect, AUDIT_ARCH_I386, i386_nrs[i], 0), SECCOMP_RET_KILL_PROCESS);
	}
	/* x32: arch is x86_64, the number carries __X32_SYSCALL_BIT. Its
	 * connect must not slip past the hook, its ptrace past the deny. */
	const int x32_nrs[] = { SYS_getpid, SYS_connect, SYS_clone, SYS_unshare, SYS_setns, 521 /* x32 ptrace */,
				SYS_io_uring_setup, SYS_bpf, 0 };
	for (size_t i = 0; i < sizeof(x32_nrs) / sizeof(x32_nrs[0]); i++) {
		assert_int_equal(run(&F_notify, NATIVE, (int)(X32_BIT | (unsigned)x32_nrs[i]), 0), SECCOMP_RET_KILL_PROCESS);
		assert_int_equal(run(&F_protect, NATIVE, (int)(X32_BIT | (unsigned)x32_nrs[i]), 0), SECCOMP_RET_KILL_PROCESS);
	}
	/* Another architecture altogether. */
	assert_int_equal(run(&F_notify, AUDIT_ARCH_AARCH64, 203 /* connect */, 0), SECCOMP_RET_KILL_PROCESS);
	assert_int_equal(run(&F_notify, 0, SYS_getpid, 0), SECCOMP_RET_KILL_PROCESS);
}

/* Every "always" row: the action its doc names, whatever the arguments. */
static void test_unconditional_rows(void **state)
{
	(void)state;
	unsigned checked = 0;
	const struct workload_rule_doc *d;
	for (size_t i = 0; (d = workload_filter_rule_doc(i)); i++) {
		if (strcmp(d->when, "always") != 0)
			continue;
		int nr = seccomp_syscall_resolve_name(d->syscall);
		if (nr == __NR_SCMP_ERROR)
			continue; /* the filter skips it too (logged) */
		uint32_t want = !strcmp(d->action, "ENOSYS") ? ERR(ENOSYS) : ERR(EPERM);
		assert_string_equal(d->action, want == ERR(ENOSYS) ? "ENOSYS" : "EPERM");
		assert_int_equal(run(&F_notify, NATIVE, nr, 6, ARG(0), ARG(0), ARG(0), ARG(0), ARG(0), ARG(0)), want);
		assert_int_equal(run(&F_notify, NATIVE, nr, 6, ARG(-1), ARG(-1), ARG(-1), ARG(-1), ARG(-1), ARG(-1)),
				 want);
		checked++;
	}
	assert_true(checked >= 30);
}

static void test_clone_flags(void **state)
{
	(void)state;
	assert_int_equal(run(&F_notify, NATIVE, SYS_clone, 1, ARG(SIGCHLD)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_clone, 1, ARG(CLONE_VM | CLONE_VFORK | SIGCHLD)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_clone, 1,
			     ARG(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
				 CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID)),
			 SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_clone, 1, ARG(CLONE_PARENT | SIGCHLD)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_clone, 1, ARG(CLONE_NEWUSER | SIGCHLD)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_clone, 1, ARG((1ULL << 32) | CLONE_PARENT)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_unshare, 1, ARG(CLONE_NEWUSER)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_unshare, 1, ARG(CLONE_NEWNS | CLONE_NEWUSER)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_unshare, 1, ARG(CLONE_FILES)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_clone3, 2, ARG(0x1000), ARG(88)), ERR(ENOSYS));
	assert_int_equal(run(&F_notify, NATIVE, SYS_vfork, 0), SECCOMP_RET_ALLOW);
}

static void test_prctl_ioctl_low32(void **state)
{
	(void)state;
	assert_int_equal(run(&F_notify, NATIVE, SYS_prctl, 2, ARG(35 /* PR_SET_MM */), ARG(1)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_prctl, 2, ARG((1ULL << 32) | 35), ARG(1)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_prctl, 2, ARG(15 /* PR_SET_NAME */), ARG(0x1000)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_ioctl, 3, ARG(0), ARG(0x5412), ARG(0x1000)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_ioctl, 3, ARG(0), ARG((1ULL << 32) | 0x5412), ARG(0)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_ioctl, 3, ARG(3), ARG(0xAA00 /* USERFAULTFD_IOC_NEW */), ARG(0)),
			 ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_ioctl, 3, ARG(3), ARG((1ULL << 32) | 0xAA00), ARG(0)), ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_ioctl, 3, ARG(0), ARG(0x541B /* FIONREAD */), ARG(0)),
			 SECCOMP_RET_ALLOW);
}

static void test_sockets(void **state)
{
	(void)state;
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG(AF_INET), ARG(SOCK_STREAM), ARG(0)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG(AF_INET6), ARG(SOCK_DGRAM), ARG(0)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG(AF_UNIX), ARG(SOCK_STREAM), ARG(0)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG(AF_INET), ARG(SOCK_RAW | SOCK_CLOEXEC), ARG(1)),
			 ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG((1ULL << 32) | AF_INET), ARG(SOCK_RAW), ARG(1)),
			 ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG(17 /* AF_PACKET */), ARG(SOCK_DGRAM), ARG(0)),
			 ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG(40 /* AF_VSOCK */), ARG(SOCK_STREAM), ARG(0)),
			 ERR(EPERM));
	assert_int_equal(run(&F_notify, NATIVE, SYS_socket, 3, ARG((1ULL << 32) | 40), ARG(SOCK_DGRAM), ARG(0)),
			 ERR(EPERM));
}

/* TCP Fast Open connects inside a send: sendto/sendmsg/sendmmsg with
 * MSG_FASTOPEN meet the connect hook, plain sends never do. */
static void test_fastopen_sends(void **state)
{
	(void)state;
	const struct {
		uint64_t flags;
		uint32_t want;
	} cases[] = {
		{ 0, SECCOMP_RET_ALLOW },
		{ MSG_DONTWAIT | MSG_NOSIGNAL, SECCOMP_RET_ALLOW },
		{ ~(uint64_t)MSG_FASTOPEN, SECCOMP_RET_ALLOW },
		{ MSG_FASTOPEN, SECCOMP_RET_USER_NOTIF },
		{ MSG_FASTOPEN | MSG_NOSIGNAL, SECCOMP_RET_USER_NOTIF },
		{ (1ULL << 40) | MSG_FASTOPEN, SECCOMP_RET_USER_NOTIF },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t f = cases[i].flags;
		assert_int_equal(run(&F_notify, NATIVE, SYS_sendto, 6, ARG(3), ARG(0x1000), ARG(5), ARG(f), ARG(0x2000),
				     ARG(16)),
				 cases[i].want);
		assert_int_equal(run(&F_notify, NATIVE, SYS_sendmsg, 3, ARG(3), ARG(0x1000), ARG(f)), cases[i].want);
		assert_int_equal(run(&F_notify, NATIVE, SYS_sendmmsg, 4, ARG(3), ARG(0x1000), ARG(2), ARG(f)),
				 cases[i].want);
	}
	/* the flag in another argument is not a Fast Open send */
	assert_int_equal(run(&F_notify, NATIVE, SYS_sendmsg, 4, ARG(3), ARG(0x1000), ARG(0), ARG(MSG_FASTOPEN)),
			 SECCOMP_RET_ALLOW);
}

/* Nobody's limits but one's own may be set: a hard RLIMIT_CPU on the
 * supervisor is a SIGKILL from the kernel, which Landlock does not scope. */
static void test_prlimit(void **state)
{
	(void)state;
	const struct workload_filter *fs[] = { &F_notify, &F_protect };
	for (size_t i = 0; i < 2; i++) {
		const struct workload_filter *f = fs[i];
		/* setrlimit/getrlimit's own form, and reading another's */
		assert_int_equal(run(f, NATIVE, SYS_prlimit64, 4, ARG(0), ARG(RLIMIT_NOFILE), ARG(0x1000), ARG(0)),
				 SECCOMP_RET_ALLOW);
		assert_int_equal(run(f, NATIVE, SYS_prlimit64, 4, ARG(0), ARG(RLIMIT_NOFILE), ARG(0), ARG(0x1000)),
				 SECCOMP_RET_ALLOW);
		assert_int_equal(run(f, NATIVE, SYS_prlimit64, 4, ARG(PROTECT_PID), ARG(RLIMIT_CPU), ARG(0), ARG(0x1000)),
				 SECCOMP_RET_ALLOW);
		assert_int_equal(run(f, NATIVE, SYS_prlimit64, 4, ARG(PROTECT_PID), ARG(RLIMIT_CPU), ARG(0x1000), ARG(0)),
				 ERR(EPERM));
		assert_int_equal(run(f, NATIVE, SYS_prlimit64, 4, ARG(1), ARG(RLIMIT_NOFILE), ARG(0x1000), ARG(0x2000)),
				 ERR(EPERM));
		assert_int_equal(run(f, NATIVE, SYS_prlimit64, 4, ARG((1ULL << 32) | PROTECT_PID), ARG(RLIMIT_CPU),
				     ARG(0x1000), ARG(0)),
				 ERR(EPERM));
	}
}

/* The Landlock fallback: signals aimed at the supervisor. */
static void test_protect_pid(void **state)
{
	(void)state;
	assert_int_equal(run(&F_protect, NATIVE, SYS_kill, 2, ARG(PROTECT_PID), ARG(9)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_kill, 2, ARG((uint32_t)-PROTECT_PID), ARG(9)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_kill, 2, ARG((uint32_t)-PROTECT_PGID), ARG(9)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_kill, 2, ARG((uint32_t)-1), ARG(9)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_kill, 2, ARG(-1LL), ARG(9)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_kill, 2, ARG(PROTECT_PID + 1), ARG(9)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_protect, NATIVE, SYS_tkill, 2, ARG(PROTECT_PID), ARG(9)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_tgkill, 3, ARG(PROTECT_PID), ARG(PROTECT_PID), ARG(9)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_pidfd_open, 2, ARG(PROTECT_PID), ARG(0)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_rt_sigqueueinfo, 3, ARG(PROTECT_PID), ARG(9), ARG(0x1000)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_rt_tgsigqueueinfo, 4, ARG(PROTECT_PID), ARG(PROTECT_PID), ARG(9),
			     ARG(0x1000)),
			 ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_rt_sigqueueinfo, 3, ARG(PROTECT_PID + 1), ARG(9), ARG(0x1000)),
			 SECCOMP_RET_ALLOW);
	/* SIGIO owners: F_SETOWN (8) naming it, F_SETOWN_EX (15) and the
	 * owner ioctls whatever they point at; F_SETOWN of anyone else stays. */
	assert_int_equal(run(&F_protect, NATIVE, SYS_fcntl, 3, ARG(3), ARG(8), ARG(PROTECT_PID)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_fcntl, 3, ARG(3), ARG(8), ARG((uint32_t)-PROTECT_PGID)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_fcntl, 3, ARG(3), ARG(8), ARG((uint32_t)-PROTECT_PID)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_fcntl, 3, ARG(3), ARG(8), ARG((1ULL << 32) | PROTECT_PID)),
			 ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_fcntl, 3, ARG(3), ARG(8), ARG(PROTECT_PID + 7)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_protect, NATIVE, SYS_fcntl, 3, ARG(3), ARG(15), ARG(0x1000)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_ioctl, 3, ARG(3), ARG(0x8901), ARG(0x1000)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_ioctl, 3, ARG(3), ARG(0x8902), ARG(0x1000)), ERR(EPERM));
	assert_int_equal(run(&F_protect, NATIVE, SYS_fcntl, 3, ARG(3), ARG(4 /* F_SETFL */), ARG(PROTECT_PID)),
			 SECCOMP_RET_ALLOW);
	/* Without the fallback the same calls are Landlock's to refuse. */
	assert_int_equal(run(&F_notify, NATIVE, SYS_kill, 2, ARG(PROTECT_PID), ARG(9)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_fcntl, 3, ARG(3), ARG(8), ARG(PROTECT_PID)), SECCOMP_RET_ALLOW);
	assert_int_equal(run(&F_notify, NATIVE, SYS_fcntl, 3, ARG(3), ARG(15), ARG(0x1000)), SECCOMP_RET_ALLOW);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_native_basics),
		cmocka_unit_test(test_foreign_abis_killed),
		cmocka_unit_test(test_unconditional_rows),
		cmocka_unit_test(test_clone_flags),
		cmocka_unit_test(test_prctl_ioctl_low32),
		cmocka_unit_test(test_sockets),
		cmocka_unit_test(test_fastopen_sends),
		cmocka_unit_test(test_prlimit),
		cmocka_unit_test(test_protect_pid),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
