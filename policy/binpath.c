#include "policy/binpath.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"

#define BINPATH_MAX_LINKS 40

/* Look at one symlink-free relative path inside rootfd without following
 * its last component: its stat, and its link target when it is a link.
 * openat2 refuses any symlink on the way (a component swapped for a link
 * after we checked it cannot take the lookup out of the root); without
 * openat2 (ENOSYS, kernels before 5.6) fstatat/readlinkat. */
static int peek(int rootfd, const char *rel, struct stat *st, char *target, size_t tsize)
{
	struct open_how how = {
		.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
	if (fd < 0 && errno != ENOSYS)
		return -errno;
	int r = 0;
	if (fd >= 0) {
		if (fstat(fd, st) < 0)
			r = -errno;
	} else if (fstatat(rootfd, rel, st, AT_SYMLINK_NOFOLLOW) < 0) {
		r = -errno;
	}
	if (r == 0 && S_ISLNK(st->st_mode)) {
		ssize_t n = fd >= 0 ? readlinkat(fd, "", target, tsize) : readlinkat(rootfd, rel, target, tsize);
		if (n < 0)
			r = -errno;
		else if ((size_t)n >= tsize)
			r = -ENAMETOOLONG;
		else
			target[n] = '\0';
	}
	if (fd >= 0)
		close(fd);
	return r;
}

int binpath_resolve(int rootfd, const char *path, char *out, size_t size)
{
	/* cur: the resolved prefix ("" is the root), free of links; todo: what
	 * is left to walk. A link's target replaces the component in todo. */
	char cur[PATH_MAX] = "", todo[2 * PATH_MAX], target[PATH_MAX];
	unsigned links = 0;
	if (!path || path[0] != '/')
		return -EINVAL;
	if (strscpy(todo, path, sizeof(todo)) < 0)
		return -ENAMETOOLONG;
	char *p = todo;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		char *end = strchrnul(p, '/');
		size_t len = (size_t)(end - p);
		if (len == 1 && p[0] == '.') {
			p = end;
			continue;
		}
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			char *slash = strrchr(cur, '/');
			if (slash)
				*slash = '\0'; /* ".." at the root stays at the root */
			p = end;
			continue;
		}
		size_t cl = strlen(cur);
		if (cl + 1 + len >= sizeof(cur))
			return -ENAMETOOLONG;
		cur[cl] = '/';
		memcpy(cur + cl + 1, p, len);
		cur[cl + 1 + len] = '\0';
		p = end;
		struct stat st;
		int r = peek(rootfd, cur + 1, &st, target, sizeof(target));
		if (r < 0)
			return r;
		if (S_ISLNK(st.st_mode)) {
			if (++links > BINPATH_MAX_LINKS)
				return -ELOOP;
			cur[cl] = '\0';
			if (target[0] == '/')
				cur[0] = '\0';
			char rest[2 * PATH_MAX];
			if (snprintf(rest, sizeof(rest), "%s/%s", target, p) >= (int)sizeof(rest))
				return -ENAMETOOLONG;
			strscpy(todo, rest, sizeof(todo));
			p = todo;
			continue;
		}
		if (*p && !S_ISDIR(st.st_mode)) {
			/* more to walk below a non-directory ("a/b" with a a file) */
			const char *q = p;
			while (*q == '/')
				q++;
			if (*q)
				return -ENOTDIR;
		}
	}
	return strscpy(out, cur[0] ? cur : "/", size);
}

static int read_head(int rootfd, const char *path, char *buf, size_t size)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, rootfd, path[0] == '/' ? path + 1 : path, &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS)
		fd = openat(rootfd, path[0] == '/' ? path + 1 : path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0; /* not a regular file: not a script */
	}
	ssize_t n = read(fd, buf, size - 1);
	int e = errno;
	close(fd);
	if (n < 0)
		return -e;
	buf[n] = '\0';
	return (int)n;
}

/* NAME from `#!/usr/bin/env [-S] [VAR=x]... NAME`, in the usual places. */
static int env_lookup(int rootfd, const char *name, char *out, size_t size)
{
	static const char *const dirs[] = { "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
					    "/usr/bin", "/sbin", "/bin" };
	if (strchr(name, '/'))
		return binpath_resolve(rootfd, name, out, size);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char p[PATH_MAX];
		if (snprintf(p, sizeof(p), "%s/%s", dirs[i], name) >= (int)sizeof(p))
			return -ENAMETOOLONG;
		if (binpath_resolve(rootfd, p, out, size) == 0)
			return 0;
	}
	return -ENOENT;
}

int binpath_interpreter(int rootfd, const char *path, char *out, size_t size)
{
	char cur[PATH_MAX];
	if (strscpy(cur, path, sizeof(cur)) < 0)
		return -ENAMETOOLONG;
	int depth = 0;
	for (; depth < 5; depth++) {
		char head[512];
		int n = read_head(rootfd, cur, head, sizeof(head));
		if (n < 0 && depth == 0)
			return n;
		if (n < 0)
			break; /* the interpreter itself is unreadable: it is the answer */
		if (n < 3 || head[0] != '#' || head[1] != '!')
			break;
		/* "#!INTERP [ARG]": the kernel splits at the first blank */
		char *s = head + 2, *nl = strchr(s, '\n');
		if (nl)
			*nl = '\0';
		while (*s == ' ' || *s == '\t')
			s++;
		char *interp = strsep(&s, " \t");
		if (!interp || interp[0] != '/')
			return -ENOEXEC;
		char next[PATH_MAX];
		int r = binpath_resolve(rootfd, interp, next, sizeof(next));
		if (r < 0)
			return r;
		const char *base = strrchr(next, '/') + 1;
		if (!strcmp(base, "env")) {
			/* env's arguments: options (-S splits the rest), VAR=x, NAME */
			char *tok = NULL;
			while (s && (tok = strsep(&s, " \t")) != NULL) {
				if (!*tok || tok[0] == '-' || strchr(tok, '='))
					continue;
				break;
			}
			if (!tok || !*tok || tok[0] == '-' || strchr(tok, '='))
				return -ENOEXEC;
			if ((r = env_lookup(rootfd, tok, next, sizeof(next))) < 0)
				return r;
		}
		strscpy(cur, next, sizeof(cur));
	}
	if (depth == 0)
		return 0;
	if (depth == 5)
		return -ELOOP;
	return strscpy(out, cur, size) < 0 ? -ENAMETOOLONG : 1;
}

