#!/bin/bash
# proc-supervisor --control-peer-uid: a unix: control socket that one uid
# alone may use. The socket file belongs to that uid (0600), a peer of that
# uid anchors a net-supervisor, a peer of any other uid (root included) is
# refused at accept and its net-supervisor stays not ready. It is refused
# on a tcp: endpoint and for a non-numeric value. (Deployments run the
# split sidecar's net-supervisor as an unprivileged uid this way.)
. "${TETHER_SRC:?}/tests/common/script_lib.sh" ctlpeeruid
command -v setpriv >/dev/null || { echo "SKIP: setpriv missing"; exit 0; }
NOBODY=65534
chmod 0755 "$D"
"$BIN/tether" keygen --out "$D/keys" >/dev/null || { echo "FAIL: keygen" >&2; exit 1; }
chmod 0755 "$D/keys"; chmod 0644 "$D/keys/provisioning.pub"
printf 'version: 1\nnetwork:\n  policies: []\n' >"$D/p.yaml"
chmod 0644 "$D/p.yaml"
SOCK="$D/control.sock"

"$BIN/proc-supervisor" --control "unix:$SOCK" --provisioning-key "$D/keys/provisioning.key" \
	--control-peer-uid "$NOBODY" -- sleep 60 2>"$D/ps.err" &
PSPID=$!
PIDS+=("$PSPID")
for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done
[ "$(stat -c '%u %a' "$SOCK" 2>/dev/null)" = "$NOBODY 600" ] && ok "the socket belongs to uid $NOBODY, mode 0600" ||
	fail "socket owner/mode: $(stat -c '%u %a' "$SOCK" 2>&1)"

# ns_ready TRIES [RUNAS...]: the net-supervisor's /readyz status after up to TRIES × 0.1 s
ns_ready() {
	local tries=$1 np ap code=""
	shift
	np=$(freeport) ap=$(freeport)
	while [ "$ap" = "$np" ]; do ap=$(freeport); done
	"$@" "$BIN/net-supervisor" --listen "127.0.0.1:$np" --admin "127.0.0.1:$ap" --policy "$D/p.yaml" \
		--audit /dev/null --identity delegated --control "unix:$SOCK" \
		--provisioning-pubkey "$D/keys/provisioning.pub" 2>"$D/ns.err" &
	local nspid=$!
	PIDS+=("$nspid")
	for _ in $(seq "$tries"); do
		code=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ap/readyz")
		[ "$code" = 200 ] && break
		sleep 0.1
	done
	kill "$nspid" 2>/dev/null
	wait "$nspid" 2>/dev/null
	echo "$code"
}

[ "$(ns_ready 100 setpriv --reuid "$NOBODY" --regid "$NOBODY" --clear-groups)" = 200 ] &&
	ok "a net-supervisor running as uid $NOBODY anchors (ready)" || fail "not ready as uid $NOBODY: $(cat "$D/ns.err")"
[ "$(ns_ready 20)" != 200 ] && ok "a net-supervisor running as root is refused (not ready)" ||
	fail "root anchored on a socket of uid $NOBODY"
grep -q "uid 0 refused (want uid $NOBODY)" "$D/ps.err" && ok "the refusal is logged with both uids" ||
	fail "no refusal in: $(cat "$D/ps.err")"
kill "$PSPID"; wait "$PSPID" 2>/dev/null

# bad values: 125 and one clear line
"$BIN/proc-supervisor" --control "tcp:127.0.0.1:$(freeport)" --provisioning-key "$D/keys/provisioning.key" \
	--control-peer-uid "$NOBODY" -- true >"$D/out" 2>&1
rc=$?
[ "$rc" = 125 ] && grep -q "applies to a unix: control endpoint" "$D/out" &&
	ok "--control-peer-uid on a tcp: endpoint is refused (125)" || fail "tcp endpoint: rc $rc: $(cat "$D/out")"
"$BIN/proc-supervisor" --control "unix:$D/c2.sock" --provisioning-key "$D/keys/provisioning.key" \
	--control-peer-uid nobody -- true >"$D/out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "control-peer-uid: a numeric uid: nobody" "$D/out" &&
	ok "a non-numeric --control-peer-uid is a usage error (2)" || fail "bad uid: rc $rc: $(cat "$D/out")"
finish "control peer uid tests"
