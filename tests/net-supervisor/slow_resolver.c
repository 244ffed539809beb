/* LD_PRELOAD shim for test_proxy: a resolver that never answers in time.
 * getaddrinfo() of a name under "slow.test" (a reserved TLD: nothing real
 * is ever asked) blocks its thread for SLOW_MS and then fails, as a lookup
 * whose DNS server drops the query does; every other name goes to the
 * real getaddrinfo. Loaded only into net-supervisor processes the test
 * starts itself. */
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
#include <time.h>

#define SLOW_MS 2500

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	static const char suffix[] = ".slow.test";
	size_t n = node ? strlen(node) : 0;
	if (n >= sizeof(suffix) - 1 && strcmp(node + n - (sizeof(suffix) - 1), suffix) == 0) {
		struct timespec ts = { .tv_sec = SLOW_MS / 1000, .tv_nsec = (SLOW_MS % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) != 0)
			;
		return EAI_AGAIN;
	}
	gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
	return real ? real(node, service, hints, res) : EAI_SYSTEM;
}
