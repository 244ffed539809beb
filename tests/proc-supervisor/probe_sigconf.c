/* probe_sigconf IGN BLK CMD [ARG...]: start CMD with the signals in IGN
 * ignored, every other one default (a shell's background job comes with
 * SIGINT and SIGQUIT ignored), and those in BLK blocked (comma-separated
 * numbers, "-" for none),
 * the way a parent such as nohup or a job-control shell leaves them. The
 * raw rt_sigprocmask: glibc's would drop its reserved signals (32, 33). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint64_t parse(const char *s)
{
	uint64_t m = 0;
	if (strcmp(s, "-") == 0)
		return 0;
	for (char *end; *s; s = *end ? end + 1 : end) {
		long n = strtol(s, &end, 10);
		if (n < 1 || n > 64 || (*end && *end != ',')) {
			fprintf(stderr, "probe_sigconf: bad signal list\n");
			exit(2);
		}
		m |= 1ULL << (n - 1);
	}
	return m;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: probe_sigconf IGN BLK CMD [ARG...]\n");
		return 2;
	}
	uint64_t ign = parse(argv[1]), blk = parse(argv[2]);
	for (int s = 1; s <= 64; s++) {
		if (s == SIGKILL || s == SIGSTOP)
			continue;
		struct {
			void (*handler)(int);
			unsigned long flags;
			void (*restorer)(void);
			uint64_t mask;
		} ksa = { .handler = (ign & (1ULL << (s - 1))) ? SIG_IGN : SIG_DFL };
		if (syscall(SYS_rt_sigaction, s, &ksa, NULL, sizeof(ksa.mask)) < 0) {
			perror("rt_sigaction");
			return 2;
		}
	}
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &blk, NULL, sizeof(blk)) < 0) {
		perror("rt_sigprocmask");
		return 2;
	}
	execvp(argv[3], argv + 3);
	perror(argv[3]);
	return 127;
}
