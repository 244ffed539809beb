/* The sandbox CA (net-supervisor/tls_ca.h): a P-256 CA certificate with
 * CA:TRUE pathlen 0; leaves minted per name that verify against it for
 * that name only (DNS and IP SANs); the cache answers repeats, stays
 * bounded and evicts the least recently used; the written files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "net-supervisor/tls_ca.h"

static X509 *ca_cert(const struct tls_ca *ca)
{
	BIO *b = BIO_new_mem_buf(tls_ca_cert_pem(ca), -1);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	BIO_free(b);
	return x;
}

/* Does ctx's leaf verify against ca for name (a host or an IP)? */
static bool verifies(const struct tls_ca *ca, SSL_CTX *ctx, const char *name, bool ip)
{
	X509 *leaf = SSL_CTX_get0_certificate(ctx);
	X509 *root = ca_cert(ca);
	X509_STORE *st = X509_STORE_new();
	X509_STORE_add_cert(st, root);
	X509_STORE_CTX *v = X509_STORE_CTX_new();
	X509_STORE_CTX_init(v, st, leaf, NULL);
	X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(v);
	if (ip)
		X509_VERIFY_PARAM_set1_ip_asc(p, name);
	else
		X509_VERIFY_PARAM_set1_host(p, name, 0);
	X509_VERIFY_PARAM_set_purpose(p, X509_PURPOSE_SSL_SERVER);
	bool ok = X509_verify_cert(v) == 1;
	X509_STORE_CTX_free(v);
	X509_STORE_free(st);
	X509_free(root);
	return ok;
}

static void test_ca_and_leaves(void **state)
{
	(void)state;
	struct tls_ca *ca;
	assert_int_equal(tls_ca_new(4, &ca), 0);
	X509 *root = ca_cert(ca);
	assert_non_null(root);
	assert_int_equal(X509_check_ca(root), 1);
	EVP_PKEY *pk = X509_get0_pubkey(root);
	assert_int_equal(EVP_PKEY_get_bits(pk), 256);
	assert_int_equal(X509_get_pathlen(root), 0);
	X509_free(root);
	assert_null(strstr(tls_ca_cert_pem(ca), "PRIVATE"));

	SSL_CTX *a = tls_ca_server_ctx(ca, "api.example.com");
	assert_non_null(a);
	assert_true(verifies(ca, a, "api.example.com", false));
	assert_false(verifies(ca, a, "other.example.com", false));
	SSL_CTX *ip = tls_ca_server_ctx(ca, "198.51.100.10");
	assert_true(verifies(ca, ip, "198.51.100.10", true));
	assert_false(verifies(ca, ip, "198.51.100.11", true));
	/* another CA's leaves do not verify against this one */
	struct tls_ca *other;
	assert_int_equal(tls_ca_new(0, &other), 0);
	SSL_CTX *o = tls_ca_server_ctx(other, "api.example.com");
	assert_false(verifies(ca, o, "api.example.com", false));
	SSL_CTX_free(o);
	tls_ca_free(other);

	unsigned long long minted, hits;
	SSL_CTX *again = tls_ca_server_ctx(ca, "api.example.com");
	assert_ptr_equal(again, a);
	tls_ca_stats(ca, &minted, &hits);
	assert_int_equal(minted, 2);
	assert_int_equal(hits, 1);
	SSL_CTX_free(again);
	/* bounded: 4 names; a fifth evicts the least recently used (the IP) */
	const char *more[] = { "b.example", "c.example", "d.example" };
	for (size_t i = 0; i < 3; i++)
		SSL_CTX_free(tls_ca_server_ctx(ca, more[i]));
	SSL_CTX_free(tls_ca_server_ctx(ca, "api.example.com")); /* now the most recent */
	tls_ca_stats(ca, &minted, &hits);
	assert_int_equal(minted, 5);
	SSL_CTX *ip2 = tls_ca_server_ctx(ca, "198.51.100.10"); /* was evicted: minted again */
	tls_ca_stats(ca, &minted, &hits);
	assert_int_equal(minted, 6);
	assert_ptr_not_equal(ip2, ip);
	SSL_CTX *a2 = tls_ca_server_ctx(ca, "api.example.com");
	assert_ptr_equal(a2, a); /* still cached */
	/* references the caller holds outlive the cache */
	SSL_CTX_free(a2);
	SSL_CTX_free(ip2);
	SSL_CTX_free(ip);
	assert_null(tls_ca_server_ctx(ca, ""));
	tls_ca_free(ca);
	SSL_CTX_free(a);
}

static void test_write(void **state)
{
	(void)state;
	struct tls_ca *ca;
	assert_int_equal(tls_ca_new(0, &ca), 0);
	char dir[] = "/tmp/tether-tlsca-XXXXXX", sys[64], out[64], bundle[64];
	assert_non_null(mkdtemp(dir));
	snprintf(sys, sizeof(sys), "%s/sys.pem", dir);
	snprintf(out, sizeof(out), "%s/ca.pem", dir);
	snprintf(bundle, sizeof(bundle), "%s/bundle.pem", dir);
	FILE *f = fopen(sys, "w");
	fputs("-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----", f);
	fclose(f);
	assert_int_equal(tls_ca_write(ca, out, NULL), 0);
	assert_int_equal(tls_ca_write(ca, bundle, sys), 0);
	char buf[8192] = { 0 };
	f = fopen(bundle, "r");
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	assert_true(n > 0);
	assert_memory_equal(buf, "-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----\n", 61);
	assert_string_equal(buf + 61, tls_ca_cert_pem(ca));
	assert_int_equal(tls_ca_write(ca, bundle, "/nonexistent/ca.pem"), -ENOENT);
	unlink(sys);
	unlink(out);
	unlink(bundle);
	rmdir(dir);
	tls_ca_free(ca);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ca_and_leaves),
		cmocka_unit_test(test_write),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
