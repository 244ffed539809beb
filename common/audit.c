#include "common/audit.h"
#include "common/log.h"
#include "common/util.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
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

int audit_open(const char *path, const char *topology, struct audit_log **out)
{
	struct audit_log *log = calloc(1, sizeof(*log));
	if (!log)
		return -ENOMEM;
	if (strcmp(path, "-") == 0) {
		log->fd = STDOUT_FILENO;
	} else {
		if (strscpy(log->path, path, sizeof(log->path)) < 0) {
			free(log);
			return -ENAMETOOLONG;
		}
		log->fd = open(path, AUDIT_OPEN_FLAGS, 0600);
		if (log->fd < 0) {
			int r = -errno;
			free(log);
			return r;
		}
		log->owns_fd = true;
	}
	strscpy(log->topology, topology ? topology : "none", sizeof(log->topology));
	pthread_mutex_init(&log->lock, NULL);
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

int audit_emit(struct audit_log *log, const char *event, json_t *fields)
{
	char ts[32];
	audit_format_ts(now_real_ns(), ts);
	json_t *obj = json_object();
	if (!obj)
		return -ENOMEM;
	json_object_set_new(obj, "ts", json_string(ts));
	json_object_set_new(obj, "event", json_string(event));
	json_object_set_new(obj, "topology", json_string(log ? log->topology : "none"));
	if (fields)
		json_object_update_missing(obj, fields);
	char *line = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(obj);
	if (!line)
		return -ENOMEM;
	size_t len = strlen(line);
	line[len] = '\n'; /* json_dumps leaves room: we rewrite the NUL */
	int fd = log ? log->fd : STDERR_FILENO;
	int r = 0;
	if (log)
		pthread_mutex_lock(&log->lock);
	ssize_t n;
	do
		n = write(fd, line, len + 1);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)(len + 1)) {
		r = n < 0 ? -errno : -EIO;
		if (log && atomic_fetch_add(&log->failures, 1) == 0)
			log_error("audit: cannot write event '%s': %s", event, strerror(-r));
	} else if (log) {
		atomic_fetch_add(&log->written, 1);
	}
	if (log)
		pthread_mutex_unlock(&log->lock);
	free(line);
	return r;
}

uint64_t audit_events_written(const struct audit_log *log) { return log ? log->written : 0; }
uint64_t audit_failures(const struct audit_log *log) { return log ? log->failures : 0; }
