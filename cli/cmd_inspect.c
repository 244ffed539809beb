/* tether inspect: one process's verified identity and its chain to an
 * anchor, as a one-shot tool. There is no supervisor table here, so the
 * chain is learnt from the live parent links below --anchor ("live-chain"
 * membership) — weaker than a supervisor's recorded lineage, and the output
 * says so. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/commands.h"
#include "common/kernel.h"
#include "common/log.h"
#include "common/reason.h"
#include "common/util.h"
#include "identity/ancestry.h"
#include "identity/members.h"
#include "identity/procref.h"

#define MEMBERSHIP_LIVE_CHAIN "live-chain (no supervisor table)"
#define MEMBERSHIP_NONE "none (no anchor given)"

static void inspect_usage(FILE *out)
{
	fprintf(out,
		"usage: tether inspect --pid PID [--anchor PID] [--json]\n"
		"\n"
		"Print the verified identity of process PID (ProcessRef, exe tuple and\n"
		"SHA-256 of the running image) and its ancestry chain.\n"
		"\n"
		"  --pid PID      the process to inspect (in this PID namespace)\n"
		"  --anchor PID   walk up to this trust anchor; membership is taken from\n"
		"                 the live parent chain (no supervisor table)\n"
		"                 without it: the live ppid chain up to, not including, PID 1\n"
		"  --json         one JSON object on stdout\n"
		"  --help         this text\n"
		"\n"
		"Exit status: 0 identity printed (and, with --anchor, the chain reaches\n"
		"it); 1 the process or the chain failed (the reason word is printed);\n"
		"2 usage error.\n");
}

static int parse_pid(const char *s, pid_t *out)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || !end || *end || end == s || v <= 0 || v > (1L << 22))
		return -EINVAL;
	*out = (pid_t)v;
	return 0;
}

static json_t *ref_to_json(const struct procref *r)
{
	json_t *o = json_pack(
		"{s:s, s:s, s:i, s:i, s:I, s:[iiii], s:[iiii], s:I, s:s, s:s, s:s}", "key", r->key,
		"key_kind", procref_key_kind_name(r->key_kind), "pid", (int)r->pid, "ppid",
		(int)r->ppid, "start_time", (json_int_t)r->start_time, "uids", (int)r->ruid,
		(int)r->euid, (int)r->suid, (int)r->fsuid, "gids", (int)r->rgid, (int)r->egid,
		(int)r->sgid, (int)r->fsgid, "cgroup_id", (json_int_t)r->cgroup_id, "info_source",
		procref_source_name(r->info_source), "comm", r->comm, "boot_id", r->boot_id);
	if (o && r->key_kind == PROCREF_KEY_PIDFS)
		json_object_set_new(o, "pidfs_ino", json_integer((json_int_t)r->pidfs_ino));
	return o;
}

static void print_text(const struct procref *ref, int hash_err, bool have_anchor,
		       const struct procref *anchor, const struct ancestry_result *res)
{
	printf("process\n");
	printf("  pid:          %d\n", (int)ref->pid);
	printf("  ppid:         %d\n", (int)ref->ppid);
	printf("  key:          %s\n", ref->key);
	printf("  key_kind:     %s\n", procref_key_kind_name(ref->key_kind));
	printf("  start_time:   %llu\n", (unsigned long long)ref->start_time);
	printf("  uids:         %u %u %u %u (real effective saved fs)\n", (unsigned)ref->ruid,
	       (unsigned)ref->euid, (unsigned)ref->suid, (unsigned)ref->fsuid);
	printf("  gids:         %u %u %u %u\n", (unsigned)ref->rgid, (unsigned)ref->egid,
	       (unsigned)ref->sgid, (unsigned)ref->fsgid);
	printf("  cgroup_id:    %llu\n", (unsigned long long)ref->cgroup_id);
	printf("  info_source:  %s\n", procref_source_name(ref->info_source));
	printf("  comm:         %s\n", ref->comm);
	printf("exe\n");
	if (ref->exe_err < 0) {
		printf("  unavailable:  %s\n", strerror(-ref->exe_err));
	} else {
		const struct exe_tuple *e = &ref->exe;
		printf("  path:         %s%s%s\n", e->path, e->deleted ? " (deleted)" : "",
		       e->memfd ? " (memfd)" : "");
		printf("  dev:ino:      %llu:%llu\n", (unsigned long long)e->dev,
		       (unsigned long long)e->ino);
		printf("  size:         %lld\n", (long long)e->size);
		printf("  mtime_ns:     %lld\n", (long long)e->mtime_ns);
		printf("  ctime_ns:     %lld\n", (long long)e->ctime_ns);
		if (e->maps_mismatch)
			printf("  WARNING:      exe does not match the main mapping in maps\n");
		if (e->hashed) {
			char hex[65];
			hex_encode(e->sha256, sizeof(e->sha256), hex);
			printf("  sha256:       %s\n", hex);
		} else {
			printf("  sha256:       unavailable (%s)\n", strerror(-hash_err));
		}
	}
	printf("membership:     %s\n", have_anchor ? MEMBERSHIP_LIVE_CHAIN : MEMBERSHIP_NONE);
	if (have_anchor)
		printf("anchor:         pid %d %s (%s)\n", (int)anchor->pid, anchor->key,
		       anchor->comm);
	else
		printf("anchor:         none given; chain is the live ppid chain up to, not "
		       "including, PID 1\n");
	printf("chain%s\n", res->n ? "" : ":          (empty)");
	for (size_t i = 0; i < res->n; i++) {
		const struct ancestry_hop *h = &res->hops[i];
		printf("  %-7d %-16s %s%s%s\n", (int)h->ref.pid, h->ref.comm, h->ref.key,
		       h->live ? "" : " (recorded, exited)",
		       have_anchor && i + 1 == res->n && res->anchored ? " [anchor]" : "");
	}
	printf("result:         %s", reason_word(res->reason));
	if (res->detail[0])
		printf(": %s", res->detail);
	printf("\n");
}

static int print_json(const struct procref *ref, int hash_err, bool have_anchor,
		      const struct procref *anchor, const struct ancestry_result *res)
{
	json_t *exe = ref->exe_err < 0 ? json_null() : members_exe_to_json(&ref->exe);
	json_t *o = json_pack("{s:o, s:o, s:s, s:o, s:o, s:b, s:s, s:s}", "process",
			      ref_to_json(ref), "exe", exe, "membership",
			      have_anchor ? MEMBERSHIP_LIVE_CHAIN : MEMBERSHIP_NONE, "anchor",
			      have_anchor ? ref_to_json(anchor) : json_null(), "chain",
			      ancestry_chain_to_json(res), "anchored", res->anchored, "reason",
			      reason_word(res->reason), "detail", res->detail);
	if (!o) {
		log_error("cannot build JSON output");
		return -ENOMEM;
	}
	if (ref->exe_err < 0)
		json_object_set_new(o, "exe_error", json_string(strerror(-ref->exe_err)));
	else if (!ref->exe.hashed)
		json_object_set_new(o, "sha256_error", json_string(strerror(-hash_err)));
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return -ENOMEM;
	puts(s);
	free(s);
	return 0;
}

int cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "anchor", required_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	pid_t pid = 0, anchor_pid = 0;
	bool json = false;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_pid(optarg, &pid) < 0) {
				log_error("inspect: --pid needs a positive process id, got '%s'", optarg);
				return 2;
			}
			break;
		case 'a':
			if (parse_pid(optarg, &anchor_pid) < 0) {
				log_error("inspect: --anchor needs a positive process id, got '%s'",
					  optarg);
				return 2;
			}
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			inspect_usage(stdout);
			return 0;
		default:
			log_error("inspect: unknown or incomplete option '%s'", argv[optind - 1]);
			inspect_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		log_error("inspect: unexpected argument '%s'", argv[optind]);
		return 2;
	}
	if (!pid) {
		log_error("inspect: --pid is required");
		inspect_usage(stderr);
		return 2;
	}

	struct kernel_caps caps;
	int r = kernel_caps_probe(&caps);
	if (r < 0) {
		log_error("inspect: kernel probe failed: %s", strerror(-r));
		return 1;
	}
	struct procref ref;
	r = procref_open(&caps, pid, &ref);
	if (r < 0) {
		log_error("inspect: pid %d: %s (%s)", (int)pid, strerror(-r),
			  reason_word(r == -ESRCH ? REASON_PROCESS_VANISHED
						  : REASON_IDENTITY_UNAVAILABLE));
		return 1;
	}
	int hash_err = procref_hash_exe(&ref, NULL);

	struct procref anchor = { .pidfd = -1 };
	struct members *table = NULL;
	struct ancestry_result res;
	int rc = 0;
	if (anchor_pid) {
		r = procref_open(&caps, anchor_pid, &anchor);
		if (r < 0) {
			log_error("inspect: anchor pid %d: %s (%s)", (int)anchor_pid, strerror(-r),
				  reason_word(REASON_ANCHOR_UNKNOWN));
			procref_close(&ref);
			return 1;
		}
		struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE, .live_chain = true };
		r = members_create(&caps, &anchor, &cfg, &table);
		if (r < 0) {
			log_error("inspect: cannot build a lineage table: %s", strerror(-r));
			procref_close(&ref);
			procref_close(&anchor);
			return 1;
		}
		/* Learn the subject through the live chain (records the hops in
		 * the temporary table); the walk below gives the verdict. */
		(void)members_learn(table, pid, NULL, NULL);
		r = ancestry_walk(&caps, table, &ref, NULL, &res);
	} else {
		r = ancestry_walk_unanchored(&caps, &ref, NULL, &res);
	}
	if (r < 0)
		rc = 1;

	if (json) {
		if (print_json(&ref, hash_err, anchor_pid != 0, &anchor, &res) < 0)
			rc = 1;
	} else {
		print_text(&ref, hash_err, anchor_pid != 0, &anchor, &res);
	}
	if (rc)
		log_error("inspect: chain of pid %d: %s", (int)pid, reason_word(res.reason));
	ancestry_result_free(&res);
	members_free(table);
	procref_close(&anchor);
	procref_close(&ref);
	return rc;
}
