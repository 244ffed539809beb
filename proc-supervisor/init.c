#include "proc-supervisor/init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/harden.h"
#include "common/log.h"
#include "common/util.h"
#include "identity/procfs.h"

int init_become_anchor(void)
{
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		return -errno;
	return harden_no_dumps(false);
}

int init_reap(void (*cb)(void *user, pid_t pid, int wstatus), void *user, bool *no_children)
{
	int n = 0;
	if (no_children)
		*no_children = false;
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0) {
			n++;
			if (cb)
				cb(user, pid, st);
			continue;
		}
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0 && errno == ECHILD && no_children)
			*no_children = true;
		return n;
	}
}

int init_exit_code(int wstatus)
{
	if (WIFEXITED(wstatus))
		return WEXITSTATUS(wstatus);
	if (WIFSIGNALED(wstatus))
		return 128 + WTERMSIG(wstatus);
	return 255;
}

/* ppid and start time of /proc/<pid>/stat (the project's one stat parser). */
static int read_stat(pid_t pid, pid_t *ppid, unsigned long long *start)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	struct procfs_stat st;
	int r = procfs_read_stat_at(AT_FDCWD, path, &st);
	if (r < 0)
		return r;
	*ppid = st.ppid;
	*start = st.start_time;
	return 0;
}

struct node {
	pid_t pid, ppid;
	unsigned long long start;
};

int init_signal_tree(int sig)
{
	pid_t self = getpid();
	/* A /proc of another PID namespace would name other processes. */
	char buf[32];
	ssize_t l = readlink("/proc/self", buf, sizeof(buf) - 1);
	if (l <= 0)
		return -EXDEV;
	buf[l] = '\0';
	if (atoi(buf) != self)
		return -EXDEV;

	DIR *d = opendir("/proc");
	if (!d)
		return -errno;
	size_t n = 0, cap = 256;
	struct node *v = malloc(cap * sizeof(*v));
	if (!v) {
		closedir(d);
		return -ENOMEM;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		long p = strtol(de->d_name, &end, 10);
		if (*end || p <= 0 || p == self)
			continue;
		struct node nd = { .pid = (pid_t)p };
		if (read_stat(nd.pid, &nd.ppid, &nd.start) < 0)
			continue;
		if (n == cap) {
			struct node *nv = realloc(v, 2 * cap * sizeof(*v));
			if (!nv)
				break;
			v = nv, cap *= 2;
		}
		v[n++] = nd;
	}
	closedir(d);

	int count = 0;
	for (size_t i = 0; i < n; i++) {
		/* Walk the parent links (bounded) to see whether we are an ancestor. */
		pid_t p = v[i].ppid;
		bool ours = false;
		for (int depth = 0; depth < 4096 && p > 0; depth++) {
			if (p == self) {
				ours = true;
				break;
			}
			size_t j;
			for (j = 0; j < n && v[j].pid != p; j++)
				;
			if (j == n)
				break;
			p = v[j].ppid;
		}
		if (!ours)
			continue;
		int fd = sys_pidfd_open(v[i].pid, 0);
		if (fd < 0)
			continue;
		pid_t pp;
		unsigned long long st;
		/* The pidfd pins the process; same start time => same process. */
		if (read_stat(v[i].pid, &pp, &st) == 0 && st == v[i].start && sys_pidfd_send_signal(fd, sig, NULL, 0) == 0)
			count++;
		close(fd);
	}
	free(v);
	return count;
}
