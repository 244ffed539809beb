/* Writes the committed seed corpus of fuzz/fuzz_frame and fuzz/fuzz_verify:
 *   proto_fuzz_seeds DIR   -> DIR/fuzz_frame/seed-*, DIR/fuzz_verify/seed-*
 * Regenerate with: build/tests/proto_fuzz_seeds fuzz/corpus */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/frame.h"
#include "proto/message.h"
#include "proto/signed.h"
#include "tests/proto/fixture.h"

static void put(const char *dir, const char *sub, const char *name, uint8_t lead, const uint8_t *b, size_t n)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, sub);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/%s/%s", dir, sub, name);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(&lead, 1, 1, f) != 1 || fwrite(b, 1, n, f) != n) {
		perror(p);
		exit(1);
	}
	fclose(f);
}

static void frame(const char *dir, const char *name, uint8_t lead, const struct ctl_msg *m)
{
	uint8_t *b;
	size_t n;
	if (ctl_encode(m, &b, &n) < 0)
		exit(1);
	put(dir, "fuzz_frame", name, lead, b, n);
	free(b);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	const char *dir = argv[1];
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	struct fixture f;
	if (fix_init(&f) < 0)
		return 1;
	struct signed_context sc;
	if (fix_sign(&f, NULL, NULL, NULL, 0, &sc) < 0)
		return 1;

	struct ctl_msg hello = { .kind = CTL_HELLO };
	strcpy(hello.u.hello.role, "net-supervisor");
	frame(dir, "seed-hello", 31, &hello);
	struct ctl_msg ack = { .kind = CTL_HELLO_ACK };
	ack.u.hello_ack.cert = f.cert;
	frame(dir, "seed-hello-ack", 7, &ack);
	struct ctl_msg req = { .kind = CTL_IDENTITY_REQUEST };
	req.u.identity_request.request_id = 5;
	memcpy(req.u.identity_request.nonce, f.nonce, 32);
	req.u.identity_request.tuple = f.tuple;
	frame(dir, "seed-identity-request", 0, &req);
	struct ctl_msg resp = { .kind = CTL_IDENTITY_RESPONSE };
	resp.u.identity_response.request_id = 5;
	resp.u.identity_response.ok = true;
	resp.u.identity_response.context = sc;
	frame(dir, "seed-identity-response", 3, &resp);
	struct ctl_msg err = { .kind = CTL_IDENTITY_RESPONSE };
	err.u.identity_response.reason = REASON_ANCESTRY_NOT_ANCHORED;
	strcpy(err.u.identity_response.message, "no anchor");
	frame(dir, "seed-identity-error", 0x85, &err);
	char *argv_[] = { "/bin/sh", "-c", "true" };
	struct ctl_env_var env[] = { { "TERM", "xterm" } };
	struct ctl_msg ex = { .kind = CTL_EXEC_REQUEST };
	ex.u.exec_request.argv = argv_;
	ex.u.exec_request.argc = 3;
	ex.u.exec_request.cwd = "/";
	ex.u.exec_request.env = env;
	ex.u.exec_request.n_env = 1;
	ex.u.exec_request.pty = true;
	ex.u.exec_request.rows = 24;
	ex.u.exec_request.cols = 80;
	frame(dir, "seed-exec-request", 11, &ex);
	struct ctl_msg exited = { .kind = CTL_EXEC_EXITED };
	exited.u.exec_exited.signal = 9;
	frame(dir, "seed-exec-exited", 1, &exited);
	/* 1.1 clock samples */
	struct ctl_msg hello_clock = hello;
	memset(hello_clock.u.hello.clock_nonce, 0x3c, PROTO_CLOCK_NONCE_LEN);
	hello_clock.u.hello.has_clock_nonce = true;
	frame(dir, "seed-hello-clock", 0, &hello_clock);
	struct ctl_msg ack_clock = ack;
	clock_sample_sign(f.inst, hello_clock.u.hello.clock_nonce, FIX_T0, &ack_clock.u.hello_ack.clock);
	ack_clock.u.hello_ack.has_clock = true;
	frame(dir, "seed-hello-ack-clock", 0, &ack_clock);
	struct ctl_msg creq = { .kind = CTL_CLOCK_REQUEST };
	memset(creq.u.clock_request.nonce, 0x3d, PROTO_CLOCK_NONCE_LEN);
	frame(dir, "seed-clock-request", 0, &creq);
	struct ctl_msg cresp = { .kind = CTL_CLOCK_RESPONSE };
	clock_sample_sign(f.inst, creq.u.clock_request.nonce, FIX_T0, &cresp.u.clock_response.clock);
	frame(dir, "seed-clock-response", 0, &cresp);

	/* verifier seeds: a good signed context, a certificate, raw context bytes */
	uint8_t *p;
	size_t n;
	if (signed_context_pack(&sc, &p, &n) < 0)
		return 1;
	put(dir, "fuzz_verify", "seed-signed-context", 0, p, n);
	free(p);
	if (signed_cert_pack(&f.cert, &p, &n) < 0)
		return 1;
	put(dir, "fuzz_verify", "seed-signed-cert", 1, p, n);
	free(p);
	put(dir, "fuzz_verify", "seed-context", 2, sc.context, sc.context_len);
	struct signed_context other;
	uint8_t nonce2[32];
	memset(nonce2, 0x5c, sizeof(nonce2));
	if (fix_sign(&f, NULL, nonce2, NULL, 0, &other) < 0 || signed_context_pack(&other, &p, &n) < 0)
		return 1;
	put(dir, "fuzz_verify", "seed-signed-context-other-nonce", 0, p, n);
	free(p);
	signed_context_clear(&other);
	signed_context_clear(&sc);
	fix_free(&f);
	return 0;
}
