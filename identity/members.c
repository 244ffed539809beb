/* The process table: recorded lineage of one anchor's tree. See members.h. */
#include "identity/members.h"

#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "common/util.h"
#include "identity/procfs.h"

#define MEMBERS_DEFAULT_MAX 65536
/* The same bound the ancestry walk uses by default: a learn never follows
 * a longer unrecorded chain than a walk would accept. */
#define MEMBERS_LEARN_DEPTH 64
/* A hop whose parent changed while we looked (it exited and the hop was
 * reparented) is retried from scratch this many times. */
#define MEMBERS_LEARN_TRIES 3

/* A node keeps its entry compactly. A struct member_entry is 12.9 KiB, 12
 * of it the PATH_MAX arrays of its three exe paths, so a table of 65536
 * entries held ~850 MB in the supervisor. A node holds the entry's bytes
 * with those three arrays cut out, the paths by length, and beside them,
 * typed, the fields the table reads or changes itself. */
enum { PATH_REF, PATH_SPAWN, PATH_CONNECT, N_PATHS };
#define PATH_LEN sizeof(((struct exe_tuple *)0)->path)
static const size_t path_hole[N_PATHS] = {
	offsetof(struct member_entry, ref.exe.path),
	offsetof(struct member_entry, exe_spawn.path),
	offsetof(struct member_entry, exe_connect.path),
};
_Static_assert(offsetof(struct member_entry, ref.exe.path) < offsetof(struct member_entry, exe_spawn.path) &&
		       offsetof(struct member_entry, exe_spawn.path) < offsetof(struct member_entry, exe_connect.path),
	       "the cut-out paths are in declaration order");
#define PACKED_LEN (sizeof(struct member_entry) - N_PATHS * PATH_LEN)

struct node {
	struct node *hnext;       /* bucket chain */
	struct node *prev, *next; /* insertion order, anchor first */
	/* prune_locked's scratch: how many entries name this one as parent,
	 * and whether it goes */
	size_t children;
	bool doomed;
	/* Authoritative copies (the packed bytes of these are not read). */
	pid_t pid;
	enum member_join join;
	bool exited, has_exe_connect;
	uint64_t exit_ns;
	char *path[N_PATHS];              /* the exe paths, NUL-terminated */
	unsigned char packed[PACKED_LEN]; /* the entry without its paths */
};

/* Where a byte offset of struct member_entry (outside the paths) is in
 * node.packed. */
static size_t packed_off(size_t off)
{
	size_t cut = 0;
	for (size_t i = 0; i < N_PATHS; i++)
		if (path_hole[i] < off)
			cut += PATH_LEN;
	return off - cut;
}

/* Copy [off, off + len) of an entry (no path inside it) into or out of
 * the packed bytes. */
static void packed_put(struct node *nd, size_t off, const void *src, size_t len)
{
	memcpy(nd->packed + packed_off(off), src, len);
}

static const char *node_key(const struct node *nd)
{
	return (const char *)nd->packed + packed_off(offsetof(struct member_entry, ref.key));
}

static const char *node_parent_key(const struct node *nd)
{
	return (const char *)nd->packed + packed_off(offsetof(struct member_entry, parent_key));
}

static void node_free(struct node *nd)
{
	for (size_t i = 0; i < N_PATHS; i++)
		free(nd->path[i]);
	free(nd);
}

static int set_path(struct node *nd, size_t i, const char *path)
{
	if (nd->path[i] && strcmp(nd->path[i], path) == 0)
		return 0;
	char *dup = strndup(path, PATH_LEN - 1);
	if (!dup)
		return -ENOMEM;
	free(nd->path[i]);
	nd->path[i] = dup;
	return 0;
}

/* A node holding e; NULL without memory. */
static struct node *node_new(const struct member_entry *e)
{
	struct node *nd = calloc(1, sizeof(*nd));
	if (!nd)
		return NULL;
	const unsigned char *src = (const unsigned char *)e;
	size_t from = 0, to = 0;
	for (size_t i = 0; i < N_PATHS; i++) {
		memcpy(nd->packed + to, src + from, path_hole[i] - from);
		to += path_hole[i] - from;
		from = path_hole[i] + PATH_LEN;
	}
	memcpy(nd->packed + to, src + from, sizeof(*e) - from);
	const char *paths[N_PATHS] = { e->ref.exe.path, e->exe_spawn.path, e->exe_connect.path };
	for (size_t i = 0; i < N_PATHS; i++)
		if (set_path(nd, i, paths[i]) < 0) {
			node_free(nd);
			return NULL;
		}
	nd->pid = e->ref.pid;
	nd->join = e->join;
	nd->exited = e->exited;
	nd->has_exe_connect = e->has_exe_connect;
	nd->exit_ns = e->exit_ns;
	return nd;
}

