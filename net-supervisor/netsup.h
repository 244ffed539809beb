/* The net-supervisor daemon: wires its parts (context.h) together: the
 * policy store, the identity strategy, the audit queue, the proxy
 * listeners (proxy.h), the admin endpoint (admin.h) and tunnel revocation
 * (revoke.h), and its workers (--workers: the other event loops, each on
 * its own thread with its own listeners, identity strategy instance and
 * policy view; context.h says what they share). */
#pragma once

#include "net-supervisor/context.h"
#include "net-supervisor/hostport.h"

/* Load the policy, open audit, strategy, listeners, admin. -errno with a
 * message already logged. */
int netsup_start(struct netsup *ns, uv_loop_t *loop, const struct netsup_config *cfg);
/* Run until SIGTERM/SIGINT (the other workers are stopped and joined
 * first); then close everything. */
int netsup_run(struct netsup *ns);

