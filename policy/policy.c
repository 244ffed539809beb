/* The layered loader: reads each layer's files in order, checks the
 * top-level shape (version, immutable, known sections) and hands each
 * section to its parser. The embedded baseline is always the first layer. */
#include "policy/policy_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"

struct policy_loader {
	struct policy *p;
	enum policy_layer last;
	const struct policy_section *const *ext;
	size_t n_ext;
	bool skip_workload_files;
};

static const char *const layer_names[POLICY_LAYER__COUNT] = {
	[POLICY_LAYER_BASELINE] = "baseline", [POLICY_LAYER_SYSTEM] = "system",
	[POLICY_LAYER_USER] = "user",         [POLICY_LAYER_PROJECT] = "project",
	[POLICY_LAYER_AGENT] = "agent",       [POLICY_LAYER_COMMAND] = "command",
};

const char *policy_layer_name(enum policy_layer l)
{
	if ((unsigned)l >= POLICY_LAYER__COUNT)
		return "unknown";
	return layer_names[l];
}

static int push_str(char ***v, size_t *n, const char *s, char **out)
{
	char *d = strdup(s);
	if (!d)
		return -ENOMEM;
	char **nv = realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv) {
		free(d);
		return -ENOMEM;
	}
	*v = nv;
	nv[(*n)++] = d;
	if (out)
		*out = d;
	return 0;
}

int policy_add_warning(struct policy *p, const char *msg)
{
	return push_str(&p->warnings, &p->n_warnings, msg, NULL);
}

const char *policy_add_file(struct policy *p, const char *name, enum policy_layer layer)
{
	enum policy_layer *nl = realloc(p->file_layers, (p->n_files + 1) * sizeof(*nl));
	if (!nl)
		return NULL;
	p->file_layers = nl;
	char *s = NULL;
	if (push_str(&p->files, &p->n_files, name, &s) < 0)
		return NULL;
	nl[p->n_files - 1] = layer;
	return s;
}

void *policy_section_data(const struct policy *p, const char *name)
{
	for (size_t i = 0; i < p->n_ext; i++)
		if (strcmp(p->ext[i].sec->name, name) == 0)
			return p->ext[i].data;
	return NULL;
}

void policy_free(struct policy *p)
{
	if (!p)
		return;
	policy_env_done(&p->env);
	free(p->exec.shell);
	free(p->env.trust_bundle);
	free(p->agent);
	for (size_t i = 0; i < p->n_ext; i++)
		if (p->ext[i].data && p->ext[i].sec->free)
			p->ext[i].sec->free(p->ext[i].data);
	free(p->ext);
	for (size_t i = 0; i < p->n_files; i++)
		free(p->files[i]);
	free(p->files);
	free(p->file_layers);
	for (size_t i = 0; i < p->n_warnings; i++)
		free(p->warnings[i]);
	free(p->warnings);
	free(p);
}

