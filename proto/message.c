#include "proto/message.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/reason.h"
#include "common/util.h"
#include "control.pb-c.h"
#include "proto/frame.h"
#include "proto/pbutil.h"
#include "proto/procref_wire.h"

const char *ctl_kind_name(enum ctl_kind k)
{
	switch (k) {
	case CTL_HELLO: return "Hello";
	case CTL_HELLO_ACK: return "HelloAck";
	case CTL_IDENTITY_REQUEST: return "IdentityRequest";
	case CTL_IDENTITY_RESPONSE: return "IdentityResponse";
	case CTL_EXEC_REQUEST: return "ExecRequest";
	case CTL_EXEC_STARTED: return "ExecStarted";
	case CTL_EXEC_EXITED: return "ExecExited";
	case CTL_EXEC_RESIZE: return "ExecResize";
	case CTL_EXEC_SIGNAL: return "ExecSignal";
	case CTL_EXEC_DATA: return "ExecData";
	case CTL_CLOCK_REQUEST: return "ClockRequest";
	case CTL_CLOCK_RESPONSE: return "ClockResponse";
	case CTL_CONTEXT_SIGNATURE: return "ContextSignature";
	case CTL_IDENTITY_PUSH: return "IdentityPush";
	}
	return "?";
}

static ProtobufCBinaryData bin(const void *p, size_t n)
{
	return (ProtobufCBinaryData){ .len = n, .data = (uint8_t *)p };
}

static ProtobufCBinaryData bin_str(const char *s) { return bin(s, s ? strlen(s) : 0); }

/* Everything the encoder points the Frame at lives here for one call. */
struct enc_scratch {
	Tether__Hello hello;
	Tether__HelloAck hello_ack;
	Tether__SignedCertificate cert;
	Tether__IdentityRequest ireq;
	Tether__FlowTuple tuple;
	Tether__IdentityResponse iresp;
	Tether__SignedContext sctx;
	Tether__MacContext mctx;
	Tether__ContextSignature csig;
	Tether__Error err;
	Tether__ExecRequest ereq;
	ProtobufCBinaryData *argv;
	Tether__EnvVar *env;
	Tether__EnvVar **envp;
	Tether__ExecStarted estarted;
	Tether__ExecExited eexited;
	Tether__ExecResize eresize;
	Tether__ExecSignal esignal;
	Tether__ExecData edata;
	Tether__ClockSample clock;
	Tether__ClockRequest creq;
	Tether__ClockResponse cresp;
	Tether__IdentityPush ipush;
};

static Tether__ClockSample *clock_to_pb(const struct clock_sample *c, Tether__ClockSample *pb)
{
	tether__clock_sample__init(pb);
	pb->now_ns = c->now_ns;
	pb->signature = bin(c->signature, PROTO_SIG_LEN);
	return pb;
}

/* -EBADMSG unless a sample of the right shape (the signature is the
 * verifier's business). */
static int clock_from_pb(const Tether__ClockSample *pb, struct clock_sample *c)
{
	if (!pb || pb->now_ns == 0 || pb->signature.len != PROTO_SIG_LEN)
		return -EBADMSG;
	c->now_ns = pb->now_ns;
	memcpy(c->signature, pb->signature.data, PROTO_SIG_LEN);
	return 0;
}

