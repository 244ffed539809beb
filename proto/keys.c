#include "proto/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define PUB_HEADER "tether-provisioning-public-v1"
#define SEC_HEADER "tether-provisioning-secret-v1"

static const char *domain_label(enum sign_domain d)
{
	switch (d) {
	case SIGN_DOMAIN_CONTEXT: return "tether-context-v1";
	case SIGN_DOMAIN_CERTIFICATE: return "tether-anchor-cert-v1";
	case SIGN_DOMAIN_CLOCK: return "tether-clock-v1";
	case SIGN_DOMAIN_MAC_KX: return "tether-mac-kx-v1";
	}
	return "tether-invalid-domain";
}

int proto_crypto_init(void) { return sodium_init() < 0 ? -EIO : 0; }

static struct sign_key *key_alloc(void)
{
	if (proto_crypto_init() < 0)
		return NULL;
	struct sign_key *k = sodium_malloc(sizeof(*k));
	if (k)
		sodium_mlock(k, sizeof(*k)); /* sodium_malloc already locks; be explicit */
	return k;
}

int sign_key_generate(struct sign_key **out)
{
	struct sign_key *k = key_alloc();
	if (!k)
		return -ENOMEM;
	crypto_sign_keypair(k->pk, k->sk);
	key_id_compute(k->pk, k->id);
	*out = k;
	return 0;
}

int sign_key_from_seed(const uint8_t seed[32], struct sign_key **out)
{
	struct sign_key *k = key_alloc();
	if (!k)
		return -ENOMEM;
	crypto_sign_seed_keypair(k->pk, k->sk, seed);
	key_id_compute(k->pk, k->id);
	*out = k;
	return 0;
}

void sign_key_free(struct sign_key *k)
{
	if (!k)
		return;
	sodium_memzero(k, sizeof(*k));
	sodium_munlock(k, sizeof(*k));
	sodium_free(k);
}

void sign_key_freep(struct sign_key **k) { sign_key_free(*k); }

void sign_key_public(const struct sign_key *k, struct pub_key *out)
{
	memcpy(out->pk, k->pk, sizeof(out->pk));
	memcpy(out->id, k->id, sizeof(out->id));
}

void key_id_compute(const uint8_t pk[PROTO_PUBKEY_LEN], uint8_t id[PROTO_KEY_ID_LEN])
{
	crypto_generichash(id, PROTO_KEY_ID_LEN, pk, PROTO_PUBKEY_LEN, NULL, 0);
}

void key_id_hex(const uint8_t id[PROTO_KEY_ID_LEN], char out[PROTO_KEY_ID_HEX])
{
	hex_encode(id, PROTO_KEY_ID_LEN, out);
}

void pub_key_from_bytes(const uint8_t pk[PROTO_PUBKEY_LEN], struct pub_key *out)
{
	memcpy(out->pk, pk, PROTO_PUBKEY_LEN);
	key_id_compute(out->pk, out->id);
}

/* Plain Ed25519 (not the prehashed multi-part API) needs label||msg
 * contiguous: a stack buffer for small messages, the heap otherwise. */
static uint8_t *with_label(enum sign_domain d, const uint8_t *msg, size_t len, uint8_t *stackbuf,
			   size_t stacksize, size_t *total)
{
	const char *label = domain_label(d);
	size_t ll = strlen(label) + 1;
	*total = ll + len;
	uint8_t *b = *total <= stacksize ? stackbuf : malloc(*total);
	if (!b)
		return NULL;
	memcpy(b, label, ll);
	if (len)
		memcpy(b + ll, msg, len);
	return b;
}

void sign_detached(const struct sign_key *k, enum sign_domain d, const uint8_t *msg, size_t len,
		   uint8_t sig[PROTO_SIG_LEN])
{
	uint8_t stackbuf[4096];
	size_t total;
	uint8_t *b = with_label(d, msg, len, stackbuf, sizeof(stackbuf), &total);
	if (!b) {
		/* Out of memory: emit a signature nobody accepts. */
		memset(sig, 0, PROTO_SIG_LEN);
		return;
	}
	crypto_sign_detached(sig, NULL, b, total, k->sk);
	if (b != stackbuf)
		free(b);
}