bool binpath_is_shell(const char *path)
{
	static const char *const shells[] = { "sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox", NULL };
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	for (size_t i = 0; shells[i]; i++)
		if (!strcmp(base, shells[i]))
			return true;
	return false;
}

/* ---------- names that never connect themselves ----------
 * Checked on Debian 12 (bookworm); docs/network-policy.md has the same
 * table. A row names the binary to allow instead where there is one. */

static const char *const n_git[] = { "git", NULL };
static const char *const n_node[] = { "npm", "npx", "yarn", "yarnpkg", "pnpm", "pnpx", "corepack", NULL };
static const char *const n_pip[] = { "pip", "pip3", "pipx", "poetry", "pdm", "twine", NULL };
static const char *const n_python[] = { "python", "python3", NULL };
static const char *const n_rustup[] = { "cargo", "rustc", "rustup", NULL };
static const char *const n_go[] = { "go", NULL };
static const char *const n_ssh[] = { "scp", "sftp", "rsync", NULL };
static const char *const n_sshself[] = { "ssh", NULL };
static const char *const n_shell[] = { "sh", "bash", "dash", "zsh", "ksh", NULL };

static const struct binpath_hint hints[] = {
	{ n_git, NULL, "/usr/lib/git-core/git-remote-http",
	  "git fetches http:// and https:// remotes through /usr/lib/git-core/git-remote-http "
	  "(git-remote-https is a symlink to it) and ssh remotes through /usr/bin/ssh; only git:// "
	  "connects from git itself" },
	{ n_node, NULL, "/usr/bin/node",
	  "a Node.js program: its flows come from /usr/bin/node (/usr/bin/nodejs is a symlink to it)" },
	{ n_pip, NULL, "/usr/bin/python3.*",
	  "a Python program: its flows come from the interpreter, /usr/bin/python3.X" },
	{ n_python, NULL, "/usr/bin/python3.*",
	  "a symlink to the versioned interpreter (/usr/bin/python3.11 on Debian 12): the flows "
	  "come from /usr/bin/python3.X" },
	{ n_rustup, "rustup", NULL,
	  "rustup's proxy: it runs the toolchain's binary, so the flows come from "
	  "~/.rustup/toolchains/TOOLCHAIN/bin/cargo (Debian's /usr/bin/cargo connects itself; "
	  "git dependencies with net.git-fetch-with-cli come from git-remote-http)" },
	{ n_go, NULL, NULL,
	  "go downloads modules itself (/usr/lib/go-1.X/bin/go), but modules fetched from version "
	  "control (GOPROXY=direct, GOPRIVATE) come from git's helpers, and a `go run` program "
	  "runs from a temporary build directory: build it with `go build -o PATH` and name PATH" },
	{ n_ssh, NULL, "/usr/bin/ssh",
	  "runs ssh for the connection: the flows are ssh's (captured, with a `protocol: tcp` "
	  "endpoint; or through `tether connect`, its ProxyCommand)" },
	{ n_sshself, NULL, NULL,
	  "ssh does not follow HTTP proxies: with transparent capture (tether run's default) its "
	  "flows are its own and need an endpoint with `protocol: tcp`; through the proxy they come "
	  "from `tether connect` (ProxyCommand), so name the tether binary with ssh as an ancestor" },
	{ n_shell, NULL, NULL,
	  "a shell does not connect itself (bash's /dev/tcp bypasses the proxy: captured, or fenced): "
	  "name the programs it runs" },
};

const struct binpath_hint *binpath_hints(size_t *n)
{
	*n = sizeof(hints) / sizeof(hints[0]);
	return hints;
}

/* "pip3.11", "python3.12" count as pip3 and python3 only for the version-less
 * names; the versioned interpreter connects itself. */
static bool name_in(const char *base, const char *const *names)
{
	for (size_t i = 0; names[i]; i++)
		if (!strcmp(base, names[i]))
			return true;
	if (!strncmp(base, "pip3.", 5) && isdigit((unsigned char)base[5]))
		return names == n_pip;
	return false;
}

const struct binpath_hint *binpath_hint_find(const char *written, const char *resolved)
{
	const char *wb = strrchr(written, '/');
	wb = wb ? wb + 1 : written;
	const char *rb = resolved ? strrchr(resolved, '/') : NULL;
	rb = rb ? rb + 1 : resolved;
	for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++) {
		const struct binpath_hint *h = &hints[i];
		if (!name_in(wb, h->names))
			continue;
		if (h->resolved_base && (!rb || strcmp(rb, h->resolved_base) != 0))
			continue;
		/* python3 that resolved to python3.X needs no hint: resolution
		 * already matches the versioned interpreter */
		if (h->names == n_python && rb && strcmp(rb, wb) != 0)
			continue;
		return h;
	}
	return NULL;
}
