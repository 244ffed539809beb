#!/bin/bash
# --strict-socket-owner, end to end through the identity service and a
# delegated net-supervisor: a workload (python3, allowed by the policy)
# connects to the proxy, hands the socket by SCM_RIGHTS to a process outside
# the tree and exits; the outsider sends the request.
#   default: the connect-time registry attributes the flow to the workload
#            (allowed, binary python3) - the documented trade-off;
#   strict:  the connector is gone, the holder search finds only the
#            outsider: denied.
# A request the workload makes itself is allowed in both modes.
. "$(dirname "$0")/lib.sh"
NS_BIN="${TETHER_BIN}/net-supervisor"
TETHER="${TETHER_BIN}/tether"
# Debian's interpreter by absolute path (a PATH lookup may find a shim)
PY=$(readlink -f /usr/bin/python3)
[ -x "$PY" ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
chmod 755 "$D"
"$TETHER" keygen --out "$D/keys" >/dev/null || { fail "keygen"; finish; }

# the upstream: a loopback HTTP server the test owns
mkdir -p "$D/www" && echo hi >"$D/www/index.html"
"$PY" -m http.server 0 --bind 127.0.0.1 --directory "$D/www" >"$D/http.log" 2>&1 &
BG_PIDS+=("$!")
disown "$!"
for _ in $(seq 100); do
	UP=$(sed -n 's/.*port \([0-9]*\).*/\1/p' "$D/http.log" | head -1)
	[ -n "$UP" ] && break
	sleep 0.05
done
[ -n "$UP" ] || { fail "no upstream"; finish; }
cat >"$D/p.yaml" <<YAML
version: 1
network:
  mode: enforce
  policies:
    - name: py
      binaries:
        - path: $PY
      endpoints:
        - cidr: 127.0.0.0/8
          ports: [$UP]
YAML

# the outsider: receives one fd, sends the request on it, prints the status
cat >"$D/outsider.py" <<'PYEOF'
import array, socket, sys
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sys.argv[1]); srv.listen(1); srv.settimeout(40)
c, _ = srv.accept()
fds = array.array("i")
msg, anc, _, _ = c.recvmsg(32, socket.CMSG_LEN(fds.itemsize))
fds.frombytes(anc[0][2][:fds.itemsize])
# the message is the connector's pid: wait (up to 5 s) until it has exited,
# so the request goes out on a socket only the outsider holds (a zombie
# holds no descriptors)
import time
pid, deadline = int(msg), time.monotonic() + 5
while time.monotonic() < deadline:
    try:
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    except OSError:
        break
    time.sleep(0.01)
s = socket.socket(fileno=fds[0]); s.settimeout(20)
s.sendall(f"GET http://127.0.0.1:{sys.argv[2]}/ HTTP/1.1\r\nHost: 127.0.0.1:{sys.argv[2]}\r\nConnection: close\r\n\r\n".encode())
print(s.recv(100).split(b"\r\n")[0].decode())
PYEOF
# the workload: connect to the proxy, hand the socket over, exit; then
# (a second python3) one request of its own
cat >"$D/handoff.py" <<'PYEOF'
import array, os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); u.connect(sys.argv[1])
u.sendmsg([str(os.getpid()).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [s.fileno()]))])
PYEOF
cat >"$D/own.py" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); s.settimeout(20)
s.sendall(f"GET http://127.0.0.1:{sys.argv[2]}/ HTTP/1.1\r\nHost: 127.0.0.1:{sys.argv[2]}\r\nConnection: close\r\n\r\n".encode())
print(s.recv(100).split(b"\r\n")[0].decode())
PYEOF

for mode in default strict; do
	rm -f "$D/ctl.sock" "$D/hand.sock" "$D/audit.jsonl" "$D/ns.out"
	PPORT=$((20000 + RANDOM % 20000))
	"$NS_BIN" --listen 127.0.0.1:$PPORT --policy "$D/p.yaml" --audit "$D/audit.jsonl" \
		--identity delegated --control "unix:$D/ctl.sock" --provisioning-pubkey "$D/keys/provisioning.pub" \
		>"$D/ns.out" 2>&1 &
	NSP=$!
	BG_PIDS+=("$NSP")
	"$PY" "$D/outsider.py" "$D/hand.sock" "$UP" >"$D/outsider.$mode" 2>&1 &
	OUTP=$!
	BG_PIDS+=("$OUTP")
	extra=()
	[ "$mode" = strict ] && extra=(--strict-socket-owner)
	timeout 60 "$PS" --audit "$D/ps.$mode.jsonl" --cgroup none "${extra[@]}" --control "unix:$D/ctl.sock" \
		--provisioning-key "$D/keys/provisioning.key" -- sh -c "
		i=0; while ! grep -q 'ready:' $D/ns.out && [ \$i -lt 400 ]; do sleep 0.05; i=\$((i+1)); done
		while [ ! -S $D/hand.sock ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i+1)); done
		$PY $D/handoff.py $D/hand.sock $PPORT
		i=0; while [ ! -s $D/outsider.$mode ] && [ \$i -lt 400 ]; do sleep 0.05; i=\$((i+1)); done
		$PY $D/own.py $PPORT $UP" >"$D/own.$mode" 2>&1
	wait "$OUTP" 2>/dev/null
	kill "$NSP" 2>/dev/null; wait "$NSP" 2>/dev/null
	own=$(grep HTTP "$D/own.$mode" | tail -1); handed=$(tail -1 "$D/outsider.$mode")
	expect_eq "[$mode] the workload's own request" "${own#HTTP/1.? }" "200 OK"
	if [ "$mode" = default ]; then
		expect_eq "[default] handed-off socket (registry: the connector)" "${handed#HTTP/1.? }" "200 OK"
	else
		case "$handed" in *403*) ok "[strict] handed-off socket refused: $handed" ;;
		*) fail "[strict] handed-off socket: '$handed'" ;; esac
		reason=$(jq -r 'select(.event=="egress_decision" and .decision=="deny") | .reason' "$D/audit.jsonl" | head -1)
		case "$reason" in identity_unavailable|foreign_process|ambiguous_socket_owner) ok "[strict] reason $reason" ;;
		*) fail "[strict] reason '$reason'" ;; esac
	fi
done
[ "$FAILS" = 0 ] || cat "$D"/ps.*.jsonl "$D/audit.jsonl" >&2
finish
