#include "notify_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/fdpass.h"
#include "common/util.h"
#include "tests/common/loopback.h"

int notify_rec_identify(void *u, const struct kernel_caps *caps, int pidfd, struct procref *out)
{
	if (((struct notify_rec *)u)->fail_identify)
		return -ESRCH;
	return procref_from_pidfd(caps, pidfd, out);
}

int notify_rec_record(void *u, uint64_t cookie, const struct procref *ref)
{
	struct notify_rec *r = u;
	if (r->n >= NOTIFY_REC_MAX)
		return -ENOSPC;
	r->cookie[r->n] = cookie;
	r->pid[r->n] = ref->pid;
	strscpy(r->key[r->n], ref->key, sizeof(r->key[0]));
	strscpy(r->exe[r->n], ref->exe.path, sizeof(r->exe[0]));
	r->exe_ino[r->n] = ref->exe.ino;
	r->exe_tuple[r->n] = ref->exe;
	r->n++;
	return 0;
}

void notify_rec_release(void *u, struct procref *ref)
{
	(void)u;
	procref_close(ref);
}

int notify_world_open(struct notify_world *w,
		      int (*identify)(void *user, const struct kernel_caps *caps, int pidfd, struct procref *out))
{
	memset(w, 0, sizeof(*w));
	w->srv = -1;
	if (kernel_caps_probe(&w->caps) < 0)
		return fprintf(stderr, "kernel_caps_probe failed\n"), -1;
	w->srv = loopback_listen(64, &w->port);
	if (w->srv < 0)
		return perror("listen"), -1;
	struct workload_filter_opts fo = { .notify_connect = true };
	if (workload_filter_build(&fo, &w->f) < 0)
		return fprintf(stderr, "filter build failed\n"), -1;
	uv_loop_init(&w->loop);
	struct notifier_ops ops = { .identify = identify,
				    .record = notify_rec_record,
				    .release = notify_rec_release,
				    .user = &w->rec };
	if (notifier_new(&w->loop, &w->caps, &ops, &w->n) < 0)
		return fprintf(stderr, "notifier_new failed\n"), -1;
	return 0;
}

void notify_world_close(struct notify_world *w)
{
	notifier_close(w->n);
	uv_run(&w->loop, UV_RUN_DEFAULT);
	uv_loop_close(&w->loop);
	workload_filter_free(&w->f);
	close(w->srv);
}

void notify_child_setup(const struct workload_filter *f, int sock)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(91);
	int lfd = workload_filter_install_listener(f);
	if (lfd < 0)
		_exit(92);
	if (fdpass_send(sock, "L", 1, lfd, 0) != 1)
		_exit(90);
	close(lfd);
	char go;
	if (read(sock, &go, 1) != 1)
		_exit(93);
}

int notify_recv_listener(int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	char b;
	int fd = -1;
	if (poll(&p, 1, 5000) != 1 || fdpass_recv(sock, &b, 1, &fd, 0) != 1) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

int notify_handle_n(struct notifier *n, int lfd, int count)
{
	for (int i = 0; i < count; i++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLIN))
			return -ETIMEDOUT;
		int r = notifier_handle(n, lfd);
		if (r < 0)
			return r;
	}
	return 0;
}

int notify_copy_fd(int in, int out)
{
	struct stat st;
	if (fstat(in, &st) < 0)
		return -errno;
	for (off_t off = 0; off < st.st_size;) {
		ssize_t w = sendfile(out, in, &off, (size_t)(st.st_size - off));
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
	}
	return 0;
}

int notify_copy_file(const char *from, const char *to)
{
	_cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	_cleanup_close_ int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	if (out < 0)
		return -errno;
	return notify_copy_fd(in, out);
}
