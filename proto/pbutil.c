#include "proto/pbutil.h"

#include "proto/version.h"

bool pb_has_unknown_fields(const ProtobufCMessage *m)
{
	if (!m)
		return false;
	if (m->n_unknown_fields > 0)
		return true;
	const ProtobufCMessageDescriptor *d = m->descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		const char *base = (const char *)m;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)(base + f->offset);
			for (size_t k = 0; k < n; k++)
				if (pb_has_unknown_fields(arr[k]))
					return true;
			continue;
		}
		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
			uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
			if (which != f->id)
				continue;
		}
		const ProtobufCMessage *sub = *(ProtobufCMessage *const *)(base + f->offset);
		if (pb_has_unknown_fields(sub))
			return true;
	}
	return false;
}

bool pb_unknown_fields_ok(const ProtobufCMessage *m, unsigned minor)
{
	return minor > PROTO_VERSION_MINOR || !pb_has_unknown_fields(m);
}
