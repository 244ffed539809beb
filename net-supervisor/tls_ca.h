/* The sandbox's own certificate authority, for TLS inspection
 * (tls_inspect.h; docs/network-policy.md, `tls: inspect`).
 *
 * One CA per net-supervisor, made at its start: an ECDSA P-256 key that
 * lives only in this process's memory (never written, never logged) and a
 * self-signed certificate (CA:TRUE, pathlen 0, keyCertSign, valid from an
 * hour ago for 30 days). The certificate, and a bundle of it after the
 * system CAs, are written where the launcher hands them to the workload
 * (the trust-bundle variables, policy/trust_bundle.h).
 *
 * Leaf certificates are minted per server name (a DNS name gets a DNS
 * SAN, an address an IP SAN), signed by the CA, all on one P-256 leaf key
 * made at start, valid 7 days, and cached as ready server SSL_CTXs: at most
 * cache_max names, least recently used evicted. Thread-safe: every
 * worker's loop (--workers) shares the one CA and its leaf cache (a lock;
 * the returned SSL_CTX is the caller's reference). */
#pragma once

#include <stddef.h>
#include <openssl/ssl.h>

struct tls_ca;

/* A new CA and leaf key; cache_max names at most (0: 256). 0 or -errno
 * (-ENOMEM, -EIO when OpenSSL refuses; logged). */
int tls_ca_new(size_t cache_max, struct tls_ca **out);
void tls_ca_free(struct tls_ca *ca);

/* The CA certificate as PEM (NUL-terminated, owned by ca). */
const char *tls_ca_cert_pem(const struct tls_ca *ca);

/* Write the CA certificate (system_bundle NULL) or system_bundle's
 * certificates followed by it to path: a new file written beside it, then
 * renamed over it (mode 0644: the workload reads it). 0 or -errno. */
int tls_ca_write(const struct tls_ca *ca, const char *path, const char *system_bundle);

/* The protocol a client session is to be given (tls_ca_set_alpn): wire
 * format (a length byte, then the name), len 0 for none. */
struct tls_ca_alpn {
	unsigned char proto[16];
	size_t len;
};

/* What the server session ssl selects by ALPN: a->proto when the client
 * offers it, else none (a->len 0: none, as a server that speaks no ALPN).
 * a is not copied: it must live as long as ssl. Without this call a
 * session selects http/1.1 when the client offers it, else none. */
void tls_ca_set_alpn(SSL *ssl, const struct tls_ca_alpn *a);

/* A server SSL_CTX whose certificate names host (a DNS name or an IP
 * literal, as the client named it), minted or from the cache; ALPN: see
 * tls_ca_set_alpn. The caller owns
 * one reference (SSL_CTX_free). NULL when host is empty or minting failed
 * (logged). */
SSL_CTX *tls_ca_server_ctx(struct tls_ca *ca, const char *host);

/* How many leaf certificates were minted, and how many lookups the cache
 * answered (metrics, tests). */
void tls_ca_stats(const struct tls_ca *ca, unsigned long long *minted, unsigned long long *hits);
