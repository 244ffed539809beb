/*
 * Sanitizer builds only (TETHER_SANITIZE): the tether CLI also runs inside
 * the sandbox (`tether ps`, `tether connect`, the entrypoint of a combined
 * run), where the workload's seccomp profile refuses ptrace. LeakSanitizer
 * stops the world with ptrace at exit, fails there with a fatal error and
 * turns a clean exit into status 1. Under a seccomp filter, leak checking
 * is off; everywhere else the environment's options apply unchanged.
 *
 * This runs before the sanitizer runtime is initialised: a raw syscall,
 * nothing that an interceptor could see.
 */
#include <linux/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

const char *__asan_default_options(void);

const char *__asan_default_options(void)
{
	long mode = syscall(SYS_prctl, PR_GET_SECCOMP, 0, 0, 0, 0);
	return mode == 2 ? "detect_leaks=0" : "";
}
