#include "net-supervisor/identity_strategy.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

struct identity_request {
	struct identity_strategy *s;
	struct proxy_flow tuple;
	uv_timer_t timer;
	identity_cb cb;
	void *data;
	void *sdata;
	uint64_t start_ns;
	bool in_resolve; /* deliver on the next turn, never inside identity_resolve() */
	bool delivered;  /* cb called, or abandoned */
	bool completed;  /* the strategy answered */
	bool closing;
	enum reason reason;
	struct flow_identity *id;
	uint64_t anchor_epoch; /* the strategy's when the request started */
};

void identity_strategy_set_anchored(struct identity_strategy *s, bool anchored, const char *desc)
{
	bool changed = s->anchored != anchored;
	s->anchored = anchored;
	strscpy(s->anchor_desc, desc ? desc : "", sizeof(s->anchor_desc));
	if (changed && s->on_anchor)
		s->on_anchor(s, anchored, s->on_anchor_data);
}

void identity_strategy_set_instance(struct identity_strategy *s, const char *instance)
{
	if (!instance || strcmp(s->anchor_instance, instance) == 0)
		return;
	bool had = s->anchor_instance[0] != '\0';
	strscpy(s->anchor_instance, instance, sizeof(s->anchor_instance));
	s->anchor_epoch++;
	if (had && s->on_replaced)
		s->on_replaced(s, s->on_anchor_data);
}

static void req_closed(uv_handle_t *h)
{
	struct identity_request *req = h->data;
	flow_identity_free(req->id);
	free(req);
}

static void req_maybe_free(struct identity_request *req)
{
	if (req->delivered && req->completed && !req->closing) {
		req->closing = true;
		uv_close((uv_handle_t *)&req->timer, req_closed);
	}
}

static void req_deliver(struct identity_request *req, enum reason reason, struct flow_identity *id)
{
	req->delivered = true;
	uv_timer_stop(&req->timer);
	struct identity_result res = {
		.reason = reason,
		.id = reason == REASON_OK ? id : NULL,
		.latency_ns = now_mono_ns() - req->start_ns,
	};
	if (reason != REASON_OK)
		flow_identity_free(id);
	req->cb(&res, req->data);
}

static void req_timer(uv_timer_t *t)
{
	struct identity_request *req = t->data;
	if (req->delivered)
		return;
	if (req->completed) {
		struct flow_identity *id = req->id;
		req->id = NULL;
		req_deliver(req, req->reason, id);
	} else {
		req_deliver(req, REASON_IDENTITY_TIMEOUT, NULL);
		if (req->s->ops->cancel)
			req->s->ops->cancel(req->s, req);
	}
	req_maybe_free(req);
}

int identity_resolve(struct identity_strategy *s, const struct proxy_flow *tuple,
		     uint64_t timeout_ms, identity_cb cb, void *data, struct identity_request **out)
{
	struct identity_request *req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	req->s = s;
	req->tuple = *tuple;
	req->cb = cb;
	req->data = data;
	req->start_ns = now_mono_ns();
	req->anchor_epoch = s->anchor_epoch;
	uv_timer_init(s->loop, &req->timer);
	req->timer.data = req;
	uv_timer_start(&req->timer, req_timer, timeout_ms ? timeout_ms : IDENTITY_DEFAULT_TIMEOUT_MS, 0);
	*out = req;
	req->in_resolve = true;
	int r = s->ops->resolve(s, req);
	if (r < 0 && !req->completed) {
		log_warn("identity strategy '%s' could not start: %s", s->ops->name, strerror(-r));
		identity_request_complete(req, REASON_IDENTITY_UNAVAILABLE, NULL);
	}
	req->in_resolve = false;
	return 0;
}

void identity_request_complete(struct identity_request *req, enum reason reason,
			       struct flow_identity *id)
{
	if (req->completed) {
		/* A strategy bug; never let it flip a decision. */
		log_error("identity strategy '%s' answered a request twice", req->s->ops->name);
		flow_identity_free(id);
		return;
	}
	req->completed = true;
	if (reason == REASON_OK && !id)
		reason = REASON_IDENTITY_UNAVAILABLE;
	if (id)
		id->anchor_epoch = req->anchor_epoch;
	if (req->delivered) {
		flow_identity_free(id);
		req_maybe_free(req);
		return;
	}
	if (req->in_resolve) {
		req->reason = reason;
		req->id = id;
		uv_timer_start(&req->timer, req_timer, 0, 0);
		return;
	}
	req_deliver(req, reason, id);
	req_maybe_free(req);
}

void identity_request_abandon(struct identity_request *req)
{
	if (!req || req->delivered)
		return;
	req->delivered = true;
	uv_timer_stop(&req->timer);
	if (!req->completed && req->s->ops->cancel)
		req->s->ops->cancel(req->s, req);
	req_maybe_free(req);
}

const struct proxy_flow *identity_request_tuple(const struct identity_request *req) { return &req->tuple; }
void identity_request_set_data(struct identity_request *req, void *p) { req->sdata = p; }
void *identity_request_data(const struct identity_request *req) { return req->sdata; }

void identity_strategy_destroy(struct identity_strategy *s)
{
	if (s && s->ops->destroy)
		s->ops->destroy(s);
}
