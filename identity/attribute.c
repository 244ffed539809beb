/* Flow attribution: sock_diag, then the cookie registry, then the holder
 * search, then the ambiguity rule. */
#include "identity/attribute.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "identity/exe.h"
#include "identity/holders.h"

/* inode -> holders entries kept warm; a proxy worker sees at most a few
 * hundred live flows being re-attributed at once. */
#define ATTRIBUTE_HOLDER_CACHE 1024

struct attribute_ctx {
	const struct kernel_caps *caps;
	struct cookie_registry *reg; /* borrowed, may be NULL */
	struct sockdiag *sd;
	struct holders *holders;
	bool check_alive;
	bool registry_holder_check;
	int proc_fd;
};

struct attribute_ctx *attribute_ctx_new(const struct kernel_caps *caps, struct cookie_registry *reg)
{
	if (!caps) {
		errno = EINVAL;
		return NULL;
	}
	struct attribute_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return NULL;
	ctx->proc_fd = -1;
	ctx->caps = caps;
	ctx->reg = reg;
	ctx->check_alive = true;
	ctx->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ctx->proc_fd < 0)
		goto fail;
	ctx->sd = sockdiag_open();
	if (!ctx->sd)
		goto fail;
	ctx->holders = holders_new(caps, ATTRIBUTE_HOLDER_CACHE);
	if (!ctx->holders)
		goto fail;
	return ctx;
fail:;
	int e = errno;
	attribute_ctx_free(ctx);
	errno = e;
	return NULL;
}

void attribute_ctx_free(struct attribute_ctx *ctx)
{
	if (!ctx)
		return;
	sockdiag_close(ctx->sd);
	holders_free(ctx->holders);
	if (ctx->proc_fd >= 0)
		close(ctx->proc_fd);
	free(ctx);
}

void attribute_ctx_clear_cache(struct attribute_ctx *ctx)
{
	if (ctx)
		holders_cache_clear(ctx->holders);
}

void attribute_ctx_set_check_alive(struct attribute_ctx *ctx, bool on)
{
	if (ctx)
		ctx->check_alive = on;
}

void attribute_ctx_set_registry_holder_check(struct attribute_ctx *ctx, bool on)
{
	if (ctx)
		ctx->registry_holder_check = on;
}

void attribute_ctx_set_link_budget(struct attribute_ctx *ctx, size_t links)
{
	if (ctx)
		holders_set_link_budget(ctx->holders, links);
}

void attribute_ctx_set_pinned(struct attribute_ctx *ctx, holders_pinned_fn fn, void *userdata)
{
	if (ctx)
		holders_set_pinned(ctx->holders, fn, userdata);
}

const char *attribution_source_word(enum attribution_source s)
{
	switch (s) {
	case ATTRIBUTION_SOURCE_REGISTRY:
		return "registry";
	case ATTRIBUTION_SOURCE_HOLDER_SEARCH:
		return "holder_search";
	default:
		return "none";
	}
}

bool attribute_same_binary(const struct procref *a, const struct procref *b)
{
	/* Policy matches binaries by path and optional hash, so two holders
	 * are one binary only if every input to that match agrees: a hard
	 * link under another name could match another rule. */
	if (!exe_tuple_same_file(&a->exe, &b->exe))
		return false;
	if (strcmp(a->exe.path, b->exe.path) != 0)
		return false;
	if (a->exe.deleted != b->exe.deleted || a->exe.memfd != b->exe.memfd)
		return false;
	if (a->exe.hashed && b->exe.hashed && memcmp(a->exe.sha256, b->exe.sha256, 32) != 0)
		return false;
	return true;
}

/* Is the process behind pidfd (opened on rec->pid) the recorded one? With
 * pidfs keys the pidfd's inode answers exactly (never reused within a
 * boot); otherwise procref_match_pid compares pid + start_time, and since
 * pidfd was opened first and is checked alive by the callers afterwards,
 * the pid was not reused in between. */
static bool pidfd_is_recorded(const struct kernel_caps *caps, int pidfd, const struct procref *rec)
{
	if (strcmp(rec->boot_id, caps->boot_id) != 0)
		return false; /* recorded in another boot */
	if (rec->key_kind == PROCREF_KEY_PIDFS && caps->pidfs_ino && rec->pidfs_ino) {
		struct stat st;
		return fstat(pidfd, &st) == 0 && (uint64_t)st.st_ino == rec->pidfs_ino;
	}
	return procref_match_pid(caps, rec, rec->pid) == 0;
}

/* Does the recorded process still run? Three syscalls with pidfs. */
static bool recorded_alive(const struct kernel_caps *caps, const struct procref *rec)
{
	_cleanup_close_ int pidfd = rec->pid > 0 ? sys_pidfd_open(rec->pid, 0) : -1;
	return pidfd >= 0 && pidfd_is_recorded(caps, pidfd, rec) && pidfd_is_alive(pidfd) == 0;
}