__attribute__((format(printf, 2, 3))) static void diag_set(struct policy_diag *d, const char *fmt, ...)
{
	if (d && !d->msg[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
		va_end(ap);
	}
}

void policy_loader_free(struct policy_loader *l)
{
	if (!l)
		return;
	policy_free(l->p);
	free(l);
}

void policy_loader_skip_workload_files(struct policy_loader *l)
{
	l->skip_workload_files = true;
}

int policy_loader_new(const struct policy_section *const *ext, size_t n_ext,
		      struct policy_loader **out, struct policy_diag *diag)
{
	if (diag)
		diag->msg[0] = '\0';
	struct policy_loader *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->p = calloc(1, sizeof(*l->p));
	if (!l->p) {
		free(l);
		return -ENOMEM;
	}
	l->p->version = 1;
	l->p->env.mode = POLICY_ENV_SANITIZED;
	l->p->env.mode_layer = POLICY_LAYER_BASELINE;
	if (n_ext) {
		l->p->ext = calloc(n_ext, sizeof(*l->p->ext));
		if (!l->p->ext) {
			policy_loader_free(l);
			return -ENOMEM;
		}
		for (size_t i = 0; i < n_ext; i++)
			l->p->ext[i].sec = ext[i];
		l->p->n_ext = n_ext;
	}
	l->ext = ext;
	l->n_ext = n_ext;
	l->last = POLICY_LAYER_BASELINE;

	size_t len;
	const char *data = policy_embedded_get("baseline", &len);
	if (!data) {
		diag_set(diag, "tether: embedded baseline missing (build error)");
		policy_loader_free(l);
		return -ENOENT;
	}
	int r = policy_loader_add_buffer(l, POLICY_LAYER_BASELINE, "embedded:profiles/baseline.yaml",
					 data, len, diag);
	if (r < 0) {
		policy_loader_free(l);
		return r;
	}
	*out = l;
	return 0;
}

static const char *const builtin_top[] = { "version", "immutable", "environment", "network", "exec",
					    "credentials" /* parsed where credentials_section is registered */ };

static int parse_top(struct pctx *ctx, struct policy_loader *l, const struct pnode *root)
{
	if (!root || (root->kind == PNODE_SCALAR && root->plain && root->len == 0))
		return pnode_error(ctx, NULL, "empty policy file (expected at least 'version: 1')");
	int r = pnode_expect_map(ctx, root, "policy file");
	if (r < 0)
		return r;

	const char *allowed[ARRAY_SIZE(builtin_top) + 16 + 1];
	size_t na = 0;
	for (size_t i = 0; i < ARRAY_SIZE(builtin_top); i++)
		allowed[na++] = builtin_top[i];
	for (size_t i = 0; i < l->n_ext && na < ARRAY_SIZE(allowed) - 1; i++) {
		bool dup = false;
		for (size_t j = 0; j < na; j++)
			dup |= strcmp(allowed[j], l->ext[i]->name) == 0;
		if (!dup)
			allowed[na++] = l->ext[i]->name;
	}
	allowed[na] = NULL;
	r = pmap_check_keys(ctx, root, "the policy file", allowed);
	if (r < 0)
		return r;

	const struct pnode *v = pmap_get(root, "version");
	if (!v)
		return pnode_error(ctx, root, "missing 'version: 1' at the top of the policy file");
	uint64_t ver;
	r = pnode_expect_uint(ctx, v, "version", UINT32_MAX, &ver);
	if (r < 0)
		return r;
	if (ver != 1)
		return pnode_error(ctx, v, "unsupported policy version %llu (this tether reads version 1)",
				   (unsigned long long)ver);

	const struct pnode *im = pmap_get(root, "immutable");
	if (im) {
		bool b;
		r = pnode_expect_bool(ctx, im, "immutable", &b);
		if (r < 0)
			return r;
		if (ctx->layer == POLICY_LAYER_SYSTEM) {
			if (b) {
				l->p->immutable = true;
				ctx->immutable = true;
			}
		} else if (b) {
			pnode_warn(ctx, im, "'immutable' is honoured in the system layer only; ignored in the %s layer",
				   policy_layer_name(ctx->layer));
		}
	}

	for (size_t i = 0; i < root->n; i++) {
		const char *key = root->keys[i]->str;
		const struct pnode *val = root->vals[i];
		if (ctx->layer == POLICY_LAYER_BASELINE && strcmp(key, "version") != 0 &&
		    strcmp(key, "environment") != 0)
			return pnode_error(ctx, root->keys[i], "the baseline data file has only 'environment'");
		if (strcmp(key, "version") == 0 || strcmp(key, "immutable") == 0)
			continue;
		if (strcmp(key, "environment") == 0) {
			r = policy_env_parse(ctx, val);
		} else if (strcmp(key, "exec") == 0) {
			r = policy_exec_parse(ctx, val);
		} else {
			r = 0;
			for (size_t j = 0; j < l->p->n_ext; j++)
				if (strcmp(l->p->ext[j].sec->name, key) == 0) {
					r = l->p->ext[j].sec->parse(ctx, val, &l->p->ext[j].data);
					if (r < 0 && ctx->diag && !ctx->diag->msg[0])
						pnode_error(ctx, val, "%s: invalid section (%s)", key,
							    strerror(-r));
					break;
				}
		}
		if (r < 0)
			return r;
	}
	return 0;
}

int policy_loader_add_buffer(struct policy_loader *l, enum policy_layer layer, const char *name,
			     const char *buf, size_t len, struct policy_diag *diag)
{
	if (diag)
		diag->msg[0] = '\0';
	if ((unsigned)layer >= POLICY_LAYER__COUNT || layer < l->last) {
		diag_set(diag, "%s: layer '%s' added out of order (programming error)", name,
			 policy_layer_name(layer));
		return -EINVAL;
	}
	l->last = layer;
	const char *file = policy_add_file(l->p, name, layer);
	if (!file)
		return -ENOMEM;
	struct pctx ctx = { .file = file, .layer = layer, .immutable = l->p->immutable,
			    .skip_workload_files = l->skip_workload_files,
			    .diag = diag, .policy = l->p };
	struct pnode *root = NULL;
	int r = pnode_parse(&ctx, buf, len, &root);
	if (r < 0)
		return r;
	r = parse_top(&ctx, l, root);
	pnode_free(root);
	return r;
}

static int read_policy_file(const char *path, bool optional, char **buf, size_t *len,
			    bool *missing, struct stat *st, struct policy_diag *diag)
{
	*missing = false;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT && optional) {
			*missing = true;
			return 0;
		}
		int e = errno;
		diag_set(diag, "%s: cannot open policy file: %s", path, strerror(e));
		return -e;
	}
	if (fstat(fd, st) < 0) {
		int e = errno;
		diag_set(diag, "%s: cannot stat policy file: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st->st_mode)) {
		diag_set(diag, "%s: %s", path, "not a regular file");
		return -EINVAL;
	}
	if ((unsigned long long)st->st_size > POLICY_MAX_FILE_SIZE) {
		diag_set(diag, "%s: %s", path, "policy file too large (limit 1 MiB)");
		return -EFBIG;
	}
	char *b = malloc((size_t)st->st_size + 1);
	if (!b)
		return -ENOMEM;
	size_t off = 0;
	for (;;) {
		ssize_t n = read(fd, b + off, (size_t)st->st_size + 1 - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			free(b);
			diag_set(diag, "%s: cannot read policy file: %s", path, strerror(e));
			return -e;
		}
		if (n == 0)
			break;
		off += (size_t)n;
		if (off > (size_t)st->st_size) {
			free(b);
			diag_set(diag, "%s: %s", path, "policy file changed while reading");
			return -EAGAIN;
		}
	}
	*buf = b;
	*len = off;
	return 0;
}

