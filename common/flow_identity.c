#include "common/flow_identity.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

const char *flow_source_word(enum flow_source s)
{
	switch (s) {
	case FLOW_SOURCE_LOCAL_PROCFS: return "local_procfs";
	case FLOW_SOURCE_DELEGATED: return "delegated";
	case FLOW_SOURCE_STATIC_TEST: return "static_test";
	default: return "none";
	}
}

struct flow_identity *flow_identity_new(void) { return calloc(1, sizeof(struct flow_identity)); }

void flow_identity_free(struct flow_identity *id)
{
	if (!id)
		return;
	free(id->binary_path);
	free(id->process_key);
	for (size_t i = 0; i < id->n_ancestors; i++)
		free(id->ancestors[i].path);
	free(id->ancestors);
	free(id->signed_context);
	free(id);
}

int flow_identity_add_ancestor(struct flow_identity *id, const char *path, int pid,
			       const char *sha256)
{
	struct flow_ancestor *v = realloc(id->ancestors, (id->n_ancestors + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	id->ancestors = v;
	struct flow_ancestor *a = &v[id->n_ancestors];
	memset(a, 0, sizeof(*a));
	if (!(a->path = strdup(path)))
		return -ENOMEM;
	a->pid = pid;
	if (sha256)
		strscpy(a->sha256, sha256, sizeof(a->sha256));
	id->n_ancestors++;
	return 0;
}

struct flow_identity *flow_identity_dup(const struct flow_identity *src)
{
	struct flow_identity *id = flow_identity_new();
	if (!id)
		return NULL;
	memcpy(id->sha256, src->sha256, sizeof(id->sha256));
	id->pid = src->pid;
	id->source = src->source;
	id->anchor_epoch = src->anchor_epoch;
	id->context_request_id = src->context_request_id;
	if ((src->binary_path && !(id->binary_path = strdup(src->binary_path))) ||
	    (src->process_key && !(id->process_key = strdup(src->process_key))))
		goto fail;
	for (size_t i = 0; i < src->n_ancestors; i++)
		if (flow_identity_add_ancestor(id, src->ancestors[i].path, src->ancestors[i].pid,
					       src->ancestors[i].sha256) < 0)
			goto fail;
	if (src->signed_context_len) {
		if (!(id->signed_context = malloc(src->signed_context_len)))
			goto fail;
		memcpy(id->signed_context, src->signed_context, src->signed_context_len);
		id->signed_context_len = src->signed_context_len;
	}
	return id;
fail:
	flow_identity_free(id);
	return NULL;
}