static int build_frame(const struct ctl_msg *m, Tether__Frame *f, struct enc_scratch *s)
{
	tether__frame__init(f);
	f->version_major = PROTO_VERSION_MAJOR;
	/* A test acting as an older peer may set a lower minor. */
	f->version_minor = m->version_minor && m->version_minor < PROTO_VERSION_MINOR ? m->version_minor
										       : PROTO_VERSION_MINOR;
	switch (m->kind) {
	case CTL_HELLO:
		tether__hello__init(&s->hello);
		s->hello.role = (char *)m->u.hello.role;
		s->hello.software = (char *)m->u.hello.software;
		if (m->u.hello.has_clock_nonce)
			s->hello.clock_nonce = bin(m->u.hello.clock_nonce, PROTO_CLOCK_NONCE_LEN);
		if (m->u.hello.has_kx)
			s->hello.kx_public = bin(m->u.hello.kx_public, PROTO_KX_PUBLIC_LEN);
		if (m->u.hello.has_push_seed)
			s->hello.push_seed = bin(m->u.hello.push_seed, PROTO_PUSH_SEED_LEN);
		f->msg_case = TETHER__FRAME__MSG_HELLO;
		f->hello = &s->hello;
		return 0;
	case CTL_HELLO_ACK:
		if (!m->u.hello_ack.cert.cert || !m->u.hello_ack.cert.cert_len)
			return -EINVAL;
		tether__signed_certificate__init(&s->cert);
		s->cert.certificate = bin(m->u.hello_ack.cert.cert, m->u.hello_ack.cert.cert_len);
		s->cert.signature = bin(m->u.hello_ack.cert.signature, PROTO_SIG_LEN);
		tether__hello_ack__init(&s->hello_ack);
		s->hello_ack.certificate = &s->cert;
		if (m->u.hello_ack.has_clock)
			s->hello_ack.clock = clock_to_pb(&m->u.hello_ack.clock, &s->clock);
		if (m->u.hello_ack.has_kx) {
			s->hello_ack.kx_public = bin(m->u.hello_ack.kx_public, PROTO_KX_PUBLIC_LEN);
			s->hello_ack.kx_signature = bin(m->u.hello_ack.kx_signature, PROTO_SIG_LEN);
		}
		s->hello_ack.push = m->u.hello_ack.push;
		f->msg_case = TETHER__FRAME__MSG_HELLO_ACK;
		f->hello_ack = &s->hello_ack;
		return 0;
	case CTL_IDENTITY_REQUEST:
		tether__identity_request__init(&s->ireq);
		s->ireq.request_id = m->u.identity_request.request_id;
		s->ireq.nonce = bin(m->u.identity_request.nonce, PROTO_NONCE_LEN);
		proto_tuple_to_pb(&m->u.identity_request.tuple, &s->tuple);
		s->ireq.tuple = &s->tuple;
		s->ireq.socket_cookie = m->u.identity_request.socket_cookie;
		f->msg_case = TETHER__FRAME__MSG_IDENTITY_REQUEST;
		f->identity_request = &s->ireq;
		return 0;
	case CTL_IDENTITY_RESPONSE:
		tether__identity_response__init(&s->iresp);
		s->iresp.request_id = m->u.identity_response.request_id;
		if (m->u.identity_response.ok && m->u.identity_response.mac) {
			const struct mac_context *mc = &m->u.identity_response.mac_context;
			if (!mc->context || !mc->context_len)
				return -EINVAL;
			tether__mac_context__init(&s->mctx);
			s->mctx.context = bin(mc->context, mc->context_len);
			s->mctx.mac = bin(mc->mac, PROTO_MAC_LEN);
			s->mctx.instance_key_id = bin(mc->key_id, PROTO_KEY_ID_LEN);
			s->iresp.result_case = TETHER__IDENTITY_RESPONSE__RESULT_MAC_CONTEXT;
			s->iresp.mac_context = &s->mctx;
		} else if (m->u.identity_response.ok) {
			const struct signed_context *sc = &m->u.identity_response.context;
			if (!sc->context || !sc->context_len)
				return -EINVAL;
			tether__signed_context__init(&s->sctx);
			s->sctx.context = bin(sc->context, sc->context_len);
			s->sctx.signature = bin(sc->signature, PROTO_SIG_LEN);
			s->sctx.instance_key_id = bin(sc->key_id, PROTO_KEY_ID_LEN);
			s->iresp.result_case = TETHER__IDENTITY_RESPONSE__RESULT_CONTEXT;
			s->iresp.context = &s->sctx;
		} else {
			const char *w = reason_word(m->u.identity_response.reason);
			if (!w || m->u.identity_response.reason == REASON_OK)
				return -EINVAL;
			tether__error__init(&s->err);
			s->err.reason = (char *)w;
			s->err.message = (char *)m->u.identity_response.message;
			s->iresp.result_case = TETHER__IDENTITY_RESPONSE__RESULT_ERROR;
			s->iresp.error = &s->err;
		}
		f->msg_case = TETHER__FRAME__MSG_IDENTITY_RESPONSE;
		f->identity_response = &s->iresp;
		return 0;
	case CTL_IDENTITY_PUSH: {
		const struct mac_context *mc = &m->u.identity_push.mac_context;
		if (!mc->context || !mc->context_len || !(m->u.identity_push.push_id & PROTO_PUSH_ID_BIT))
			return -EINVAL;
		tether__mac_context__init(&s->mctx);
		s->mctx.context = bin(mc->context, mc->context_len);
		s->mctx.mac = bin(mc->mac, PROTO_MAC_LEN);
		s->mctx.instance_key_id = bin(mc->key_id, PROTO_KEY_ID_LEN);
		tether__identity_push__init(&s->ipush);
		s->ipush.push_id = m->u.identity_push.push_id;
		s->ipush.mac_context = &s->mctx;
		f->msg_case = TETHER__FRAME__MSG_IDENTITY_PUSH;
		f->identity_push = &s->ipush;
		return 0;
	}
	case CTL_CONTEXT_SIGNATURE: {
		const struct signed_context *sc = &m->u.context_signature.context;
		if (!sc->context || !sc->context_len)
			return -EINVAL;
		tether__signed_context__init(&s->sctx);
		s->sctx.context = bin(sc->context, sc->context_len);
		s->sctx.signature = bin(sc->signature, PROTO_SIG_LEN);
		s->sctx.instance_key_id = bin(sc->key_id, PROTO_KEY_ID_LEN);
		tether__context_signature__init(&s->csig);
		s->csig.request_id = m->u.context_signature.request_id;
		s->csig.context = &s->sctx;
		f->msg_case = TETHER__FRAME__MSG_CONTEXT_SIGNATURE;
		f->context_signature = &s->csig;
		return 0;
	}
	case CTL_EXEC_REQUEST: {
		const typeof(m->u.exec_request) *e = &m->u.exec_request;
		if (e->argc == 0 || e->argc > CTL_MAX_ARGV || e->n_env > CTL_MAX_ENV)
			return -EINVAL;
		tether__exec_request__init(&s->ereq);
		s->argv = calloc(e->argc, sizeof(*s->argv));
		if (!s->argv)
			return -ENOMEM;
		for (size_t i = 0; i < e->argc; i++)
			s->argv[i] = bin_str(e->argv[i]);
		s->ereq.n_argv = e->argc;
		s->ereq.argv = s->argv;
		s->ereq.cwd = bin_str(e->cwd);
		if (e->n_env) {
			s->env = calloc(e->n_env, sizeof(*s->env));
			s->envp = calloc(e->n_env, sizeof(*s->envp));
			if (!s->env || !s->envp)
				return -ENOMEM;
			for (size_t i = 0; i < e->n_env; i++) {
				tether__env_var__init(&s->env[i]);
				s->env[i].name = bin_str(e->env[i].name);
				s->env[i].value = bin_str(e->env[i].value);
				s->envp[i] = &s->env[i];
			}
		}
		s->ereq.n_env = e->n_env;
		s->ereq.env = s->envp;
		s->ereq.pty = e->pty;
		s->ereq.rows = e->rows;
		s->ereq.cols = e->cols;
		f->msg_case = TETHER__FRAME__MSG_EXEC_REQUEST;
		f->exec_request = &s->ereq;
		return 0;
	}
	case CTL_EXEC_STARTED:
		tether__exec_started__init(&s->estarted);
		s->estarted.pid = m->u.exec_started.pid;
		s->estarted.process_key = (char *)m->u.exec_started.process_key;
		f->msg_case = TETHER__FRAME__MSG_EXEC_STARTED;
		f->exec_started = &s->estarted;
		return 0;
	case CTL_EXEC_EXITED:
		tether__exec_exited__init(&s->eexited);
		s->eexited.exit_code = m->u.exec_exited.exit_code;
		s->eexited.signal = m->u.exec_exited.signal;
		f->msg_case = TETHER__FRAME__MSG_EXEC_EXITED;
		f->exec_exited = &s->eexited;
		return 0;
	case CTL_EXEC_RESIZE:
		tether__exec_resize__init(&s->eresize);
		s->eresize.rows = m->u.exec_resize.rows;
		s->eresize.cols = m->u.exec_resize.cols;
		f->msg_case = TETHER__FRAME__MSG_EXEC_RESIZE;
		f->exec_resize = &s->eresize;
		return 0;
	case CTL_EXEC_SIGNAL:
		tether__exec_signal__init(&s->esignal);
		s->esignal.signo = m->u.exec_signal.signo;
		f->msg_case = TETHER__FRAME__MSG_EXEC_SIGNAL;
		f->exec_signal = &s->esignal;
		return 0;
	case CTL_EXEC_DATA:
		tether__exec_data__init(&s->edata);
		s->edata.stream = m->u.exec_data.stream;
		s->edata.data = bin(m->u.exec_data.data, m->u.exec_data.len);
		s->edata.eof = m->u.exec_data.eof;
		f->msg_case = TETHER__FRAME__MSG_EXEC_DATA;
		f->exec_data = &s->edata;
		return 0;
	case CTL_CLOCK_REQUEST:
		tether__clock_request__init(&s->creq);
		s->creq.nonce = bin(m->u.clock_request.nonce, PROTO_CLOCK_NONCE_LEN);
		f->msg_case = TETHER__FRAME__MSG_CLOCK_REQUEST;
		f->clock_request = &s->creq;
		return 0;
	case CTL_CLOCK_RESPONSE:
		tether__clock_response__init(&s->cresp);
		s->cresp.clock = clock_to_pb(&m->u.clock_response.clock, &s->clock);
		f->msg_case = TETHER__FRAME__MSG_CLOCK_RESPONSE;
		f->clock_response = &s->cresp;
		return 0;
	}
	return -EINVAL;
}

