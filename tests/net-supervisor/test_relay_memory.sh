#!/bin/bash
# The relay memory budget (net-supervisor --relay-memory, proxy.c).
#
# 200 tunnels whose clients never read, to an upstream that sends as fast
# as it can: without the budget the proxy held ~2 MiB of buffers per tunnel
# (414 MB RSS for 200). With --relay-memory 16 MiB, the buffers it holds
# (tether_relay_buffered_bytes) and its RSS stay bounded, and a healthy
# tunnel opened meanwhile still moves 8 MiB to its end, byte-exact.
# With --workers 2 (docs/net-supervisor.md, Workers) the tunnels are on
# both workers and the budget is one for both: the bytes held stay within
# 30 MiB (measured 23-24 MiB). A budget per worker would hold more: two
# --workers 1 proxies with 100 of these tunnels and 16 MiB each held 35-37
# MiB together.
. "${TETHER_SRC:?}/tests/common/script_lib.sh" relaymem

# Upstream: on the first port it sends 256 KiB chunks to every connection
# for as long as the test runs; on the second it sends 8 MiB of a counting
# pattern and closes.
cat >"$D/up.py" <<'EOF'
import selectors, socket, sys, time
def listen():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0)); s.listen(1024); s.setblocking(False); return s
flood, exact = listen(), listen()
open(sys.argv[1], "w").write("%d %d" % (flood.getsockname()[1], exact.getsockname()[1]))
pattern = bytes(range(256)) * 32768  # 8 MiB
sel = selectors.DefaultSelector()
sel.register(flood, selectors.EVENT_READ, "flood"); sel.register(exact, selectors.EVENT_READ, "exact")
chunk = b"x" * 262144
end = time.time() + 80
while time.time() < end:
    for key, _ in sel.select(0.2):
        if key.data in ("flood", "exact"):
            try:
                c, _ = key.fileobj.accept()
            except BlockingIOError:
                continue
            c.setblocking(False)
            sel.register(c, selectors.EVENT_WRITE, [key.data, 0])
            continue
        kind, sent = key.data
        try:
            if kind == "flood":
                key.fileobj.send(chunk)
            else:
                sent += key.fileobj.send(pattern[sent:sent + 262144])
                key.data[1] = sent
                if sent == len(pattern):
                    sel.unregister(key.fileobj); key.fileobj.close()
        except BlockingIOError:
            pass
        except OSError:
            sel.unregister(key.fileobj); key.fileobj.close()
EOF
python3 "$D/up.py" "$D/ports" & PIDS+=("$!")
for _ in $(seq 50); do [ -s "$D/ports" ] && break; sleep 0.1; done
FLOOD=$(cut -d' ' -f1 "$D/ports" 2>/dev/null) EXACT=$(cut -d' ' -f2 "$D/ports" 2>/dev/null)
[ -n "$FLOOD" ] && [ -n "$EXACT" ] || { echo "FAIL: upstream did not start" >&2; exit 1; }
printf 'version: 1\nnetwork:\n  policies:\n    - name: t\n      binaries: [{path: /x/client}]\n      endpoints: [{cidr: 127.0.0.1/32, ports: [%s, %s]}]\n' \
	"$FLOOD" "$EXACT" >"$D/p.yaml"
PORT=$(freeport) ADMIN=$(freeport)
while [ "$ADMIN" = "$PORT" ]; do ADMIN=$(freeport); done
"$BIN/net-supervisor-testing" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" --policy "$D/p.yaml" \
	--audit "$D/a.jsonl" --identity-static /x/client --relay-memory 16777216 --workers 2 2>"$D/ns.err" &
NSPID=$!
PIDS+=("$NSPID")
metric() { curl -s --noproxy '*' "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
for _ in $(seq 100); do [ "$(metric tether_ready)" = 1 ] && break; sleep 0.05; done
[ "$(metric tether_ready)" = 1 ] || { echo "FAIL: net-supervisor not ready: $(cat "$D/ns.err")" >&2; exit 1; }
[ "$(metric tether_relay_memory_bytes)" = 16777216 ] && ok "--relay-memory in /metrics" ||
	fail "tether_relay_memory_bytes '$(metric tether_relay_memory_bytes)'"

# 200 stalled tunnels (tiny receive buffers, never read), held for 20 s
cat >"$D/stall.py" <<'EOF'
import socket, sys, time
port, up = int(sys.argv[1]), int(sys.argv[2])
socks = []
for _ in range(200):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % up); socks.append(s)
open(sys.argv[3], "w").write("up")
time.sleep(20)
EOF
python3 "$D/stall.py" "$PORT" "$FLOOD" "$D/stalled" & STALL=$!
PIDS+=("$STALL")
for _ in $(seq 100); do [ -s "$D/stalled" ] && break; sleep 0.1; done
sleep 3 # let the queues fill
held=$(metric tether_relay_buffered_bytes)
rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$NSPID/status")
echo "200 stalled tunnels: tether_relay_buffered_bytes $held, RSS $rss kB"
[ "$(metric tether_connections_active)" = 200 ] || fail "active connections $(metric tether_connections_active), want 200"
[ -n "$held" ] && [ "$held" -gt 0 ] && [ "$held" -le $((30 << 20)) ] &&
	ok "buffers held: $held bytes over both workers (≤ 30 MiB: one budget)" || fail "buffers held: '$held'"
w0=$(metric 'tether_worker_accepted_total{worker="0"}') w1=$(metric 'tether_worker_accepted_total{worker="1"}')
[ "${w0:-0}" -gt 0 ] && [ "${w1:-0}" -gt 0 ] && ok "the stalled tunnels are on both workers ($w0 + $w1)" ||
	fail "tunnels per worker: '$w0' '$w1'"
[ -n "$rss" ] && [ "$rss" -le $((160 << 10)) ] && ok "RSS $rss kB (≤ 160 MiB; 414 MB before the budget)" ||
	fail "RSS $rss kB"

# a healthy tunnel meanwhile: 8 MiB, byte-exact, in bounded time
cat >"$D/exact.py" <<'EOF'
import socket, sys
port, up = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port), timeout=20)
s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % up)
data = b""
while b"\r\n\r\n" not in data:
    d = s.recv(4096)
    if not d: break
    data += d
head, _, body = data.partition(b"\r\n\r\n")
got = bytearray(body)
while True:
    d = s.recv(1 << 20)
    if not d: break
    got += d
want = bytes(range(256)) * 32768
print("%s %d %s" % (head.split(b"\r\n")[0].split(b" ")[1].decode(), len(got), "same" if bytes(got) == want else "differs"))
EOF
out=$(timeout 30 python3 "$D/exact.py" "$PORT" "$EXACT")
[ "$out" = "200 8388608 same" ] && ok "a healthy tunnel moved 8 MiB byte-exact meanwhile" || fail "healthy tunnel: '$out'"
kill "$STALL" 2>/dev/null; wait "$STALL" 2>/dev/null
for _ in $(seq 100); do [ "$(metric tether_connections_active)" = 0 ] && break; sleep 0.05; done
[ "$(metric tether_relay_buffered_bytes)" = 0 ] && ok "nothing held once the tunnels closed" ||
	fail "still held after close: $(metric tether_relay_buffered_bytes) (active $(metric tether_connections_active))"

finish "relay memory checks"
