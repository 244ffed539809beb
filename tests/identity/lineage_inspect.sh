#!/bin/bash
# tether inspect on a real process tree: this shell → sh (S) → sleep (G),
# plus a sibling sleep (X). Text and --json (parsed with python3), the chain
# to an anchor, failure reasons and exit codes, usage errors.
set -u
T="${TETHER_BIN:?}/tether"
tmp=$(mktemp -d /tmp/tether-inspect.XXXXXX)
fail=0
pids=""
cleanup() {
	for p in $pids; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
expect_rc() { # want cmd...
	local want=$1; shift
	timeout 10 "$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$?
	if [ "$rc" -eq "$want" ]; then ok "exit $want: $*"; else bad "exit $rc (want $want): $* :: $(cat "$tmp/err")"; fi
}

sh -c 'sleep 30 & echo $! > "$0"; wait' "$tmp/g" &
S=$!
pids="$pids $S"
sleep 30 &
X=$!
pids="$pids $X"
for _ in $(seq 200); do [ -s "$tmp/g" ] && break; sleep 0.02; done
G=$(cat "$tmp/g" 2>/dev/null)
[ -n "$G" ] || { echo "FAIL: tree did not start"; exit 1; }
pids="$pids $G"
want_sha=$(sha256sum "/proc/$G/exe" | cut -d' ' -f1)
# The distribution's python3 starts in ~0.1 s; a pyenv shim takes seconds.
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if [ "${TETHER_FORCE_FALLBACK:-}" = all ]; then kind=pid_start; src=procfs; else kind=pidfs; src=pidfd_info; fi

# usage
expect_rc 0 "$T" inspect --help
grep -q "usage: tether inspect" "$tmp/out" || bad "--help text"
expect_rc 2 "$T" inspect
expect_rc 2 "$T" inspect --pid abc
expect_rc 2 "$T" inspect --pid 0
expect_rc 2 "$T" inspect --pid "$G" extra
expect_rc 2 "$T" inspect --pid "$G" --bogus
expect_rc 2 "$T" inspect --pid "$G" --anchor -3

# text, no anchor
expect_rc 0 "$T" inspect --pid "$G"
out="$tmp/out"
grep -q "^membership: *none (no anchor given)" "$out" || bad "text: membership line"
grep -q "^  pid: *$G\$" "$out" || bad "text: pid"
grep -q "^  ppid: *$S\$" "$out" || bad "text: ppid"
grep -q "^  key_kind: *$kind\$" "$out" || bad "text: key_kind $kind"
grep -q "^  info_source: *$src\$" "$out" || bad "text: info_source $src"
grep -q "^  sha256: *$want_sha\$" "$out" || bad "text: sha256"
grep -q "^  $S " "$out" || bad "text: chain lists S"
grep -q "^  $$ " "$out" || bad "text: chain lists this shell"
grep -q "^  1 " "$out" && bad "text: chain includes PID 1"
grep -q "^result: *ok" "$out" || bad "text: result ok"

# JSON, anchored at this shell
expect_rc 0 "$T" inspect --pid "$G" --anchor $$ --json
"$PY" - "$tmp/out" "$G" "$S" "$$" "$want_sha" "$kind" "$src" <<'EOF' || fail=1
import json, sys
path, g, s, anchor, sha, kind, src = sys.argv[1:]
d = json.load(open(path))
errs = []
def want(cond, msg):
    if not cond:
        errs.append(msg)
want(d["process"]["pid"] == int(g), "process.pid")
want(d["process"]["ppid"] == int(s), "process.ppid")
want(d["process"]["key_kind"] == kind, "key_kind")
want(d["process"]["info_source"] == src, "info_source")
want(len(d["process"]["uids"]) == 4 and len(d["process"]["gids"]) == 4, "uids/gids")
want(d["exe"]["sha256"] == sha, "exe.sha256")
want(d["exe"]["path"].endswith("sleep"), "exe.path")
want(d["membership"] == "live-chain (no supervisor table)", "membership")
want(d["anchored"] is True and d["reason"] == "ok", "anchored/reason")
chain = [h["pid"] for h in d["chain"]]
want(chain == [int(s), int(anchor)], "chain %r" % chain)
want(d["anchor"]["pid"] == int(anchor), "anchor.pid")
want(d["chain"][-1]["key"] == d["anchor"]["key"], "chain ends at the anchor key")
for e in errs:
    print("FAIL: json:", e)
sys.exit(1 if errs else 0)
EOF

# the anchor is a sibling, not an ancestor
expect_rc 1 "$T" inspect --pid "$G" --anchor "$X" --json
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["reason"]=="ancestry_not_anchored" and d["anchored"] is False else 1)' "$tmp/out" \
	|| bad "sibling anchor: reason $(cat "$tmp/out")"
grep -q "ancestry_not_anchored" "$tmp/err" || bad "sibling anchor: reason on stderr"

# the anchor is below the subject: the chain runs to PID 1
expect_rc 1 "$T" inspect --pid "$S" --anchor "$G"
grep -q "^result: *reached_namespace_init" "$tmp/out" || bad "anchor below subject: $(grep result "$tmp/out")"

# a process that is gone
kill -9 "$X"; wait "$X" 2>/dev/null
expect_rc 1 "$T" inspect --pid "$X"
grep -q "process_vanished" "$tmp/err" || bad "gone pid: reason"

[ "$fail" -eq 0 ] && echo "lineage_inspect: ok"
exit "$fail"
