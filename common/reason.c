#include "common/reason.h"

#include <string.h>

static const char *const words[REASON__COUNT] = {
	[REASON_OK] = "ok",
	[REASON_ALLOWED] = "allowed",
	[REASON_AUDIT_ONLY] = "audit_only",
	[REASON_IDENTITY_UNAVAILABLE] = "identity_unavailable",
	[REASON_ANCESTRY_NOT_ANCHORED] = "ancestry_not_anchored",
	[REASON_REACHED_NAMESPACE_INIT] = "reached_namespace_init",
	[REASON_FOREIGN_PROCESS] = "foreign_process",
	[REASON_PROCESS_VANISHED] = "process_vanished",
	[REASON_DEPTH_EXCEEDED] = "depth_exceeded",
	[REASON_PID_REUSED] = "pid_reused",
	[REASON_AMBIGUOUS_SOCKET_OWNER] = "ambiguous_socket_owner",
	[REASON_CONTEXT_SIGNATURE_INVALID] = "context_signature_invalid",
	[REASON_CONTEXT_REPLAYED] = "context_replayed",
	[REASON_CONTEXT_EXPIRED] = "context_expired",
	[REASON_CONTEXT_TUPLE_MISMATCH] = "context_tuple_mismatch",
	[REASON_ANCHOR_CERTIFICATE_INVALID] = "anchor_certificate_invalid",
	[REASON_ANCHOR_UNKNOWN] = "anchor_unknown",
	[REASON_IDENTITY_TIMEOUT] = "identity_timeout",
	[REASON_CONTROL_CHANNEL_LOST] = "control_channel_lost",
	[REASON_PROTOCOL_ERROR] = "protocol_error",
	[REASON_NO_MATCHING_POLICY] = "no_matching_policy",
	[REASON_BINARY_HASH_MISMATCH] = "binary_hash_mismatch",
	[REASON_ANCESTOR_REQUIREMENT_UNMET] = "ancestor_requirement_unmet",
	[REASON_BLOCKED_DESTINATION] = "blocked_destination",
	[REASON_PROTOCOL_NOT_ALLOWED] = "protocol_not_allowed",
	[REASON_NOT_READY] = "not_ready",
	[REASON_POLICY_NOT_LOADED] = "policy_not_loaded",
	[REASON_BAD_REQUEST] = "bad_request",
	[REASON_HEADER_TOO_LARGE] = "header_too_large",
	[REASON_TOO_MANY_HEADERS] = "too_many_headers",
	[REASON_TOO_MANY_CONNECTIONS] = "too_many_connections",
	[REASON_HOST_MISMATCH] = "host_mismatch",
	[REASON_RESOLVE_FAILED] = "resolve_failed",
	[REASON_UPSTREAM_CONNECT_FAILED] = "upstream_connect_failed",
	[REASON_UPSTREAM_TIMEOUT] = "upstream_timeout",
	[REASON_IDLE_TIMEOUT] = "idle_timeout",
	[REASON_INTERNAL_ERROR] = "internal_error",
	[REASON_NOT_ALLOWED] = "not_allowed",
	[REASON_HARD_DENY] = "hard_deny",
	[REASON_POLICY_DENY] = "policy_deny",
	[REASON_VALUE_CHECK] = "value_check",
	[REASON_SECRET_SHAPED] = "secret_shaped",
	[REASON_NAME_INVALID] = "name_invalid",
	[REASON_TETHER_RESERVED] = "tether_reserved",
	[REASON_SUPERVISOR_SET] = "supervisor_set",
	[REASON_RESOLVE_TIMEOUT] = "resolve_timeout",
	[REASON_AUDIT_UNAVAILABLE] = "audit_unavailable",
	[REASON_CLOCK_SKEW] = "clock_skew",
	[REASON_DNS_NO_RULE] = "dns_no_rule",
	[REASON_DNS_TYPE_REFUSED] = "dns_type_refused",
	[REASON_DNS_UPSTREAM_FAILED] = "dns_upstream_failed",
	[REASON_DNS_MALFORMED] = "dns_malformed",
	[REASON_UPSTREAM_PROXY_UNREACHABLE] = "upstream_proxy_unreachable",
	[REASON_UPSTREAM_PROXY_REFUSED] = "upstream_proxy_refused",
	[REASON_UPSTREAM_PROXY_AUTH_REQUIRED] = "upstream_proxy_auth_required",
	[REASON_UPSTREAM_CERT_INVALID] = "upstream_cert_invalid",
	[REASON_UPSTREAM_TLS_FAILED] = "upstream_tls_failed",
	[REASON_CLIENT_TLS_FAILED] = "client_tls_failed",
	[REASON_TLS_INSPECT_UNAVAILABLE] = "tls_inspect_unavailable",
	[REASON_HTTP_RULE_DENY] = "http_rule_deny",
	[REASON_HTTP_NO_MATCHING_RULE] = "http_no_matching_rule",
	[REASON_WEBSOCKET_NOT_ALLOWED] = "websocket_not_allowed",
	[REASON_HTTP_PATH_NOT_CANONICAL] = "http_path_not_canonical",
	[REASON_HTTP_BAD_REQUEST] = "http_bad_request",
	[REASON_CREDENTIAL_NOT_PERMITTED] = "credential_not_permitted",
	[REASON_CREDENTIAL_UNAVAILABLE] = "credential_unavailable",
	[REASON_TLS_INSPECT_NEEDS_CONNECT] = "tls_inspect_needs_connect",
};

const char *reason_word(enum reason r)
{
	if ((unsigned)r >= REASON__COUNT || !words[r])
		return "internal_error";
	return words[r];
}

enum reason reason_from_word(const char *word)
{
	for (int i = 0; i < REASON__COUNT; i++)
		if (words[i] && strcmp(words[i], word) == 0)
			return (enum reason)i;
	return REASON__COUNT;
}
