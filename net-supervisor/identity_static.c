#include "net-supervisor/identity_static.h"

#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

struct pending {
	uv_timer_t timer;
	struct identity_request *req;
	struct static_strategy *owner;
	struct pending *next, *prev;
};

struct static_strategy {
	struct identity_strategy base; /* first */
	struct flow_identity *proto;
	uint64_t delay_ms;
	uv_timer_t anchor_timer;
	bool anchor_timer_used;
	struct pending *pending;
};

/* Hash the file at path (startup only, before the loop runs). */
static int sha256_file(const char *path, char out[65])
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	crypto_hash_sha256_state st;
	crypto_hash_sha256_init(&st);
	unsigned char buf[65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
	}
	unsigned char h[32];
	crypto_hash_sha256_final(&st, h);
	hex_encode(h, 32, out);
	return 0;
}

static void pending_closed(uv_handle_t *h) { free(h->data); }

static void pending_done(struct pending *p)
{
	struct static_strategy *s = p->owner;
	if (p->prev)
		p->prev->next = p->next;
	else
		s->pending = p->next;
	if (p->next)
		p->next->prev = p->prev;
	struct flow_identity *id = flow_identity_dup(s->proto);
	identity_request_complete(p->req, id ? REASON_OK : REASON_INTERNAL_ERROR, id);
	uv_close((uv_handle_t *)&p->timer, pending_closed);
}

static void pending_fire(uv_timer_t *t) { pending_done(t->data); }

static int static_resolve(struct identity_strategy *base, struct identity_request *req)
{
	struct static_strategy *s = (struct static_strategy *)base;
	if (s->delay_ms == 0) {
		struct flow_identity *id = flow_identity_dup(s->proto);
		identity_request_complete(req, id ? REASON_OK : REASON_INTERNAL_ERROR, id);
		return 0;
	}
	struct pending *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->req = req;
	p->owner = s;
	uv_timer_init(base->loop, &p->timer);
	p->timer.data = p;
	p->next = s->pending;
	if (s->pending)
		s->pending->prev = p;
	s->pending = p;
	identity_request_set_data(req, p);
	uv_timer_start(&p->timer, pending_fire, s->delay_ms, 0);
	return 0;
}

static void static_cancel(struct identity_strategy *base, struct identity_request *req)
{
	struct pending *p = identity_request_data(req);
	if (p) {
		uv_timer_stop(&p->timer);
		pending_done(p); /* completes (the plumbing discards the answer) */
	}
}

static void anchor_closed(uv_handle_t *h) { free(h->data); }

static void static_destroy(struct identity_strategy *base)
{
	struct static_strategy *s = (struct static_strategy *)base;
	while (s->pending)
		pending_done(s->pending);
	flow_identity_free(s->proto);
	s->proto = NULL;
	if (s->anchor_timer_used) {
		s->anchor_timer.data = s;
		uv_close((uv_handle_t *)&s->anchor_timer, anchor_closed);
	} else {
		free(s);
	}
}

static const struct identity_strategy_ops static_ops = {
	.name = "static",
	.resolve = static_resolve,
	.cancel = static_cancel,
	.destroy = static_destroy,
};

static void anchor_fire(uv_timer_t *t)
{
	struct static_strategy *s = t->data;
	identity_strategy_set_instance(&s->base, "static_test");
	identity_strategy_set_anchored(&s->base, true, "static_test (no real anchor)");
}

int identity_static_new(uv_loop_t *loop, const struct identity_static_config *cfg,
			struct identity_strategy **out)
{
	if (!cfg->binary_path || cfg->binary_path[0] != '/')
		return -EINVAL;
	if (sodium_init() < 0)
		return -EIO;
	struct static_strategy *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &static_ops;
	s->base.loop = loop;
	s->delay_ms = cfg->delay_ms;
	s->proto = flow_identity_new();
	if (!s->proto || !(s->proto->binary_path = strdup(cfg->binary_path)) ||
	    !(s->proto->process_key = strdup("static_test:0"))) {
		flow_identity_free(s->proto);
		free(s);
		return -ENOMEM;
	}
	s->proto->source = FLOW_SOURCE_STATIC_TEST;
	s->proto->pid = 0;
	if (cfg->sha256) {
		strscpy(s->proto->sha256, cfg->sha256, sizeof(s->proto->sha256));
	} else {
		int r = sha256_file(cfg->binary_path, s->proto->sha256);
		if (r < 0)
			log_warn("static identity: cannot hash %s (%s): sha256 stays empty",
				 cfg->binary_path, strerror(-r));
	}
	for (size_t i = 0; i < cfg->n_ancestors; i++) {
		char h[65] = "";
		if (sha256_file(cfg->ancestors[i], h) < 0)
			h[0] = '\0';
		if (flow_identity_add_ancestor(s->proto, cfg->ancestors[i], 0, h) < 0) {
			flow_identity_free(s->proto);
			free(s);
			return -ENOMEM;
		}
	}
	if (!cfg->never_anchor) {
		if (cfg->anchor_delay_ms == 0) {
			s->base.anchored = true;
			identity_strategy_set_instance(&s->base, "static_test");
			strscpy(s->base.anchor_desc, "static_test (no real anchor)",
				sizeof(s->base.anchor_desc));
		} else {
			uv_timer_init(loop, &s->anchor_timer);
			s->anchor_timer.data = s;
			s->anchor_timer_used = true;
			uv_timer_start(&s->anchor_timer, anchor_fire, cfg->anchor_delay_ms, 0);
		}
	}
	*out = &s->base;
	return 0;
}
