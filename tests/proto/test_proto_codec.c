/* Frame decoder and message codec: partial reads, many frames per read, and
 * every kind of bad input failing with a precise error. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "control.pb-c.h"
#include "proto/frame.h"
#include "proto/message.h"
#include "proto/procref_wire.h"
#include "tests/proto/fixture.h"

struct sink {
	int frames;
	size_t lens[16];
	int msgs_ok;
	int last_err;
};

static int sink_cb(const uint8_t *p, size_t len, void *ud)
{
	struct sink *s = ud;
	if (s->frames < 16)
		s->lens[s->frames] = len;
	s->frames++;
	struct ctl_msg m;
	int r = ctl_decode(p, len, &m);
	s->last_err = r;
	if (r == 0) {
		s->msgs_ok++;
		ctl_msg_clear(&m);
	}
	return 0;
}

static void encode_hello(uint8_t **buf, size_t *len)
{
	struct ctl_msg m = { .kind = CTL_HELLO };
	strcpy(m.u.hello.role, "net-supervisor");
	strcpy(m.u.hello.software, "test");
	assert_int_equal(ctl_encode(&m, buf, len), 0);
}

static void test_partial_and_many(void **state)
{
	uint8_t *one;
	size_t n;
	encode_hello(&one, &n);
	/* three frames back to back, fed one byte at a time */
	uint8_t *three = malloc(3 * n);
	for (int i = 0; i < 3; i++)
		memcpy(three + i * n, one, n);
	struct frame_decoder d;
	struct sink s = { 0 };
	frame_decoder_init(&d, 0);
	for (size_t i = 0; i < 3 * n; i++) {
		assert_int_equal(frame_decoder_feed(&d, three + i, 1, sink_cb, &s), 0);
		if (i + 1 < 3 * n && (i + 1) % n != 0)
			assert_true(frame_decoder_pending(&d));
	}
	assert_false(frame_decoder_pending(&d));
	assert_int_equal(s.frames, 3);
	assert_int_equal(s.msgs_ok, 3);
	frame_decoder_free(&d);

	/* all three in one read, then split at odd places */
	memset(&s, 0, sizeof(s));
	frame_decoder_init(&d, 0);
	assert_int_equal(frame_decoder_feed(&d, three, 3 * n, sink_cb, &s), 0);
	assert_int_equal(s.msgs_ok, 3);
	assert_int_equal(frame_decoder_feed(&d, three, 2, sink_cb, &s), 0);
	assert_int_equal(frame_decoder_feed(&d, three + 2, n + 3, sink_cb, &s), 0);
	assert_int_equal(frame_decoder_feed(&d, three + n + 5, 2 * n - 5, sink_cb, &s), 0);
	assert_int_equal(s.msgs_ok, 6);
	assert_false(frame_decoder_pending(&d));
	frame_decoder_free(&d);
	free(three);
	free(one);
}

static void test_bad_prefixes(void **state)
{
	struct frame_decoder d;
	struct sink s = { 0 };
	/* zero length */
	uint8_t zero[4] = { 0, 0, 0, 0 };
	frame_decoder_init(&d, 0);
	assert_int_equal(frame_decoder_feed(&d, zero, 4, sink_cb, &s), -EBADMSG);
	/* the decoder stays failed */
	assert_int_equal(frame_decoder_feed(&d, zero, 1, sink_cb, &s), -EBADMSG);
	frame_decoder_free(&d);
	/* larger than the limit: refused from the prefix alone, even split */
	uint8_t big[4];
	frame_put_prefix(big, PROTO_MAX_FRAME + 1);
	frame_decoder_init(&d, 0);
	assert_int_equal(frame_decoder_feed(&d, big, 2, sink_cb, &s), 0);
	assert_int_equal(frame_decoder_feed(&d, big + 2, 2, sink_cb, &s), -EMSGSIZE);
	frame_decoder_free(&d);
	/* a configured lower limit */
	frame_put_prefix(big, 1025);
	frame_decoder_init(&d, 1024);
	assert_int_equal(frame_decoder_feed(&d, big, 4, sink_cb, &s), -EMSGSIZE);
	frame_decoder_free(&d);
	/* truncated frame: never delivered */
	uint8_t *one;
	size_t n;
	encode_hello(&one, &n);
	frame_decoder_init(&d, 0);
	assert_int_equal(frame_decoder_feed(&d, one, n - 1, sink_cb, &s), 0);
	assert_int_equal(s.frames, 0);
	assert_true(frame_decoder_pending(&d));
	frame_decoder_free(&d);
	free(one);
}

