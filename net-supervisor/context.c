#include "net-supervisor/context.h"

#include <string.h>

#include "net-supervisor/identity_delegated.h"

void netsup_config_defaults(struct netsup_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->audit_path = "-";
	for (size_t i = 0; i < NETSUP_MAX_POLICY; i++)
		cfg->policy_layer[i] = POLICY_LAYER_COMMAND;
	cfg->topology = "combined";
	cfg->max_header_bytes = 16384;
	cfg->max_headers = 100;
	cfg->max_conns = 1024;
	cfg->header_timeout_ms = 10000;
	cfg->connect_timeout_ms = 10000;
	cfg->idle_timeout_ms = 300000;
	cfg->identity_timeout_ms = IDENTITY_DEFAULT_TIMEOUT_MS;
	cfg->max_clock_skew_s = 60;
	cfg->resolve_timeout_ms = 5000;
	cfg->dns_timeout_ms = 3000;
	cfg->dns_max_outstanding = 256;
	cfg->dns_record_max = 4096;
	cfg->transparent_peek_ms = 1000;
	cfg->relay_buffer = 256 * 1024;
	cfg->high_water = 1024 * 1024;
	cfg->relay_memory = 64 * 1024 * 1024;
	cfg->audit_queue = 8192;
	cfg->splice = false;
	cfg->revoke_grace_ms = 3000;
	cfg->max_tunnel_lifetime_ms = 0;
}

void netsup_audit_decision(struct netsup *ns, const char *event, json_t *fields, struct auditq_waiter *w)
{
	auditq_stage(ns->audit, event, fields, w);
}

void netsup_audit(struct netsup *ns, const char *event, json_t *fields)
{
	if (ns->audit)
		auditq_push(ns->audit, event, fields);
	else
		json_decref(fields);
}

void netsup_update_ready(struct netsup *ns)
{
	bool ready = policystore_loaded(ns->policy) && ns->identity && ns->identity->anchored;
	if (ready != ns->ready) {
		ns->ready = ready;
		if (ns->worker == 0)
			log_info("%s", ready ? "ready: policy loaded and anchor established"
					     : "not ready: no policy or no anchor; refusing connections (503 not_ready)");
		else
			log_info("worker %u %s", ns->worker, ready ? "ready"
				 : "not ready (no policy or no anchor): its connections get 503 not_ready");
	}
}

enum reason netsup_not_ready_reason(const struct netsup *ns)
{
	struct verifier_clock_state cs;
	if (ns->identity && !ns->identity->anchored && identity_delegated_clock(ns->identity, &cs) && cs.exceeded)
		return REASON_CLOCK_SKEW;
	return REASON_NOT_READY;
}