int ctl_encode(const struct ctl_msg *m, uint8_t **out, size_t *len)
{
	struct enc_scratch s;
	memset(&s, 0, sizeof(s));
	Tether__Frame f;
	int r = build_frame(m, &f, &s);
	if (r == 0) {
		size_t n = tether__frame__get_packed_size(&f);
		if (n > PROTO_MAX_FRAME) {
			r = -EMSGSIZE;
		} else {
			uint8_t *b = malloc(PROTO_FRAME_PREFIX + n);
			if (!b) {
				r = -ENOMEM;
			} else {
				size_t packed = tether__frame__pack(&f, b + PROTO_FRAME_PREFIX);
				frame_put_prefix(b, (uint32_t)packed);
				*out = b;
				*len = PROTO_FRAME_PREFIX + packed;
			}
		}
	}
	free(s.argv);
	free(s.env);
	free(s.envp);
	return r;
}

/* A bytes field as a fresh C string: no embedded NUL, shorter than max. */
static int bytes_to_str(const ProtobufCBinaryData *b, size_t max, char **out)
{
	if (b->len >= max || (b->len && memchr(b->data, '\0', b->len)))
		return -EBADMSG;
	char *s = malloc(b->len + 1);
	if (!s)
		return -ENOMEM;
	if (b->len)
		memcpy(s, b->data, b->len);
	s[b->len] = '\0';
	*out = s;
	return 0;
}

