#!/bin/bash
# Transparent capture without `tether run`: a pod netns this test creates
# (the real pod fence: `tether fence install --proxy-uid 0 --allow-port
# 19611 --transparent-port 19612`) joined by a veth to a server netns
# (198.51.100.10); net-supervisor in the pod netns as root with the static
# test identity and --transparent-listen 127.0.0.1:19612; the clients run
# as uid 65534 and never name a proxy.
#   - an HTTP request trickled a byte at a time: decided as HTTP once the
#     head is in (bounded wakeups, then the timer's last peek), its Host
#     unconfirmed (no resolver): name_source none, peeked_name kept;
#   - a raw stream to a port only an http endpoint names: reset,
#     protocol_not_allowed;
#   - a server that speaks first, protocol: tcp: allowed once the peek
#     time (--transparent-peek-ms 1000) is over, the banner arrives;
#   - a TLS ClientHello with SNI to a port no rule names: denied (reset),
#     peek tls, peeked_name;
#   - the capture port named directly: refused for uid 65534 (the fence),
#     reset for root (no original destination), counted in
#     tether_transparent_unredirected_total.
set -u
BIN=${TETHER_BIN:?}
ID=$$
POD=ttpod$ID NET=ttnet$ID
TMP=$(mktemp -d /tmp/tether-transparent-XXXXXX)
chmod 755 "$TMP"
PIDS=()
PY3=python3
[ -x /usr/bin/python3 ] && PY3=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; [ -f $TMP/ns.err ] && sed 's/^/  ns: /' $TMP/ns.err | tail -20 >&2
	[ -f $TMP/audit.jsonl ] && sed 's/^/  audit: /' $TMP/audit.jsonl | tail -10 >&2; exit 1; }
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
	ip netns del $POD 2>/dev/null
	ip netns del $NET 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 0; }
wait_for() { # wait_for SECONDS CMD...
	local n=$(( $1 * 20 )); shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
	return 1
}

ip netns add $POD && ip netns add $NET || fail "cannot create namespaces"
ip link add tta$ID type veth peer name ttb$ID || fail "veth"
ip link set tta$ID netns $POD && ip link set ttb$ID netns $NET || fail "move veth"
inpod() { ip netns exec $POD "$@"; }
innet() { ip netns exec $NET "$@"; }
inpod ip link set lo up && innet ip link set lo up
inpod ip addr add 198.51.100.2/24 dev tta$ID && inpod ip link set tta$ID up
innet ip addr add 198.51.100.10/24 dev ttb$ID && innet ip link set ttb$ID up
"$BIN/tether" fence install --netns $POD --proxy-uid 0 --allow-port 19611 --transparent-port 19612 ||
	fail "fence install"

# servers: HTTP on 8080, a banner-first service on 8082 (ip netns exec
# itself in the background, not a function: $! is then the process)
ip netns exec $NET "$PY3" -c '
import socket, threading
def http():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("198.51.100.10", 8080)); s.listen(8)
    while True:
        c, _ = s.accept(); d = b""
        while b"\r\n\r\n" not in d:
            x = c.recv(100)
            if not x: break
            d += x
        c.sendall(b"HTTP/1.0 200 OK\r\n\r\nok"); c.close()
def banner():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("198.51.100.10", 8082)); s.listen(8)
    while True:
        c, _ = s.accept(); c.sendall(b"220 banner\r\n"); c.close()
threading.Thread(target=http, daemon=True).start()
banner()' >$TMP/servers.log 2>&1 &
PIDS+=($!)
cat >$TMP/policy.yaml <<'P'
version: 1
network:
  policies:
    - name: web
      binaries: [{path: /usr/bin/true}]
      endpoints:
        - {cidr: 198.51.100.0/24, ports: [8080, 8081]}
        - {cidr: 198.51.100.0/24, ports: [8082], protocol: tcp}
P
ip netns exec $POD "$BIN/net-supervisor-testing" --listen 127.0.0.1:19611 --transparent-listen 127.0.0.1:19612 \
	--transparent-peek-ms 1000 --admin 127.0.0.1:19613 --policy $TMP/policy.yaml --audit $TMP/audit.jsonl \
	--identity-static /usr/bin/true >$TMP/ns.out 2>$TMP/ns.err &
