#!/bin/bash
# proc-supervisor --control-allow: on a tcp: control endpoint only peers
# from the listed sources may connect. A peer from elsewhere is closed at
# accept (no HelloAck, well before the 5 s Hello deadline that holds a
# silent allowed peer), so it can neither hold one of the 64 slots nor ask
# about processes; the net-supervisor from an allowed source anchors as
# usual (also while 64 allowed peers idle in every slot: one of them makes
# room), from a refused one it stays not ready. Bad values are refused at
# start.
. "${TETHER_SRC:?}/tests/common/script_lib.sh" ctlallow
"$BIN/tether" keygen --out "$D/keys" >/dev/null || { echo "FAIL: keygen" >&2; exit 1; }

# start_ps ALLOW: a proc-supervisor serving tcp:127.0.0.1:$CP, allowing ALLOW
start_ps() {
	CP=$(freeport)
	"$BIN/proc-supervisor" --control "tcp:127.0.0.1:$CP" --provisioning-key "$D/keys/provisioning.key" \
		--control-allow "$1" -- sleep 30 2>"$D/ps.err" &
	PSPID=$!
	PIDS+=("$PSPID")
	for _ in $(seq 100); do
		python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$CP),timeout=1).close()" 2>/dev/null && break
		sleep 0.05
	done
}
# seconds until a silent peer is closed (capped at 3)
close_after() {
	python3 - "$CP" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
t = time.time()
try:
    s.recv(1)
except socket.timeout:
    pass
except ConnectionResetError:
    pass
print("%.2f" % (time.time() - t))
EOF
}
# readyz ADMIN_PORT: the net-supervisor's /readyz status after up to 5 s
ns_ready() {
	local np ap
	np=$(freeport) ap=$(freeport)
	while [ "$ap" = "$np" ]; do ap=$(freeport); done
	printf 'version: 1\nnetwork:\n  policies: []\n' >"$D/p.yaml"
	"$BIN/net-supervisor" --listen "127.0.0.1:$np" --admin "127.0.0.1:$ap" --policy "$D/p.yaml" \
		--audit /dev/null --identity delegated --control "tcp:127.0.0.1:$CP" \
		--provisioning-pubkey "$D/keys/provisioning.pub" --workers 2 2>"$D/ns.err" &
	local nspid=$!
	PIDS+=("$nspid")
	local code=""
	for _ in $(seq "$1"); do
		code=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ap/readyz")
		[ "$code" = 200 ] && break
		sleep 0.1
	done
	kill "$nspid" 2>/dev/null
	wait "$nspid" 2>/dev/null
	echo "$code"
}

# refused source
start_ps 192.0.2.7
t=$(close_after)
awk -v t="$t" 'BEGIN { exit !(t < 1.0) }' && ok "a peer from outside the list is closed at once (${t}s)" ||
	fail "refused peer closed after ${t}s"
[ "$(ns_ready 20)" != 200 ] && ok "a net-supervisor from a refused source stays not ready" ||
	fail "the net-supervisor anchored from a refused source"
grep -q "control peer 127.0.0.1 refused by peer check" "$D/ps.err" && ok "the refusal is logged with the address" || fail "no refusal in: $(cat "$D/ps.err")"
kill "$PSPID"; wait "$PSPID" 2>/dev/null

# allowed source
start_ps 127.0.0.0/8
t=$(close_after)
awk -v t="$t" 'BEGIN { exit !(t >= 2.5) }' && ok "an allowed silent peer waits for its Hello (${t}s)" ||
	fail "allowed peer closed after ${t}s"
[ "$(ns_ready 50)" = 200 ] && ok "a net-supervisor from an allowed source anchors (ready)" ||
	fail "not ready from an allowed source: $(cat "$D/ns.err")"
