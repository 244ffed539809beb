#include "proto/cert.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "identity.pb-c.h"
#include "proto/pbutil.h"
#include "proto/procref_wire.h"

int pidns_id_of_pid(pid_t pid, struct pidns_id *out)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	if (stat(path, &st) < 0)
		return -errno;
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	return 0;
}

int cert_issue(const struct sign_key *prov, const struct cert_input *in, struct signed_cert *out)
{
	memset(out, 0, sizeof(*out));
	if (!in->instance || !in->anchor || in->pidns.ino == 0 ||
	    in->topology < PROTO_TOPOLOGY_COMBINED || in->topology > PROTO_TOPOLOGY_SPLIT)
		return -EINVAL;
	const char *boot = in->boot_id ? in->boot_id : in->anchor->boot_id;
	if (!boot_id_valid(boot))
		return -EINVAL;
	Tether__AnchorCertificate m = TETHER__ANCHOR_CERTIFICATE__INIT;
	Tether__PidNamespace ns = TETHER__PID_NAMESPACE__INIT;
	struct pb_procref_buf anchor;
	m.version_major = PROTO_VERSION_MAJOR;
	m.version_minor = PROTO_VERSION_MINOR;
	m.instance_public_key.data = (uint8_t *)in->instance->pk;
	m.instance_public_key.len = PROTO_PUBKEY_LEN;
	procref_to_pb(in->anchor, &anchor);
	m.anchor = &anchor.ref;
	m.boot_id = (char *)boot;
	ns.dev = in->pidns.dev;
	ns.ino = in->pidns.ino;
	m.pid_namespace = &ns;
	m.topology = (Tether__Topology)in->topology;
	m.issued_at_ns = in->issued_at_ns ? in->issued_at_ns : now_real_ns();
	m.not_after_ns = m.issued_at_ns + (in->validity_ns ? in->validity_ns : PROTO_CERT_DEFAULT_VALIDITY_NS);
	m.provisioning_key_id.data = (uint8_t *)prov->id;
	m.provisioning_key_id.len = PROTO_KEY_ID_LEN;

	size_t n = tether__anchor_certificate__get_packed_size(&m);
	out->cert = malloc(n);
	if (!out->cert)
		return -ENOMEM;
	out->cert_len = tether__anchor_certificate__pack(&m, out->cert);
	sign_detached(prov, SIGN_DOMAIN_CERTIFICATE, out->cert, out->cert_len, out->signature);
	return 0;
}

static enum reason decode_cert(const Tether__AnchorCertificate *m, const struct pub_key *signer,
			       struct anchor_cert *c)
{
	const enum reason bad = REASON_ANCHOR_CERTIFICATE_INVALID;
	if (m->version_major != PROTO_VERSION_MAJOR || !pb_unknown_fields_ok(&m->base, m->version_minor))
		return bad;
	c->version_major = m->version_major;
	c->version_minor = m->version_minor;
	if (m->instance_public_key.len != PROTO_PUBKEY_LEN)
		return bad;
	pub_key_from_bytes(m->instance_public_key.data, &c->instance);
	if (procref_from_pb(m->anchor, &c->anchor) < 0)
		return bad;
	if (!boot_id_valid(m->boot_id) || strcmp(m->boot_id, c->anchor.boot_id) != 0)
		return bad;
	memcpy(c->boot_id, m->boot_id, 37);
	if (!m->pid_namespace || m->pid_namespace->ino == 0)
		return bad;
	c->pidns.dev = m->pid_namespace->dev;
	c->pidns.ino = m->pid_namespace->ino;
	if (m->topology < TETHER__TOPOLOGY__TOPOLOGY_COMBINED || m->topology > TETHER__TOPOLOGY__TOPOLOGY_SPLIT)
		return bad;
	c->topology = (enum proto_topology)m->topology;
	if (m->issued_at_ns == 0 || m->not_after_ns <= m->issued_at_ns)
		return bad;
	c->issued_at_ns = m->issued_at_ns;
	c->not_after_ns = m->not_after_ns;
	/* The id inside must name the key that actually signed. */
	if (m->provisioning_key_id.len != PROTO_KEY_ID_LEN ||
	    memcmp(m->provisioning_key_id.data, signer->id, PROTO_KEY_ID_LEN) != 0)
		return bad;
	memcpy(c->provisioning_key_id, signer->id, PROTO_KEY_ID_LEN);
	return REASON_OK;
}

enum reason cert_verify(const struct pub_key *pinned, size_t n_pinned, const struct signed_cert *sc,
			struct anchor_cert *out)
{
	memset(out, 0, sizeof(*out));
	if (!sc->cert || sc->cert_len == 0 || sc->cert_len > PROTO_MAX_SIGNED_LEN)
		return REASON_ANCHOR_CERTIFICATE_INVALID;
	const struct pub_key *signer = NULL;
	for (size_t i = 0; i < n_pinned && !signer; i++)
		if (verify_detached(&pinned[i], SIGN_DOMAIN_CERTIFICATE, sc->cert, sc->cert_len, sc->signature))
			signer = &pinned[i];
	if (!signer)
		return REASON_ANCHOR_CERTIFICATE_INVALID;
	Tether__AnchorCertificate *m = tether__anchor_certificate__unpack(NULL, sc->cert_len, sc->cert);
	if (!m)
		return REASON_ANCHOR_CERTIFICATE_INVALID;
	enum reason r = decode_cert(m, signer, out);
	tether__anchor_certificate__free_unpacked(m, NULL);
	return r;
}

enum reason cert_time_check(const struct anchor_cert *c, uint64_t now_ns, uint64_t skew_ns)
{
	if (now_ns + skew_ns < c->issued_at_ns || now_ns > c->not_after_ns + skew_ns)
		return REASON_ANCHOR_CERTIFICATE_INVALID;
	return REASON_OK;
}
