#include "common/netns.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>

struct ns_job {
	int ns_fd;
	int (*fn)(void *);
	void *arg;
	int result;
};

static void *ns_job_main(void *p)
{
	struct ns_job *job = p;
	if (setns(job->ns_fd, CLONE_NEWNET) < 0) {
		job->result = -errno;
		return NULL;
	}
	job->result = job->fn(job->arg);
	/* The thread ends here: no thread of the caller ever changed netns. */
	return NULL;
}

int netns_run(int ns_fd, int (*fn)(void *arg), void *arg)
{
	if (!fn)
		return -EINVAL;
	if (ns_fd < 0)
		return fn(arg);
	struct ns_job job = { .ns_fd = ns_fd, .fn = fn, .arg = arg, .result = -EIO };
	pthread_t th;
	int r = pthread_create(&th, NULL, ns_job_main, &job);
	if (r != 0)
		return -r;
	pthread_join(th, NULL);
	return job.result;
}

int netns_enter(int ns_fd)
{
	if (ns_fd < 0)
		return -EBADF;
	return setns(ns_fd, CLONE_NEWNET) < 0 ? -errno : 0;
}

struct socket_job {
	int domain, type, protocol;
};

static int socket_job(void *p)
{
	struct socket_job *j = p;
	int fd = socket(j->domain, j->type | SOCK_CLOEXEC, j->protocol);
	return fd < 0 ? -errno : fd;
}

int netns_socket(int ns_fd, int domain, int type, int protocol)
{
	struct socket_job j = { domain, type, protocol };
	return netns_run(ns_fd, socket_job, &j);
}
