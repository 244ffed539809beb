#include "policy/trust_bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define TRUST_BUNDLE_MAX (8u << 20)

const char *const trust_bundle_vars[] = {
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT",
	"CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "npm_config_cafile", NULL,
};

bool trust_bundle_var(const char *name)
{
	for (size_t i = 0; trust_bundle_vars[i]; i++)
		if (strcmp(name, trust_bundle_vars[i]) == 0)
			return true;
	return false;
}

int trust_bundle_check(const char *path, char *err, size_t err_size)
{
	if (!path || path[0] != '/')
		return err_set(err, err_size, -EINVAL, "trust bundle '%s': not an absolute path", path ? path : "");
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return err_set(err, err_size, -errno, "trust bundle %s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > TRUST_BUNDLE_MAX) {
		close(fd);
		return err_set(err, err_size, -EINVAL, "trust bundle %s: not a regular file of at most %u bytes", path,
			    TRUST_BUNDLE_MAX);
	}
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = 0;
	BIO *bio = BIO_new_mem_buf(buf, (int)got);
	if (!bio) {
		free(buf);
		return -ENOMEM;
	}
	int certs = 0, rc = 0;
	ERR_clear_error();
	for (;;) {
		X509 *x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
		if (!x)
			break;
		X509_free(x);
		certs++;
	}
	unsigned long e = ERR_peek_last_error();
	bool at_end = ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE;
	if (e && !at_end) {
		char why[256];
		ERR_error_string_n(e, why, sizeof(why));
		rc = err_set(err, err_size, -EINVAL, "trust bundle %s: certificate %d does not parse (%s)", path,
			  certs + 1, why);
	} else if (certs == 0) {
		rc = err_set(err, err_size, -EINVAL, "trust bundle %s: no PEM certificate in it "
			  "(expected -----BEGIN CERTIFICATE----- blocks)", path);
	} else if (strstr(buf, "PRIVATE KEY-----")) {
		/* a key beside the CAs would be handed to every client that reads the file */
		rc = err_set(err, err_size, -EINVAL, "trust bundle %s: holds a private key; give the CA "
			  "certificates only", path);
	}
	ERR_clear_error();
	BIO_free(bio);
	free(buf);
	return rc < 0 ? rc : certs;
}

int trust_bundle_env(const char *path, int (*put)(void *ctx, const char *name, const char *value), void *ctx)
{
	for (size_t i = 0; trust_bundle_vars[i]; i++) {
		int r = put(ctx, trust_bundle_vars[i], path);
		if (r < 0)
			return r;
	}
	return 0;
}
