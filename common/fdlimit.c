#include "common/fdlimit.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"

rlim_t fdlimit_current(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > FDLIMIT_CEILING)
		return FDLIMIT_CEILING;
	return rl.rlim_cur;
}

int fdlimit_raise(struct rlimit *orig)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		int r = -errno;
		log_warn("getrlimit(RLIMIT_NOFILE): %s", strerror(-r));
		return r;
	}
	if (orig)
		*orig = rl;
	rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > FDLIMIT_CEILING ? FDLIMIT_CEILING : rl.rlim_max;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return 0;
	struct rlimit raised = { want, rl.rlim_max };
	if (setrlimit(RLIMIT_NOFILE, &raised) < 0)
		/* e.g. a hard limit above fs.nr_open */
		log_warn("cannot raise RLIMIT_NOFILE from %llu to %llu: %s", (unsigned long long)rl.rlim_cur,
			 (unsigned long long)want, strerror(errno));
	return 0;
}

size_t fdlimit_capacity(rlim_t limit, size_t per_conn, size_t reserve)
{
	if (per_conn == 0 || limit <= reserve)
		return 0;
	return (size_t)((limit - reserve) / per_conn);
}
