/* The admin endpoint: GET /metrics (Prometheus text), /healthz (the process
 * is alive and its loop turns), /readyz (200 only when a policy is loaded and
 * the identity strategy has an anchor; else 503 with why). One request per
 * connection, bounded size and time. */
#pragma once

#include "net-supervisor/netsup.h"

int admin_listen(struct netsup *ns, const char *addr, struct admin **out);
void admin_close(struct admin *a);
