/* Credential-broker socket placement (see env_broker.h). */
#include "proc-supervisor/env_broker.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"

void envb_broker_close(struct envb_broker *b)
{
	if (b->fd >= 0)
		close(b->fd);
	b->fd = -1;
	if (b->path[0])
		unlink(b->path);
	if (b->dir[0])
		rmdir(b->dir);
	b->path[0] = b->dir[0] = '\0';
}

int envb_broker_open(const struct policy *p, const char *runtime_dir, uid_t owner, gid_t group,
		     struct envb_broker *b)
{
	memset(b, 0, sizeof(*b));
	b->fd = -1;
	if (!p->env.broker || p->env.mode == POLICY_ENV_SECRETS_OFF)
		return 0;
	if (sodium_init() < 0)
		return -EIO;
	if (!runtime_dir) {
		const char *x = getenv("XDG_RUNTIME_DIR");
		runtime_dir = x && x[0] == '/' ? x : geteuid() == 0 ? "/run" : "/tmp";
	}
	if (snprintf(b->dir, sizeof(b->dir), "%s/tether-XXXXXX", runtime_dir) >= (int)sizeof(b->dir)) {
		b->dir[0] = '\0';
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(b->dir)) { /* 0700 */
		int e = errno;
		b->dir[0] = '\0';
		return -e;
	}
	unsigned char rnd[16];
	char hex[33];
	randombytes_buf(rnd, sizeof(rnd));
	hex_encode(rnd, sizeof(rnd), hex);
	int r;
	if (snprintf(b->path, sizeof(b->path), "%s/cred-%s.sock", b->dir, hex) >= (int)sizeof(b->path)) {
		b->path[0] = '\0';
		r = -ENAMETOOLONG;
		goto fail;
	}
	b->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (b->fd < 0) {
		r = -errno;
		goto fail;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, b->path, strlen(b->path) + 1);
	if (bind(b->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		b->path[0] = '\0';
		goto fail;
	}
	/* The 0700 parent already keeps others out while the mode is set. */
	if (chmod(b->path, 0600) < 0 || listen(b->fd, 16) < 0) {
		r = -errno;
		goto fail;
	}
	if (owner != (uid_t)-1 || group != (gid_t)-1) {
		if (chown(b->dir, owner, group) < 0 || chown(b->path, owner, group) < 0) {
			r = -errno;
			goto fail;
		}
	}
	return 0;
fail:
	envb_broker_close(b);
	return r;
}