static void test_garbage_and_wrong_messages(void **state)
{
	struct ctl_msg m;
	/* garbage bytes */
	uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99 };
	assert_int_equal(ctl_decode(garbage, sizeof(garbage), &m), -EBADMSG);
	/* valid protobuf of the wrong message: an IdentityRequest is not a Frame */
	Tether__IdentityRequest q = TETHER__IDENTITY_REQUEST__INIT;
	uint8_t nonce[32] = { 1 };
	q.request_id = 9;
	q.nonce.data = nonce;
	q.nonce.len = 32;
	uint8_t buf[256];
	size_t n = tether__identity_request__pack(&q, buf);
	assert_int_equal(ctl_decode(buf, n, &m), -EBADMSG);
	/* a Frame with no message */
	Tether__Frame f = TETHER__FRAME__INIT;
	f.version_major = PROTO_VERSION_MAJOR;
	n = tether__frame__pack(&f, buf);
	assert_int_equal(ctl_decode(buf, n, &m), -EBADMSG);
	/* unknown major version */
	Tether__Hello h = TETHER__HELLO__INIT;
	h.role = "x";
	f.version_major = PROTO_VERSION_MAJOR + 1;
	f.msg_case = TETHER__FRAME__MSG_HELLO;
	f.hello = &h;
	n = tether__frame__pack(&f, buf);
	assert_int_equal(ctl_decode(buf, n, &m), -EPROTONOSUPPORT);
	/* version 0 (a message that forgot its version) */
	f.version_major = 0;
	n = tether__frame__pack(&f, buf);
	assert_int_equal(ctl_decode(buf, n, &m), -EPROTONOSUPPORT);
	/* an IdentityRequest with a short nonce */
	f.version_major = PROTO_VERSION_MAJOR;
	Tether__FlowTuple t = TETHER__FLOW_TUPLE__INIT;
	uint8_t a4[4] = { 192, 0, 2, 1 };
	t.proto = 6;
	t.src_addr.data = t.dst_addr.data = a4;
	t.src_addr.len = t.dst_addr.len = 4;
	q.tuple = &t;
	q.nonce.len = 16;
	f.msg_case = TETHER__FRAME__MSG_IDENTITY_REQUEST;
	f.identity_request = &q;
	n = tether__frame__pack(&f, buf);
	assert_int_equal(ctl_decode(buf, n, &m), -EBADMSG);
	q.nonce.len = 32;
	n = tether__frame__pack(&f, buf);
	assert_int_equal(ctl_decode(buf, n, &m), 0);
	assert_int_equal(m.kind, CTL_IDENTITY_REQUEST);
	ctl_msg_clear(&m);
	/* a tuple with mixed address sizes */
	uint8_t a16[16] = { 0x20, 0x01, 0x0d, 0xb8 };
	t.dst_addr.data = a16;
	t.dst_addr.len = 16;
	n = tether__frame__pack(&f, buf);
	assert_int_equal(ctl_decode(buf, n, &m), -EBADMSG);
}

