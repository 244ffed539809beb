/* suggest: a network policy from the flows an audit recorded
 * (`tether policy suggest`, after `tether run --learn`).
 *
 * Input: JSONL audit lines, semi-trusted (our daemons write them, but it is
 * a file anyone may have edited or concatenated): parsed with jansson,
 * every field checked. Each `egress_decision` with a verified binary and a
 * destination host:port is a flow; other events and flows without an
 * identity are counted and skipped; a line that is not a JSON object is an
 * error with its line number (a partial policy is never written).
 *
 * Output: a policy YAML written with libyaml's emitter: one rule per real
 * binary (the exe path the identity pipeline verified), with
 *   - binaries: that path (one entry per distinct sha256 with pin);
 *     with pin, an ancestor is pinned too when every flow recorded the
 *     same hash for it (else it is required by path only);
 *   - ancestors: the ancestor paths present on EVERY flow of that binary
 *     (none when no ancestor was always there);
 *   - endpoints: one per host, with the ports seen (deduplicated, sorted).
 * Flows the suggestion cannot name exactly are left out with a note: an
 * address in a blocked range (a cidr endpoint would have to open it: a
 * human decides that), a path with '*' (a glob) or control characters.
 * With a merge policy, its document is kept as it is (comments aside) and
 * rules are appended only for flows it does not already allow (decided by
 * netpolicy_decide, symlinks resolved like the proxy does).
 * Before it is handed out, the result is loaded with the project's loader
 * and every flow is decided again: each must be allowed (fail closed). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "policy/policy.h"

struct suggest;

struct suggest_opts {
	bool pin;               /* sha256 on every binaries entry (error if one is unknown) */
	const char *merge_name; /* an existing policy to extend (its text below), or NULL */
	const char *merge_text;
	size_t merge_len;
	int rootfd;             /* where symlinked paths of the merge policy resolve */
	const char *root_label;
};

struct suggest_stats {
	size_t lines;       /* audit lines read */
	size_t flows;       /* flows taken */
	size_t no_identity; /* egress decisions without a verified binary or destination */
	size_t left_out;    /* flows left out (see the notes) */
	size_t covered;     /* flows the merge policy allows already */
	size_t rules;       /* rules written */
};

int suggest_new(struct suggest **out);
void suggest_free(struct suggest *s);

/* One audit line (lineno for messages). 1: a flow, 0: skipped (another
 * event, no identity, left out), -EINVAL: malformed (msg says why and
 * where), -ENOMEM, -E2BIG (more than SUGGEST_MAX_FLOWS flows). */
int suggest_add_line(struct suggest *s, const char *line, size_t len, unsigned lineno, char *msg,
		     size_t msize);

/* The policy as YAML (*yaml malloc'd, NUL-terminated). -EINVAL with diag:
 * a bad merge policy, --pin without a hash; -EPROTO: the result failed its
 * own check (a bug: diag says which flow). */
int suggest_write(struct suggest *s, const struct suggest_opts *o, char **yaml, size_t *len,
		  struct policy_diag *diag);

/* Notes for the user: flows left out and why, one line each. */
const char *const *suggest_notes(const struct suggest *s, size_t *n);
const struct suggest_stats *suggest_stats(const struct suggest *s);

#define SUGGEST_MAX_FLOWS 1000000
#define SUGGEST_MAX_NOTES 100