/* The whole entry of a node. */
static void node_entry(const struct node *nd, struct member_entry *out)
{
	unsigned char *dst = (unsigned char *)out;
	size_t from = 0, to = 0;
	for (size_t i = 0; i < N_PATHS; i++) {
		memcpy(dst + from, nd->packed + to, path_hole[i] - from);
		to += path_hole[i] - from;
		from = path_hole[i] + PATH_LEN;
	}
	memcpy(dst + from, nd->packed + to, sizeof(*out) - from);
	strscpy(out->ref.exe.path, nd->path[PATH_REF], PATH_LEN);
	strscpy(out->exe_spawn.path, nd->path[PATH_SPAWN], PATH_LEN);
	strscpy(out->exe_connect.path, nd->path[PATH_CONNECT], PATH_LEN);
	out->exited = nd->exited;
	out->has_exe_connect = nd->has_exe_connect;
	out->exit_ns = nd->exit_ns;
}

struct members {
	pthread_mutex_t lock;
	const struct kernel_caps *caps;
	enum membership_mode mode;
	char cgroup_path[PATH_MAX];
	uint64_t cgroup_id;
	bool live_chain;
	enum members_orphans orphans;
	size_t max_entries;
	struct procref anchor; /* recorded */
	struct node **buckets;
	size_t nbuckets; /* power of two */
	size_t n;
	struct node *head, *tail;
	/* entries marked exited since the last prune: a full table is pruned
	 * only when this is non-zero (a prune that frees nothing would just
	 * repeat at every insert) */
	size_t exited_since_prune;
};