static void test_unknown_fields(void **state)
{
	/* A Hello frame plus an unknown field 99 (varint) appended. */
	uint8_t *one;
	size_t n;
	encode_hello(&one, &n);
	size_t plen = n - 4;
	uint8_t buf[512];
	memcpy(buf, one + 4, plen);
	/* field 99, varint: tag (99 << 3) as a two-byte varint, value 1 */
	buf[plen] = 0x98;
	buf[plen + 1] = 0x06;
	buf[plen + 2] = 0x01;
	struct ctl_msg m;
	/* our own minor: unknown fields are malformed */
	assert_int_equal(ctl_decode(buf, plen + 3, &m), -EBADMSG);
	/* from a newer minor they are tolerated (it may add fields) */
	Tether__Frame *f = tether__frame__unpack(NULL, plen, buf);
	assert_non_null(f);
	f->version_minor = PROTO_VERSION_MINOR + 1;
	size_t k = tether__frame__pack(f, buf);
	tether__frame__free_unpacked(f, NULL);
	buf[k] = 0x98;
	buf[k + 1] = 0x06;
	buf[k + 2] = 0x01;
	assert_int_equal(ctl_decode(buf, k + 3, &m), 0);
	assert_string_equal(m.u.hello.role, "net-supervisor");
	ctl_msg_clear(&m);
	free(one);
}

static void roundtrip(const struct ctl_msg *in, struct ctl_msg *out)
{
	uint8_t *buf;
	size_t n;
	assert_int_equal(ctl_encode(in, &buf, &n), 0);
	assert_int_equal(ctl_decode(buf + 4, n - 4, out), 0);
	assert_int_equal(out->kind, in->kind);
	free(buf);
}

static void test_exec_messages(void **state)
{
	char *argv[] = { "/bin/sh", "-c", "echo hi" };
	struct ctl_env_var env[] = { { "TERM", "xterm" }, { "LANG", "C.UTF-8" } };
	struct ctl_msg in = { .kind = CTL_EXEC_REQUEST }, out;
	in.u.exec_request.argv = argv;
	in.u.exec_request.argc = 3;
	in.u.exec_request.cwd = "/work";
	in.u.exec_request.env = env;
	in.u.exec_request.n_env = 2;
	in.u.exec_request.pty = true;
	in.u.exec_request.rows = 24;
	in.u.exec_request.cols = 80;
	roundtrip(&in, &out);
	assert_int_equal(out.u.exec_request.argc, 3);
	assert_string_equal(out.u.exec_request.argv[2], "echo hi");
	assert_null(out.u.exec_request.argv[3]);
	assert_string_equal(out.u.exec_request.cwd, "/work");
	assert_string_equal(out.u.exec_request.env[1].value, "C.UTF-8");
	assert_true(out.u.exec_request.pty);
	assert_int_equal(out.u.exec_request.cols, 80);
	ctl_msg_clear(&out);

	/* empty argv cannot be encoded; a bad env name does not decode */
	in.u.exec_request.argc = 0;
	uint8_t *buf;
	size_t n;
	assert_int_equal(ctl_encode(&in, &buf, &n), -EINVAL);
	in.u.exec_request.argc = 3;
	env[0].name = "BAD=NAME";
	assert_int_equal(ctl_encode(&in, &buf, &n), 0);
	assert_int_equal(ctl_decode(buf + 4, n - 4, &out), -EBADMSG);
	free(buf);

	struct ctl_msg st = { .kind = CTL_EXEC_STARTED };
	st.u.exec_started.pid = 42;
	strcpy(st.u.exec_started.process_key, FIX_BOOT ":77");
	roundtrip(&st, &out);
	assert_int_equal(out.u.exec_started.pid, 42);
	assert_string_equal(out.u.exec_started.process_key, FIX_BOOT ":77");
	struct ctl_msg ex = { .kind = CTL_EXEC_EXITED };
	ex.u.exec_exited.exit_code = 3;
	ex.u.exec_exited.signal = 9;
	roundtrip(&ex, &out);
	assert_int_equal(out.u.exec_exited.signal, 9);
	struct ctl_msg rs = { .kind = CTL_EXEC_RESIZE };
	rs.u.exec_resize.rows = 50;
	rs.u.exec_resize.cols = 132;
	roundtrip(&rs, &out);
	assert_int_equal(out.u.exec_resize.cols, 132);
	struct ctl_msg sg = { .kind = CTL_EXEC_SIGNAL };
	sg.u.exec_signal.signo = 15;
	roundtrip(&sg, &out);
	assert_int_equal(out.u.exec_signal.signo, 15);
	sg.u.exec_signal.signo = 0; /* out of range */
	assert_int_equal(ctl_encode(&sg, &buf, &n), 0);
	assert_int_equal(ctl_decode(buf + 4, n - 4, &out), -EBADMSG);
	free(buf);
	struct ctl_msg da = { .kind = CTL_EXEC_DATA };
	da.u.exec_data.stream = 1;
	da.u.exec_data.data = (uint8_t *)"abc";
	da.u.exec_data.len = 3;
	roundtrip(&da, &out);
	assert_int_equal(out.u.exec_data.len, 3);
	assert_memory_equal(out.u.exec_data.data, "abc", 3);
	ctl_msg_clear(&out);
}

