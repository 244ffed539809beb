/* cmd_tree: see cmd_tree.h. */
#include "cmd_tree.h"
#include "identity/procfs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The parent pid in /proc/<pid>/stat; 0 when unreadable. */
static pid_t ppid_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	struct procfs_stat st;
	return procfs_read_stat_at(AT_FDCWD, path, &st) == 0 ? st.ppid : 0;
}

static int g_port;

static int connect_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g_port) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		_exit(1);
	return fd;
}

static void obey(int cmd)
{
	char c;
	int prev = -1;
	while (read(cmd, &c, 1) == 1) {
		if (c == 'c' || c == 'n') { /* one more connection, held ('n': the previous extra one closed) */
			if (c == 'n' && prev >= 0)
				close(prev);
			prev = connect_port();
		}
		if (c == 'w') { /* exec ident_workload (beside this binary), which connects anew */
			char self[4096], port[16];
			ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 32);
			char *slash = n > 0 ? memrchr(self, '/', (size_t)n) : NULL;
			if (!slash)
				_exit(127);
			strcpy(slash, "/ident_workload");
			snprintf(port, sizeof(port), "%d", g_port);
			execl(self, self, port, "self", (char *)NULL);
			_exit(127);
		}
		if (c == 'x') { /* exec another binary, keeping the socket */
			execl("/bin/sleep", "sleep", "30", (char *)NULL);
			_exit(127);
		}
		if (c == 'f' && fork() == 0) { /* a child inherits it, then execs */
			execl("/bin/sleep", "sleep", "30", (char *)NULL);
			_exit(127);
		}
		if (c == 'k' && fork() == 0) { /* a child with a connection of its own */
			close(cmd);
			(void)connect_port();
			for (;;)
				pause();
		}
		if (c == 'd') /* 300 more open fds (more links than the loop reads) */
			for (int i = 0; i < 300; i++)
				(void)fcntl(0, F_DUPFD_CLOEXEC, 3);
		if (c == 'q')
			_exit(0);
	}
	_exit(0);
}

/* M: forks L (which connects, reports its pid, obeys pl), reports L's pid,
 * obeys pm. */
static void run_mid(int pm, int pl, int rep)
{
	alarm(30);
	pid_t l = fork();
	if (l == 0) {
		alarm(30);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g_port) };
		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		int fd = socket(AF_INET, SOCK_STREAM, 0); /* no CLOEXEC: kept over exec */
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			_exit(1);
		pid_t me = getpid();
		if (write(rep, &me, sizeof(me)) != sizeof(me))
			_exit(1);
		obey(pl);
	}
	if (write(rep, &l, sizeof(l)) != sizeof(l))
		_exit(1);
	obey(pm);
}

int tree_start(struct tree *t, int lfd, int port, bool anchor_self)
{
	memset(t, 0, sizeof(*t));
	t->conn = -1;
	g_port = port;
	int pm[2], pl[2], rep[2];
	if (pipe2(pm, O_CLOEXEC) < 0 || pipe2(pl, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		return -1;
	pid_t top = fork();
	if (top == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (anchor_self)
			run_mid(pm[0], pl[0], rep[1]);
		alarm(30);
		pid_t m = fork();
		if (m == 0)
			run_mid(pm[0], pl[0], rep[1]);
		for (;;)
			pause();
	}
	close(pm[0]);
	close(pl[0]);
	close(rep[1]);
	t->cmd_m = pm[1];
	t->cmd_l = pl[1];
	if (top < 0) {
		close(rep[0]);
		return -1;
	}
	setpgid(top, top);
	t->pgid = top;
	if (anchor_self)
		t->m = top;
	else
		t->a = top;
	pid_t got[2] = { 0, 0 };
	struct pollfd p = { .fd = rep[0], .events = POLLIN };
	for (int i = 0; i < 2; i++)
		if (poll(&p, 1, 5000) != 1 || read(rep[0], &got[i], sizeof(pid_t)) != sizeof(pid_t))
			break;
	close(rep[0]);
	/* L reports first (after its connect), then M reports L's pid. */
	t->l = got[0];
	p = (struct pollfd){ .fd = lfd, .events = POLLIN };
	if (t->l <= 0 || poll(&p, 1, 5000) != 1)
		return -1;
	t->conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (t->conn < 0)
		return -1;
	socklen_t sl = sizeof(t->flow.client);
	getpeername(t->conn, (struct sockaddr *)&t->flow.client, &sl);
	sl = sizeof(t->flow.proxy);
	getsockname(t->conn, (struct sockaddr *)&t->flow.proxy, &sl);
	if (anchor_self)
		return 0;
	t->m = ppid_of(t->l);
	return t->m > 0 ? 0 : -1;
}

void tree_stop(struct tree *t)
{
	if (t->conn >= 0)
		close(t->conn);
	if (t->cmd_m > 0)
		close(t->cmd_m);
	if (t->cmd_l > 0)
		close(t->cmd_l);
	if (t->pgid > 0) {
		kill(-t->pgid, SIGKILL);
		waitpid(t->pgid, NULL, 0);
	}
	memset(t, 0, sizeof(*t));
}

bool tree_exec_sleep(struct tree *t, bool mid)
{
	return write(mid ? t->cmd_m : t->cmd_l, "x", 1) == 1 && wait_exe(mid ? t->m : t->l, "/sleep");
}

bool tree_exit(struct tree *t, bool mid)
{
	if (write(mid ? t->cmd_m : t->cmd_l, "q", 1) != 1 || !wait_gone(mid ? t->m : t->l))
		return false;
	if (mid) {
		/* M's exe goes (exit_mm) before its children are reparented
		 * (exit_notify): until then L is still M's child, and a chain
		 * through the dying M is still a chain. Wait for the reparent. */
		for (int i = 0; i < 300; i++) {
			if (ppid_of(t->l) != t->m)
				return true;
			usleep(10000);
		}
		return false;
	}
	struct pollfd p = { .fd = t->conn, .events = POLLIN };
	return poll(&p, 1, 3000) == 1; /* its FIN */
}

bool wait_exe(pid_t pid, const char *suffix)
{
	char path[64], link[4096];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	size_t sl = strlen(suffix);
	for (int i = 0; i < 300; i++) {
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			if ((size_t)n >= sl && strcmp(link + n - sl, suffix) == 0)
				return true;
		}
		usleep(10000);
	}
	return false;
}

bool wait_gone(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	for (int i = 0; i < 300; i++) {
		char link[64];
		if (readlink(path, link, sizeof(link)) < 0)
			return true; /* exited (zombie or reaped) */
		usleep(10000);
	}
	return false;
}

pid_t wait_other_child(pid_t parent, pid_t not)
{
	char path[96], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)parent, (int)parent);
	for (int i = 0; i < 300; i++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n > 0) {
			buf[n] = '\0';
			char *save = NULL;
			for (char *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
				pid_t c = (pid_t)atoi(tok);
				if (c > 0 && c != not)
					return c;
			}
		}
		usleep(10000);
	}
	return 0;
}

bool wait_child_exe(pid_t parent, const char *suffix)
{
	pid_t c = wait_other_child(parent, 0);
	return c > 0 && wait_exe(c, suffix);
}
