#include "common/audit.h"

#include <errno.h>
#include <string.h>
#include "common/log.h"
#include "common/secrets.h"
#include "common/util.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#define AUDIT_OPEN_FLAGS (O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY)

struct audit_log {
	int fd;
	bool owns_fd;
	char path[PATH_MAX];
	char topology[32];
	pthread_mutex_t lock;
	atomic_uint_fast64_t written;
	atomic_uint_fast64_t failures;
	atomic_uint_fast64_t episodes;
	atomic_bool writable;
	/* under lock: the failure episode in progress */
	bool failing;
	int fail_errno;
	uint64_t fail_since_ns;  /* real time of its first failure */
	uint64_t fail_events;    /* events lost in it */
	bool need_newline;       /* a fragment could not be cut: end it first */
	/* A regular file: writes (and the cuts after a failed one) hold
	 * flock(LOCK_EX), so another process appending to the same file (tether
	 * run gives both supervisors one) never lands between a partial line
	 * and its cut. */
	bool flock_writes;
};

void audit_format_ts(uint64_t real_ns, char out[32])
{
	time_t secs = (time_t)(real_ns / 1000000000ull);
	unsigned ms = (unsigned)((real_ns / 1000000ull) % 1000);
	struct tm tm;
	gmtime_r(&secs, &tm);
	char base[24];
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, 32, "%s.%03uZ", base, ms);
}

static struct audit_log *log_new(const char *topology)
{
	struct audit_log *log = calloc(1, sizeof(*log));
	if (!log)
		return NULL;
	strscpy(log->topology, topology ? topology : "none", sizeof(log->topology));
	pthread_mutex_init(&log->lock, NULL);
	atomic_store(&log->writable, true);
	return log;
}

/* A process killed in the middle of a write(2) leaves a partial last line
 * (no answer waited on it had gone out). Cut it off before appending, so
 * the next line does not merge with it. */