static void test_identity_messages(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct ctl_msg ack = { .kind = CTL_HELLO_ACK }, out;
	ack.u.hello_ack.cert = f.cert;
	roundtrip(&ack, &out);
	assert_int_equal(out.u.hello_ack.cert.cert_len, f.cert.cert_len);
	assert_memory_equal(out.u.hello_ack.cert.cert, f.cert.cert, f.cert.cert_len);
	ctl_msg_clear(&out);

	struct signed_context sc;
	assert_int_equal(fix_sign(&f, NULL, NULL, NULL, 0, &sc), 0);
	struct ctl_msg resp = { .kind = CTL_IDENTITY_RESPONSE };
	resp.u.identity_response.request_id = 12;
	resp.u.identity_response.ok = true;
	resp.u.identity_response.context = sc;
	roundtrip(&resp, &out);
	assert_true(out.u.identity_response.ok);
	assert_memory_equal(out.u.identity_response.context.context, sc.context, sc.context_len);
	ctl_msg_clear(&out);

	struct ctl_msg err = { .kind = CTL_IDENTITY_RESPONSE };
	err.u.identity_response.request_id = 13;
	err.u.identity_response.reason = REASON_ANCESTRY_NOT_ANCHORED;
	strcpy(err.u.identity_response.message, "walk reached pid 1");
	roundtrip(&err, &out);
	assert_false(out.u.identity_response.ok);
	assert_int_equal(out.u.identity_response.reason, REASON_ANCESTRY_NOT_ANCHORED);
	assert_string_equal(out.u.identity_response.message, "walk reached pid 1");

	/* an error claiming "ok" or an unknown word decodes as protocol_error */
	Tether__Error e = TETHER__ERROR__INIT;
	e.reason = "totally_fine";
	Tether__IdentityResponse ir = TETHER__IDENTITY_RESPONSE__INIT;
	ir.result_case = TETHER__IDENTITY_RESPONSE__RESULT_ERROR;
	ir.error = &e;
	Tether__Frame fr = TETHER__FRAME__INIT;
	fr.version_major = PROTO_VERSION_MAJOR;
	fr.msg_case = TETHER__FRAME__MSG_IDENTITY_RESPONSE;
	fr.identity_response = &ir;
	uint8_t buf[512];
	size_t n = tether__frame__pack(&fr, buf);
	assert_int_equal(ctl_decode(buf, n, &out), 0);
	assert_int_equal(out.u.identity_response.reason, REASON_PROTOCOL_ERROR);
	e.reason = "ok";
	n = tether__frame__pack(&fr, buf);
	assert_int_equal(ctl_decode(buf, n, &out), 0);
	assert_int_equal(out.u.identity_response.reason, REASON_PROTOCOL_ERROR);
	signed_context_clear(&sc);
	fix_free(&f);
}

