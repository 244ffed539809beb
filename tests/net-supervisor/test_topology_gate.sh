#!/bin/bash
# net-supervisor --topology is checked when given: the identity strategy
# must be the topology's, and a local anchor must share our PID namespace
# exactly when the topology says so. Each refusal is exit 1 before listening,
# with a message naming the mismatch; a matching arrangement starts.
set -u
NS="${TETHER_BIN:?}/net-supervisor"
D=$(mktemp -d /tmp/tether-gate.XXXXXX)
PIDS=()
FAILS=0
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }
printf 'version: 1\nnetwork:\n  policies: []\n' >"$D/p.yaml"

refused() { # refused WANT-IN-MESSAGE ARGS...
	local want=$1; shift
	timeout 10 "$NS" --listen 127.0.0.1:0 --policy "$D/p.yaml" --audit /dev/null "$@" >"$D/out" 2>&1
	local rc=$?
	if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then fail "$* started (rc $rc)"; return; fi
	grep -q -- "$want" "$D/out" && ok "refused: $*" || fail "$*: message lacks '$want': $(cat "$D/out")"
}

refused "unknown" --topology nosuch --identity local --anchor-pid $$
refused "uses delegated identity" --topology split-veth --identity local --anchor-pid $$
refused "uses local identity" --topology combined --identity delegated --control unix:$D/c.sock --provisioning-pubkey "$D/none.pub"

# an anchor in a child PID namespace is visible here but not shared
unshare --pid --fork --mount-proc sleep 30 </dev/null >/dev/null 2>&1 &
PIDS+=("$!")
child=""
for _ in $(seq 50); do child=$(cat /proc/"$!"/task/*/children 2>/dev/null | awk '{print $1}'); [ -n "$child" ] && break; sleep 0.1; done
[ -n "$child" ] && PIDS+=("$child") || fail "no process in the child PID namespace"
refused "needs a shared PID namespace" --topology combined --identity local --anchor-pid "$child" \
	--expected-anchor-sha256 "$(sha256sum /usr/bin/sleep | cut -d' ' -f1)"

# a matching arrangement starts (and would wait for its anchor): still running after 1 s
sleep 30 </dev/null >/dev/null 2>&1 &
PIDS+=("$!")
"$NS" --listen 127.0.0.1:0 --policy "$D/p.yaml" --audit /dev/null --topology combined \
	--identity local --anchor-pid "$!" --expected-anchor-sha256 "$(sha256sum /usr/bin/sleep | cut -d' ' -f1)" \
	>"$D/good" 2>&1 &
g=$!
PIDS+=("$g")
disown "$g" # no "Killed" job report when cleanup ends it
sleep 1
kill -0 "$g" 2>/dev/null && ok "combined with a same-namespace anchor starts" || fail "matching topology refused: $(cat "$D/good")"
# without --topology nothing is checked (the name only labels audit lines)
timeout 3 "$NS" --listen 127.0.0.1:0 --policy "$D/p.yaml" --audit /dev/null --identity local --anchor-pid "$child" \
	--expected-anchor-sha256 "$(sha256sum /usr/bin/sleep | cut -d' ' -f1)" >"$D/out" 2>&1
[ $? = 124 ] && ok "no --topology: no check" || fail "without --topology: $(cat "$D/out")"
[ "$FAILS" = 0 ] || { echo "$FAILS failure(s)"; exit 1; }
echo "all passed"