/* Does the recorded connector still run AND still hold socket:[inode]?
 * The fd table is read after the pidfd is opened and checked, and the
 * pidfd is alive after the read: the table read was the connector's. */
static bool recorded_holds(struct attribute_ctx *ctx, const struct procref *rec, uint32_t inode)
{
	_cleanup_close_ int pidfd = rec->pid > 0 ? sys_pidfd_open(rec->pid, 0) : -1;
	if (pidfd < 0 || !pidfd_is_recorded(ctx->caps, pidfd, rec))
		return false;
	if (holders_pid_holds(ctx->proc_fd, rec->pid, inode, NULL) != 1)
		return false;
	return pidfd_is_alive(pidfd) == 0;
}

static void out_init(struct attribution *out)
{
	memset(out, 0, sizeof(*out));
	out->subject.pidfd = -1;
	out->subject_fd = -1;
	out->reason = REASON_IDENTITY_UNAVAILABLE;
}

void attribution_release(struct attribution *out)
{
	if (!out)
		return;
	if (out->subject.pidfd >= 0)
		procref_close(&out->subject);
	out->subject.pidfd = -1;
}

static int attribute_found(struct attribute_ctx *ctx, const pid_t *members, size_t n_members,
			   struct attribution *out);

int attribute_flow(struct attribute_ctx *ctx, const struct flow_tuple *t, const pid_t *members,
		   size_t n_members, struct attribution *out)
{
	if (!out)
		return -EINVAL;
	out_init(out);
	if (!ctx || !t)
		return -EINVAL;

	int r = sockdiag_lookup(ctx->sd, t, &out->sock);
	if (r == -ENOTUNIQ) {
		/* Several UDP sockets answer for the tuple equally well. */
		out->reason = REASON_AMBIGUOUS_SOCKET_OWNER;
		return r;
	}
	if (r < 0)
		return r; /* -ENOENT: no socket; else a netlink failure */
	return attribute_found(ctx, members, n_members, out);
}

int attribute_flow_sock(struct attribute_ctx *ctx, const struct sockdiag_result *sock,
			const pid_t *members, size_t n_members, struct attribution *out)
{
	if (!out)
		return -EINVAL;
	out_init(out);
	if (!ctx || !sock)
		return -EINVAL;
	out->sock = *sock;
	return attribute_found(ctx, members, n_members, out);
}

/* The socket is known (out->sock): registry, then holder search. */
static int attribute_found(struct attribute_ctx *ctx, const pid_t *members, size_t n_members,
			   struct attribution *out)
{
	int r;
	out->socket_found = true;

	if (ctx->reg && cookie_registry_get(ctx->reg, out->sock.cookie, &out->subject) == 0) {
		/* The connector was recorded before its connect went ahead;
		 * cookies are never reused, so the record is this socket's. */
		if (!ctx->registry_holder_check) {
			out->source = ATTRIBUTION_SOURCE_REGISTRY;
			if (ctx->check_alive)
				out->subject_alive = recorded_alive(ctx->caps, &out->subject);
			out->reason = REASON_OK;
			return 0;
		}
		/* Strict: the connector must still hold the socket, else it
		 * may have handed it off — ask the holder search. */
		if (recorded_holds(ctx, &out->subject, out->sock.inode)) {
			out->source = ATTRIBUTION_SOURCE_REGISTRY;
			out->subject_alive = true;
			out->reason = REASON_OK;
			return 0;
		}
		memset(&out->subject, 0, sizeof(out->subject));
		out->subject.pidfd = -1;
	}

	out->source = ATTRIBUTION_SOURCE_HOLDER_SEARCH;
	struct holder_list hl;
	r = holders_find(ctx->holders, out->sock.inode, out->sock.cookie, members, n_members, &hl);
	if (r < 0)
		return r;
	out->cache_hit = hl.from_cache;
	out->n_pinned = hl.n_pinned;
	out->n_holders = hl.n;
	if (hl.n == 0) {
		holder_list_release(&hl);
		return -ESRCH;
	}
	for (size_t i = 1; i < hl.n; i++) {
		if (!attribute_same_binary(&hl.refs[0], &hl.refs[i])) {
			holder_list_release(&hl);
			out->reason = REASON_AMBIGUOUS_SOCKET_OWNER;
			return -ENOTUNIQ;
		}
	}
	/* Hand the first holder's live ref (and its pidfd) to the caller. */
	out->subject = hl.refs[0];
	out->subject_fd = hl.first_fd;
	hl.refs[0].pidfd = -1;
	holder_list_release(&hl);
	out->subject_alive = true;
	out->reason = REASON_OK;
	return 0;
}