/* 1.1 clock samples: Hello's nonce, HelloAck's sample, ClockRequest and
 * ClockResponse round-trip; a nonce of the wrong length or a sample
 * without time or with a short signature is malformed. */
static void test_clock_messages(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct ctl_msg out;
	struct ctl_msg h = { .kind = CTL_HELLO };
	strcpy(h.u.hello.role, "net-supervisor");
	memset(h.u.hello.clock_nonce, 0x42, PROTO_CLOCK_NONCE_LEN);
	h.u.hello.has_clock_nonce = true;
	roundtrip(&h, &out);
	assert_true(out.u.hello.has_clock_nonce);
	assert_memory_equal(out.u.hello.clock_nonce, h.u.hello.clock_nonce, PROTO_CLOCK_NONCE_LEN);
	ctl_msg_clear(&out);
	h.u.hello.has_clock_nonce = false;
	roundtrip(&h, &out);
	assert_false(out.u.hello.has_clock_nonce);
	ctl_msg_clear(&out);

	struct ctl_msg ack = { .kind = CTL_HELLO_ACK };
	ack.u.hello_ack.cert = f.cert;
	clock_sample_sign(f.inst, h.u.hello.clock_nonce, FIX_T0, &ack.u.hello_ack.clock);
	ack.u.hello_ack.has_clock = true;
	roundtrip(&ack, &out);
	assert_true(out.u.hello_ack.has_clock);
	assert_int_equal(out.u.hello_ack.clock.now_ns, FIX_T0);
	assert_true(clock_sample_verify(&f.inst_pub, h.u.hello.clock_nonce, &out.u.hello_ack.clock));
	ctl_msg_clear(&out);

	struct ctl_msg q = { .kind = CTL_CLOCK_REQUEST };
	memset(q.u.clock_request.nonce, 7, PROTO_CLOCK_NONCE_LEN);
	roundtrip(&q, &out);
	assert_int_equal(out.kind, CTL_CLOCK_REQUEST);
	assert_memory_equal(out.u.clock_request.nonce, q.u.clock_request.nonce, PROTO_CLOCK_NONCE_LEN);
	struct ctl_msg a = { .kind = CTL_CLOCK_RESPONSE };
	clock_sample_sign(f.inst, q.u.clock_request.nonce, 0, &a.u.clock_response.clock);
	roundtrip(&a, &out);
	assert_int_equal(out.kind, CTL_CLOCK_RESPONSE);
	assert_true(clock_sample_verify(&f.inst_pub, q.u.clock_request.nonce, &out.u.clock_response.clock));

	uint8_t buf[512], nonce[33] = { 0 };
	Tether__Frame fr = TETHER__FRAME__INIT;
	fr.version_major = PROTO_VERSION_MAJOR;
	fr.version_minor = PROTO_VERSION_MINOR;
	Tether__ClockRequest cr = TETHER__CLOCK_REQUEST__INIT;
	cr.nonce.data = nonce;
	cr.nonce.len = 31;
	fr.msg_case = TETHER__FRAME__MSG_CLOCK_REQUEST;
	fr.clock_request = &cr;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG);
	Tether__Hello hh = TETHER__HELLO__INIT;
	hh.clock_nonce.data = nonce;
	hh.clock_nonce.len = 33;
	fr.msg_case = TETHER__FRAME__MSG_HELLO;
	fr.hello = &hh;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG);
	Tether__ClockSample cs = TETHER__CLOCK_SAMPLE__INIT;
	Tether__ClockResponse cp = TETHER__CLOCK_RESPONSE__INIT;
	cp.clock = &cs;
	cs.signature.data = buf + 256;
	cs.signature.len = PROTO_SIG_LEN;
	fr.msg_case = TETHER__FRAME__MSG_CLOCK_RESPONSE;
	fr.clock_response = &cp;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG); /* now_ns 0 */
	cs.now_ns = FIX_T0;
	cs.signature.len = 63;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG);
	cp.clock = NULL;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG);
	fix_free(&f);
}

