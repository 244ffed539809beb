/* tether ps --socket PATH [--json]: the supervised process table.
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
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"

static void usage(FILE *out)
{
	fprintf(out, "usage: tether ps --socket PATH [--json]\n\n"
		     "Print the process table of the proc-supervisor whose status socket is\n"
		     "PATH (its --status-socket): pid, key, how each process joined (entrypoint,\n"
		     "exec session, born in tree, adopted), exe path, live or exited, and the\n"
		     "membership mode (cgroup or lineage), as a tree.\n");
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
	if (!path || optind != argc) {
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
