/* See harden.h. */
#include "common/harden.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

int harden_hide_environ(void)
{
	extern char **environ;
	size_t n = 0;
	while (environ && environ[n])
		n++;
	char **copy = calloc(n + 1, sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (!(copy[i] = strdup(environ[i]))) {
			while (i--)
				free(copy[i]);
			free(copy);
			return -ENOMEM;
		}
	for (size_t i = 0; i < n; i++)
		explicit_bzero(environ[i], strlen(environ[i]));
	/* Owned by the process from now on (like the initial environment). */
	environ = copy;
	return 0;
}

int harden_no_dumps(bool core_limit)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return -errno;
	struct rlimit rl = { 0, 0 };
	if (core_limit && setrlimit(RLIMIT_CORE, &rl) < 0)
		return -errno;
	return 0;
}
