/* Best-effort secret redaction for argv and log lines (`--dry-run`, audit
 * JSONL, `tether env`). Recognised shapes become "[REDACTED]":
 *   flags      --api-key=V  --token V  --password V  (any flag whose name has
 *              a component key/token/secret/password/passwd/pass/pwd/auth/
 *              credential/cookie/session), -pV for mysql-family tools and
 *              sshpass, curl/wget -u/--user user:V
 *   key=value  NAME=V and NAME: V when NAME is secret-ish (env assignments,
 *              query strings, JSON "token": "V")
 *   headers    Authorization:, Proxy-Authorization:, Cookie:, X-Api-Key:
 *   URLs       scheme://user:V@host
 *   tokens     sk-…, ghp_/gho_/ghs_/ghu_/ghr_/github_pat_…, glpat-…, xox?-…,
 *              AKIA/ASIA + 16, AIza + 35, JWTs (eyJ….….)
 *   PEM        the body between -----BEGIN X----- and -----END X-----
 *   values     every value registered in common/secrets.h (the secrets of
 *              `credentials:` this process knows), wherever it occurs
 * It cannot know every secret format; it never promises that a line is
 * clean, and it does not change what the child itself sees in
 * /proc/<pid>/cmdline. Secrets belong in the credential broker, not argv. */
#pragma once

#define REDACTED "[REDACTED]"

/* A redacted copy of s (malloc), NULL on ENOMEM. */
char *redact_line(const char *s);
/* A redacted copy of a NULL-terminated argv (argv[0] picks tool rules). */
char **redact_argv(char *const *argv);
void redact_argv_free(char **v);
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Is this key/flag name secret-ish? ("--api-key", "AWS_SECRET_ACCESS_KEY") */
bool redact_key_secretish(const char *id, size_t len);
/* Redact every string inside j in place (objects, arrays); a string value
 * whose object key is secret-ish becomes "[REDACTED]" whole. For audit
 * events that carry user-supplied text (argv, headers). -ENOMEM or 0. */
int redact_json(json_t *j);
