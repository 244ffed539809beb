#include "proc-supervisor/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

int cgroup_mode_parse(const char *arg, enum cgroup_mode *mode, const char **path)
{
	*path = NULL;
	if (strcmp(arg, "auto") == 0)
		*mode = CGROUP_MODE_AUTO;
	else if (strcmp(arg, "none") == 0)
		*mode = CGROUP_MODE_NONE;
	else if (arg[0] == '/') {
		*mode = CGROUP_MODE_PATH;
		*path = arg;
	} else
		return -EINVAL;
	return 0;
}

/* The supervisor's own cgroup v2 path ("0::/x/y") below the mount. */
static int own_cgroup(char *out, size_t size)
{
	char buf[4096];
	ssize_t n = read_file_at(AT_FDCWD, "/proc/self/cgroup", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (strncmp(line, "0::", 3) == 0)
			return strscpy(out, line + 3, size);
	}
	return -ENOENT;
}

int sandbox_cgroup_setup(const struct kernel_caps *caps, enum cgroup_mode mode, const char *path,
			 struct sandbox_cgroup *cg)
{
	memset(cg, 0, sizeof(*cg));
	cg->workload_fd = -1;
	if (mode == CGROUP_MODE_NONE)
		return 0;
	char parent[PATH_MAX];
	if (mode == CGROUP_MODE_PATH) {
		if (strscpy(parent, path, sizeof(parent)) < 0)
			return -ENAMETOOLONG;
	} else {
		if (!caps->cgroup_v2)
			return -EOPNOTSUPP;
		char self[PATH_MAX];
		int r = own_cgroup(self, sizeof(self));
		if (r < 0)
			return r;
		/* "/" means the root of the (possibly namespaced) hierarchy. */
		if (snprintf(parent, sizeof(parent), "%s%s", caps->cgroup_root,
			     strcmp(self, "/") == 0 ? "" : self) >= (int)sizeof(parent))
			return -ENAMETOOLONG;
	}
	if (snprintf(cg->base, sizeof(cg->base), "%s/tether-%d", parent, (int)getpid()) >= (int)sizeof(cg->base) ||
	    snprintf(cg->workload, sizeof(cg->workload), "%s/workload", cg->base) >= (int)sizeof(cg->workload))
		return -ENAMETOOLONG;
	if (mkdir(cg->base, 0755) < 0)
		return -errno;
	if (mkdir(cg->workload, 0755) < 0) {
		int r = -errno;
		rmdir(cg->base);
		return r;
	}
	cg->workload_fd = open(cg->workload, O_DIRECTORY | O_PATH | O_CLOEXEC);
	if (cg->workload_fd < 0) {
		int r = -errno;
		rmdir(cg->workload);
		rmdir(cg->base);
		return r;
	}
	cg->active = true;
	return 0;
}

int sandbox_cgroup_kill(const struct sandbox_cgroup *cg)
{
	if (!cg->active)
		return -EBADF;
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/cgroup.kill", cg->workload);
	_cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "1", 1) != 1)
		return -errno;
	return 0;
}

int sandbox_cgroup_nprocs(const struct sandbox_cgroup *cg)
{
	if (!cg->active)
		return -EBADF;
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/cgroup.procs", cg->workload);
	_cleanup_fclose_ FILE *f = fopen(p, "re");
	if (!f)
		return -errno;
	int n = 0, c;
	while ((c = fgetc(f)) != EOF)
		if (c == '\n')
			n++;
	return n;
}

int sandbox_cgroup_remove(struct sandbox_cgroup *cg)
{
	if (!cg->active)
		return 0;
	if (cg->workload_fd >= 0)
		close(cg->workload_fd);
	cg->workload_fd = -1;
	int r = 0;
	/* Exited tasks leave the cgroup asynchronously after reaping; retry
	 * briefly rather than leave a directory behind. */
	for (int i = 0; i < 100; i++) {
		if (rmdir(cg->workload) == 0 || errno == ENOENT) {
			r = 0;
			break;
		}
		r = -errno;
		if (r != -EBUSY)
			break;
		usleep(10000);
	}
	if (r == 0 && rmdir(cg->base) < 0 && errno != ENOENT)
		r = -errno;
	if (r < 0)
		log_warn("cgroup: could not remove %s: %s", cg->workload, strerror(-r));
	else
		cg->active = false;
	return r;
}