bool verify_detached(const struct pub_key *k, enum sign_domain d, const uint8_t *msg, size_t len,
		     const uint8_t sig[PROTO_SIG_LEN])
{
	if (proto_crypto_init() < 0)
		return false;
	uint8_t stackbuf[4096];
	size_t total;
	uint8_t *b = with_label(d, msg, len, stackbuf, sizeof(stackbuf), &total);
	if (!b)
		return false;
	bool ok = crypto_sign_verify_detached(sig, b, total, k->pk) == 0;
	if (b != stackbuf)
		free(b);
	return ok;
}

static int write_key_file(int dirfd, const char *name, mode_t mode, const char *header,
			  const uint8_t *bytes)
{
	char hex[65];
	char line[128];
	hex_encode(bytes, 32, hex);
	int n = snprintf(line, sizeof(line), "%s\n%s\n", header, hex);
	sodium_memzero(hex, sizeof(hex));
	_cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0) {
		sodium_memzero(line, sizeof(line));
		return -errno;
	}
	int r = 0;
	if (fchmod(fd, mode) < 0 || write(fd, line, (size_t)n) != n || fsync(fd) < 0)
		r = errno ? -errno : -EIO;
	sodium_memzero(line, sizeof(line));
	return r;
}

int provkey_write_files(const char *dir, uint8_t id_out[PROTO_KEY_ID_LEN])
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	struct stat st;
	if (fstatat(dfd, "provisioning.key", &st, AT_SYMLINK_NOFOLLOW) == 0 ||
	    fstatat(dfd, "provisioning.pub", &st, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;
	if (proto_crypto_init() < 0)
		return -EIO;
	uint8_t *seed = sodium_malloc(32);
	if (!seed)
		return -ENOMEM;
	randombytes_buf(seed, 32);
	struct sign_key *k = NULL;
	int r = sign_key_from_seed(seed, &k);
	if (r == 0)
		r = write_key_file(dfd, "provisioning.key", 0600, SEC_HEADER, seed);
	sodium_free(seed);
	if (r == 0) {
		r = write_key_file(dfd, "provisioning.pub", 0644, PUB_HEADER, k->pk);
		if (r < 0)
			unlinkat(dfd, "provisioning.key", 0);
	}
	if (r == 0 && id_out)
		memcpy(id_out, k->id, PROTO_KEY_ID_LEN);
	sign_key_free(k);
	return r;
}

/* Read "<header>\n<64 hex>\n" into 32 bytes. */
static int read_key_file(const char *path, const char *header, bool secret, uint8_t out[32])
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EPERM;
	if (secret && (st.st_mode & 077))
		return -EPERM;
	char buf[256];
	/* Read from the fd that was checked, so the file checked is the file read. */
	size_t off = 0;
	for (;;) {
		if (off + 1 >= sizeof(buf)) {
			sodium_memzero(buf, sizeof(buf));
			return -EBADMSG;
		}
		ssize_t k = pread(fd, buf + off, sizeof(buf) - 1 - off, (off_t)off);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
		off += (size_t)k;
	}
	buf[off] = '\0';
	size_t hl = strlen(header);
	int r = -EBADMSG;
	if (off == hl + 1 + 64 + 1 && strncmp(buf, header, hl) == 0 && buf[hl] == '\n' &&
	    buf[hl + 65] == '\n') {
		buf[hl + 65] = '\0';
		r = hex_decode(buf + hl + 1, out, 32) < 0 ? -EBADMSG : 0;
	}
	sodium_memzero(buf, sizeof(buf));
	return r;
}

int provkey_load_secret(const char *path, struct sign_key **out)
{
	if (proto_crypto_init() < 0)
		return -EIO;
	uint8_t *seed = sodium_malloc(32);
	if (!seed)
		return -ENOMEM;
	int r = read_key_file(path, SEC_HEADER, true, seed);
	if (r == 0)
		r = sign_key_from_seed(seed, out);
	sodium_free(seed);
	return r;
}

int provkey_load_public(const char *path, struct pub_key *out)
{
	uint8_t pk[32];
	int r = read_key_file(path, PUB_HEADER, false, pk);
	if (r < 0)
		return r;
	pub_key_from_bytes(pk, out);
	return 0;
}
