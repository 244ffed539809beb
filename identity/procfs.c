#include "identity/procfs.h"

#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* A cursor over a length-bounded buffer: nothing here relies on a NUL. */
struct cur {
	const char *p, *end;
};

static bool cur_eof(const struct cur *c) { return c->p >= c->end; }

/* Unsigned decimal (or hex) number with overflow detection; at least one
 * digit. Leading '+', '-' and whitespace are not numbers. */
static int cur_u64(struct cur *c, unsigned base, uint64_t *out)
{
	uint64_t v = 0;
	const char *start = c->p;
	while (c->p < c->end) {
		unsigned d;
		char ch = *c->p;
		if (ch >= '0' && ch <= '9')
			d = (unsigned)(ch - '0');
		else if (base == 16 && ch >= 'a' && ch <= 'f')
			d = (unsigned)(ch - 'a' + 10);
		else if (base == 16 && ch >= 'A' && ch <= 'F')
			d = (unsigned)(ch - 'A' + 10);
		else
			break;
		if (v > (UINT64_MAX - d) / base)
			return -EINVAL;
		v = v * base + d;
		c->p++;
	}
	if (c->p == start)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Signed decimal, for fields the kernel prints with %d. */
static int cur_s64(struct cur *c, int64_t *out)
{
	bool neg = false;
	if (c->p < c->end && *c->p == '-') {
		neg = true;
		c->p++;
	}
	uint64_t v;
	int r = cur_u64(c, 10, &v);
	if (r < 0)
		return r;
	if (v > (uint64_t)INT64_MAX)
		return -EINVAL;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

static int cur_pid(struct cur *c, pid_t *out)
{
	uint64_t v;
	int r = cur_u64(c, 10, &v);
	if (r < 0)
		return r;
	if (v > INT32_MAX)
		return -EINVAL;
	*out = (pid_t)v;
	return 0;
}

static int cur_id32(struct cur *c, uint32_t *out)
{
	uint64_t v;
	int r = cur_u64(c, 10, &v);
	if (r < 0)
		return r;
	if (v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int cur_char(struct cur *c, char ch)
{
	if (c->p >= c->end || *c->p != ch)
		return -EINVAL;
	c->p++;
	return 0;
}

/* Skip one or more of ' ' / '\t'; -EINVAL if there is none. */
static int cur_blanks(struct cur *c)
{
	const char *start = c->p;
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
	return c->p == start ? -EINVAL : 0;
}

static void cur_opt_blanks(struct cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
}

/* End of the current line (position of '\n' or end). */
static const char *line_end(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	return nl ? nl : end;
}

static bool has_nul(const char *buf, size_t len) { return memchr(buf, '\0', len) != NULL; }

int procfs_parse_stat(const char *buf, size_t len, struct procfs_stat *out)
{
	if (!buf || len == 0)
		return -EINVAL;
	if (len > PROCFS_STAT_MAX)
		return -EFBIG;
	/* A short read cuts a number silently: only a whole line is trusted. */
	if (buf[len - 1] != '\n')
		return -EINVAL;
	memset(out, 0, sizeof(*out));

	struct cur c = { buf, buf + len };
	int r = cur_pid(&c, &out->pid);
	if (r < 0)
		return r;
	if (cur_char(&c, ' ') < 0 || cur_char(&c, '(') < 0)
		return -EINVAL;
	/* The process picks its comm; only the fields after it are ours. */
	const char *rparen = NULL;
	for (const char *q = buf + len; q > c.p; q--)
		if (q[-1] == ')') {
			rparen = q - 1;
			break;
		}
	if (!rparen)
		return -EINVAL;
	size_t comm_len = (size_t)(rparen - c.p);
	if (comm_len > PROCFS_COMM_MAX || memchr(c.p, '\0', comm_len))
		return -EINVAL;
	memcpy(out->comm, c.p, comm_len);
	out->comm[comm_len] = '\0';
	c.p = rparen + 1;

	/* Fields 3..22 follow, one space each; the rest of the line is not ours. */
	for (int field = 3; field <= 22; field++) {
		if (cur_char(&c, ' ') < 0)
			return -EINVAL;
		if (field == 3) {
			if (cur_eof(&c))
				return -EINVAL;
			char st = *c.p++;
			if (st < 'A' || st > 'z' || (st > 'Z' && st < 'a'))
				return -EINVAL;
			out->state = st;
			continue;
		}
		if (field == 4) {
			r = cur_pid(&c, &out->ppid);
		} else if (field == 22) {
			r = cur_u64(&c, 10, &out->start_time);
		} else {
			int64_t ignored;
			r = cur_s64(&c, &ignored);
		}
		if (r < 0)
			return r;
	}
	/* Field 22 must end at a separator, never run into garbage. */
	if (!cur_eof(&c) && *c.p != ' ' && *c.p != '\n')
		return -EINVAL;
	if (has_nul(c.p, (size_t)(c.end - c.p)))
		return -EINVAL;
	return 0;
}

/* Does the line start with key (like "Uid:")? Advances past it. */
static bool line_key(struct cur *c, const char *key)
{
	size_t n = strlen(key);
	if ((size_t)(c->end - c->p) < n || memcmp(c->p, key, n) != 0)
		return false;
	c->p += n;
	return true;
}

static int parse_ids4(struct cur *c, uint32_t v[4])
{
	for (int i = 0; i < 4; i++) {
		if (cur_blanks(c) < 0)
			return -EINVAL;
		int r = cur_id32(c, &v[i]);
		if (r < 0)
			return r;
	}
	cur_opt_blanks(c);
	return cur_eof(c) ? 0 : -EINVAL;
}

static int parse_one_pid(struct cur *c, pid_t *out)
{
	if (cur_blanks(c) < 0)
		return -EINVAL;
	int r = cur_pid(c, out);
	if (r < 0)
		return r;
	cur_opt_blanks(c);
	return cur_eof(c) ? 0 : -EINVAL;
}

int procfs_parse_status(const char *buf, size_t len, struct procfs_status *out)
{
	if (!buf || len == 0)
		return -EINVAL;
	if (len > PROCFS_STATUS_MAX)
		return -EFBIG;
	if (buf[len - 1] != '\n')
		return -EINVAL; /* truncated: the last number may be cut short */
	/* Name: is escaped by the kernel, so a NUL anywhere is garbage. */
	if (has_nul(buf, len))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	bool seen_uid = false, seen_gid = false, seen_ppid = false, seen_nspid = false;
	bool seen_tgid = false, seen_pid = false;

	const char *p = buf, *end = buf + len;
	while (p < end) {
		const char *le = line_end(p, end);
		struct cur c = { p, le };
		int r = 0;
		if (line_key(&c, "Uid:")) {
			if (seen_uid)
				return -EINVAL;
			seen_uid = true;
			r = parse_ids4(&c, (uint32_t *)out->uid);
		} else if (line_key(&c, "Gid:")) {
			if (seen_gid)
				return -EINVAL;
			seen_gid = true;
			r = parse_ids4(&c, (uint32_t *)out->gid);
		} else if (line_key(&c, "PPid:")) {
			if (seen_ppid)
				return -EINVAL;
			seen_ppid = true;
			r = parse_one_pid(&c, &out->ppid);
		} else if (line_key(&c, "Tgid:")) {
			if (seen_tgid)
				return -EINVAL;
			seen_tgid = true;
			r = parse_one_pid(&c, &out->tgid);
		} else if (line_key(&c, "Pid:")) {
			if (seen_pid)
				return -EINVAL;
			seen_pid = true;
			r = parse_one_pid(&c, &out->pid);
		} else if (line_key(&c, "NSpid:")) {
			if (seen_nspid)
				return -EINVAL;
			seen_nspid = true;
			for (;;) {
				cur_opt_blanks(&c);
				if (cur_eof(&c))
					break;
				if (out->n_nspid >= PROCFS_NSPID_MAX)
					return -EINVAL;
				r = cur_pid(&c, &out->nspid[out->n_nspid++]);
				if (r < 0)
					return r;
				if (!cur_eof(&c) && *c.p != ' ' && *c.p != '\t')
					return -EINVAL;
			}
			if (out->n_nspid == 0)
				return -EINVAL;
		}
		if (r < 0)
			return r;
		p = le < end ? le + 1 : end;
	}
	if (!seen_uid || !seen_gid || !seen_ppid)
		return -EINVAL;
	if (seen_nspid && seen_pid && out->nspid[0] != out->pid)
		return -EINVAL;
	return 0;
}

static bool strip_deleted(char *path, size_t *len)
{
	static const char suffix[] = " (deleted)";
	size_t n = sizeof(suffix) - 1;
	if (*len >= n && memcmp(path + *len - n, suffix, n) == 0) {
		*len -= n;
		path[*len] = '\0';
		return true;
	}
	return false;
}

static bool path_escapes(const char *path)
{
	/* A ".." component: the kernel prints these for a cgroup outside the
	 * reader's cgroup namespace. */
	for (const char *p = path; (p = strstr(p, "..")) != NULL; p += 2) {
		bool start_ok = p == path || p[-1] == '/';
		bool end_ok = p[2] == '\0' || p[2] == '/';
		if (start_ok && end_ok)
			return true;
	}
	return false;
}

int procfs_parse_cgroup(const char *buf, size_t len, struct procfs_cgroup *out)
{
	if (!buf || len == 0)
		return -EINVAL;
	if (len > PROCFS_CGROUP_MAX)
		return -EFBIG;
	if (buf[len - 1] != '\n')
		return -EINVAL; /* truncated: the path may be cut short */
	if (has_nul(buf, len))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	bool found = false;

	const char *p = buf, *end = buf + len;
	while (p < end) {
		const char *le = line_end(p, end);
		if (le == p)
			return -EINVAL; /* empty line */
		struct cur c = { p, le };
		uint64_t hier;
		int r = cur_u64(&c, 10, &hier);
		if (r < 0)
			return r;
		if (hier > INT32_MAX || cur_char(&c, ':') < 0)
			return -EINVAL;
		/* Controllers: anything but ':' (names like "name=systemd"). */
		const char *ctl = c.p;
		const char *colon = memchr(c.p, ':', (size_t)(le - c.p));
		if (!colon)
			return -EINVAL;
		size_t ctl_len = (size_t)(colon - ctl);
		c.p = colon + 1;
		/* The path is the rest of the line and may itself contain ':'. */
		size_t plen = (size_t)(le - c.p);
		if (plen == 0 || *c.p != '/')
			return -EINVAL;
		if (hier == 0) {
			if (ctl_len != 0 || found)
				return -EINVAL; /* v2 has no controllers and one line */
			if (plen >= sizeof(out->path))
				return -EINVAL;
			memcpy(out->path, c.p, plen);
			out->path[plen] = '\0';
			out->deleted = strip_deleted(out->path, &plen);
			if (plen == 0)
				return -EINVAL;
			out->escapes = path_escapes(out->path);
			found = true;
		} else if (ctl_len == 0) {
			return -EINVAL; /* a v1 hierarchy always names controllers */
		}
		p = le < end ? le + 1 : end;
	}
	return found ? 0 : -ENOENT;
}

int procfs_parse_maps_line(const char *line, size_t len, struct procfs_maps_entry *out)
{
	if (!line || len == 0)
		return -EINVAL;
	if (len > PROCFS_MAPS_LINE_MAX)
		return -EFBIG;
	if (line[len - 1] == '\n')
		len--;
	if (len == 0 || memchr(line, '\n', len) || has_nul(line, len))
		return -EINVAL;
	memset(out, 0, sizeof(*out));

	/* start-end perms offset major:minor inode [spaces path] */
	struct cur c = { line, line + len };
	uint64_t maj, min;
	int r;
	if ((r = cur_u64(&c, 16, &out->start)) < 0 || cur_char(&c, '-') < 0 ||
	    (r = cur_u64(&c, 16, &out->end)) < 0 || cur_char(&c, ' ') < 0)
		return -EINVAL;
	if (out->end < out->start)
		return -EINVAL;
	if (c.end - c.p < 4)
		return -EINVAL;
	memcpy(out->perms, c.p, 4);
	for (int i = 0; i < 4; i++) {
		static const char allowed[4][3] = { "r-", "w-", "x-", "ps" };
		if (!memchr(allowed[i], out->perms[i], 2))
			return -EINVAL;
	}
	c.p += 4;
	if (cur_char(&c, ' ') < 0 || cur_u64(&c, 16, &out->offset) < 0 || cur_char(&c, ' ') < 0 ||
	    cur_u64(&c, 16, &maj) < 0 || cur_char(&c, ':') < 0 || cur_u64(&c, 16, &min) < 0 ||
	    cur_char(&c, ' ') < 0 || cur_u64(&c, 10, &out->ino) < 0)
		return -EINVAL;
	/* Kernel dev_t: 12-bit major, 20-bit minor. */
	if (maj > 0xfff || min > 0xfffff)
		return -EINVAL;
	out->dev_major = (unsigned)maj;
	out->dev_minor = (unsigned)min;
	if (cur_eof(&c))
		return 0;
	if (cur_blanks(&c) < 0)
		return -EINVAL;
	size_t plen = (size_t)(c.end - c.p);
	if (plen == 0)
		return 0; /* trailing padding only */
	if (plen >= sizeof(out->path))
		return -EINVAL;
	memcpy(out->path, c.p, plen);
	out->path[plen] = '\0';
	out->deleted = strip_deleted(out->path, &plen);
	return 0;
}

int procfs_maps_find(const char *buf, size_t len, uint64_t dev, uint64_t ino,
		     struct procfs_maps_entry *out)
{
	if (!buf)
		return -EINVAL;
	if (len == 0)
		return 0;
	if (buf[len - 1] != '\n')
		return -EINVAL;
	const char *p = buf, *end = buf + len;
	while (p < end) {
		const char *le = line_end(p, end);
		int r = procfs_parse_maps_line(p, (size_t)(le - p), out);
		if (r < 0)
			return r;
		/* Anonymous mappings have inode 0 and never match a file. */
		if (out->ino != 0 && out->ino == ino &&
		    makedev(out->dev_major, out->dev_minor) == dev)
			return 1;
		p = le + 1;
	}
	memset(out, 0, sizeof(*out));
	return 0;
}

int procfs_parse_fdinfo_pid(const char *buf, size_t len, pid_t *out)
{
	if (!buf || len == 0)
		return -EINVAL;
	if (len > PROCFS_FDINFO_MAX)
		return -EFBIG;
	if (buf[len - 1] != '\n')
		return -EINVAL;
	if (has_nul(buf, len))
		return -EINVAL;
	bool found = false;
	const char *p = buf, *end = buf + len;
	while (p < end) {
		const char *le = line_end(p, end);
		struct cur c = { p, le };
		if (line_key(&c, "Pid:")) {
			int64_t v;
			if (found || cur_blanks(&c) < 0 || cur_s64(&c, &v) < 0)
				return -EINVAL;
			cur_opt_blanks(&c);
			if (!cur_eof(&c) || v < -1 || v > INT32_MAX)
				return -EINVAL;
			*out = (pid_t)v;
			found = true;
		}
		p = le < end ? le + 1 : end;
	}
	return found ? 0 : -EINVAL;
}

int procfs_read_at(int dirfd, const char *name, size_t max, char **buf, size_t *len)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	size_t cap = max < 4096 ? max : 4096, off = 0;
	_cleanup_free_ char *b = malloc(cap + 1);
	if (!b)
		return -ENOMEM;
	for (;;) {
		if (off == cap) {
			if (cap >= max)
				return -EFBIG;
			size_t ncap = cap * 2 > max ? max : cap * 2;
			char *nb = realloc(b, ncap + 1);
			if (!nb)
				return -ENOMEM;
			b = nb;
			cap = ncap;
		}
		ssize_t n = read(fd, b + off, cap - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		off += (size_t)n;
	}
	b[off] = '\0';
	*buf = b;
	b = NULL;
	*len = off;
	return 0;
}

uint64_t procfs_parse_forks(const char *buf)
{
	const char *p = strstr(buf, "\nprocesses ");
	if (!p)
		return 0;
	char *end = NULL;
	unsigned long long v = strtoull(p + 11, &end, 10);
	if (end == p + 11 || *end != '\n')
		return 0;
	return (uint64_t)v;
}

int procfs_read_stat_at(int dirfd, const char *name, struct procfs_stat *out)
{
	char *buf = NULL;
	size_t len;
	int r = procfs_read_at(dirfd, name, PROCFS_STAT_MAX, &buf, &len);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	r = procfs_parse_stat(buf, len, out);
	free(buf);
	return r;
}
