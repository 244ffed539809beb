#include "net-supervisor/tls_ca.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/log.h"
#include "common/netaddr.h"
#include "common/util.h"

#define CA_DAYS 30
#define LEAF_DAYS 7

struct leaf {
	char *host;
	SSL_CTX *ctx;
	unsigned long long used; /* tick of the last lookup: LRU */
};

struct tls_ca {
	EVP_PKEY *ca_key, *leaf_key;
	X509 *ca_cert;
	char *ca_pem;
	struct leaf *leaves;
	size_t n, max;
	unsigned long long tick, minted, hits;
	pthread_mutex_t lock; /* the leaf cache: every worker's loop mints and looks up */
};

static void log_ssl(const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[256] = "unknown error";
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	log_error("tls ca: %s: %s", what, buf);
}

static EVP_PKEY *p256_key(void) { return EVP_EC_gen("P-256"); }

static int random_serial(X509 *x)
{
	unsigned char b[16];
	if (RAND_bytes(b, sizeof(b)) != 1)
		return -1;
	b[0] &= 0x7f; /* positive */
	BIGNUM *bn = BN_bin2bn(b, sizeof(b), NULL);
	int ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
	BN_free(bn);
	return ok ? 0 : -1;
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
	X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (!ex)
		return -1;
	int ok = X509_add_ext(cert, ex, -1);
	X509_EXTENSION_free(ex);
	return ok ? 0 : -1;
}

/* A certificate for key, subject CN cn, signed by (issuer, issuer_key); a
 * self-signed one when issuer is NULL. */
static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, int days)
{
	X509 *x = X509_new();
	if (!x)
		return NULL;
	X509_NAME *name = X509_NAME_new();
	bool ok = name && X509_set_version(x, 2) && random_serial(x) == 0 &&
		  X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
		  X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400) && X509_set_pubkey(x, key) &&
		  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"tether sandbox",
					     -1, -1, 0) &&
		  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) &&
		  X509_set_subject_name(x, name) &&
		  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
	X509_NAME_free(name);
	if (!ok) {
		X509_free(x);
		return NULL;
	}
	X509 *iss = issuer ? issuer : x;
	if (!issuer) {
		ok = add_ext(x, iss, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") == 0 &&
		     add_ext(x, iss, NID_key_usage, "critical,keyCertSign,cRLSign") == 0 &&
		     add_ext(x, iss, NID_subject_key_identifier, "hash") == 0;
	} else {
		char san[300];
		struct netaddr a;
		snprintf(san, sizeof(san), "%s:%s", netaddr_parse(cn, &a) == 0 ? "IP" : "DNS", cn);
		ok = add_ext(x, iss, NID_basic_constraints, "critical,CA:FALSE") == 0 &&
		     add_ext(x, iss, NID_key_usage, "critical,digitalSignature") == 0 &&
		     add_ext(x, iss, NID_ext_key_usage, "serverAuth") == 0 &&
		     add_ext(x, iss, NID_authority_key_identifier, "keyid:always") == 0 &&
		     add_ext(x, iss, NID_subject_alt_name, san) == 0;
	}
	if (!ok || !X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256())) {
		X509_free(x);
		return NULL;
	}
	return x;
}

