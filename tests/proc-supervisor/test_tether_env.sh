#!/bin/bash
# `tether env` for a chosen parent environment (env -i + vars): one line per
# variable, kept or dropped with the reason word; values never printed.
set -euo pipefail
T="$TETHER_BIN/tether"
tmp=$(mktemp -d /tmp/tether-env-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/etc" "$tmp/user" "$tmp/proj"
cd "$tmp/proj"
fail() { echo "FAIL: $*" >&2; echo "--- output:" >&2; cat "$tmp/out" >&2 || true; exit 1; }
expect() { grep -Eq -- "$1" "$tmp/out" || fail "missing line /$1/"; }
absent() { ! grep -q -- "$1" "$tmp/out" || fail "unexpected '$1'"; }

run() {
	env -i TETHER_SYSTEM_POLICY_DIR="$tmp/etc" TETHER_USER_POLICY_DIR="$tmp/user" \
		HOME=/root PATH=/usr/bin:.:/bin::/nonexistent LD_PRELOAD= GH_TOKEN=ghp_secretvalue99 \
		ANTHROPIC_API_KEY=sk-ant-value99 LANG=C.UTF-8 'LC_ALL=../../x' SHELL=/bin/evil \
		OLDPWD=/old 'BUN_OPTIONS=--preload ./evil.js' DOTNET_STARTUP_HOOKS=/tmp/evil.dll \
		PYTHONWARNINGS=ignore::evil.W "$T" env "$@" >"$tmp/out" 2>"$tmp/err"
}

run --agent claude
expect '^env mode: sanitized$'
expect '^kept    HOME +allowed  \(HOME, baseline layer, embedded:profiles/baseline.yaml:[0-9]+:[0-9]+\)$'
expect '^kept    LANG +allowed  \(LANG, baseline layer, '
expect '^kept    ANTHROPIC_API_KEY +allowed  \(ANTHROPIC_API_KEY, agent layer, embedded:profiles/agents/claude.yaml:[0-9]+:[0-9]+\)$'
expect '^dropped LD_PRELOAD +hard_deny$'
expect '^dropped GH_TOKEN +not_allowed$'
expect '^dropped BUN_OPTIONS +hard_deny$'
expect '^dropped DOTNET_STARTUP_HOOKS +hard_deny$'
expect '^dropped PYTHONWARNINGS +hard_deny$'
expect '^dropped LC_ALL +value_check  \(LC_\*, baseline layer, '
expect '^dropped SHELL +supervisor_set$'
expect '^dropped OLDPWD +supervisor_set$'
expect '^dropped TETHER_SYSTEM_POLICY_DIR +tether_reserved$'
expect '^set     PWD +supervisor$'
expect '^PATH=/usr/bin:/bin$'
expect '^path dropped  \. \(dot\)$'
expect '^path dropped  "" \(empty\)$'
expect '^path dropped  /nonexistent \(missing\)$'
absent ghp_secretvalue99
absent sk-ant-value99
absent /bin/evil

# where a decision came from: the deciding rule, its layer and position
printf 'version: 1\nenvironment:\n  pass_through: ["GH_*", EDITOR]\n  deny: [lang]\n' >"$tmp/why.yaml"
run --policy "$tmp/why.yaml"
expect "^dropped GH_TOKEN +secret_shaped  \\(GH_\\*, command layer, $tmp/why.yaml:3:18\\)\$"
expect "^dropped LANG +policy_deny  \\(lang, command layer, $tmp/why.yaml:4:10\\)\$"

# the project layer is .tether.yaml in the cwd
printf 'version: 1\nenvironment:\n  mode: secrets-off\n' >"$tmp/proj/.tether.yaml"
run --agent claude
expect '^env mode: secrets-off$'
expect '^dropped ANTHROPIC_API_KEY +secret_shaped  \(ANTHROPIC_API_KEY, agent layer, '
rm "$tmp/proj/.tether.yaml"

# immutable system layer: a --policy file adding a secret is refused
printf 'version: 1\nimmutable: true\n' >"$tmp/etc/policy.yaml"
printf 'version: 1\nenvironment:\n  pass_through:\n    - GH_TOKEN\n' >"$tmp/cmd.yaml"
set +e
run --policy "$tmp/cmd.yaml"; rc=$?
set -e
[ "$rc" = 1 ] || fail "lockdown: exit $rc, want 1"
grep -qx "$tmp/cmd.yaml:4:7: policy lockdown violation: the command layer adds secret-shaped 'GH_TOKEN' to environment.pass_through, but the system policy is immutable" "$tmp/err" ||
	{ cat "$tmp/err"; fail "lockdown message"; }
rm "$tmp/etc/policy.yaml"

# a --policy file with a mistake: FILE:LINE:COL, exit 1
printf 'version: 1\nenvironment:\n  mode: inherit-all\n' >"$tmp/bad.yaml"
set +e
run --policy "$tmp/bad.yaml"; rc=$?
set -e
[ "$rc" = 1 ] || fail "bad policy: exit $rc"
grep -q "^$tmp/bad.yaml:3:9: environment.mode 'inherit-all' is not allowed" "$tmp/err" || fail "bad policy message"

# JSON: the audit event shape, names only
run --agent claude --json --proxy http://192.0.2.1:3128
python3 - "$tmp/out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["mode"] == "sanitized", j
assert "ANTHROPIC_API_KEY" in j["allowed"] and "HTTPS_PROXY" in j["allowed"] and "no_proxy" in j["allowed"], j["allowed"]
d = {x["name"]: x["reason"] for x in j["dropped"]}
assert d["LD_PRELOAD"] == "hard_deny" and d["GH_TOKEN"] == "not_allowed", d
assert j["path"] == "/usr/bin:/bin" and j["path_rewritten"] is True
assert "." in j["path_dropped"]
s = open(sys.argv[1]).read()
assert "ghp_secretvalue99" not in s and "sk-ant-value99" not in s
PY

# usage
set +e
"$T" env --bogus >/dev/null 2>&1; rc=$?
[ "$rc" = 2 ] || fail "usage error: exit $rc, want 2"
"$T" env extra-arg >/dev/null 2>&1; rc=$?
[ "$rc" = 2 ] || fail "extra argument: exit $rc, want 2"
"$T" env --agent nosuch >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" = 1 ] || fail "unknown agent: exit $rc"
grep -q "unknown agent preset" "$tmp/err" || fail "unknown agent message"
"$T" env --help | grep -q '^usage: tether env' || fail "--help"
echo "test_tether_env: ok"