static void repair_torn_tail(struct audit_log *log)
{
	struct stat st;
	if (fstat(log->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
		return;
	int rfd = open(log->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (rfd < 0)
		return;
	char buf[4096];
	off_t end = st.st_size, keep = -1;
	while (end > 0 && keep < 0 && st.st_size - end < (1 << 20)) {
		size_t n = end > (off_t)sizeof(buf) ? sizeof(buf) : (size_t)end;
		if (pread(rfd, buf, n, end - (off_t)n) != (ssize_t)n)
			break;
		if (end == st.st_size && buf[n - 1] == '\n')
			break; /* whole */
		for (size_t i = n; i > 0 && keep < 0; i--)
			if (buf[i - 1] == '\n')
				keep = end - (off_t)n + (off_t)i;
		end -= (off_t)n;
	}
	close(rfd);
	if (end == 0 && keep < 0)
		keep = 0; /* one partial line and nothing else */
	if (keep < 0 || keep == st.st_size)
		return;
	if (ftruncate(log->fd, keep) == 0)
		log_warn("audit: %s ended in a partial line (%lld bytes, a write cut short by a crash); removed",
			 log->path, (long long)(st.st_size - keep));
	else
		log->need_newline = true;
}

int audit_open(const char *path, const char *topology, struct audit_log **out)
{
	if (strcmp(path, "-") == 0)
		return audit_open_fd(STDOUT_FILENO, topology, out);
	struct audit_log *log = log_new(topology);
	if (!log)
		return -ENOMEM;
	if (strscpy(log->path, path, sizeof(log->path)) < 0) {
		audit_close(log);
		return -ENAMETOOLONG;
	}
	log->fd = open(path, AUDIT_OPEN_FLAGS, 0600);
	if (log->fd < 0) {
		int r = -errno;
		audit_close(log);
		return r;
	}
	log->owns_fd = true;
	struct stat st;
	log->flock_writes = fstat(log->fd, &st) == 0 && S_ISREG(st.st_mode);
	if (log->flock_writes)
		(void)flock(log->fd, LOCK_EX);
	repair_torn_tail(log);
	if (log->flock_writes)
		(void)flock(log->fd, LOCK_UN);
	*out = log;
	return 0;
}

int audit_open_fd(int fd, const char *topology, struct audit_log **out)
{
	struct audit_log *log = log_new(topology);
	if (!log)
		return -ENOMEM;
	log->fd = fd;
	snprintf(log->path, sizeof(log->path), fd == STDOUT_FILENO ? "stdout" : "fd %d", fd);
	*out = log;
	return 0;
}

int audit_reopen(struct audit_log *log)
{
	if (!log || !log->owns_fd)
		return 0;
	int fd = open(log->path, AUDIT_OPEN_FLAGS, 0600);
	if (fd < 0)
		return -errno;
	int r = dup3(fd, log->fd, O_CLOEXEC) < 0 ? -errno : 0;
	close(fd);
	return r;
}

void audit_close(struct audit_log *log)
{
	if (!log)
		return;
	if (log->owns_fd)
		close(log->fd);
	pthread_mutex_destroy(&log->lock);
	free(log);
}

/* s as JSON writes a string's body unchanged: printable ASCII, no '"' or '\\' */
static bool json_plain(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e || *s == '"' || *s == '\\')
			return false;
	return true;
}

struct dumpbuf {
	char *p;
	size_t len, cap;
};

static int dumpbuf_add(const char *b, size_t n, void *data)
{
	struct dumpbuf *d = data;
	if (d->len + n + 1 > d->cap) { /* + 1: room for the '\n' */
		size_t cap = d->cap * 2;
		while (cap < d->len + n + 1)
			cap *= 2;
		char *np = realloc(d->p, cap);
		if (!np)
			return -1;
		d->p = np;
		d->cap = cap;
	}
	memcpy(d->p + d->len, b, n);
	d->len += n;
	return 0;
}

/* The header written as text and fields dumped once after it, in one
 * buffer: the line the reference below makes (the header's keys first,
 * then fields' keys in their order), without building a second object
 * and copying every field into it. Only when that is the same line: the
 * header's strings plain and none of its keys in fields. NULL: ENOMEM. */
static char *format_spliced(const char *ts, const char *event, const char *topology, json_t *fields, size_t *len)
{
	struct dumpbuf d = { .cap = 1024 }; /* a decision line: 600-700 bytes */
	if (!(d.p = malloc(d.cap)))
		return NULL;
	int hl = snprintf(d.p, d.cap, "{\"ts\":\"%s\",\"event\":\"%s\",\"topology\":\"%s\"", ts, event, topology);
	if (hl < 0 || (size_t)hl + 1 >= d.cap) {
		free(d.p);
		return NULL; /* not with a 32-byte topology and a literal event */
	}
	d.len = (size_t)hl;
	if (json_dump_callback(fields, dumpbuf_add, &d, JSON_COMPACT | JSON_PRESERVE_ORDER) < 0 ||
	    d.len < (size_t)hl + 2 || d.p[hl] != '{') {
		free(d.p);
		return NULL;
	}
	if (d.p[hl + 1] == '}') { /* "{}": the header alone */
		d.p[hl] = '}';
		d.len = (size_t)hl + 1;
	} else {
		d.p[hl] = ',';
	}
	*len = d.len;
	return d.p;
}

static char *format_tree(const char *ts, const char *event, const char *topology, json_t *fields, size_t *len)
{
	json_t *obj = json_object();
	if (!obj)
		return NULL;
	json_object_set_new(obj, "ts", json_string(ts));
	json_object_set_new(obj, "event", json_string(event));
	json_object_set_new(obj, "topology", json_string(topology));
	if (fields)
		json_object_update_missing(obj, fields);
	char *line = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(obj);
	if (!line)
		return NULL;
	*len = strlen(line);
	return line; /* json_dumps leaves room for the '\n': the NUL */
}

char *audit_format_at(const struct audit_log *log, const char *event, json_t *fields, const char *ts, bool reference,
		      size_t *len)
{
	const char *topology = log ? log->topology : "none";
	char *line;
	if (!reference && json_is_object(fields) && json_plain(ts) && json_plain(event) && json_plain(topology) &&
	    !json_object_get(fields, "ts") && !json_object_get(fields, "event") && !json_object_get(fields, "topology"))
		line = format_spliced(ts, event, topology, fields, len);
	else
		line = format_tree(ts, event, topology, fields, len);
	if (!line)
		return NULL;
	/* the registered secret values (common/secrets.h), raw or as JSON
	 * escapes them (audit_secret_add registers both) */
	char *red = NULL;
	size_t rn = 0;
	int r = secrets_scrub(line, *len, &red, &rn);
	if (r != 0) {
		free(line);
		if (r < 0)
			return NULL;
		line = red;
		*len = rn;
	}
	line[(*len)++] = '\n'; /* both formats (and secrets_scrub) leave room: we rewrite the NUL */
	return line;
}

char *audit_format(const struct audit_log *log, const char *event, json_t *fields, size_t *len)
{
	char ts[32];
	audit_format_ts(now_real_ns(), ts);
	return audit_format_at(log, event, fields, ts, false, len);
}

int audit_secret_add(const char *v)
{
	int r = secrets_add(v, strlen(v));
	if (r < 0)
		return r;
	json_t *s = json_string(v);
	if (!s)
		return -EINVAL; /* not UTF-8: JSON never carries it as it is */
	char *j = json_dumps(s, JSON_ENCODE_ANY);
	json_decref(s);
	if (!j)
		return -ENOMEM;
	size_t n = strlen(j);
	r = n >= 2 ? secrets_add(j + 1, n - 2) : 0; /* without the quotes */
	explicit_bzero(j, n);
	free(j);
	return r;
}

/* "ENOSPC (No space left on device)": the name an operator searches for. */
static const char *errno_text(int e, char *buf, size_t size)
{
	const char *name = strerrorname_np(e);
	snprintf(buf, size, "%s (%s)", name ? name : "E?", strerror(e));
	return buf;
}

static size_t count_lines(const char *p, size_t len)
{
	size_t n = 0;
	for (const char *e = p + len; (p = memchr(p, '\n', (size_t)(e - p))); p++)
		n++;
	return n;
}

/* write(2) until done or an error; *done = bytes the kernel took. */
static int write_fully(int fd, const char *p, size_t len, size_t *done)
{
	*done = 0;
	while (*done < len) {
		ssize_t n = write(fd, p + *done, len - *done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		*done += (size_t)n;
	}
	return 0;
}

/* The last `extra` bytes written are a partial line: cut them off, if this
 * fd is a regular file whose end is still where our write left it (else
 * someone wrote after us, and cutting would take their bytes). */
static void cut_fragment(struct audit_log *log, size_t extra)
{
	off_t end = lseek(log->fd, 0, SEEK_CUR);
	struct stat st;
	if (end >= (off_t)extra && fstat(log->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == end &&
	    ftruncate(log->fd, end - (off_t)extra) == 0) {
		/* an fd without O_APPEND (a redirected stdout) would write past
		 * the new end and leave a hole */
		(void)lseek(log->fd, end - (off_t)extra, SEEK_SET);
		return;
	}
	log->need_newline = true;
}

/* Under lock: an episode starts (one warning) or goes on. */
static void note_failure(struct audit_log *log, int err, size_t lost)
{
	atomic_fetch_add(&log->failures, lost);
	if (!log->failing) {
		log->failing = true;
		log->fail_errno = err;
		log->fail_since_ns = now_real_ns();
		log->fail_events = 0;
		atomic_store(&log->writable, false);
		atomic_fetch_add(&log->episodes, 1);
		char e[96];
		log_warn("audit: cannot write to %s: %s; events are not recorded until a write works "
			 "again (reported once; see tether_audit_writable)",
			 log->path, errno_text(err, e, sizeof(e)));
	}
	log->fail_events += lost;
}

/* Under lock, failing: the `audit_resumed` line, malloc'd, NULL on ENOMEM. */
static char *resumed_line(struct audit_log *log, size_t *len)
{
	char since[32];
	audit_format_ts(log->fail_since_ns, since);
	const char *name = strerrorname_np(log->fail_errno);
	json_t *f = json_pack("{s:I, s:s, s:s}", "unrecorded_events", (json_int_t)log->fail_events, "since",
			      since, "error", name ? name : "E?");
	char *line = f ? audit_format(log, "audit_resumed", f, len) : NULL;
	json_decref(f);
	return line;
}

/* Under lock, failing: the episode ends only when the file takes the whole
 * batch, with `audit_resumed` ahead of it, in one write; else all of it is
 * cut back (a file with a page's room left would otherwise take the short
 * resumed line and refuse the next: an episode per batch). */
static int write_recovering(struct audit_log *log, const char *buf, size_t len, size_t *recorded)
{
	size_t rlen = 0;
	char *rl = resumed_line(log, &rlen);
	char *all = rl ? realloc(rl, rlen + len) : NULL;
	if (!all) {
		free(rl);
		note_failure(log, ENOMEM, count_lines(buf, len));
		return -ENOMEM;
	}
	memcpy(all + rlen, buf, len);
	size_t done;
	int r = write_fully(log->fd, all, rlen + len, &done);
	if (r < 0) {
		if (done)
			cut_fragment(log, done);
		free(all);
		note_failure(log, -r, count_lines(buf, len));
		return r;
	}
	char since[32], e[96];
	audit_format_ts(log->fail_since_ns, since);
	log_info("audit: writing to %s again; %llu events could not be written since %s (%s)", log->path,
		 (unsigned long long)log->fail_events, since, errno_text(log->fail_errno, e, sizeof(e)));
	free(all);
	log->failing = false;
	atomic_fetch_add(&log->written, 1 + count_lines(buf, len));
	atomic_store(&log->writable, true);
	*recorded = len;
	return 0;
}

int audit_write_lines(struct audit_log *log, const char *buf, size_t len, size_t *recorded)
{
	*recorded = 0;
	if (len == 0)
		return 0;
	pthread_mutex_lock(&log->lock);
	if (log->flock_writes)
		(void)flock(log->fd, LOCK_EX); /* best effort: a file system without locks still writes */
	int r = 0;
	size_t done = 0;
	if (log->need_newline) {
		r = write_fully(log->fd, "\n", 1, &done);
		if (r == 0)
			log->need_newline = false;
		else
			note_failure(log, -r, count_lines(buf, len));
	}
	if (r == 0 && log->failing) {
		r = write_recovering(log, buf, len, recorded);
	} else if (r == 0) {
		r = write_fully(log->fd, buf, len, &done);
		if (r == 0) {
			atomic_fetch_add(&log->written, count_lines(buf, len));
			*recorded = len;
		} else {
			size_t whole = done;
			while (whole > 0 && buf[whole - 1] != '\n')
				whole--;
			if (done > whole)
				cut_fragment(log, done - whole);
			atomic_fetch_add(&log->written, count_lines(buf, whole));
			note_failure(log, -r, count_lines(buf + whole, len - whole));
			*recorded = whole;
		}
	}
	if (log->flock_writes)
		(void)flock(log->fd, LOCK_UN);
	pthread_mutex_unlock(&log->lock);
	return r;
}

int audit_emit(struct audit_log *log, const char *event, json_t *fields)
{
	size_t len;
	char *line = audit_format(log, event, fields, &len);
	if (!line)
		return -ENOMEM;
	int r;
	if (log) {
		size_t recorded;
		r = audit_write_lines(log, line, len, &recorded);
	} else {
		size_t done;
		r = write_fully(STDERR_FILENO, line, len, &done);
	}
	free(line);
	return r;
}

uint64_t audit_events_written(const struct audit_log *log) { return log ? log->written : 0; }
uint64_t audit_failures(const struct audit_log *log) { return log ? log->failures : 0; }
bool audit_writable(const struct audit_log *log) { return log ? atomic_load(&log->writable) : true; }
uint64_t audit_failure_episodes(const struct audit_log *log) { return log ? log->episodes : 0; }
