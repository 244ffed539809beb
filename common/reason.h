/* Stable reason words: every deny, error and audit `reason` field comes
 * from this enum through reason_word(). Words never change once shipped. */
#pragma once

enum reason {
	REASON_OK = 0,
	REASON_ALLOWED,
	REASON_AUDIT_ONLY,
	/* identity */
	REASON_IDENTITY_UNAVAILABLE,
	REASON_ANCESTRY_NOT_ANCHORED,
	REASON_REACHED_NAMESPACE_INIT,
	REASON_FOREIGN_PROCESS,
	REASON_PROCESS_VANISHED,
	REASON_DEPTH_EXCEEDED,
	REASON_PID_REUSED,
	REASON_AMBIGUOUS_SOCKET_OWNER,
	/* delegation */
	REASON_CONTEXT_SIGNATURE_INVALID,
	REASON_CONTEXT_REPLAYED,
	REASON_CONTEXT_EXPIRED,
	REASON_CONTEXT_TUPLE_MISMATCH,
	REASON_ANCHOR_CERTIFICATE_INVALID,
	REASON_ANCHOR_UNKNOWN,
	REASON_IDENTITY_TIMEOUT,
	REASON_CONTROL_CHANNEL_LOST,
	REASON_PROTOCOL_ERROR,
	/* policy */
	REASON_NO_MATCHING_POLICY,
	REASON_BINARY_HASH_MISMATCH,
	REASON_ANCESTOR_REQUIREMENT_UNMET,
	REASON_BLOCKED_DESTINATION,
	REASON_NOT_READY,
	REASON_POLICY_NOT_LOADED,
	/* proxy */
	REASON_BAD_REQUEST,
	REASON_HEADER_TOO_LARGE,
	REASON_TOO_MANY_HEADERS,
	REASON_TOO_MANY_CONNECTIONS,
	REASON_HOST_MISMATCH,
	REASON_RESOLVE_FAILED,
	REASON_UPSTREAM_CONNECT_FAILED,
	REASON_UPSTREAM_TIMEOUT,
	REASON_IDLE_TIMEOUT,
	REASON_INTERNAL_ERROR,
	/* env boundary: why a parent variable did not reach the child */
	REASON_NOT_ALLOWED,
	REASON_HARD_DENY,
	REASON_POLICY_DENY,
	REASON_VALUE_CHECK,
	REASON_SECRET_SHAPED,
	REASON_NAME_INVALID,
	REASON_TETHER_RESERVED,
	REASON_SUPERVISOR_SET,
	/* proxy (appended) */
	REASON_RESOLVE_TIMEOUT,
	REASON_AUDIT_UNAVAILABLE, /* the decision could not be recorded */
	/* delegation (appended): the proc side's clock is past --max-clock-skew */
	REASON_CLOCK_SKEW,
	/* the workload's resolver (appended) */
	REASON_DNS_NO_RULE,         /* no rule of this binary could allow the name */
	REASON_DNS_TYPE_REFUSED,    /* a query type the resolver does not serve */
	REASON_DNS_UPSTREAM_FAILED, /* no usable answer from the upstream resolver */
	REASON_DNS_MALFORMED,       /* the query could not be parsed */
	/* the corporate upstream proxy (appended; net-supervisor/upstream.h) */
	REASON_UPSTREAM_PROXY_UNREACHABLE,   /* no connection to it */
	REASON_UPSTREAM_PROXY_REFUSED,       /* it answered the CONNECT with an error */
	REASON_UPSTREAM_PROXY_AUTH_REQUIRED, /* it answered 407: credentials missing or wrong */
	/* transparent capture (appended): a raw (not TLS/HTTP) stream that only
	 * an http endpoint names; `protocol: tcp` would admit it */
	REASON_PROTOCOL_NOT_ALLOWED,
	/* TLS inspection (net-supervisor/tls_inspect.h) */
	REASON_UPSTREAM_CERT_INVALID,   /* the real server's certificate failed verification */
	REASON_UPSTREAM_TLS_FAILED,     /* the TLS handshake with the real server failed otherwise */
	REASON_CLIENT_TLS_FAILED,       /* the workload's TLS handshake with the proxy failed */
	REASON_TLS_INSPECT_UNAVAILABLE, /* the endpoint says inspect, but no sandbox CA is set up */
	/* HTTP rules of an inspected endpoint (policy/httprules.h) */
	REASON_HTTP_RULE_DENY,          /* a deny rule matched the request */
	REASON_HTTP_NO_MATCHING_RULE,   /* the endpoint has rules and none allows the request */
	REASON_WEBSOCKET_NOT_ALLOWED,   /* an upgrade no rule allows with websocket: true */
	REASON_HTTP_PATH_NOT_CANONICAL, /* dot segments, encoded separators: no glob can judge it */
	REASON_HTTP_BAD_REQUEST,        /* the request inside the TLS session did not parse */
	/* credentials (policy/credentials.h) */
	REASON_CREDENTIAL_NOT_PERMITTED, /* a placeholder this binary/endpoint may not spend, or unknown */
	REASON_CREDENTIAL_UNAVAILABLE,   /* its source gave no secret (missing, bad mode, bad value) */
	/* a `tls: inspect` endpoint reached other than by a CONNECT through the
	 * proxy (a captured flow, a plain-HTTP forward): its rules and
	 * credentials could not be applied */
	REASON_TLS_INSPECT_NEEDS_CONNECT,
	REASON__COUNT
};

const char *reason_word(enum reason r);
/* Inverse of reason_word(); REASON__COUNT when the word is unknown. */
enum reason reason_from_word(const char *word);