int policy_loader_add_file(struct policy_loader *l, enum policy_layer layer, const char *path,
			   bool optional, struct policy_diag *diag)
{
	if (diag)
		diag->msg[0] = '\0';
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	bool missing;
	struct stat st;
	int r = read_policy_file(path, optional, &buf, &len, &missing, &st, diag);
	if (r < 0 || missing)
		return r;
	r = policy_loader_add_buffer(l, layer, path, buf, len, diag);
	if (r == 0 && layer == POLICY_LAYER_SYSTEM && (st.st_mode & 022)) {
		char msg[1200];
		snprintf(msg, sizeof(msg),
			 "%s:1:1: system policy file is group/world-writable (mode %04o): anyone who can write it controls the sandbox",
			 path, (unsigned)(st.st_mode & 07777));
		r = policy_add_warning(l->p, msg);
	}
	return r;
}

int policy_loader_add_agent(struct policy_loader *l, const char *name, struct policy_diag *diag)
{
	if (diag)
		diag->msg[0] = '\0';
	char key[128], file[192];
	bool ok = name[0] != '\0' && strlen(name) < 64;
	for (const char *c = name; *c && ok; c++)
		ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_';
	size_t len = 0;
	const char *data = NULL;
	if (ok) {
		snprintf(key, sizeof(key), "agents/%s", name);
		data = policy_embedded_get(key, &len);
	}
	if (!data) {
		char list[512] = "";
		size_t o = 0;
		const char *const *names = policy_agent_names();
		for (size_t i = 0; names[i] && o < sizeof(list); i++) {
			int w = snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "", names[i]);
			if (w < 0)
				break;
			o += (size_t)w;
		}
		char pn[80];
		pnode_printable(name, strlen(name), pn, sizeof(pn));
		diag_set(diag, "--agent %s: unknown agent preset (known: %s)", pn, list);
		return -ENOENT;
	}
	free(l->p->agent);
	l->p->agent = strdup(name);
	if (!l->p->agent)
		return -ENOMEM;
	snprintf(file, sizeof(file), "embedded:profiles/agents/%s.yaml", name);
	return policy_loader_add_buffer(l, POLICY_LAYER_AGENT, file, data, len, diag);
}

int policy_loader_finish(struct policy_loader *l, struct policy **out)
{
	*out = l->p;
	l->p = NULL;
	policy_loader_free(l);
	return 0;
}

static int yaml_filter(const struct dirent *d)
{
	size_t n = strlen(d->d_name);
	return d->d_name[0] != '.' && n > 5 && strcmp(d->d_name + n - 5, ".yaml") == 0;
}