/* Protocol 1.2: kx keys in Hello/HelloAck, MacContext answers and
 * ContextSignature frames; wrong sizes are malformed; an older minor can
 * be written (tests acting as a 1.1 peer). */
static void test_mac_messages(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct ctl_msg out;
	struct ctl_msg h = { .kind = CTL_HELLO };
	strcpy(h.u.hello.role, "net-supervisor");
	memset(h.u.hello.kx_public, 0x33, PROTO_KX_PUBLIC_LEN);
	h.u.hello.has_kx = true;
	roundtrip(&h, &out);
	assert_true(out.u.hello.has_kx);
	assert_memory_equal(out.u.hello.kx_public, h.u.hello.kx_public, PROTO_KX_PUBLIC_LEN);
	assert_int_equal(out.version_minor, PROTO_VERSION_MINOR);
	ctl_msg_clear(&out);

	struct ctl_msg ack = { .kind = CTL_HELLO_ACK, .version_minor = 1 };
	ack.u.hello_ack.cert = f.cert;
	memset(ack.u.hello_ack.kx_public, 0x44, PROTO_KX_PUBLIC_LEN);
	memset(ack.u.hello_ack.kx_signature, 0x55, PROTO_SIG_LEN);
	ack.u.hello_ack.has_kx = true;
	roundtrip(&ack, &out);
	assert_int_equal(out.version_minor, 1);
	assert_true(out.u.hello_ack.has_kx);
	assert_memory_equal(out.u.hello_ack.kx_signature, ack.u.hello_ack.kx_signature, PROTO_SIG_LEN);
	ctl_msg_clear(&out);

	struct signed_context sc;
	assert_int_equal(fix_sign(&f, NULL, NULL, NULL, 0, &sc), 0);
	struct ctl_msg r = { .kind = CTL_IDENTITY_RESPONSE };
	r.u.identity_response.request_id = 12;
	r.u.identity_response.ok = true;
	r.u.identity_response.mac = true;
	struct mac_context *mc = &r.u.identity_response.mac_context;
	mc->context = sc.context;
	mc->context_len = sc.context_len;
	memset(mc->mac, 0x66, PROTO_MAC_LEN);
	memcpy(mc->key_id, sc.key_id, PROTO_KEY_ID_LEN);
	roundtrip(&r, &out);
	assert_true(out.u.identity_response.ok && out.u.identity_response.mac);
	assert_int_equal(out.u.identity_response.mac_context.context_len, sc.context_len);
	assert_memory_equal(out.u.identity_response.mac_context.context, sc.context, sc.context_len);
	assert_memory_equal(out.u.identity_response.mac_context.mac, mc->mac, PROTO_MAC_LEN);
	ctl_msg_clear(&out);

	struct ctl_msg cs = { .kind = CTL_CONTEXT_SIGNATURE };
	cs.u.context_signature.request_id = 12;
	cs.u.context_signature.context = sc;
	roundtrip(&cs, &out);
	assert_int_equal(out.kind, CTL_CONTEXT_SIGNATURE);
	assert_int_equal(out.u.context_signature.request_id, 12);
	assert_memory_equal(out.u.context_signature.context.signature, sc.signature, PROTO_SIG_LEN);
	ctl_msg_clear(&out);

	uint8_t buf[4096], junk[64] = { 0 };
	Tether__Frame fr = TETHER__FRAME__INIT;
	fr.version_major = PROTO_VERSION_MAJOR;
	fr.version_minor = PROTO_VERSION_MINOR;
	Tether__Hello hh = TETHER__HELLO__INIT;
	hh.kx_public.data = junk;
	hh.kx_public.len = 31;
	fr.msg_case = TETHER__FRAME__MSG_HELLO;
	fr.hello = &hh;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG);
	Tether__IdentityResponse ir = TETHER__IDENTITY_RESPONSE__INIT;
	Tether__MacContext m = TETHER__MAC_CONTEXT__INIT;
	m.context.data = sc.context;
	m.context.len = sc.context_len;
	m.mac.data = junk;
	m.mac.len = 31;
	m.instance_key_id.data = junk;
	m.instance_key_id.len = PROTO_KEY_ID_LEN;
	ir.result_case = TETHER__IDENTITY_RESPONSE__RESULT_MAC_CONTEXT;
	ir.mac_context = &m;
	fr.msg_case = TETHER__FRAME__MSG_IDENTITY_RESPONSE;
	fr.identity_response = &ir;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG);
	m.mac.len = PROTO_MAC_LEN;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), 0);
	ctl_msg_clear(&out);
	Tether__ContextSignature csig = TETHER__CONTEXT_SIGNATURE__INIT;
	fr.msg_case = TETHER__FRAME__MSG_CONTEXT_SIGNATURE;
	fr.context_signature = &csig;
	assert_int_equal(ctl_decode(buf, tether__frame__pack(&fr, buf), &out), -EBADMSG); /* no context */
	signed_context_clear(&sc);
	fix_free(&f);
}