static uint64_t key_hash(const char *s)
{
	/* FNV-1a: keys are short and come from the kernel, not from peers. */
	uint64_t h = 1469598103934665603ULL;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

static struct node *find_locked(struct members *t, const char *key)
{
	struct node *nd = t->buckets[key_hash(key) & (t->nbuckets - 1)];
	for (; nd; nd = nd->hnext)
		if (strcmp(node_key(nd), key) == 0)
			return nd;
	return NULL;
}

static int grow_locked(struct members *t)
{
	size_t nb = t->nbuckets * 2;
	struct node **b = calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (struct node *nd = t->head; nd; nd = nd->next) {
		size_t i = key_hash(node_key(nd)) & (nb - 1);
		nd->hnext = b[i];
		b[i] = nd;
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = nb;
	return 0;
}

static void unlink_locked(struct members *t, struct node *nd)
{
	struct node **pp = &t->buckets[key_hash(node_key(nd)) & (t->nbuckets - 1)];
	while (*pp && *pp != nd)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = nd->hnext;
	if (nd->prev)
		nd->prev->next = nd->next;
	else
		t->head = nd->next;
	if (nd->next)
		nd->next->prev = nd->prev;
	else
		t->tail = nd->prev;
	t->n--;
	node_free(nd);
}

static int prune_locked(struct members *t);

static int insert_locked(struct members *t, const struct procref *ref, enum member_join join,
			 const struct node *parent, struct node **out)
{
	if (find_locked(t, ref->key))
		return -EEXIST;
	if (t->n >= t->max_entries) {
		if (t->exited_since_prune > 0)
			prune_locked(t);
		if (t->n >= t->max_entries)
			return -ENOSPC;
	}
	if (t->n >= t->nbuckets) {
		int r = grow_locked(t);
		if (r < 0)
			return r;
	}
	/* Built on the heap: a whole entry is too big for a thread's stack
	 * to spend on every insert. */
	struct member_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	procref_copy_recorded(&e->ref, ref);
	e->ref.pidfd = -1;
	e->join = join;
	if (parent) {
		strscpy(e->parent_key, node_key(parent), sizeof(e->parent_key));
		e->parent_pid = parent->pid;
	}
	e->exe_spawn = ref->exe;
	e->spawn_ns = now_real_ns();
	struct node *nd = node_new(e);
	free(e);
	if (!nd)
		return -ENOMEM;
	size_t i = key_hash(ref->key) & (t->nbuckets - 1);
	nd->hnext = t->buckets[i];
	t->buckets[i] = nd;
	nd->prev = t->tail;
	if (t->tail)
		t->tail->next = nd;
	else
		t->head = nd;
	t->tail = nd;
	t->n++;
	if (out)
		*out = nd;
	return 0;
}

const char *member_join_word(enum member_join j)
{
	switch (j) {
	case MEMBER_ANCHOR:
		return "anchor";
	case MEMBER_ENTRYPOINT:
		return "entrypoint";
	case MEMBER_EXEC_SESSION:
		return "exec_session";
	case MEMBER_BORN_IN_TREE:
		return "born_in_tree";
	case MEMBER_ADOPTED:
		return "adopted";
	}
	return "unknown";
}

bool members_younger_than(const struct procref *parent, const struct procref *child)
{
	if (parent->start_time > child->start_time)
		return true;
	return parent->key_kind == PROCREF_KEY_PIDFS && child->key_kind == PROCREF_KEY_PIDFS &&
	       parent->pidfs_ino && child->pidfs_ino && parent->pidfs_ino > child->pidfs_ino;
}

bool member_join_is_member(enum member_join j)
{
	return j == MEMBER_ENTRYPOINT || j == MEMBER_EXEC_SESSION || j == MEMBER_BORN_IN_TREE;
}

int members_create(const struct kernel_caps *caps, const struct procref *anchor,
		   const struct members_config *cfg, struct members **out)
{
	if (!caps || !anchor || !cfg || !out || !anchor->key[0] || anchor->pid <= 0)
		return -EINVAL;
	if (cfg->mode != MEMBERSHIP_LINEAGE && cfg->mode != MEMBERSHIP_CGROUP)
		return -EINVAL;
	if (cfg->mode == MEMBERSHIP_CGROUP) {
		if (!caps->cgroup_v2)
			return -EOPNOTSUPP;
		if (!cfg->cgroup_path || cfg->cgroup_path[0] != '/' || strstr(cfg->cgroup_path, "/.."))
			return -EINVAL;
	}
	struct members *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->nbuckets = 64;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->buckets) {
		free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->caps = caps;
	t->mode = cfg->mode;
	t->live_chain = cfg->live_chain;
	t->orphans = cfg->orphans;
	t->max_entries = cfg->max_entries ? cfg->max_entries : MEMBERS_DEFAULT_MAX;
	if (cfg->mode == MEMBERSHIP_CGROUP) {
		if (strscpy(t->cgroup_path, cfg->cgroup_path, sizeof(t->cgroup_path)) < 0) {
			members_free(t);
			return -EINVAL;
		}
		/* "/a/b/" and "/a/b" name the same cgroup. */
		size_t l = strlen(t->cgroup_path);
		while (l > 1 && t->cgroup_path[l - 1] == '/')
			t->cgroup_path[--l] = '\0';
		t->cgroup_id = cfg->cgroup_id;
		if (!t->cgroup_id) {
			/* On cgroup v2 a cgroup's id is its directory's inode.
			 * Best effort: without it every check reads the path. */
			char dir[PATH_MAX + 256];
			struct stat st;
			snprintf(dir, sizeof(dir), "%s%s", caps->cgroup_root,
				 strcmp(t->cgroup_path, "/") == 0 ? "" : t->cgroup_path);
			if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
				t->cgroup_id = st.st_ino;
		}
	}
	procref_copy_recorded(&t->anchor, anchor);
	t->anchor.pidfd = -1;
	int r = insert_locked(t, &t->anchor, MEMBER_ANCHOR, NULL, NULL);
	if (r < 0) {
		members_free(t);
		return r;
	}
	*out = t;
	return 0;
}

void members_free(struct members *t)
{
	if (!t)
		return;
	struct node *nd = t->head;
	while (nd) {
		struct node *next = nd->next;
		node_free(nd);
		nd = next;
	}
	free(t->buckets);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* Is path (as /proc/<pid>/cgroup prints it) the sandbox cgroup or below? */
static bool cgroup_path_under(const char *root, const char *path)
{
	size_t l = strlen(root);
	if (l == 1 && root[0] == '/')
		return path[0] == '/';
	return strncmp(root, path, l) == 0 && (path[l] == '\0' || path[l] == '/');
}

/* The live process behind ref (pidfd held) is inside the sandbox cgroup. */
static int check_cgroup(struct members *t, const struct procref *ref)
{
	if (t->mode != MEMBERSHIP_CGROUP)
		return 0;
	/* Directly in the sandbox cgroup (the common case): a fresh id from
	 * PIDFD_GET_INFO says so without a procfs read. Never ref->cgroup_id:
	 * it is as old as the ref, and root may have moved the process. */
	if (t->cgroup_id && t->caps->pidfd_info) {
		struct tether_pidfd_info info = { .mask = TETHER_PIDFD_INFO_CGROUPID };
		if (ioctl(ref->pidfd, TETHER_PIDFD_GET_INFO, &info) == 0 &&
		    (info.mask & TETHER_PIDFD_INFO_CGROUPID) && info.cgroupid == t->cgroup_id)
			return procref_revalidate(t->caps, ref);
	}
	char dir[32];
	snprintf(dir, sizeof(dir), "/proc/%d", (int)ref->pid);
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r = procfs_read_at(dfd, "cgroup", PROCFS_CGROUP_MAX, &buf, &len);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	struct procfs_cgroup cg;
	r = procfs_parse_cgroup(buf, len, &cg);
	if (r < 0)
		return -EPERM; /* no v2 line or garbage: cannot show it is inside */
	/* What we read belongs to ref only if ref is still that live process. */
	r = procref_revalidate(t->caps, ref);
	if (r < 0)
		return r;
	if (cg.deleted || cg.escapes || !cgroup_path_under(t->cgroup_path, cg.path))
		return -EPERM;
	return 0;
}

int members_check_cgroup(struct members *t, const struct procref *ref)
{
	if (!t || !ref)
		return -EINVAL;
	if (t->mode != MEMBERSHIP_CGROUP)
		return 0;
	if (ref->pidfd < 0)
		return -EINVAL;
	return check_cgroup(t, ref);
}

int members_add_spawned(struct members *t, const struct procref *child, enum member_join how)
{
	if (!t || !child || !child->key[0] ||
	    (how != MEMBER_ENTRYPOINT && how != MEMBER_EXEC_SESSION))
		return -EINVAL;
	if (t->mode == MEMBERSHIP_CGROUP) {
		if (child->pidfd < 0)
			return -EINVAL; /* cannot check a recorded ref's cgroup */
		int r = check_cgroup(t, child);
		if (r < 0)
			return r;
	}
	pthread_mutex_lock(&t->lock);
	struct node *anchor = find_locked(t, t->anchor.key);
	int r = insert_locked(t, child, how, anchor, NULL);
	pthread_mutex_unlock(&t->lock);
	return r;
}

int members_add_recorded(struct members *t, const struct procref *ref, enum member_join how,
			 const char *parent_key)
{
	if (!t || !ref || !ref->key[0] || !parent_key || how == MEMBER_ANCHOR ||
	    how < MEMBER_ANCHOR || how > MEMBER_ADOPTED)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	struct node *parent = find_locked(t, parent_key);
	int r = parent ? insert_locked(t, ref, how, parent, NULL) : -ENOENT;
	pthread_mutex_unlock(&t->lock);
	return r;
}

static void set_why(enum reason *why, enum reason r)
{
	if (why)
		*why = r;
}

/* One attempt of members_learn. -EAGAIN: a hop's parent changed under us. */
static int learn_once(struct members *t, pid_t pid, const char *filtered_key, enum reason *why,
		      struct member_entry *out)
{
	struct procref *hops = calloc(MEMBERS_LEARN_DEPTH + 1, sizeof(*hops));
	if (!hops)
		return -ENOMEM;
	size_t n = 0;
	int r;
	struct member_entry parent; /* the recorded entry the chain reached */

	r = procref_open(t->caps, pid, &hops[0]);
	if (r < 0) {
		free(hops);
		set_why(why, r == -ESRCH ? REASON_PROCESS_VANISHED : REASON_IDENTITY_UNAVAILABLE);
		return r;
	}
	n = 1;

	for (;;) {
		struct procref *cur = &hops[n - 1];
		/* Known already? For the subject this answers without a walk. */
		pthread_mutex_lock(&t->lock);
		struct node *known = find_locked(t, cur->key);
		if (known)
			node_entry(known, &parent);
		pthread_mutex_unlock(&t->lock);
		if (known) {
			if (n == 1) {
				if (out)
					*out = parent;
				r = member_join_is_member(parent.join) ? 0 : -EPERM;
				set_why(why, r == 0 ? REASON_OK : REASON_FOREIGN_PROCESS);
				goto done;
			}
			/* cur is recorded: it is the parent of hops[n-2]. */
			procref_close(cur);
			n--;
			break;
		}

		pid_t ppid = cur->ppid;
		if (ppid <= 0) {
			set_why(why, REASON_REACHED_NAMESPACE_INIT);
			r = -EPERM;
			goto done;
		}
		if (ppid != t->anchor.pid) {
			/* Never open PID 1 (a VM's init) or the anchor's parent:
			 * nothing at or above the anchor is read. */
			if (ppid == 1) {
				set_why(why, REASON_REACHED_NAMESPACE_INIT);
				r = -EPERM;
				goto done;
			}
			if (ppid == t->anchor.ppid) {
				set_why(why, REASON_ANCESTRY_NOT_ANCHORED);
				r = -EPERM;
				goto done;
			}
		}
		if (n > MEMBERS_LEARN_DEPTH) {
			set_why(why, REASON_DEPTH_EXCEEDED);
			r = -ELOOP;
			goto done;
		}
		r = procref_open(t->caps, ppid, &hops[n]);
		if (r < 0) {
			/* The parent exited after cur's ppid was read: cur was
			 * reparented; look again. */
			if (r == -ESRCH)
				r = -EAGAIN;
			else
				set_why(why, REASON_IDENTITY_UNAVAILABLE);
			goto done;
		}
		n++;
		if (members_younger_than(&hops[n - 1], cur)) {
			/* The pid now names a process younger than its "child". */
			set_why(why, REASON_PID_REUSED);
			r = -ESTALE;
			goto done;
		}
		if (ppid == t->anchor.pid && !procref_same(&hops[n - 1], &t->anchor)) {
			/* Someone else holds the anchor's pid: the anchor is gone. */
			set_why(why, REASON_ANCESTRY_NOT_ANCHORED);
			r = -EPERM;
			goto done;
		}
	}

	/* hops[0..n-1] are unrecorded, hops[n-1]'s parent is `parent`. */
	if (members_younger_than(&parent.ref, &hops[n - 1])) {
		set_why(why, REASON_PID_REUSED);
		r = -ESTALE;
		goto done;
	}
	/* Confirm the top hop's parent is still the process we found: its ppid
	 * was read before the parent was opened. */
	{
		struct procref again;
		r = procref_from_pidfd_ex(t->caps, hops[n - 1].pidfd, PROCREF_NO_EXE, &again);
		if (r < 0) {
			set_why(why, REASON_PROCESS_VANISHED);
			goto done;
		}
		pid_t now_ppid = again.ppid;
		procref_close(&again);
		if (now_ppid != parent.ref.pid) {
			r = -EAGAIN;
			goto done;
		}
	}

	enum member_join join;
	/* An unrecorded child of the anchor: see enum members_orphans (in
	 * cgroup mode the check below then applies to every new hop). */
	bool orphan_ok = t->live_chain || t->orphans == MEMBERS_ORPHANS_DESCENDANTS ||
			 (t->orphans == MEMBERS_ORPHANS_IN_CGROUP && t->mode == MEMBERSHIP_CGROUP);
	/* The subject carries the sandbox's seccomp filter (members_learn_filtered):
	 * it and every live parent up to here descend from a process we
	 * spawned, however many of the middle parents are gone. */
	if (filtered_key && strcmp(hops[0].key, filtered_key) == 0)
		orphan_ok = true;
	if (member_join_is_member(parent.join) || (parent.join == MEMBER_ANCHOR && orphan_ok))
		join = MEMBER_BORN_IN_TREE;
	else
		join = MEMBER_ADOPTED; /* the anchor's unspawned child, or below one */

	if (join == MEMBER_BORN_IN_TREE) {
		for (size_t i = 0; i < n; i++) {
			r = check_cgroup(t, &hops[i]);
			if (r < 0) {
				set_why(why, r == -ESRCH ? REASON_PROCESS_VANISHED : REASON_FOREIGN_PROCESS);
				r = r == -ESRCH ? -ESRCH : -EPERM;
				goto done;
			}
		}
	}

	pthread_mutex_lock(&t->lock);
	struct node *p = find_locked(t, parent.ref.key);
	r = p ? 0 : -EAGAIN; /* pruned meanwhile */
	for (size_t i = n; r == 0 && i-- > 0;) {
		struct node *nd = find_locked(t, hops[i].key);
		if (!nd)
			r = insert_locked(t, &hops[i], join, p, &nd);
		p = nd;
	}
	if (r == 0 && out)
		node_entry(p, out);
	pthread_mutex_unlock(&t->lock);
	if (r == 0) {
		r = join == MEMBER_BORN_IN_TREE ? 0 : -EPERM;
		set_why(why, r == 0 ? REASON_OK : REASON_FOREIGN_PROCESS);
	} else if (r == -ENOSPC || r == -ENOMEM) {
		set_why(why, REASON_INTERNAL_ERROR);
	}
done:
	for (size_t i = 0; i < n; i++)
		procref_close(&hops[i]);
	free(hops);
	return r;
}

static int learn(struct members *t, pid_t pid, const char *filtered_key, enum reason *why,
		 struct member_entry *out)
{
	if (!t || pid <= 0)
		return -EINVAL;
	int r = -EAGAIN;
	for (int i = 0; i < MEMBERS_LEARN_TRIES && r == -EAGAIN; i++)
		r = learn_once(t, pid, filtered_key, why, out);
	if (r == -EAGAIN) {
		set_why(why, REASON_PROCESS_VANISHED);
		r = -ESRCH;
	}
	return r;
}

int members_learn(struct members *t, pid_t pid, enum reason *why, struct member_entry *out)
{
	return learn(t, pid, NULL, why, out);
}

int members_learn_filtered(struct members *t, pid_t pid, const char *key, enum reason *why,
			   struct member_entry *out)
{
	if (!key || !key[0])
		return -EINVAL;
	return learn(t, pid, key, why, out);
}

int members_mark_exited(struct members *t, const char *key)
{
	if (!t || !key)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	struct node *nd = find_locked(t, key);
	if (nd && !nd->exited) {
		nd->exited = true;
		nd->exit_ns = now_real_ns();
		t->exited_since_prune++;
	}
	pthread_mutex_unlock(&t->lock);
	return nd ? 0 : -ENOENT;
}

int members_note_connect(struct members *t, const char *key, const struct exe_tuple *exe)
{
	if (!t || !key || !exe)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	struct node *nd = find_locked(t, key);
	int r = nd ? set_path(nd, PATH_CONNECT, exe->path) : -ENOENT;
	if (r == 0) {
		/* the tuple's bytes before and after its path */
		size_t base = offsetof(struct member_entry, exe_connect), cut = offsetof(struct exe_tuple, path);
		packed_put(nd, base, exe, cut);
		packed_put(nd, base + cut + PATH_LEN, (const unsigned char *)exe + cut + PATH_LEN,
			   sizeof(*exe) - cut - PATH_LEN);
		nd->has_exe_connect = true;
	}
	pthread_mutex_unlock(&t->lock);
	return r;
}

int members_reap(struct members *t)
{
	/* Only the live entries are copied out (a table is mostly exited
	 * processes): their refs are checked outside the lock. */
	pthread_mutex_lock(&t->lock);
	size_t n = 0;
	for (struct node *nd = t->head; nd; nd = nd->next)
		n += !nd->exited && nd->join != MEMBER_ANCHOR;
	struct procref *live = n ? malloc(n * sizeof(*live)) : NULL;
	struct member_entry *e = n ? malloc(sizeof(*e)) : NULL;
	size_t k = 0;
	if (live && e)
		for (struct node *nd = t->head; nd && k < n; nd = nd->next)
			if (!nd->exited && nd->join != MEMBER_ANCHOR) {
				node_entry(nd, e);
				live[k++] = e->ref;
			}
	pthread_mutex_unlock(&t->lock);
	free(e);
	if (n && !live)
		return -ENOMEM;
	int marked = 0;
	for (size_t i = 0; i < k; i++) {
		int r = procref_match_pid(t->caps, &live[i], live[i].pid);
		if ((r == -ESRCH || r == -ESTALE) && members_mark_exited(t, live[i].key) == 0)
			marked++;
	}
	free(live);
	return marked;
}

static bool prunable(const struct node *nd)
{
	return nd->exited && nd->join != MEMBER_ANCHOR && nd->children == 0 && !nd->doomed;
}

/* Linear in the table: count each entry's children once (a hash lookup of
 * every parent key), doom the exited entries nobody names, and let each
 * doomed entry's parent follow when it was its last child — so a dead
 * chain above a live daemon stays, and goes at once when the daemon dies.
 * Marking first and unlinking after keeps the list walk safe. */
static int prune_locked(struct members *t)
{
	for (struct node *nd = t->head; nd; nd = nd->next) {
		nd->children = 0;
		nd->doomed = false;
	}
	for (struct node *nd = t->head; nd; nd = nd->next) {
		struct node *p = node_parent_key(nd)[0] ? find_locked(t, node_parent_key(nd)) : NULL;
		if (p && p != nd)
			p->children++;
	}
	for (struct node *nd = t->head; nd; nd = nd->next) {
		for (struct node *x = nd; x && prunable(x);) {
			x->doomed = true;
			struct node *p = node_parent_key(x)[0] ? find_locked(t, node_parent_key(x)) : NULL;
			if (!p || p == x)
				break;
			p->children--;
			x = p;
		}
	}
	int removed = 0;
	for (struct node *nd = t->head; nd;) {
		struct node *next = nd->next;
		if (nd->doomed) {
			unlink_locked(t, nd);
			removed++;
		}
		nd = next;
	}
	t->exited_since_prune = 0;
	return removed;
}

int members_prune(struct members *t)
{
	pthread_mutex_lock(&t->lock);
	int r = prune_locked(t);
	pthread_mutex_unlock(&t->lock);
	return r;
}

int members_lookup_key(struct members *t, const char *key, struct member_entry *out)
{
	if (!t || !key)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	struct node *nd = find_locked(t, key);
	if (nd && out)
		node_entry(nd, out);
	pthread_mutex_unlock(&t->lock);
	return nd ? 0 : -ENOENT;
}

int members_lookup_pid(struct members *t, pid_t pid, struct member_entry *out)
{
	if (!t || pid <= 0)
		return -EINVAL;
	/* Candidates are copied under the lock and checked outside it: the
	 * check opens a pidfd and reads procfs. */
	size_t cap = 4, nc = 0;
	struct member_entry *cand = malloc(cap * sizeof(*cand));
	if (!cand)
		return -ENOMEM;
	pthread_mutex_lock(&t->lock);
	for (struct node *nd = t->head; nd; nd = nd->next) {
		if (nd->pid != pid || nd->exited)
			continue;
		if (nc == cap) {
			struct member_entry *c2 = realloc(cand, 2 * cap * sizeof(*cand));
			if (!c2)
				break;
			cand = c2;
			cap *= 2;
		}
		node_entry(nd, &cand[nc++]);
	}
	pthread_mutex_unlock(&t->lock);
	int r = -ENOENT;
	bool stale = false, gone = false;
	for (size_t i = 0; i < nc; i++) {
		int m = procref_match_pid(t->caps, &cand[i].ref, pid);
		if (m == 0) {
			if (out)
				*out = cand[i];
			r = 0;
			break;
		}
		if (m == -ESTALE)
			stale = true;
		else if (m == -ESRCH)
			gone = true;
	}
	if (r != 0 && stale)
		r = -ESTALE;
	else if (r != 0 && gone)
		r = -ESRCH;
	free(cand);
	return r;
}

bool members_is_member(struct members *t, const struct procref *ref)
{
	if (!t || !ref)
		return false;
	pthread_mutex_lock(&t->lock);
	struct node *nd = find_locked(t, ref->key);
	bool m = nd && member_join_is_member(nd->join);
	pthread_mutex_unlock(&t->lock);
	return m;
}

bool members_is_anchor(struct members *t, const struct procref *ref)
{
	return t && ref && procref_same(&t->anchor, ref);
}

void members_anchor(struct members *t, struct procref *out)
{
	/* Immutable after create: no lock needed. */
	*out = t->anchor;
}

enum membership_mode members_mode(struct members *t)
{
	return t->mode;
}

bool members_live_chain(struct members *t)
{
	return t->live_chain;
}

size_t members_live_pids(struct members *t, pid_t *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&t->lock);
	for (struct node *nd = t->head; nd; nd = nd->next) {
		if (nd->exited || !member_join_is_member(nd->join))
			continue;
		if (n < max && out)
			out[n] = nd->pid;
		n++;
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

ssize_t members_snapshot(struct members *t, struct member_entry **out)
{
	pthread_mutex_lock(&t->lock);
	struct member_entry *v = malloc((t->n ? t->n : 1) * sizeof(*v));
	ssize_t n = 0;
	if (v)
		for (struct node *nd = t->head; nd; nd = nd->next)
			node_entry(nd, &v[n++]);
	pthread_mutex_unlock(&t->lock);
	if (!v)
		return -ENOMEM;
	*out = v;
	return n;
}

json_t *members_exe_to_json(const struct exe_tuple *exe)
{
	char hex[65];
	json_t *sha = json_null();
	if (exe->hashed) {
		hex_encode(exe->sha256, sizeof(exe->sha256), hex);
		sha = json_string(hex);
	}
	return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:b, s:o}", "path", exe->path,
			 "dev", (json_int_t)exe->dev, "ino", (json_int_t)exe->ino, "size",
			 (json_int_t)exe->size, "mtime_ns", (json_int_t)exe->mtime_ns, "ctime_ns",
			 (json_int_t)exe->ctime_ns, "deleted", exe->deleted, "memfd", exe->memfd,
			 "maps_mismatch", exe->maps_mismatch, "sha256", sha);
}

static json_t *entry_to_json(const struct member_entry *e)
{
	json_t *o = json_pack(
		"{s:s, s:s, s:i, s:s, s:i, s:s, s:b, s:s, s:I, s:i, s:o, s:I, s:b}", "key", e->ref.key,
		"key_kind", e->ref.key_kind == PROCREF_KEY_PIDFS ? "pidfs" : "pid_start", "pid",
		(int)e->ref.pid, "parent_key", e->parent_key, "parent_pid", (int)e->parent_pid, "join",
		member_join_word(e->join), "member", member_join_is_member(e->join), "comm",
		e->ref.comm, "start_time", (json_int_t)e->ref.start_time, "uid", (int)e->ref.ruid,
		"exe_spawn", members_exe_to_json(&e->exe_spawn), "spawn_time_ns",
		(json_int_t)e->spawn_ns, "exited", e->exited);
	if (!o)
		return NULL;
	json_object_set_new(o, "exe_connect",
			    e->has_exe_connect ? members_exe_to_json(&e->exe_connect) : json_null());
	json_object_set_new(o, "exit_time_ns",
			    e->exited ? json_integer((json_int_t)e->exit_ns) : json_null());
	return o;
}

json_t *members_to_json(struct members *t)
{
	/* Built under the lock one entry at a time: a copy of the whole table
	 * as entries would be 12.9 KiB per process. */
	json_t *procs = json_array();
	struct member_entry *e = malloc(sizeof(*e));
	pthread_mutex_lock(&t->lock);
	for (struct node *nd = t->head; procs && e && nd; nd = nd->next) {
		node_entry(nd, e);
		json_t *o = entry_to_json(e);
		if (!o || json_array_append_new(procs, o) < 0) {
			json_decref(procs);
			procs = NULL;
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (!e) {
		json_decref(procs);
		procs = NULL;
	}
	free(e);
	if (!procs)
		return NULL;
	json_t *o = json_pack("{s:s, s:o, s:s, s:b, s:o}", "mode",
			      t->mode == MEMBERSHIP_CGROUP ? "cgroup" : "lineage", "cgroup_path",
			      t->mode == MEMBERSHIP_CGROUP ? json_string(t->cgroup_path) : json_null(),
			      "anchor_key", t->anchor.key, "live_chain", t->live_chain, "processes",
			      procs);
	return o;
}

uint64_t members_pid_set_hash(const pid_t *pids, size_t n)
{
	uint64_t sum = 0, x = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t v = mix64((uint64_t)(uint32_t)pids[i] + 0x9e3779b97f4a7c15ULL);
		sum += v;
		x ^= (v << 17) | (v >> 47);
	}
	return sum ^ mix64(x);
}
