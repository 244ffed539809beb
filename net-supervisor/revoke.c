#include "net-supervisor/revoke.h"

#include "common/log.h"
#include "policy/netpolicy.h"
#include "net-supervisor/context.h"
#include "net-supervisor/proxy.h"

static void revoke_log(enum revoke_why why, size_t n)
{
	if (n)
		log_info("closed %zu open tunnel%s: %s", n, n == 1 ? "" : "s", revoke_word(why));
}

/* ---------- policy ---------- */

static enum revoke_why judge_policy(const struct tunnel_view *t, void *data)
{
	const struct network_policy *np = data;
	struct netpolicy_decision d = netpolicy_decide(np, t->id, t->host, t->port, t->addr);
	return d.allow ? REVOKE_KEEP : REVOKE_POLICY_CHANGED;
}

void revoke_after_policy(struct netsup *ns)
{
	const struct network_policy *np = policystore_network(ns->policy);
	if (!np)
		return;
	revoke_log(REVOKE_POLICY_CHANGED, proxy_revoke_tunnels(ns, judge_policy, (void *)np));
}

/* ---------- anchor ---------- */

static enum revoke_why judge_anchor(const struct tunnel_view *t, void *data)
{
	const struct identity_strategy *s = data;
	if (!t->id)
		return REVOKE_KEEP; /* no anchor vouched for it */
	if (!s->anchored)
		return REVOKE_ANCHOR_LOST;
	if (t->id->anchor_epoch != s->anchor_epoch)
		return REVOKE_ANCHOR_REPLACED;
	return REVOKE_KEEP;
}

static void anchor_grace_over(uv_timer_t *t)
{
	struct netsup *ns = t->data;
	if (!ns->identity)
		return;
	size_t n = proxy_revoke_tunnels(ns, judge_anchor, ns->identity);
	if (n)
		log_info("closed %zu open tunnel%s whose anchor is %s", n, n == 1 ? "" : "s",
			 ns->identity->anchored ? "replaced" : "lost");
}

void revoke_after_anchor(struct netsup *ns)
{
	/* The first loss starts the grace; later events within it do not
	 * push it back (a flapping channel cannot postpone the check). */
	if (!ns->revoke_started || uv_is_active((uv_handle_t *)&ns->revoke_grace))
		return;
	uv_timer_start(&ns->revoke_grace, anchor_grace_over, ns->cfg.revoke_grace_ms, 0);
}

/* ---------- lifetime ---------- */

static enum revoke_why judge_lifetime(const struct tunnel_view *t, void *data)
{
	const struct netsup *ns = data;
	return uv_now(ns->loop) - t->allowed_at_ms >= ns->cfg.max_tunnel_lifetime_ms ? REVOKE_MAX_LIFETIME
										      : REVOKE_KEEP;
}

static void lifetime_sweep(uv_timer_t *t)
{
	struct netsup *ns = t->data;
	revoke_log(REVOKE_MAX_LIFETIME, proxy_revoke_tunnels(ns, judge_lifetime, ns));
}

void revoke_start(struct netsup *ns)
{
	uv_timer_init(ns->loop, &ns->revoke_grace);
	ns->revoke_grace.data = ns;
	uv_timer_init(ns->loop, &ns->revoke_lifetime);
	ns->revoke_lifetime.data = ns;
	ns->revoke_started = true;
	uint64_t life = ns->cfg.max_tunnel_lifetime_ms;
	if (life) {
		/* checked at a tenth of the lifetime, between 50 ms and 1 s: a
		 * tunnel lives at most that much past its limit */
		uint64_t every = life / 10;
		every = every < 50 ? 50 : every > 1000 ? 1000 : every;
		uv_timer_start(&ns->revoke_lifetime, lifetime_sweep, every, every);
	}
}

void revoke_stop(struct netsup *ns)
{
	if (!ns->revoke_started)
		return;
	ns->revoke_started = false;
	uv_close((uv_handle_t *)&ns->revoke_grace, NULL);
	uv_close((uv_handle_t *)&ns->revoke_lifetime, NULL);
}