PIDS+=($!)
wait_for 30 sh -c "ip netns exec $POD curl -sf --noproxy '*' -o /dev/null http://127.0.0.1:19613/readyz" ||
	fail "net-supervisor not ready"
wait_for 30 innet bash -c 'exec 3<>/dev/tcp/198.51.100.10/8082' 2>/dev/null || fail "servers did not start"

as_nobody() { inpod setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
as_nobody "$PY3" - >$TMP/out 2>&1 <<'PY'
import socket, ssl, time
def conn(port):
    return socket.create_connection(("198.51.100.10", port), timeout=10)
# 1. trickled HTTP
s = conn(8080)
for b in b"GET / HTTP/1.1\r\nHost: trickle.test\r\nX-Pad: aaaa\r\n\r\n":
    s.send(bytes([b])); time.sleep(0.001)
print("trickle", s.recv(100).split(b"\r\n")[0].decode())
# 2. raw stream, http endpoint only
s = conn(8081)
try:
    s.send(b"hello raw\n"); d = s.recv(10); print("raw", "eof" if not d else "data")
except OSError as e:
    print("raw", type(e).__name__)
# 3. server speaks first, protocol: tcp
s = conn(8082); t = time.monotonic()
print("banner", s.recv(64).decode().strip(), "waited" if time.monotonic() - t >= 0.9 else "early")
# 4. TLS with SNI, no rule for 8443
c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
try:
    c.wrap_socket(conn(8443), server_hostname="sni.test"); print("tls open")
except OSError as e:
    print("tls", type(e).__name__)
# 5. the capture port itself
try:
    socket.create_connection(("127.0.0.1", 19612), timeout=5).recv(1); print("direct open")
except OSError as e:
    print("direct", type(e).__name__)
PY
cat $TMP/out
grep -qx "trickle HTTP/1.0 200 OK" $TMP/out || fail "trickled HTTP request"
grep -Eqx "raw (eof|ConnectionResetError)" $TMP/out || fail "raw stream not refused"
grep -qx "banner 220 banner waited" $TMP/out || fail "server-first stream"
grep -Eqx "tls (ConnectionResetError|SSLEOFError|SSLZeroReturnError|OSError)" $TMP/out || fail "TLS flow not refused"
grep -Eqx "direct (ConnectionRefusedError|ConnectionResetError)" $TMP/out || fail "direct connection to the capture port"
# root is exempt from the fence: reaches the port, has no original destination
inpod "$PY3" -c '
import socket
try:
    d = socket.create_connection(("127.0.0.1", 19612), timeout=5).recv(1); print("root", "eof" if not d else "data")
except OSError as e:
    print("root", type(e).__name__)' | grep -Eqx "root (eof|ConnectionResetError)" || fail "root direct connection not reset"

"$PY3" - $TMP/audit.jsonl <<'PY' || fail "audit lines"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"egress_decision"' in l]
def one(port, **want):
    for e in ev:
        if (e.get("dest") or {}).get("port") == port and all(e.get(k) == v for k, v in want.items()):
            return e
    print(f"no decision for port {port} with {want}; have:")
    for e in ev:
        print(" ", (e.get("dest") or {}).get("port"), e.get("decision"), e.get("reason"), e.get("capture"),
              e.get("name_source"), e.get("peek"), e.get("peeked_name"))
    sys.exit(1)
one(8080, decision="allow", capture="transparent", name_source="none", peek="http", peeked_name="trickle.test")
one(8081, decision="deny", reason="protocol_not_allowed", capture="transparent", peek="other")
one(8082, decision="allow", capture="transparent", name_source="none", peek="incomplete")
one(8443, decision="deny", reason="no_matching_policy", capture="transparent", peek="tls", peeked_name="sni.test")
if any((e.get("dest") or {}).get("port") == 19612 for e in ev):
    print("a direct connection to the capture port was decided"); sys.exit(1)
PY
m=$(inpod curl -s --noproxy '*' http://127.0.0.1:19613/metrics)
echo "$m" | grep -qx 'tether_transparent_unredirected_total 1' || fail "unredirected not counted: $(echo "$m" | grep transparent)"
echo "$m" | grep -qx 'tether_transparent_flows_total{peek="tls"} 1' || fail "tls flow not counted"
echo PASS
