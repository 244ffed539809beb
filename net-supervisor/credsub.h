/* Credential placeholders in an HTTP/1.1 request head (issue 24, stage 3:
 * credentials only one binary can spend). The workload holds
 * `tether-cred:NAME` where a secret would be (its environment variable);
 * the proxy swaps it for the secret in an inspected request only when the
 * credential allows this binary, its ancestors and this endpoint.
 *
 * This module is the pure substitution (no I/O, no policy): given a
 * complete request head (request line, headers, the empty line) it finds
 * every placeholder in the header values, in plain text or inside the
 * base64 of an `Authorization: Basic` value (a client builds USER:PASSWORD
 * itself), asks `permitted` about each, and builds the head with the
 * secrets in place. The request line is never changed (a placeholder there
 * passes as is: it is not a secret). One placeholder a credential does not
 * allow, or one naming no credential, refuses the whole request: nothing is
 * half-substituted.
 *
 * A credential with a header (credentials.h `header:`) is also set by the
 * proxy: when `permitted` allows it for this request, every header line of
 * that name the client sent is dropped and `NAME: FORMAT` (its `{}` the
 * secret) is added before the empty line; when it does not, nothing is
 * added and the client's lines pass (they hold no secret of ours). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define CREDSUB_PREFIX "tether-cred:"
#define CREDSUB_NAME_MAX 64

struct credsub_cred {
	const char *name;   /* [A-Za-z0-9_.-]{1,64} */
	const char *secret; /* no CR, LF or NUL (credsub_secret_ok) */
	const char *header; /* set by the proxy when permitted, or NULL */
	const char *format; /* header's value, one "{}" for the secret (NULL: "{}") */
};

/* Whether the request may spend cred (binary, ancestors, endpoint: the
 * caller's policy). */
typedef bool (*credsub_permitted_fn)(void *ctx, const struct credsub_cred *cred);

struct credsub_result {
	char *head;      /* malloc'd new head, or NULL when nothing was substituted */
	size_t head_len;
	size_t n_swapped;
	/* on CREDSUB_REFUSED: the name as the request spelled it (NUL-
	 * terminated, at most CREDSUB_NAME_MAX), and whether a credential of
	 * that name exists at all */
	char refused[CREDSUB_NAME_MAX + 1];
	bool refused_unknown;
};

enum { CREDSUB_OK = 0, CREDSUB_REFUSED = 1 };

/* CREDSUB_OK (res->head NULL: unchanged), CREDSUB_REFUSED, or -EINVAL (not
 * a head: no CRLF CRLF end, a header line without ':'), -ENOMEM. */
int credsub_head(const char *head, size_t len, const struct credsub_cred *creds, size_t n_creds,
		 credsub_permitted_fn permitted, void *ctx, struct credsub_result *res);
void credsub_result_done(struct credsub_result *res);

/* A secret can go into a header value: 1-8192 bytes, no CR, LF or NUL. */
bool credsub_secret_ok(const char *s, size_t len);
