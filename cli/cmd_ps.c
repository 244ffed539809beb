/* tether ps [--socket PATH | RUN] [--json]: the supervised process table.
 * Without a socket: the one `tether run` on this machine (its status
 * socket is /run/tether/run-PID/status.sock, shared-pid's anchor.sock),
 * or the list of them to choose from.
 *
 * Reads the one JSON document the proc-supervisor's status socket writes
 * (members_to_json() of its table, docs/exec-gateway.md) and prints it as a
 * tree rooted at the anchor, or verbatim with --json. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/util.h"

#define RUN_BASE "/run/tether"

/* The status socket of run `pid` (shared-pid names it anchor.sock). */
static bool run_socket(const char *pid, char *out, size_t size)
{
	static const char *const names[] = { "status.sock", "anchor.sock" };
	struct stat st;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int n = snprintf(out, size, RUN_BASE "/run-%s/%s", pid, names[i]);
		if (n > 0 && (size_t)n < size && stat(out, &st) == 0 && S_ISSOCK(st.st_mode))
			return true;
	}
	return false;
}

/* Whether pid is us or one of our ancestors (in our PID namespace). */
static bool is_ancestor(pid_t pid)
{
	pid_t p = getpid();
	for (int depth = 0; p > 0 && depth < 256; depth++) {
		if (p == pid)
			return true;
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)p);
		FILE *f = fopen(path, "re");
		if (!f)
			return false;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		const char *rp = strrchr(buf, ')');
		int ppid;
		if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1)
			return false;
		p = ppid;
	}
	return false;
}

/* 1: a supervisor answers on path and it is our ancestor (we run inside
 * that sandbox), 0: it answers, -1: nothing there (a stale socket). */
static int probe(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int r = -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		struct ucred uc;
		socklen_t len = sizeof(uc);
		r = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) == 0 && uc.pid > 0 && is_ancestor(uc.pid);
	}
	close(fd);
	return r;
}

/* The one run's socket into out (0); none or several: a message (1, 2). */
static int find_run(char *out, size_t size)
{
	DIR *d = opendir(RUN_BASE);
	if (!d) {
		fprintf(stderr, "tether ps: no tether run on this machine (%s: %s)\n", RUN_BASE, strerror(errno));
		return 1;
	}
	char runs[16][32], sock[256];
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "run-", 4) != 0 || strlen(de->d_name + 4) >= sizeof(runs[0]) ||
		    !run_socket(de->d_name + 4, sock, sizeof(sock)))
			continue;
		int pr = probe(sock);
		if (pr < 0)
			continue;
		if (pr == 1) { /* the run we are inside */
			strscpy(out, sock, size);
			closedir(d);
			return 0;
		}
		if (n < 16)
			strscpy(runs[n], de->d_name + 4, sizeof(runs[0]));
		if (n++ == 0)
			strscpy(out, sock, size);
	}
	closedir(d);
	if (n == 1)
		return 0;
	if (n == 0) {
		fprintf(stderr, "tether ps: no tether run with a status socket in %s\n", RUN_BASE);
		return 1;
	}
	fprintf(stderr, "tether ps: %zu runs; say which (tether ps RUN):\n", n);
	for (size_t i = 0; i < n && i < 16; i++)
		fprintf(stderr, "  %s  (%s/run-%s)\n", runs[i], RUN_BASE, runs[i]);
	return 2;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: tether ps [--socket PATH | RUN] [--json]\n\n"
		     "Print the process table of the proc-supervisor whose status socket is\n"
		     "PATH (its --status-socket): pid, key, how each process joined (entrypoint,\n"
		     "exec session, born in tree, adopted), exe path, live or exited, and the\n"
		     "membership mode (cgroup or lineage), as a tree.\n"
		     "Without --socket: the run of `tether run` on this machine, inside or\n"
		     "beside it (" RUN_BASE "/run-PID/status.sock); with several, RUN (the\n"
		     "PID of their `tether run`) says which, and without it they are listed.\n");
}

static const char *sget(json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));
	return v ? v : "";
}