# 64 allowed peers that say Hello and then idle hold every slot: the
# net-supervisor still anchors, each of its channels in the slot of the one
# idle longest.
python3 - "$CP" "$D" <<'EOF' &
import os, socket, sys, time
port, d = int(sys.argv[1]), sys.argv[2]
hello = bytes.fromhex("00000007" "0801" "1a03" "0a0178")  # Frame{1.0, Hello{role "x"}}
conns = []
for _ in range(64):
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.sendall(hello)
    n = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "big")
    if n and len(s.recv(n, socket.MSG_WAITALL)) == n:
        conns.append(s)
open(d + "/held", "w").write("%d\n" % len(conns))
end = time.time() + 20
while time.time() < end and not os.path.exists(d + "/stop"):
    time.sleep(0.05)
closed = 0
for s in conns:
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
open(d + "/closed", "w").write("%d\n" % closed)
EOF
HOLDER=$!
PIDS+=("$HOLDER")
for _ in $(seq 100); do [ -s "$D/held" ] && break; sleep 0.05; done
[ "$(cat "$D/held" 2>/dev/null)" = 64 ] && ok "64 peers said Hello and idle" || fail "held: $(cat "$D/held" 2>/dev/null)"
# (--workers 2: a control channel per worker; ready only when both are
# anchored, so neither displaced the other)
[ "$(ns_ready 50)" = 200 ] && ok "a net-supervisor with 2 workers still anchors next to 64 idle peers (ready)" ||
	fail "not ready next to 64 idle peers: $(cat "$D/ns.err")"
touch "$D/stop"
wait "$HOLDER" 2>/dev/null
[ "$(cat "$D/closed" 2>/dev/null)" = 2 ] && ok "exactly one idle peer made room for each of its two channels" ||
	fail "idle peers closed: $(cat "$D/closed" 2>/dev/null)"
grep -q "closing one idle for" "$D/ps.err" && ok "the eviction is logged" || fail "no eviction line in: $(cat "$D/ps.err")"
kill "$PSPID"; wait "$PSPID" 2>/dev/null

# bad values
"$BIN/proc-supervisor" --control "tcp:127.0.0.1:$(freeport)" --provisioning-key "$D/keys/provisioning.key" \
	--control-allow 192.0.2.300 -- true >"$D/out" 2>&1
rc=$?
[ "$rc" = 125 ] && grep -q "control-allow 192.0.2.300: expected an address" "$D/out" &&
	ok "a bad --control-allow is refused (125)" || fail "bad value: rc $rc: $(cat "$D/out")"
"$BIN/proc-supervisor" --control "unix:$D/c.sock" --provisioning-key "$D/keys/provisioning.key" \
	--control-allow 127.0.0.1 -- true >"$D/out" 2>&1
rc=$?
[ "$rc" = 125 ] && grep -q "applies to a tcp: control endpoint" "$D/out" &&
	ok "--control-allow on a unix: endpoint is refused (125)" || fail "unix endpoint: rc $rc: $(cat "$D/out")"

# an endpoint someone else holds: one clear error and 125 (it freed a
# pointer it did not own and aborted, 134, before)
BP=$(freeport)
python3 -c "import socket,time,sys; s=socket.socket(); s.bind(('127.0.0.1',$BP)); s.listen(1); open(sys.argv[1],'w').close(); time.sleep(10)" "$D/held_port" &
HOLD=$!
PIDS+=("$HOLD")
for _ in $(seq 100); do [ -e "$D/held_port" ] && break; sleep 0.05; done
"$BIN/proc-supervisor" --control "tcp:127.0.0.1:$BP" --provisioning-key "$D/keys/provisioning.key" \
	-- true >"$D/out" 2>&1
rc=$?
[ "$rc" = 125 ] && grep -q "Address already in use" "$D/out" && ! grep -q "free()" "$D/out" &&
	ok "a control endpoint in use: a clear error, 125" || fail "endpoint in use: rc $rc: $(cat "$D/out")"
kill "$HOLD" 2>/dev/null; wait "$HOLD" 2>/dev/null

finish "--control-allow checks"
