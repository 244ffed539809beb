/* tether-runtime-init: a stand-in for a VM runtime init such as /init.krun.
 *
 * It exists so the vm topology can be reproduced on one machine: PID 1 of
 * the guest PID namespace is a *foreign* binary above the proc-supervisor,
 * and its executable cannot be verified from inside (the bug this project
 * was born from: an ancestry walk went past the anchor, reached /init.krun
 * and failed closed because it could not stat it).
 *
 * Stage 1 copies our own image into a private tmpfs (in a private mount
 * namespace, / made a slave so nothing propagates out), opens the copy,
 * unlinks it, lazily unmounts the tmpfs and re-execs from the fd. After
 * that, readlink(/proc/1/exe) names a deleted file on a detached mount that
 * no path reaches, and PR_SET_DUMPABLE 0 makes /proc/1/exe itself
 * unreadable to anyone without CAP_SYS_PTRACE.
 *
 * Stage 2 is a tiny init in the tini mould: spawn CMD, forward signals to
 * it, reap every zombie (orphans of the namespace land here), exit with
 * CMD's status (128+N when killed by signal N). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define EXIT_SETUP 125
#define STAGE2_FLAG "--stage2"
#define HIDE_DIR "/tmp"              /* tmpfs goes over it in our private mount ns */
#define IMAGE_NAME "tether-runtime-init"

extern char **environ;

struct opts {
	bool mount_proc;
	bool no_mount_ns;
	bool no_hide;
	bool stage2;
	int cmd_index; /* argv index of CMD */
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: tether-runtime-init [OPTIONS] -- CMD [ARG...]\n"
		"\n"
		"A stand-in for a VM runtime init (/init.krun). Run it as PID 1 of a PID\n"
		"namespace: it re-executes itself from an image that cannot be stat'ed\n"
		"afterwards (a deleted copy on a lazily unmounted private tmpfs, and not\n"
		"dumpable), spawns CMD, forwards signals to it, reaps every zombie and\n"
		"exits with CMD's status.\n"
		"\n"
		"Options:\n"
		"  --mount-proc    mount a fresh /proc for this PID namespace (private mount ns)\n"
		"  --no-mount-ns   hide the image by copy+unlink in %s, without a mount ns\n"
		"  --no-hide       run from the original image (debugging)\n"
		"  -h, --help      show this help\n"
		"\n"
		"Exit status: CMD's; 128+N when CMD was killed by signal N; 125 setup\n"
		"failure; 126 CMD not executable; 127 CMD not found; 2 usage error.\n",
		HIDE_DIR);
}

static int parse(int argc, char **argv, struct opts *o)
{
	enum { OPT_MOUNT_PROC = 256, OPT_NO_MOUNT_NS, OPT_NO_HIDE, OPT_STAGE2 };
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "mount-proc", no_argument, NULL, OPT_MOUNT_PROC },
		{ "no-mount-ns", no_argument, NULL, OPT_NO_MOUNT_NS },
		{ "no-hide", no_argument, NULL, OPT_NO_HIDE },
		{ "stage2", no_argument, NULL, OPT_STAGE2 },
		{ 0 },
	};
	int c;
	/* '+': stop at the first non-option so CMD's own flags stay CMD's */
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h': usage(stdout); exit(0);
		case OPT_MOUNT_PROC: o->mount_proc = true; break;
		case OPT_NO_MOUNT_NS: o->no_mount_ns = true; break;
		case OPT_NO_HIDE: o->no_hide = true; break;
		case OPT_STAGE2: o->stage2 = true; break;
		default: return -EINVAL;
		}
	}
	if (optind >= argc) {
		log_error("missing CMD (usage: tether-runtime-init [OPTIONS] -- CMD [ARG...])");
		return -EINVAL;
	}
	if (o->mount_proc && o->no_mount_ns) {
		log_error("--mount-proc needs a private mount namespace; drop --no-mount-ns");
		return -EINVAL;
	}
	o->cmd_index = optind;
	return 0;
}

static int copy_self(const char *dst)
{
	_cleanup_close_ int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	struct stat st;
	if (fstat(in, &st) < 0)
		return -errno;
	_cleanup_close_ int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0500);
	if (out < 0)
		return -errno;
	off_t off = 0;
	while (off < st.st_size) {
		ssize_t n = sendfile(out, in, &off, (size_t)(st.st_size - off));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
	}
	return 0;
}