static int add_system_dir(struct policy_loader *l, const char *dir, struct policy_diag *diag)
{
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/policy.yaml", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int r = policy_loader_add_file(l, POLICY_LAYER_SYSTEM, path, true, diag);
	if (r < 0)
		return r;
	if (snprintf(path, sizeof(path), "%s/policy.d", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	struct dirent **ents = NULL;
	int n = scandir(path, &ents, yaml_filter, alphasort);
	if (n < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	r = 0;
	for (int i = 0; i < n; i++) {
		char f[4096 + 256];
		if (r == 0) {
			snprintf(f, sizeof(f), "%s/%s", path, ents[i]->d_name);
			r = policy_loader_add_file(l, POLICY_LAYER_SYSTEM, f, true, diag);
		}
		free(ents[i]);
	}
	free(ents);
	return r;
}

int policy_load_layers(const struct policy_paths *paths, const struct policy_section *const *ext,
		       size_t n_ext, struct policy **out, struct policy_diag *diag)
{
	struct policy_loader *l;
	char path[4096];
	int r = policy_loader_new(ext, n_ext, &l, diag);
	if (r < 0)
		return r;
	if (paths->system_dir && (r = add_system_dir(l, paths->system_dir, diag)) < 0)
		goto fail;
	if (paths->user_dir) {
		snprintf(path, sizeof(path), "%s/policy.yaml", paths->user_dir);
		if ((r = policy_loader_add_file(l, POLICY_LAYER_USER, path, true, diag)) < 0)
			goto fail;
	}
	if (paths->project_dir) {
		snprintf(path, sizeof(path), "%s/.tether.yaml", paths->project_dir);
		if ((r = policy_loader_add_file(l, POLICY_LAYER_PROJECT, path, true, diag)) < 0)
			goto fail;
	}
	if (paths->agent && (r = policy_loader_add_agent(l, paths->agent, diag)) < 0)
		goto fail;
	for (size_t i = 0; i < paths->n_command_files; i++)
		if ((r = policy_loader_add_file(l, POLICY_LAYER_COMMAND, paths->command_files[i], false,
						diag)) < 0)
			goto fail;
	return policy_loader_finish(l, out);
fail:
	if (diag && !diag->msg[0])
		snprintf(diag->msg, sizeof(diag->msg), "policy: loading failed: %s", strerror(-r));
	policy_loader_free(l);
	return r;
}

int policy_load_buffer(const char *name, const char *buf, size_t len,
		       const struct policy_section *const *ext, size_t n_ext, struct policy **out,
		       struct policy_diag *diag)
{
	struct policy_loader *l;
	int r = policy_loader_new(ext, n_ext, &l, diag);
	if (r < 0)
		return r;
	r = policy_loader_add_buffer(l, POLICY_LAYER_COMMAND, name, buf, len, diag);
	if (r < 0) {
		policy_loader_free(l);
		return r;
	}
	return policy_loader_finish(l, out);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int policy_paths_default(struct policy_paths *p, const char *cwd)
{
	memset(p, 0, sizeof(*p));
	const char *sys = getenv("TETHER_SYSTEM_POLICY_DIR");
	p->system_dir = strdup(sys && *sys ? sys : "/etc/tether");
	const char *user = getenv("TETHER_USER_POLICY_DIR");
	char buf[4096];
	if (user && *user) {
		p->user_dir = strdup(user);
	} else {
		const char *xdg = getenv("XDG_CONFIG_HOME");
		const char *home = getenv("HOME");
		if (!home || home[0] != '/') {
			struct passwd *pw = getpwuid(getuid());
			home = pw ? pw->pw_dir : NULL;
		}
		if (xdg && xdg[0] == '/')
			snprintf(buf, sizeof(buf), "%s/tether", xdg);
		else if (home && home[0] == '/')
			snprintf(buf, sizeof(buf), "%s/.config/tether", home);
		else
			buf[0] = '\0';
		p->user_dir = buf[0] ? strdup(buf) : NULL;
	}
	p->project_dir = dup_or_null(cwd);
	if (!p->system_dir || (cwd && !p->project_dir)) {
		policy_paths_done(p);
		return -ENOMEM;
	}
	return 0;
}

void policy_paths_done(struct policy_paths *p)
{
	free(p->system_dir);
	free(p->user_dir);
	free(p->project_dir);
	p->system_dir = p->user_dir = p->project_dir = NULL;
}

const char *policy_embedded_get(const char *name, size_t *len)
{
	for (size_t i = 0; i < policy_embedded_count; i++)
		if (strcmp(policy_embedded_files[i].name, name) == 0) {
			if (len)
				*len = policy_embedded_files[i].len;
			return policy_embedded_files[i].data;
		}
	return NULL;
}

const char *const *policy_agent_names(void)
{
	/* Built from the embedded table once per call site; the table is
	 * constant so a static const array generated with it is used. */
	extern const char *const policy_embedded_agents[];
	return policy_embedded_agents;
}