int tls_ca_new(size_t cache_max, struct tls_ca **out)
{
	struct tls_ca *ca = calloc(1, sizeof(*ca));
	if (!ca)
		return -ENOMEM;
	ca->max = cache_max ? cache_max : 256;
	pthread_mutex_init(&ca->lock, NULL);
	ca->leaves = calloc(ca->max, sizeof(*ca->leaves));
	if (!ca->leaves) {
		free(ca);
		return -ENOMEM;
	}
	char cn[64];
	unsigned char id[4];
	RAND_bytes(id, sizeof(id));
	snprintf(cn, sizeof(cn), "tether sandbox CA %02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
	ca->ca_key = p256_key();
	ca->leaf_key = p256_key();
	if (!ca->ca_key || !ca->leaf_key || !(ca->ca_cert = make_cert(ca->ca_key, cn, NULL, NULL, CA_DAYS))) {
		log_ssl("cannot make the sandbox CA");
		tls_ca_free(ca);
		return -EIO;
	}
	BIO *b = BIO_new(BIO_s_mem());
	char *p = NULL;
	long n = 0;
	if (b && PEM_write_bio_X509(b, ca->ca_cert))
		n = BIO_get_mem_data(b, &p);
	if (n > 0)
		ca->ca_pem = strndup(p, (size_t)n);
	BIO_free(b);
	if (!ca->ca_pem) {
		tls_ca_free(ca);
		return -ENOMEM;
	}
	*out = ca;
	return 0;
}

void tls_ca_free(struct tls_ca *ca)
{
	if (!ca)
		return;
	for (size_t i = 0; i < ca->n; i++) {
		free(ca->leaves[i].host);
		SSL_CTX_free(ca->leaves[i].ctx);
	}
	free(ca->leaves);
	EVP_PKEY_free(ca->ca_key);
	EVP_PKEY_free(ca->leaf_key);
	X509_free(ca->ca_cert);
	free(ca->ca_pem);
	pthread_mutex_destroy(&ca->lock);
	free(ca);
}

const char *tls_ca_cert_pem(const struct tls_ca *ca) { return ca->ca_pem; }

int tls_ca_write(const struct tls_ca *ca, const char *path, const char *system_bundle)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	int r = 0;
	if (system_bundle) {
		_cleanup_close_ int in = open(system_bundle, O_RDONLY | O_CLOEXEC);
		if (in < 0)
			r = -errno;
		char buf[65536];
		ssize_t n;
		while (r == 0 && (n = read(in, buf, sizeof(buf))) != 0) {
			if (n < 0) {
				if (errno != EINTR)
					r = -errno;
				continue;
			}
			r = write_all(fd, buf, (size_t)n);
		}
		if (r == 0)
			r = write_all(fd, "\n", 1);
	}
	if (r == 0)
		r = write_all(fd, ca->ca_pem, strlen(ca->ca_pem));
	if (r == 0 && fchmod(fd, 0644) < 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
		       unsigned int inlen, void *arg)
{
	(void)arg;
	static const unsigned char h1[] = { 8, 'h', 't', 't', 'p', '/', '1', '.', '1' };
	const struct tls_ca_alpn *a = SSL_get_app_data(ssl);
	const unsigned char *ours = a ? a->proto : h1;
	unsigned ours_len = a ? (unsigned)a->len : sizeof(h1);
	unsigned char *sel = NULL;
	if (ours_len == 0 || SSL_select_next_proto(&sel, outlen, ours, ours_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

void tls_ca_set_alpn(SSL *ssl, const struct tls_ca_alpn *a) { SSL_set_app_data(ssl, (void *)a); }

static SSL_CTX *mint(struct tls_ca *ca, const char *host)
{
	X509 *leaf = make_cert(ca->leaf_key, host, ca->ca_cert, ca->ca_key, LEAF_DAYS);
	SSL_CTX *ctx = leaf ? SSL_CTX_new(TLS_server_method()) : NULL;
	bool ok = ctx && SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) &&
		  SSL_CTX_use_certificate(ctx, leaf) == 1 && SSL_CTX_use_PrivateKey(ctx, ca->leaf_key) == 1 &&
		  SSL_CTX_add1_chain_cert(ctx, ca->ca_cert) == 1;
	X509_free(leaf);
	if (!ok) {
		log_ssl("cannot mint a leaf certificate");
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(ctx, 0);
	ca->minted++;
	return ctx;
}

static SSL_CTX *server_ctx_locked(struct tls_ca *ca, const char *host);

SSL_CTX *tls_ca_server_ctx(struct tls_ca *ca, const char *host)
{
	if (!host || !host[0])
		return NULL;
	pthread_mutex_lock(&ca->lock);
	SSL_CTX *ctx = server_ctx_locked(ca, host);
	pthread_mutex_unlock(&ca->lock);
	return ctx;
}

static SSL_CTX *server_ctx_locked(struct tls_ca *ca, const char *host)
{
	ca->tick++;
	for (size_t i = 0; i < ca->n; i++)
		if (strcmp(ca->leaves[i].host, host) == 0) {
			ca->leaves[i].used = ca->tick;
			ca->hits++;
			SSL_CTX_up_ref(ca->leaves[i].ctx);
			return ca->leaves[i].ctx;
		}
	SSL_CTX *ctx = mint(ca, host);
	char *h = ctx ? strdup(host) : NULL;
	if (!h) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	size_t slot = ca->n;
	if (ca->n == ca->max) {
		slot = 0;
		for (size_t i = 1; i < ca->n; i++)
			if (ca->leaves[i].used < ca->leaves[slot].used)
				slot = i;
		free(ca->leaves[slot].host);
		SSL_CTX_free(ca->leaves[slot].ctx);
	} else {
		ca->n++;
	}
	ca->leaves[slot] = (struct leaf){ .host = h, .ctx = ctx, .used = ca->tick };
	SSL_CTX_up_ref(ctx);
	return ctx;
}

void tls_ca_stats(const struct tls_ca *ca, unsigned long long *minted, unsigned long long *hits)
{
	pthread_mutex_lock((pthread_mutex_t *)&ca->lock);
	*minted = ca->minted;
	*hits = ca->hits;
	pthread_mutex_unlock((pthread_mutex_t *)&ca->lock);
}
