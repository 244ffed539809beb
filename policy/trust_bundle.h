/* The TLS trust bundle of the workload: one PEM file of CA certificates
 * (policy `environment.trust_bundle`) that every common client is pointed
 * at through its own variable, so they all trust the same CAs: OpenSSL
 * (SSL_CERT_FILE), Python requests (REQUESTS_CA_BUNDLE), Node
 * (NODE_EXTRA_CA_CERTS), pip (PIP_CERT), curl (CURL_CA_BUNDLE), git
 * (GIT_SSL_CAINFO) and npm (npm_config_cafile).
 *
 * Reusable on purpose: whatever hands the workload a bundle (the policy
 * today, a TLS-inspecting proxy's own CA later) checks it with
 * trust_bundle_check() and sets it with trust_bundle_env(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The variables trust_bundle_env() sets, NULL-terminated. */
extern const char *const trust_bundle_vars[];

/* True when name is one of trust_bundle_vars (exact, case-sensitive). */
bool trust_bundle_var(const char *name);

/* The file at path can be a trust bundle: an absolute path to a readable
 * regular file of at most 8 MiB holding at least one PEM certificate
 * (OpenSSL parses every certificate in it) and nothing PEM that is not one.
 * The number of certificates, or -errno with a sentence in err. */
int trust_bundle_check(const char *path, char *err, size_t err_size);

/* Call put(ctx, NAME, path) for every trust_bundle_vars entry, in order;
 * stops at (and returns) the first negative result, else 0. */
int trust_bundle_env(const char *path, int (*put)(void *ctx, const char *name, const char *value), void *ctx);