static int copy_str(const char *s, char *dst, size_t size)
{
	if (!s)
		s = "";
	return strscpy(dst, s, size) < 0 ? -EBADMSG : 0;
}

static bool env_name_valid(const char *n)
{
	if (!n[0] || strlen(n) > 255 || (n[0] >= '0' && n[0] <= '9'))
		return false;
	for (const char *p = n; *p; p++) {
		char c = *p;
		if (!(c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
			return false;
	}
	return true;
}

static int signed_context_from_pb(const Tether__SignedContext *c, struct signed_context *sc)
{
	if (!c || c->context.len == 0 || c->context.len > PROTO_MAX_SIGNED_LEN || c->signature.len != PROTO_SIG_LEN ||
	    c->instance_key_id.len != PROTO_KEY_ID_LEN)
		return -EBADMSG;
	sc->context = malloc(c->context.len);
	if (!sc->context)
		return -ENOMEM;
	memcpy(sc->context, c->context.data, c->context.len);
	sc->context_len = c->context.len;
	memcpy(sc->signature, c->signature.data, PROTO_SIG_LEN);
	memcpy(sc->key_id, c->instance_key_id.data, PROTO_KEY_ID_LEN);
	return 0;
}

static int decode_msg(const Tether__Frame *f, struct ctl_msg *m)
{
	int r;
	switch (f->msg_case) {
	case TETHER__FRAME__MSG_HELLO:
		m->kind = CTL_HELLO;
		if (copy_str(f->hello->role, m->u.hello.role, sizeof(m->u.hello.role)) < 0 ||
		    copy_str(f->hello->software, m->u.hello.software, sizeof(m->u.hello.software)) < 0)
			return -EBADMSG;
		if (f->hello->clock_nonce.len) {
			if (f->hello->clock_nonce.len != PROTO_CLOCK_NONCE_LEN)
				return -EBADMSG;
			memcpy(m->u.hello.clock_nonce, f->hello->clock_nonce.data, PROTO_CLOCK_NONCE_LEN);
			m->u.hello.has_clock_nonce = true;
		}
		if (f->hello->kx_public.len) {
			if (f->hello->kx_public.len != PROTO_KX_PUBLIC_LEN)
				return -EBADMSG;
			memcpy(m->u.hello.kx_public, f->hello->kx_public.data, PROTO_KX_PUBLIC_LEN);
			m->u.hello.has_kx = true;
		}
		if (f->hello->push_seed.len) {
			if (f->hello->push_seed.len != PROTO_PUSH_SEED_LEN)
				return -EBADMSG;
			memcpy(m->u.hello.push_seed, f->hello->push_seed.data, PROTO_PUSH_SEED_LEN);
			m->u.hello.has_push_seed = true;
		}
		return 0;
	case TETHER__FRAME__MSG_HELLO_ACK: {
		m->kind = CTL_HELLO_ACK;
		const Tether__SignedCertificate *c = f->hello_ack->certificate;
		if (!c || c->certificate.len == 0 || c->certificate.len > PROTO_MAX_SIGNED_LEN ||
		    c->signature.len != PROTO_SIG_LEN)
			return -EBADMSG;
		m->u.hello_ack.cert.cert = malloc(c->certificate.len);
		if (!m->u.hello_ack.cert.cert)
			return -ENOMEM;
		memcpy(m->u.hello_ack.cert.cert, c->certificate.data, c->certificate.len);
		m->u.hello_ack.cert.cert_len = c->certificate.len;
		memcpy(m->u.hello_ack.cert.signature, c->signature.data, PROTO_SIG_LEN);
		if (f->hello_ack->clock) {
			if (clock_from_pb(f->hello_ack->clock, &m->u.hello_ack.clock) < 0)
				return -EBADMSG;
			m->u.hello_ack.has_clock = true;
		}
		if (f->hello_ack->kx_public.len || f->hello_ack->kx_signature.len) {
			if (f->hello_ack->kx_public.len != PROTO_KX_PUBLIC_LEN ||
			    f->hello_ack->kx_signature.len != PROTO_SIG_LEN)
				return -EBADMSG;
			memcpy(m->u.hello_ack.kx_public, f->hello_ack->kx_public.data, PROTO_KX_PUBLIC_LEN);
			memcpy(m->u.hello_ack.kx_signature, f->hello_ack->kx_signature.data, PROTO_SIG_LEN);
			m->u.hello_ack.has_kx = true;
		}
		m->u.hello_ack.push = f->hello_ack->push;
		return 0;
	}
	case TETHER__FRAME__MSG_CLOCK_REQUEST:
		m->kind = CTL_CLOCK_REQUEST;
		if (f->clock_request->nonce.len != PROTO_CLOCK_NONCE_LEN)
			return -EBADMSG;
		memcpy(m->u.clock_request.nonce, f->clock_request->nonce.data, PROTO_CLOCK_NONCE_LEN);
		return 0;
	case TETHER__FRAME__MSG_CLOCK_RESPONSE:
		m->kind = CTL_CLOCK_RESPONSE;
		return clock_from_pb(f->clock_response->clock, &m->u.clock_response.clock);
	case TETHER__FRAME__MSG_IDENTITY_REQUEST: {
		m->kind = CTL_IDENTITY_REQUEST;
		const Tether__IdentityRequest *q = f->identity_request;
		if (q->nonce.len != PROTO_NONCE_LEN)
			return -EBADMSG;
		if (proto_tuple_from_pb(q->tuple, &m->u.identity_request.tuple) < 0)
			return -EBADMSG;
		m->u.identity_request.request_id = q->request_id;
		memcpy(m->u.identity_request.nonce, q->nonce.data, PROTO_NONCE_LEN);
		m->u.identity_request.socket_cookie = q->socket_cookie;
		return 0;
	}
	case TETHER__FRAME__MSG_IDENTITY_RESPONSE: {
		m->kind = CTL_IDENTITY_RESPONSE;
		const Tether__IdentityResponse *p = f->identity_response;
		m->u.identity_response.request_id = p->request_id;
		if (p->result_case == TETHER__IDENTITY_RESPONSE__RESULT_CONTEXT) {
			if ((r = signed_context_from_pb(p->context, &m->u.identity_response.context)) < 0)
				return r;
			m->u.identity_response.ok = true;
			return 0;
		}
		if (p->result_case == TETHER__IDENTITY_RESPONSE__RESULT_MAC_CONTEXT) {
			const Tether__MacContext *c = p->mac_context;
			if (c->context.len == 0 || c->context.len > PROTO_MAX_SIGNED_LEN ||
			    c->mac.len != PROTO_MAC_LEN || c->instance_key_id.len != PROTO_KEY_ID_LEN)
				return -EBADMSG;
			struct mac_context *mc = &m->u.identity_response.mac_context;
			mc->context = malloc(c->context.len);
			if (!mc->context)
				return -ENOMEM;
			memcpy(mc->context, c->context.data, c->context.len);
			mc->context_len = c->context.len;
			memcpy(mc->mac, c->mac.data, PROTO_MAC_LEN);
			memcpy(mc->key_id, c->instance_key_id.data, PROTO_KEY_ID_LEN);
			m->u.identity_response.ok = true;
			m->u.identity_response.mac = true;
			return 0;
		}
		if (p->result_case == TETHER__IDENTITY_RESPONSE__RESULT_ERROR) {
			enum reason rs = reason_from_word(p->error->reason ? p->error->reason : "");
			if (rs == REASON__COUNT || rs == REASON_OK)
				rs = REASON_PROTOCOL_ERROR;
			m->u.identity_response.reason = rs;
			if (copy_str(p->error->message, m->u.identity_response.message,
				     sizeof(m->u.identity_response.message)) < 0)
				return -EBADMSG;
			return 0;
		}
		return -EBADMSG;
	}
	case TETHER__FRAME__MSG_IDENTITY_PUSH: {
		m->kind = CTL_IDENTITY_PUSH;
		const Tether__MacContext *c = f->identity_push->mac_context;
		if (!(f->identity_push->push_id & PROTO_PUSH_ID_BIT) || !c || c->context.len == 0 ||
		    c->context.len > PROTO_MAX_SIGNED_LEN || c->mac.len != PROTO_MAC_LEN ||
		    c->instance_key_id.len != PROTO_KEY_ID_LEN)
			return -EBADMSG;
		struct mac_context *mc = &m->u.identity_push.mac_context;
		mc->context = malloc(c->context.len);
		if (!mc->context)
			return -ENOMEM;
		memcpy(mc->context, c->context.data, c->context.len);
		mc->context_len = c->context.len;
		memcpy(mc->mac, c->mac.data, PROTO_MAC_LEN);
		memcpy(mc->key_id, c->instance_key_id.data, PROTO_KEY_ID_LEN);
		m->u.identity_push.push_id = f->identity_push->push_id;
		return 0;
	}
	case TETHER__FRAME__MSG_CONTEXT_SIGNATURE:
		m->kind = CTL_CONTEXT_SIGNATURE;
		m->u.context_signature.request_id = f->context_signature->request_id;
		return signed_context_from_pb(f->context_signature->context, &m->u.context_signature.context);
	case TETHER__FRAME__MSG_EXEC_REQUEST: {
		m->kind = CTL_EXEC_REQUEST;
		const Tether__ExecRequest *q = f->exec_request;
		typeof(m->u.exec_request) *e = &m->u.exec_request;
		if (q->n_argv == 0 || q->n_argv > CTL_MAX_ARGV || q->n_env > CTL_MAX_ENV ||
		    q->rows > 65535 || q->cols > 65535)
			return -EBADMSG;
		e->argv = calloc(q->n_argv + 1, sizeof(*e->argv));
		if (!e->argv)
			return -ENOMEM;
		for (size_t i = 0; i < q->n_argv; i++) {
			if ((r = bytes_to_str(&q->argv[i], PROTO_MAX_FRAME, &e->argv[i])) < 0)
				return r;
			e->argc = i + 1;
		}
		if (q->cwd.len && (r = bytes_to_str(&q->cwd, PATH_MAX, &e->cwd)) < 0)
			return r;
		if (q->n_env) {
			e->env = calloc(q->n_env, sizeof(*e->env));
			if (!e->env)
				return -ENOMEM;
		}
		for (size_t i = 0; i < q->n_env; i++) {
			e->n_env = i + 1;
			if ((r = bytes_to_str(&q->env[i]->name, 256, &e->env[i].name)) < 0 ||
			    (r = bytes_to_str(&q->env[i]->value, PROTO_MAX_FRAME, &e->env[i].value)) < 0)
				return r;
			if (!env_name_valid(e->env[i].name))
				return -EBADMSG;
		}
		e->pty = q->pty;
		e->rows = (uint16_t)q->rows;
		e->cols = (uint16_t)q->cols;
		return 0;
	}
	case TETHER__FRAME__MSG_EXEC_STARTED:
		m->kind = CTL_EXEC_STARTED;
		if (f->exec_started->pid <= 0)
			return -EBADMSG;
		m->u.exec_started.pid = f->exec_started->pid;
		return copy_str(f->exec_started->process_key, m->u.exec_started.process_key,
				sizeof(m->u.exec_started.process_key));
	case TETHER__FRAME__MSG_EXEC_EXITED:
		m->kind = CTL_EXEC_EXITED;
		if (f->exec_exited->signal < 0 || f->exec_exited->signal > 64)
			return -EBADMSG;
		m->u.exec_exited.exit_code = f->exec_exited->exit_code;
		m->u.exec_exited.signal = f->exec_exited->signal;
		return 0;
	case TETHER__FRAME__MSG_EXEC_RESIZE:
		m->kind = CTL_EXEC_RESIZE;
		if (f->exec_resize->rows > 65535 || f->exec_resize->cols > 65535)
			return -EBADMSG;
		m->u.exec_resize.rows = (uint16_t)f->exec_resize->rows;
		m->u.exec_resize.cols = (uint16_t)f->exec_resize->cols;
		return 0;
	case TETHER__FRAME__MSG_EXEC_SIGNAL:
		m->kind = CTL_EXEC_SIGNAL;
		if (f->exec_signal->signo < 1 || f->exec_signal->signo > 64)
			return -EBADMSG;
		m->u.exec_signal.signo = f->exec_signal->signo;
		return 0;
	case TETHER__FRAME__MSG_EXEC_DATA:
		m->kind = CTL_EXEC_DATA;
		if (f->exec_data->stream > 2)
			return -EBADMSG;
		m->u.exec_data.stream = f->exec_data->stream;
		m->u.exec_data.eof = f->exec_data->eof;
		m->u.exec_data.len = f->exec_data->data.len;
		m->u.exec_data.data = malloc(f->exec_data->data.len ? f->exec_data->data.len : 1);
		if (!m->u.exec_data.data)
			return -ENOMEM;
		if (f->exec_data->data.len)
			memcpy(m->u.exec_data.data, f->exec_data->data.data, f->exec_data->data.len);
		return 0;
	default:
		return -EBADMSG;
	}
}

int ctl_decode(const uint8_t *payload, size_t len, struct ctl_msg *out)
{
	memset(out, 0, sizeof(*out));
	Tether__Frame *f = tether__frame__unpack(NULL, len, payload);
	if (!f)
		return -EBADMSG;
	int r;
	if (f->version_major != PROTO_VERSION_MAJOR)
		r = -EPROTONOSUPPORT;
	else if (!pb_unknown_fields_ok(&f->base, f->version_minor))
		r = -EBADMSG;
	else {
		out->version_minor = f->version_minor;
		r = decode_msg(f, out);
	}
	tether__frame__free_unpacked(f, NULL);
	if (r < 0)
		ctl_msg_clear(out);
	return r;
}

void ctl_msg_clear(struct ctl_msg *m)
{
	switch (m->kind) {
	case CTL_HELLO_ACK:
		signed_cert_clear(&m->u.hello_ack.cert);
		break;
	case CTL_IDENTITY_RESPONSE:
		signed_context_clear(&m->u.identity_response.context);
		free(m->u.identity_response.mac_context.context);
		break;
	case CTL_CONTEXT_SIGNATURE:
		signed_context_clear(&m->u.context_signature.context);
		break;
	case CTL_IDENTITY_PUSH:
		free(m->u.identity_push.mac_context.context);
		break;
	case CTL_EXEC_REQUEST:
		if (m->u.exec_request.argv)
			for (size_t i = 0; i < m->u.exec_request.argc; i++)
				free(m->u.exec_request.argv[i]);
		free(m->u.exec_request.argv);
		free(m->u.exec_request.cwd);
		if (m->u.exec_request.env)
			for (size_t i = 0; i < m->u.exec_request.n_env; i++) {
				free(m->u.exec_request.env[i].name);
				free(m->u.exec_request.env[i].value);
			}
		free(m->u.exec_request.env);
		break;
	case CTL_EXEC_DATA:
		free(m->u.exec_data.data);
		break;
	default:
		break;
	}
	memset(m, 0, sizeof(*m));
}