static void test_procref_wire(void **state)
{
	struct procref r, back;
	fix_ref(&r, 321, 555, "/usr/bin/git");
	struct pb_procref_buf b;
	procref_to_pb(&r, &b);
	assert_int_equal(procref_from_pb(&b.ref, &back), 0);
	assert_string_equal(back.key, r.key);
	assert_string_equal(back.exe.path, "/usr/bin/git");
	assert_memory_equal(back.exe.sha256, r.exe.sha256, 32);
	assert_true(back.exe.hashed);
	assert_int_equal(back.pidfd, -1);
	assert_int_equal(back.pid, 321);
	assert_int_equal(back.euid, 1000);

	/* sha256 must be exactly 32 bytes */
	b.exe.sha256.len = 31;
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	procref_to_pb(&r, &b);
	/* a path with an embedded NUL */
	char p[] = "/bin/sh\0/evil";
	b.exe.path.data = (uint8_t *)p;
	b.exe.path.len = sizeof(p) - 1;
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	procref_to_pb(&r, &b);
	/* a path longer than PATH_MAX */
	static uint8_t longpath[PATH_MAX + 10];
	memset(longpath, 'a', sizeof(longpath));
	b.exe.path.data = longpath;
	b.exe.path.len = sizeof(longpath);
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	procref_to_pb(&r, &b);
	/* a bad boot id, a key for another boot, a too long key, pid 0 */
	b.ref.boot_id = "not-a-boot-id";
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	procref_to_pb(&r, &b);
	b.ref.key = "11111111-2222-3333-4444-555555555555:1";
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	char longkey[200];
	snprintf(longkey, sizeof(longkey), "%s:%0150d", FIX_BOOT, 1);
	b.ref.key = longkey;
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	procref_to_pb(&r, &b);
	b.ref.pid = 0;
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	procref_to_pb(&r, &b);
	b.ref.key_kind = 7;
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	procref_to_pb(&r, &b);
	b.ref.pidfs_ino = 0; /* a PIDFS key needs its inode */
	assert_int_equal(procref_from_pb(&b.ref, &back), -EBADMSG);
	assert_int_equal(procref_from_pb(NULL, &back), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_partial_and_many),
		cmocka_unit_test(test_bad_prefixes),
		cmocka_unit_test(test_garbage_and_wrong_messages),
		cmocka_unit_test(test_unknown_fields),
		cmocka_unit_test(test_exec_messages),
		cmocka_unit_test(test_identity_messages),
		cmocka_unit_test(test_clock_messages),
		cmocka_unit_test(test_mac_messages),
		cmocka_unit_test(test_procref_wire),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
