/* Typed control messages and their Frame encoding.
 *
 * ctl_encode() wraps a message in a versioned Frame and adds the length
 * prefix. ctl_decode() is the edge for a received payload: it rejects an
 * unknown major version (-EPROTONOSUPPORT), unknown fields within a known
 * minor version, a frame with no message, and any field outside its limits
 * (-EBADMSG); what it returns is typed and bounded, with strings
 * NUL-terminated and free of embedded NULs.
 *
 * A decoded message owns its memory: ctl_msg_clear() it. A message built
 * for encoding only borrows (don't clear it). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/reason.h"
#include "proto/clock.h"
#include "proto/context.h"
#include "proto/mac.h"
#include "proto/signed.h"
#include "proto/verifier.h"

#define CTL_MAX_ARGV 4096
#define CTL_MAX_ENV 1024
#define CTL_MAX_ROLE 64
#define CTL_MAX_ERROR_MESSAGE 512

enum ctl_kind {
	CTL_HELLO = 1,
	CTL_HELLO_ACK,
	CTL_IDENTITY_REQUEST,
	CTL_IDENTITY_RESPONSE,
	CTL_EXEC_REQUEST,
	CTL_EXEC_STARTED,
	CTL_EXEC_EXITED,
	CTL_EXEC_RESIZE,
	CTL_EXEC_SIGNAL,
	CTL_EXEC_DATA,
	CTL_CLOCK_REQUEST,
	CTL_CLOCK_RESPONSE,
	CTL_CONTEXT_SIGNATURE, /* 1.2 */
	CTL_IDENTITY_PUSH,     /* 1.3 */
};

struct ctl_env_var {
	char *name; /* [A-Za-z_][A-Za-z0-9_]*, at most 255 bytes */
	char *value;
};

struct ctl_msg {
	enum ctl_kind kind;
	uint32_t version_minor; /* the sender's minor version (decoded messages); encoding:
	                         * 0 = ours, lower = act as that older minor (tests) */
	union {
		struct {
			char role[CTL_MAX_ROLE];
			char software[CTL_MAX_ROLE];
			bool has_clock_nonce; /* 1.1 */
			uint8_t clock_nonce[PROTO_CLOCK_NONCE_LEN];
			bool has_kx; /* 1.2 */
			uint8_t kx_public[PROTO_KX_PUBLIC_LEN];
			bool has_push_seed; /* 1.3 */
			uint8_t push_seed[PROTO_PUSH_SEED_LEN];
		} hello;
		struct {
			struct signed_cert cert;
			bool has_clock; /* 1.1: answer to the Hello's clock_nonce */
			struct clock_sample clock;
			bool has_kx; /* 1.2: answer to the Hello's kx_public */
			uint8_t kx_public[PROTO_KX_PUBLIC_LEN];
			uint8_t kx_signature[PROTO_SIG_LEN];
			bool push; /* 1.3: identities will be pushed */
		} hello_ack;
		struct {
			uint8_t nonce[PROTO_CLOCK_NONCE_LEN];
		} clock_request;
		struct {
			struct clock_sample clock;
		} clock_response;
		struct {
			uint64_t request_id;
			uint8_t nonce[PROTO_NONCE_LEN];
			struct proto_tuple tuple;
			uint64_t socket_cookie;
		} identity_request;
		struct {
			uint64_t request_id;
			bool ok;                      /* context (or mac_context) set, else reason/message */
			bool mac;                     /* 1.2: ok, and mac_context set instead of context */
			struct signed_context context;
			struct mac_context mac_context;
			enum reason reason;           /* an unknown word decodes as protocol_error */
			char message[CTL_MAX_ERROR_MESSAGE];
		} identity_response;
		struct {
			uint64_t request_id;
			struct signed_context context;
		} context_signature;
		struct {
			uint64_t push_id; /* PROTO_PUSH_ID_BIT set */
			struct mac_context mac_context;
		} identity_push;
		struct {
			char **argv; /* argc entries, argc >= 1 */
			size_t argc;
			char *cwd;   /* NULL: the gateway's default */
			struct ctl_env_var *env;
			size_t n_env;
			bool pty;
			uint16_t rows, cols;
		} exec_request;
		struct {
			int32_t pid;
			char process_key[PROCREF_KEY_MAX];
		} exec_started;
		struct {
			int32_t exit_code;
			int32_t signal; /* 0, or the signal that killed it */
		} exec_exited;
		struct {
			uint16_t rows, cols;
		} exec_resize;
		struct {
			int32_t signo; /* 1..64 */
		} exec_signal;
		struct {
			uint32_t stream; /* 0 stdin, 1 stdout, 2 stderr */
			uint8_t *data;
			size_t len;
			bool eof;
		} exec_data;
	} u;
};

/* Frame with its length prefix into a malloc'd *out. -EINVAL for a
 * message that would not decode (e.g. empty argv), -EMSGSIZE above
 * PROTO_MAX_FRAME. */
int ctl_encode(const struct ctl_msg *m, uint8_t **out, size_t *len);
/* One payload (without prefix). */
int ctl_decode(const uint8_t *payload, size_t len, struct ctl_msg *out);
void ctl_msg_clear(struct ctl_msg *m);
const char *ctl_kind_name(enum ctl_kind k);
