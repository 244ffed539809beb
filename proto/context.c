#include "proto/context.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"
#include "identity.pb-c.h"
#include "proto/pbutil.h"
#include "proto/procref_wire.h"

static const char *const topology_words[] = {
	[PROTO_TOPOLOGY_COMBINED] = "combined",
	[PROTO_TOPOLOGY_SHARED_PID] = "shared-pid",
	[PROTO_TOPOLOGY_VM] = "vm",
	[PROTO_TOPOLOGY_SPLIT] = "split",
};

const char *proto_topology_word(enum proto_topology t)
{
	if ((unsigned)t >= ARRAY_SIZE(topology_words))
		return NULL;
	return topology_words[t];
}

int proto_topology_from_word(const char *w, enum proto_topology *out)
{
	for (unsigned i = 1; i < ARRAY_SIZE(topology_words); i++)
		if (w && strcmp(w, topology_words[i]) == 0) {
			*out = (enum proto_topology)i;
			return 0;
		}
	return -EINVAL;
}

const char *identity_source_word(enum identity_source s)
{
	switch (s) {
	case IDENTITY_SOURCE_LOCAL_PROCFS:
		return "local_procfs";
	case IDENTITY_SOURCE_DELEGATED:
		return "delegated";
	}
	return NULL;
}

static bool topology_valid(int t) { return t >= PROTO_TOPOLOGY_COMBINED && t <= PROTO_TOPOLOGY_SPLIT; }
static bool source_valid(int s)
{
	return s == IDENTITY_SOURCE_LOCAL_PROCFS || s == IDENTITY_SOURCE_DELEGATED;
}

int context_encode(const struct context_input *in, uint8_t **out, size_t *out_len)
{
	if (!in->subject || !in->anchor || !in->tuple || !in->nonce ||
	    in->n_ancestors > PROTO_MAX_ANCESTORS || (in->n_ancestors && !in->ancestors) ||
	    !topology_valid(in->topology) || !source_valid(in->source))
		return -EINVAL;

	struct pb_procref_buf subject, nsref, anchor;
	_cleanup_free_ struct pb_procref_buf *anc = NULL;
	_cleanup_free_ Tether__ProcessRef **anc_ptrs = NULL;
	if (in->n_ancestors) {
		anc = calloc(in->n_ancestors, sizeof(*anc));
		anc_ptrs = calloc(in->n_ancestors, sizeof(*anc_ptrs));
		if (!anc || !anc_ptrs)
			return -ENOMEM;
	}
	Tether__ProcessIdentityContext m = TETHER__PROCESS_IDENTITY_CONTEXT__INIT;
	Tether__FlowTuple tuple;
	m.version_major = PROTO_VERSION_MAJOR;
	m.version_minor = PROTO_VERSION_MINOR;
	m.topology = (Tether__Topology)in->topology;
	m.source = (Tether__IdentitySource)in->source;
	procref_to_pb(in->subject, &subject);
	m.subject = &subject.ref;
	for (size_t i = 0; i < in->n_ancestors; i++) {
		procref_to_pb(&in->ancestors[i], &anc[i]);
		anc_ptrs[i] = &anc[i].ref;
	}
	m.n_ancestors = in->n_ancestors;
	m.ancestors = anc_ptrs;
	if (in->namespace_reference) {
		procref_to_pb(in->namespace_reference, &nsref);
		m.namespace_reference = &nsref.ref;
	}
	procref_to_pb(in->anchor, &anchor);
	m.process_trust_anchor = &anchor.ref;
	proto_tuple_to_pb(in->tuple, &tuple);
	m.tuple = &tuple;
	m.socket_cookie = in->socket_cookie;
	m.nonce.data = (uint8_t *)in->nonce;
	m.nonce.len = PROTO_NONCE_LEN;
	m.request_id = in->request_id;
	m.issued_at_ns = in->issued_at_ns ? in->issued_at_ns : now_real_ns();
	m.expires_at_ns = m.issued_at_ns + (in->lifetime_ns ? in->lifetime_ns : PROTO_DEFAULT_LIFETIME_NS);
	m.policy_generation = in->policy_generation;

	size_t n = tether__process_identity_context__get_packed_size(&m);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return -ENOMEM;
	*out_len = tether__process_identity_context__pack(&m, buf);
	*out = buf;
	return 0;
}

void context_free(struct identity_context *c)
{
	if (!c)
		return;
	free(c->ancestors);
	free(c);
}

static int decode_into(const Tether__ProcessIdentityContext *m, struct identity_context *c)
{
	if (m->version_major != PROTO_VERSION_MAJOR)
		return -EPROTONOSUPPORT;
	if (!pb_unknown_fields_ok(&m->base, m->version_minor))
		return -EBADMSG;
	c->version_major = m->version_major;
	c->version_minor = m->version_minor;
	if (!topology_valid(m->topology) || !source_valid(m->source))
		return -EBADMSG;
	c->topology = (enum proto_topology)m->topology;
	c->source = (enum identity_source)m->source;
	if (procref_from_pb(m->subject, &c->subject) < 0)
		return -EBADMSG;
	if (m->n_ancestors > PROTO_MAX_ANCESTORS)
		return -EBADMSG;
	if (m->n_ancestors) {
		c->ancestors = calloc(m->n_ancestors, sizeof(*c->ancestors));
		if (!c->ancestors)
			return -ENOMEM;
		for (size_t i = 0; i < m->n_ancestors; i++)
			if (procref_from_pb(m->ancestors[i], &c->ancestors[i]) < 0)
				return -EBADMSG;
	}
	c->n_ancestors = m->n_ancestors;
	if (m->namespace_reference) {
		if (procref_from_pb(m->namespace_reference, &c->namespace_reference) < 0)
			return -EBADMSG;
		c->has_namespace_reference = true;
	}
	if (procref_from_pb(m->process_trust_anchor, &c->anchor) < 0)
		return -EBADMSG;
	if (proto_tuple_from_pb(m->tuple, &c->tuple) < 0)
		return -EBADMSG;
	c->socket_cookie = m->socket_cookie;
	if (m->nonce.len != PROTO_NONCE_LEN)
		return -EBADMSG;
	memcpy(c->nonce, m->nonce.data, PROTO_NONCE_LEN);
	c->request_id = m->request_id;
	if (m->issued_at_ns == 0 || m->expires_at_ns <= m->issued_at_ns)
		return -EBADMSG;
	c->issued_at_ns = m->issued_at_ns;
	c->expires_at_ns = m->expires_at_ns;
	c->policy_generation = m->policy_generation;
	return 0;
}

int context_decode(const uint8_t *buf, size_t len, struct identity_context **out)
{
	Tether__ProcessIdentityContext *m = tether__process_identity_context__unpack(NULL, len, buf);
	if (!m)
		return -EBADMSG;
	struct identity_context *c = calloc(1, sizeof(*c));
	if (!c) {
		tether__process_identity_context__free_unpacked(m, NULL);
		return -ENOMEM;
	}
	int r = decode_into(m, c);
	tether__process_identity_context__free_unpacked(m, NULL);
	if (r < 0) {
		context_free(c);
		return r;
	}
	*out = c;
	return 0;
}