/* Returns an O_RDONLY fd of a copy of our image that no path reaches. */
static int hide_image(bool use_mount_ns)
{
	char dir[PATH_MAX], path[PATH_MAX];
	bool mounted = false;
	if (use_mount_ns) {
		if (unshare(CLONE_NEWNS) < 0) {
			log_error("cannot create a private mount namespace: %s", strerror(errno));
			return -errno;
		}
		/* Receive the host's mounts, send none of ours. */
		if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) {
			log_error("cannot make / a slave mount: %s", strerror(errno));
			return -errno;
		}
		strscpy(dir, HIDE_DIR, sizeof(dir));
		if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64m") < 0) {
			log_error("cannot mount a private tmpfs on %s: %s", dir, strerror(errno));
			return -errno;
		}
		mounted = true;
	} else {
		snprintf(dir, sizeof(dir), "%s/tether-init.XXXXXX", HIDE_DIR);
		if (!mkdtemp(dir)) {
			log_error("cannot create a temp dir in %s: %s", HIDE_DIR, strerror(errno));
			return -errno;
		}
	}
	int r = snprintf(path, sizeof(path), "%s/%s", dir, IMAGE_NAME) >= (int)sizeof(path) ? -ENAMETOOLONG : 0;
	if (r == 0)
		r = copy_self(path);
	int fd = -1;
	if (r < 0)
		log_error("cannot copy our image to %s: %s", path, strerror(-r));
	else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		r = -errno;
		log_error("cannot reopen %s: %s", path, strerror(errno));
	}
	unlink(path);
	if (mounted) {
		if (umount2(dir, MNT_DETACH) < 0 && r == 0) {
			r = -errno;
			log_error("cannot detach the tmpfs on %s: %s", dir, strerror(errno));
		}
	} else {
		rmdir(dir);
	}
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	return fd;
}

static int stage1(int argc, char **argv, const struct opts *o)
{
	int fd = hide_image(!o->no_mount_ns);
	if (fd < 0)
		return EXIT_SETUP;
	_cleanup_free_ char **nargv = calloc((size_t)argc + 2, sizeof(char *));
	if (!nargv)
		return EXIT_SETUP;
	nargv[0] = argv[0];
	nargv[1] = (char *)STAGE2_FLAG;
	for (int i = 1; i < argc; i++)
		nargv[i + 1] = argv[i];
	fexecve(fd, nargv, environ);
	log_error("cannot re-exec from the hidden image: %s", strerror(errno));
	close(fd);
	return EXIT_SETUP;
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return EXIT_SETUP;
}

static int stage2(char **cmd, const struct opts *o)
{
	/* Without CAP_SYS_PTRACE nobody may follow /proc/<us>/exe now. exec
	 * resets it, so CMD is dumpable again. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* exec from an fd names us after the fd ("3"); say who we are */
	prctl(PR_SET_NAME, "tether-init", 0, 0, 0);
	if (getpid() != 1)
		prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); /* still collect orphans */
	if (o->mount_proc && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		log_error("cannot mount /proc: %s", strerror(errno));
		return EXIT_SETUP;
	}

	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);

	pid_t child = fork();
	if (child < 0) {
		log_error("cannot fork: %s", strerror(errno));
		return EXIT_SETUP;
	}
	if (child == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(cmd[0], cmd);
		int e = errno;
		log_error("cannot execute %s: %s", cmd[0], strerror(e));
		_exit(e == ENOENT ? 127 : 126);
	}

	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&all, &si);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			log_error("sigwaitinfo: %s", strerror(errno));
			kill(child, SIGKILL);
			return EXIT_SETUP;
		}
		if (sig != SIGCHLD) {
			/* Forward everything else, like tini; a dead child's
			 * ESRCH is fine, its SIGCHLD is already queued. */
			kill(child, sig);
			continue;
		}
		for (;;) {
			int status;
			pid_t p = waitpid(-1, &status, WNOHANG);
			if (p <= 0)
				break;
			if (p == child)
				return exit_code(status); /* as PID 1, our exit ends the namespace */
		}
	}
}

int main(int argc, char **argv)
{
	log_set_program("tether-runtime-init");
	log_set_never_block(true);
	struct opts o = { 0 };
	if (parse(argc, argv, &o) < 0) {
		usage(stderr);
		return 2;
	}
	if (!o.stage2 && !o.no_hide)
		return stage1(argc, argv, &o);
	if (o.no_hide && o.mount_proc &&
	    (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)) {
		/* never mount a /proc over the caller's */
		log_error("cannot create a private mount namespace: %s", strerror(errno));
		return EXIT_SETUP;
	}
	return stage2(&argv[o.cmd_index], &o);
}
