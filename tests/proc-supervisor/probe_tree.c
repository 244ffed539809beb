/* probe_tree orphans N: make N double-forked, short-lived grandchildren
 * (each orphaned at once, so it is reparented to the nearest subreaper:
 * the supervisor), then wait up to 5 s until none of them is left as a
 * zombie or alive, and print "zombies=K alive=L" (0 0 when the supervisor
 * reaps like an init). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int count(const pid_t *pids, int n, int *alive)
{
	int z = 0;
	*alive = 0;
	for (int i = 0; i < n; i++) {
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pids[i]);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		char *p = strrchr(buf, ')');
		if (!p || p[1] != ' ')
			continue;
		if (p[2] == 'Z')
			z++;
		else
			(*alive)++;
	}
	return z;
}

int main(int argc, char **argv)
{
	if (argc < 3 || strcmp(argv[1], "orphans") != 0)
		return fprintf(stderr, "usage: probe_tree orphans N\n"), 2;
	int n = atoi(argv[2]);
	if (n <= 0 || n > 10000)
		return 2;
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	int pfd[2];
	if (!pids || pipe(pfd) < 0)
		return 1;
	for (int i = 0; i < n; i++) {
		pid_t mid = fork();
		if (mid < 0)
			return perror("fork"), 1;
		if (mid == 0) {
			pid_t g = fork();
			if (g == 0) {
				usleep((useconds_t)(1000 * (i % 20)));
				_exit(i % 7);
			}
			(void)!write(pfd[1], &g, sizeof(g));
			_exit(0); /* orphan g */
		}
		waitpid(mid, NULL, 0);
		if (read(pfd[0], &pids[i], sizeof(pids[i])) != sizeof(pids[i]))
			return 1;
	}
	int z = 0, alive = 0;
	for (int t = 0; t < 100; t++) {
		z = count(pids, n, &alive);
		if (z == 0 && alive == 0)
			break;
		usleep(50000);
	}
	printf("zombies=%d alive=%d\n", z, alive);
	free(pids);
	return 0;
}
