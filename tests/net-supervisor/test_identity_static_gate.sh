#!/bin/bash
# The static identity strategy (trusts every flow) is test-only: the
# production net-supervisor refuses --identity static and every
# --identity-static* flag before listening (exit 2, the message names the
# test build), does not contain the strategy's code and does not offer it
# in --features; net-supervisor-testing offers it and runs with it.
. "${TETHER_SRC:?}/tests/common/script_lib.sh" idstatic
NS="$BIN/net-supervisor" NST="$BIN/net-supervisor-testing"
printf 'version: 1\nnetwork:\n  policies: []\n' >"$D/p.yaml"
WANT="not built into this binary; the test build is net-supervisor-testing"

refused() { # refused FLAG-NAMED-IN-MESSAGE ARGS...
	local flag=$1; shift
	timeout 30 "$NS" --listen 127.0.0.1:0 --policy "$D/p.yaml" --audit /dev/null "$@" >"$D/out" 2>&1
	local rc=$?
	if [ "$rc" != 2 ]; then fail "production binary with $*: rc $rc, want 2: $(cat "$D/out")"; return; fi
	grep -qF -- "$flag: $WANT" "$D/out" && ok "refused: $*" ||
		fail "$*: message lacks '$flag: $WANT': $(cat "$D/out")"
}
refused "--identity static" --identity static --identity-static /usr/bin/curl
refused "--identity static" --identity static
refused "--identity-static" --identity-static /usr/bin/curl
refused "--identity-static-sha256" --identity-static-sha256 "$(printf 'a%.0s' $(seq 64))"
refused "--identity-static-ancestor" --identity-static-ancestor /usr/bin/bash
refused "--identity-static-delay-ms" --identity-static-delay-ms 10
refused "--identity-static-anchor-delay-ms" --identity-static-anchor-delay-ms 10

# --features: the test build adds exactly identity-static
"$NS" --features >"$D/f.prod" || fail "net-supervisor --features failed"
"$NST" --features >"$D/f.test" || fail "net-supervisor-testing --features failed"
grep -qx identity-static "$D/f.prod" && fail "production --features offers identity-static"
[ "$(diff "$D/f.prod" "$D/f.test" | grep '^[<>]')" = "> identity-static" ] &&
	ok "--features differ by identity-static only" || fail "--features differ: $(diff "$D/f.prod" "$D/f.test")"
grep -qx identity-local "$D/f.prod" || fail "production --features lacks identity-local"

# --help: the production binary names the test build instead of the flags
"$NS" --help >"$D/h.prod" 2>&1
grep -q -- "--identity-static PATH" "$D/h.prod" && fail "production --help lists --identity-static PATH"
grep -q "net-supervisor-testing" "$D/h.prod" && ok "production --help names the test build" ||
	fail "production --help does not name net-supervisor-testing"
"$NST" --help 2>&1 | grep -q -- "--identity-static PATH" && ok "test build --help lists --identity-static" ||
	fail "test build --help lacks --identity-static"

# the strategy's code is not in the production binary
if command -v nm >/dev/null; then
	nm "$NS" 2>/dev/null | grep -q identity_static_new && fail "identity_static_new is in net-supervisor"
	nm "$NST" 2>/dev/null | grep -q identity_static_new && ok "identity_static_new only in the test build" ||
		fail "identity_static_new not in net-supervisor-testing"
fi
grep -q "TESTING MODE" "$NS" && fail "net-supervisor contains the static strategy's TESTING MODE warning"

# the test build runs with it: ready, warns loudly
PORT=$(freeport) ADMIN=$(freeport)
while [ "$ADMIN" = "$PORT" ]; do ADMIN=$(freeport); done
"$NST" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" --policy "$D/p.yaml" --audit /dev/null \
	--identity static --identity-static /usr/bin/curl 2>"$D/nst.err" &
PIDS+=("$!")
ready=""
for _ in $(seq 300); do
	ready=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/readyz")
	[ "$ready" = 200 ] && break
	sleep 0.1
done
[ "$ready" = 200 ] && ok "net-supervisor-testing --identity static is ready" ||
	fail "net-supervisor-testing not ready ($ready): $(cat "$D/nst.err")"
grep -q "TESTING MODE" "$D/nst.err" && ok "test build warns TESTING MODE" || fail "no TESTING MODE warning"
finish "identity-static gate checks"
