/* idservice: the proc side of the delegation protocol (docs/protocol.md).
 *
 * At start: a fresh in-memory instance key; the anchor ref of this process
 * (opened and its exe hashed here, once, before the service is up); an
 * AnchorCertificate {instance key, anchor, boot_id, PID namespace, topology}
 * signed with the provisioning key (which the service does not keep); the
 * audit event `anchor_established`. Then proto_server (proto/server.h)
 * serves the endpoint: HelloAck carries the certificate, and every
 * IdentityRequest goes to the libuv thread pool:
 *   tuple -> attribute_flow (cookie registry first, holder search among
 *   members_live_pids second) -> the subject's exe hashed -> ancestry_walk
 *   to the anchor -> context_sign with the instance key,
 * answered on the loop thread with a SignedContext or a reason word, and
 * audited as `identity_issued` (request id, subject pid/key/exe, reason).
 *
 * Thread safety: attribute contexts are not thread-safe, so each worker
 * borrows one from a mutex-protected pool (created on demand, reused: the
 * holder cache stays warm); the member table, cookie registry, hash cache
 * and audit log are thread-safe; the instance key is read-only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/audit.h"
#include "policy/network.h"
#include "common/kernel.h"
#include "identity/cookies.h"
#include "identity/members.h"
#include "proto/cert.h"
#include "proto/context.h"
#include "proto/keys.h"
#include "proto/signed.h"

struct idservice;

#define IDSERVICE_MAX_PEERS 8

struct idservice_opts {
	const char *endpoint;              /* unix:PATH | tcp:HOST:PORT | vsock:CID:PORT */
	unsigned socket_mode;              /* unix: 0 => 0600 */
	bool check_uid;                    /* unix peers: SO_PEERCRED uid */
	uid_t peer_uid;
	/* tcp peers: when n_allow_peers > 0, only these sources may connect
	 * (refused before a byte is read); at most IDSERVICE_MAX_PEERS. */
	struct netcidr allow_peers[IDSERVICE_MAX_PEERS];
	size_t n_allow_peers;
	const struct kernel_caps *caps;    /* required, must outlive the service */
	struct members *members;           /* required, borrowed */
	struct cookie_registry *cookies;   /* may be NULL */
	const struct sign_key *provisioning; /* required; used only in idservice_start */
	/* The provisioning key's file: read again to renew the certificate two
	 * thirds into its validity (and sent to connected peers). NULL: never
	 * renewed, the service's answers are refused once it runs out. */
	const char *provisioning_path;
	uint64_t cert_validity_ns;         /* 0 => PROTO_CERT_DEFAULT_VALIDITY_NS (30 days) */
	enum proto_topology topology;      /* 0 => split */
	struct audit_log *audit;           /* may be NULL: no events */
	uint64_t context_lifetime_ns;      /* 0 => PROTO_DEFAULT_LIFETIME_NS */
	uint64_t policy_generation;
	/* --strict-socket-owner: a connect-time registry hit counts only while
	 * the connector still runs and holds the socket; otherwise the holder
	 * search decides. Denies a socket handed out of the tree after connect
	 * (SCM_RIGHTS), at the price of connect-and-exit attribution. */
	bool strict_socket_owner;
	/* Walk every chain in full instead of re-proving one pinned by an
	 * earlier answer (identity/chain.h). For comparison and debugging. */
	bool no_chain_cache;
	/* Protocol 1.3: do not push identities at connect time (answer a
	 * Hello's push seed with HelloAck.push = false); every flow is then
	 * asked for. --no-identity-push. */
	bool no_push;
};

/* -EINVAL bad options, -errno from the anchor ref, signing or the listener. */
int idservice_start(uv_loop_t *loop, const struct idservice_opts *opts, struct idservice **out);
/* Stop the server; done() once every in-flight request finished and all is freed. */
void idservice_stop(struct idservice *s, void (*done)(void *userdata), void *userdata);

/* The signed certificate (valid until stop). */
const struct signed_cert *idservice_cert(const struct idservice *s);
/* The instance public key. */
void idservice_instance_key(const struct idservice *s, struct pub_key *out);

/* Connect-time identity (protocol 1.3, docs/protocol.md "Pushed
 * identities"): the notifier's record step (after CONTINUE, on the loop)
 * hands over each recorded inet socket. Unless no net side asked for
 * pushes (then nothing is done), a TCP socket is dup'd and queued to the
 * thread pool (at most IDSERVICE_PUSH_MAX at a time; more are dropped and
 * counted: those flows are asked for as before). The worker verifies the
 * connector from the cookie registry (flow_verifier_verify_cookie, the
 * same walk, image check and pinned chains as a registry hit of a
 * request), waits (at most IDSERVICE_PUSH_TUPLE_WAIT_MS) for the connect
 * to complete so that the socket's tuple is the one the net side will
 * accept (getsockname/getpeername), and for each net side that asked
 * builds a context with that tuple, the push's nonce and id, MACs it
 * under that channel's key and signs it; back on the loop the IdentityPush
 * goes out, then the ContextSignature. Nothing of it runs while the caller
 * is blocked. sockfd is borrowed. */
#define IDSERVICE_PUSH_MAX 256
#define IDSERVICE_PUSH_TUPLE_WAIT_MS 20
/* A process's verified identity is reused for its next connects (same
 * process key, same image as recorded at the connect) for this long: not
 * verified again, and pushed from the loop at once when the connect had
 * already completed (else the thread pool only waits for its tuple).
 * TETHER_PUSH_NO_CACHE (any value) turns it off (measurements). */
#define IDSERVICE_PUSH_CACHE_MS 1000
void idservice_note_connect(struct idservice *s, uint64_t cookie, int sockfd);

struct idservice_stats {
	uint64_t requests, issued, refused;
	/* pushes: sockets noted, dropped (queue full / not TCP / dup failed),
	 * pushed (frames sent), not pushed (connector not verified, no tuple
	 * within the wait, the channel gone) */
	uint64_t push_noted, push_dropped, pushed, push_failed;
	uint64_t push_cached; /* from the per-process cache (pushed from the loop when the connect had completed) */
	/* answers whose chain was re-proved from pinned processes instead of
	 * walked: the same process again (subject) or a new child of a
	 * pinned parent (parent) */
	uint64_t chain_subject_hits, chain_parent_hits;
	uint64_t renewals; /* certificates renewed since start */
};
void idservice_get_stats(const struct idservice *s, struct idservice_stats *out);
