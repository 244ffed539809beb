#include "proto/procref_wire.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

void procref_to_pb(const struct procref *r, struct pb_procref_buf *b)
{
	tether__exe__init(&b->exe);
	b->exe.path.data = (uint8_t *)r->exe.path;
	b->exe.path.len = strnlen(r->exe.path, sizeof(r->exe.path));
	b->exe.dev = r->exe.dev;
	b->exe.ino = r->exe.ino;
	b->exe.size = r->exe.size;
	b->exe.mtime_ns = r->exe.mtime_ns;
	b->exe.ctime_ns = r->exe.ctime_ns;
	if (r->exe.hashed) {
		b->exe.sha256.data = (uint8_t *)r->exe.sha256;
		b->exe.sha256.len = sizeof(r->exe.sha256);
	}
	b->exe.deleted = r->exe.deleted;
	b->exe.memfd = r->exe.memfd;
	b->exe.maps_mismatch = r->exe.maps_mismatch;

	tether__process_ref__init(&b->ref);
	b->ref.boot_id = (char *)r->boot_id;
	b->ref.key_kind = r->key_kind == PROCREF_KEY_PIDFS ? TETHER__KEY_KIND__KEY_KIND_PIDFS
							     : TETHER__KEY_KIND__KEY_KIND_PID_START;
	b->ref.key = (char *)r->key;
	b->ref.pidfs_ino = r->pidfs_ino;
	b->ref.pid = r->pid;
	b->ref.ppid = r->ppid;
	b->ref.start_time = r->start_time;
	b->ref.exe = &b->exe;
	b->ref.uid = r->ruid;
	b->ref.gid = r->rgid;
	b->ref.euid = r->euid;
	b->ref.egid = r->egid;
	b->ref.cgroup_id = r->cgroup_id;
	b->ref.comm.data = (uint8_t *)r->comm;
	b->ref.comm.len = strnlen(r->comm, sizeof(r->comm));
}

bool boot_id_valid(const char *s)
{
	if (!s || strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!isxdigit((unsigned char)s[i])) {
			return false;
		}
	}
	return true;
}

static bool copy_bytes_str(const ProtobufCBinaryData *b, char *dst, size_t size)
{
	if (b->len >= size || (b->len && memchr(b->data, '\0', b->len)))
		return false;
	if (b->len)
		memcpy(dst, b->data, b->len);
	dst[b->len] = '\0';
	return true;
}

int procref_from_pb(const Tether__ProcessRef *m, struct procref *out)
{
	if (!m)
		return -EBADMSG;
	memset(out, 0, sizeof(*out));
	out->pidfd = -1;
	if (!boot_id_valid(m->boot_id))
		return -EBADMSG;
	memcpy(out->boot_id, m->boot_id, 37);

	switch (m->key_kind) {
	case TETHER__KEY_KIND__KEY_KIND_PIDFS:
		if (m->pidfs_ino == 0)
			return -EBADMSG;
		out->key_kind = PROCREF_KEY_PIDFS;
		break;
	case TETHER__KEY_KIND__KEY_KIND_PID_START:
		out->key_kind = PROCREF_KEY_PID_START;
		break;
	default:
		return -EBADMSG;
	}
	size_t klen = m->key ? strlen(m->key) : 0;
	if (klen <= 37 || klen >= PROCREF_KEY_MAX || strncmp(m->key, m->boot_id, 36) != 0 ||
	    m->key[36] != ':')
		return -EBADMSG;
	for (size_t i = 0; i < klen; i++)
		if (!isgraph((unsigned char)m->key[i]))
			return -EBADMSG;
	memcpy(out->key, m->key, klen + 1);
	out->pidfs_ino = m->pidfs_ino;
	if (m->pid <= 0 || m->ppid < 0)
		return -EBADMSG;
	out->pid = m->pid;
	out->ppid = m->ppid;
	out->start_time = m->start_time;

	out->ruid = m->uid;
	out->euid = out->suid = out->fsuid = m->euid;
	out->rgid = m->gid;
	out->egid = out->sgid = out->fsgid = m->egid;
	out->cgroup_id = m->cgroup_id;
	out->info_source = PROCREF_SRC_PROCFS;
	if (!copy_bytes_str(&m->comm, out->comm, sizeof(out->comm)))
		return -EBADMSG;

	const Tether__Exe *e = m->exe;
	if (e) {
		if (!copy_bytes_str(&e->path, out->exe.path, sizeof(out->exe.path)))
			return -EBADMSG;
		out->exe.dev = e->dev;
		out->exe.ino = e->ino;
		out->exe.size = e->size;
		out->exe.mtime_ns = e->mtime_ns;
		out->exe.ctime_ns = e->ctime_ns;
		out->exe.deleted = e->deleted;
		out->exe.memfd = e->memfd;
		out->exe.maps_mismatch = e->maps_mismatch;
		if (e->sha256.len == sizeof(out->exe.sha256)) {
			memcpy(out->exe.sha256, e->sha256.data, sizeof(out->exe.sha256));
			out->exe.hashed = true;
		} else if (e->sha256.len != 0) {
			return -EBADMSG;
		}
	}
	return 0;
}

void proto_tuple_to_pb(const struct proto_tuple *t, Tether__FlowTuple *m)
{
	tether__flow_tuple__init(m);
	m->proto = t->proto;
	m->src_addr.data = (uint8_t *)t->src;
	m->src_addr.len = (t->family == AF_INET ? 4u : 16u);
	m->src_port = t->sport;
	m->dst_addr.data = (uint8_t *)t->dst;
	m->dst_addr.len = (t->family == AF_INET ? 4u : 16u);
	m->dst_port = t->dport;
}

int proto_tuple_from_pb(const Tether__FlowTuple *m, struct proto_tuple *t)
{
	memset(t, 0, sizeof(*t));
	if (!m || m->proto == 0 || m->proto > 255 || m->src_port > 65535 || m->dst_port > 65535)
		return -EBADMSG;
	if (m->src_addr.len != m->dst_addr.len)
		return -EBADMSG;
	if (m->src_addr.len == 4)
		t->family = AF_INET;
	else if (m->src_addr.len == 16)
		t->family = AF_INET6;
	else
		return -EBADMSG;
	t->proto = (uint8_t)m->proto;
	memcpy(t->src, m->src_addr.data, m->src_addr.len);
	memcpy(t->dst, m->dst_addr.data, m->dst_addr.len);
	t->sport = (uint16_t)m->src_port;
	t->dport = (uint16_t)m->dst_port;
	return 0;
}

