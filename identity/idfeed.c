/* idfeed: see idfeed.h. */
#include "identity/idfeed.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int dump_line(json_t *o, char **out, size_t *len)
{
	if (!o)
		return -ENOMEM;
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	size_t n = strlen(s);
	if (n + 1 > IDFEED_LINE_MAX) {
		free(s);
		return -E2BIG;
	}
	char *l = realloc(s, n + 2);
	if (!l) {
		free(s);
		return -ENOMEM;
	}
	l[n] = '\n';
	l[n + 1] = '\0';
	*out = l;
	*len = n + 1;
	return 0;
}

int idfeed_encode_due(uint64_t cookie, char **out, size_t *len)
{
	return dump_line(json_pack("{s:I}", "due", (json_int_t)cookie), out, len);
}

int idfeed_encode_no(uint64_t cookie, enum reason why, char **out, size_t *len)
{
	return dump_line(json_pack("{s:I,s:s}", "no", (json_int_t)cookie, "reason", reason_word(why)), out, len);
}

int idfeed_encode_id(uint64_t cookie, const struct flow_identity *id, char **out, size_t *len)
{
	json_t *anc = json_array();
	if (!anc)
		return -ENOMEM;
	for (size_t i = 0; i < id->n_ancestors; i++) {
		const struct flow_ancestor *a = &id->ancestors[i];
		if (json_array_append_new(anc, json_pack("{s:s,s:i,s:s}", "path", a->path ? a->path : "", "pid",
							 a->pid, "sha256", a->sha256)) < 0) {
			json_decref(anc);
			return -ENOMEM;
		}
	}
	return dump_line(json_pack("{s:I,s:i,s:s,s:s,s:s,s:o}", "id", (json_int_t)cookie, "pid", id->pid, "key",
				   id->process_key ? id->process_key : "", "path",
				   id->binary_path ? id->binary_path : "", "sha256", id->sha256, "anc", anc),
			 out, len);
}

static bool sha_ok(const char *s, bool empty_ok)
{
	size_t n = strlen(s);
	if (n == 0)
		return empty_ok;
	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int idfeed_decode(const char *line, size_t len, struct idfeed_msg *out)
{
	memset(out, 0, sizeof(*out));
	json_error_t err;
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
	if (!o || !json_is_object(o)) {
		json_decref(o);
		return -EINVAL;
	}
	int r = -EINVAL;
	json_t *v;
	json_int_t c;
	if ((v = json_object_get(o, "due"))) {
		if (json_object_size(o) != 1 || !json_is_integer(v))
			goto done;
		out->kind = IDFEED_DUE;
		out->cookie = (uint64_t)json_integer_value(v);
		r = 0;
	} else if ((v = json_object_get(o, "no"))) {
		const char *word;
		if (json_unpack(o, "{s:I,s:s!}", "no", &c, "reason", &word) < 0)
			goto done;
		out->kind = IDFEED_NO;
		out->cookie = (uint64_t)c;
		out->reason = reason_from_word(word);
		if (out->reason == REASON_OK || out->reason >= REASON__COUNT)
			out->reason = REASON_IDENTITY_UNAVAILABLE;
		r = 0;
	} else if ((v = json_object_get(o, "id"))) {
		int pid;
		const char *key, *path, *sha;
		json_t *anc;
		if (json_unpack(o, "{s:I,s:i,s:s,s:s,s:s,s:o!}", "id", &c, "pid", &pid, "key", &key, "path", &path,
				"sha256", &sha, "anc", &anc) < 0 ||
		    !json_is_array(anc) || !sha_ok(sha, false) || !key[0] || !path[0] || pid <= 0)
			goto done;
		struct flow_identity *id = flow_identity_new();
		if (!id) {
			r = -ENOMEM;
			goto done;
		}
		id->source = FLOW_SOURCE_LOCAL_PROCFS;
		id->pid = pid;
		memcpy(id->sha256, sha, 65);
		id->binary_path = strdup(path);
		id->process_key = strdup(key);
		if (!id->binary_path || !id->process_key) {
			flow_identity_free(id);
			r = -ENOMEM;
			goto done;
		}
		size_t i;
		json_t *a;
		json_array_foreach(anc, i, a) {
			const char *ap, *ash;
			int apid;
			if (json_unpack(a, "{s:s,s:i,s:s!}", "path", &ap, "pid", &apid, "sha256", &ash) < 0 ||
			    !sha_ok(ash, true) || flow_identity_add_ancestor(id, ap, apid, ash) < 0) {
				flow_identity_free(id);
				goto done;
			}
		}
		out->kind = IDFEED_ID;
		out->cookie = (uint64_t)c;
		out->id = id;
		r = 0;
	}
done:
	json_decref(o);
	return r;
}

void idfeed_msg_release(struct idfeed_msg *m)
{
	if (m && m->id) {
		flow_identity_free(m->id);
		m->id = NULL;
	}
}