static void print_tree(json_t *procs, const char *parent_key, int depth, int budget)
{
	size_t i;
	json_t *p;
	if (depth > 64 || budget <= 0)
		return;
	json_array_foreach(procs, i, p) {
		const char *pk = sget(p, "parent_key");
		if (strcmp(pk, parent_key) || !strcmp(sget(p, "key"), parent_key))
			continue;
		json_t *exe = json_object_get(p, "exe_spawn");
		const char *path = exe ? sget(exe, "path") : "";
		bool exited = json_is_true(json_object_get(p, "exited"));
		printf("%*s%-7lld %-14s %-6s %s  [%s]\n", depth * 2, "",
		       (long long)json_integer_value(json_object_get(p, "pid")), sget(p, "join"),
		       exited ? "exited" : "live", path[0] ? path : sget(p, "comm"), sget(p, "key"));
		print_tree(procs, sget(p, "key"), depth + 1, budget - 1);
	}
}

int cmd_ps(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *path = NULL;
	bool as_json = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "s:jh", opts, NULL)) != -1) {
		switch (c) {
		case 's': path = optarg; break;
		case 'j': as_json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	char sockbuf[256];
	if (!path && optind + 1 == argc) {
		if (strspn(argv[optind], "0123456789") != strlen(argv[optind]) ||
		    !run_socket(argv[optind], sockbuf, sizeof(sockbuf))) {
			fprintf(stderr, "tether ps: no run %s with a status socket in %s\n", argv[optind], RUN_BASE);
			return 1;
		}
		path = sockbuf;
	} else if (!path && optind == argc) {
		int r = find_run(sockbuf, sizeof(sockbuf));
		if (r)
			return r;
		path = sockbuf;
	} else if (optind != argc) {
		usage(stderr);
		return 2;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "tether ps: socket path too long\n");
		return 2;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "tether ps: cannot connect to %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf) {
			close(fd);
			return 1;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 5000) <= 0) {
			fprintf(stderr, "tether ps: no answer from %s\n", path);
			free(buf);
			close(fd);
			return 1;
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (cap - len < 4096) {
			if (cap >= (64u << 20))
				break;
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				free(buf);
			buf = nb;
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = '\0';
	json_error_t je;
	json_t *doc = json_loads(buf, 0, &je);
	free(buf);
	if (!doc) {
		fprintf(stderr, "tether ps: the supervisor sent no valid status (%s); was the connection refused?\n",
			je.text);
		return 1;
	}
	if (as_json) {
		char *s = json_dumps(doc, JSON_INDENT(2));
		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(doc);
		return 0;
	}
	json_t *procs = json_object_get(doc, "processes");
	const char *anchor = sget(doc, "anchor_key");
	printf("membership: %s%s%s\n", sget(doc, "mode"), json_object_get(doc, "cgroup_path") ? " " : "",
	       sget(doc, "cgroup_path"));
	size_t i;
	json_t *p;
	json_array_foreach(procs, i, p) {
		if (!strcmp(sget(p, "key"), anchor)) {
			json_t *exe = json_object_get(p, "exe_spawn");
			printf("%-7lld %-14s %-6s %s  [%s]\n", (long long)json_integer_value(json_object_get(p, "pid")),
			       "anchor", "live", exe ? sget(exe, "path") : sget(p, "comm"), anchor);
		}
	}
	print_tree(procs, anchor, 1, 4096);
	/* Entries whose parent is not in the table (pruned lineage). */
	json_array_foreach(procs, i, p) {
		const char *pk = sget(p, "parent_key");
		if (!strcmp(sget(p, "key"), anchor) || !pk[0])
			continue;
		bool found = false;
		size_t k;
		json_t *q;
		json_array_foreach(procs, k, q) if (!strcmp(sget(q, "key"), pk)) found = true;
		if (!found)
			printf("? %lld %s (parent %s not recorded)\n",
			       (long long)json_integer_value(json_object_get(p, "pid")), sget(p, "join"), pk);
	}
	json_decref(doc);
	return 0;
}
