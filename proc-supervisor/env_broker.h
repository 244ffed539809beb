/* The credential-broker socket's place in the filesystem (the broker
 * protocol itself is not part of tether yet). When the policy enables it
 * (`environment: broker: true`) and the mode is not secrets-off, a Unix
 * stream socket is created, mode 0600, named cred-<32 random hex>.sock
 * (libsodium randombytes) inside a fresh private directory (0700,
 * mkdtemp) under the runtime directory: never a predictable path, never in
 * a shared /tmp without a private parent. Its path goes into the child as
 * TETHER_CREDENTIAL_SOCKET (envb_extra.credential_socket). The path is a
 * bearer capability: whoever can connect can ask for secrets. */
#pragma once

#include <sys/types.h>

#include "policy/policy.h"

struct envb_broker {
	int fd;         /* listening socket, CLOEXEC; -1 when not enabled */
	char dir[108];
	char path[108];
};

/* runtime_dir NULL: $XDG_RUNTIME_DIR when absolute, else /run when root,
 * else /tmp (the private 0700 directory inside it is what protects the
 * socket). owner/group (uid_t)-1 keep the creator's. 0 with b->fd == -1 when
 * the policy does not enable the broker; -errno on failure. */
int envb_broker_open(const struct policy *p, const char *runtime_dir, uid_t owner, gid_t group,
		     struct envb_broker *b);
/* Close, unlink the socket, remove the directory. Idempotent. */
void envb_broker_close(struct envb_broker *b);
