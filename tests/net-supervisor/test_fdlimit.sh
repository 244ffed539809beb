#!/bin/bash
# File descriptor limits (common/fdlimit.h).
#
# 1. net-supervisor held to 1024 descriptors (soft = hard, cannot raise):
#    it says at start how many connections fit and lowers its limit to
#    that, so clients past it get a 503 too_many_connections (at most
#    NETSUP_MAX_REJECTING answered at once, the rest closed and counted)
#    and never a 502 blaming the upstream or an accept failure; once the
#    tunnels end, new flows are served again.
# 2. net-supervisor started with soft 1024 under a hard 4096 raises its soft
#    limit and serves every one of 600 tunnels (≈ 1200 descriptors).
# 3. proc-supervisor raises its own soft limit, and its workload gets the
#    limits it was started with.
. "${TETHER_SRC:?}/tests/common/script_lib.sh" fdlimit

# An upstream that accepts and holds connections, closing each when its
# client's tunnel closes (so the proxy sees the whole flow end).
cat >"$D/up.py" <<'EOF'
import selectors, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(4096); s.setblocking(False)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
end = time.time() + 60
while time.time() < end:
    for key, _ in sel.select(0.5):
        if key.fileobj is s:
            try:
                c, _ = s.accept(); c.setblocking(False); sel.register(c, selectors.EVENT_READ)
            except BlockingIOError:
                pass
        else:
            try:
                d = key.fileobj.recv(4096)
            except OSError:
                d = b""
            if not d:
                sel.unregister(key.fileobj); key.fileobj.close()
EOF
# N CONNECT tunnels held open at once; prints a count per first answer line,
# then closes them all.
cat >"$D/clients.py" <<'EOF'
import collections, socket, sys
n, port, up = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
socks, res = [], collections.Counter()
req = b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (up, up)
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(req); socks.append(s)
for s in socks:
    try:
        d = s.recv(200)
        line = d.split(b"\r\n")[0].decode() if d else "closed"
        res[line.split(" ", 2)[1] if line.startswith("HTTP/") else line] += 1
    except ConnectionResetError:
        res["closed"] += 1
    except OSError as e:
        res[type(e).__name__] += 1
for s in socks:
    s.close()
print(" ".join("%s=%d" % kv for kv in sorted(res.items())))
EOF

python3 "$D/up.py" "$D/up.port" & PIDS+=("$!")
for _ in $(seq 50); do [ -s "$D/up.port" ] && break; sleep 0.1; done
UP=$(cat "$D/up.port" 2>/dev/null)
[ -n "$UP" ] || { echo "FAIL: upstream did not start" >&2; exit 1; }
printf 'version: 1\nnetwork:\n  policies:\n    - name: t\n      binaries: [{path: /x/client}]\n      endpoints: [{cidr: 127.0.0.1/32, ports: [%s]}]\n' "$UP" >"$D/p.yaml"

# start_ns NAME SOFT HARD: a net-supervisor under those limits; sets PORT, ADMIN
start_ns() {
	local name=$1 soft=$2 hard=$3
	PORT=$(freeport) ADMIN=$(freeport)
	while [ "$ADMIN" = "$PORT" ]; do ADMIN=$(freeport); done
	(exec prlimit --nofile="$soft:$hard" "$BIN/net-supervisor-testing" --listen "127.0.0.1:$PORT" \
		--admin "127.0.0.1:$ADMIN" --policy "$D/p.yaml" --audit "$D/$name.jsonl" \
		--identity-static /x/client) 2>"$D/$name.err" &
	NSPID=$!
	PIDS+=("$NSPID")
	local up=""
	for _ in $(seq 100); do
		up=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/readyz")
		[ "$up" = 200 ] && break
		sleep 0.05
	done
	[ "$up" = 200 ] || fail "$name: net-supervisor not ready: $(cat "$D/$name.err")"
}
metric() { curl -s --noproxy '*' "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
stop_ns() { kill "$NSPID" 2>/dev/null; wait "$NSPID" 2>/dev/null; }

# --- 1: held to 1024 ---------------------------------------------------------
start_ns low 1024 1024
# (1024 - 256 kept for the daemon - 8 per worker past the first) / 2
W=$(metric tether_workers)
FIT=$(( (1024 - 256 - 8 * (W - 1)) / 2 ))
grep -q "RLIMIT_NOFILE is 1024: room for $FIT concurrent connections" "$D/low.err" &&
	ok "held to 1024 ($W workers): the start-up warning says $FIT connections fit" ||
	fail "no capacity warning: $(cat "$D/low.err")"
[ "$(metric tether_connections_limit)" = "$FIT" ] && ok "tether_connections_limit $FIT" ||
	fail "tether_connections_limit is '$(metric tether_connections_limit)', want $FIT"
out=$(timeout 60 python3 "$D/clients.py" 500 "$PORT" "$UP")
echo "500 tunnels at once under 1024 descriptors: $out"
served=$(echo "$out" | tr ' ' '\n' | sed -n 's/^200=//p')
r503=$(echo "$out" | tr ' ' '\n' | sed -n 's/^503=//p')
closed=$(echo "$out" | tr ' ' '\n' | sed -n 's/^closed=//p')
[ "${served:-0}" = "$FIT" ] && ok "$FIT tunnels served (the global limit over $W workers)" || fail "served ${served:-0}, want $FIT ($out)"
[ "${r503:-0}" -ge 1 ] && [ "${r503:-0}" -le 64 ] && ok "${r503} answered 503" || fail "503s: ${r503:-0} ($out)"
[ $(( ${served:-0} + ${r503:-0} + ${closed:-0} )) = 500 ] && ok "no other outcome (no 502)" ||
	fail "unexpected answers: $out"
dropped=$(metric tether_connections_dropped_total)
[ "${dropped:-x}" = "${closed:-0}" ] && ok "dropped connections counted ($dropped)" ||
	fail "tether_connections_dropped_total '$dropped' vs ${closed:-0} closed"
[ "$(metric tether_accept_errors_total)" = 0 ] && [ "$(metric tether_fd_exhausted_total)" = 0 ] &&
	ok "no accept failure, no upstream socket refused" ||
	fail "accept errors $(metric tether_accept_errors_total), fd exhausted $(metric tether_fd_exhausted_total)"
n503=$(grep -c '"reason":"too_many_connections"' "$D/low.jsonl")
[ "$n503" = "${r503:-0}" ] && ok "each 503 audited with too_many_connections" ||
	fail "$n503 too_many_connections events for ${r503:-0} answers"
grep -q '"reason":"upstream_connect_failed"' "$D/low.jsonl" && fail "an upstream_connect_failed was audited"
# the tunnels are gone: a new flow is served
for _ in $(seq 100); do [ "$(metric tether_connections_active)" = 0 ] && break; sleep 0.05; done
out=$(timeout 20 python3 "$D/clients.py" 1 "$PORT" "$UP")
[ "$out" = "200=1" ] && ok "served again after the burst" || fail "after the burst: $out"
stop_ns

# --- 2: soft 1024 under hard 4096 --------------------------------------------
start_ns high 1024 4096
soft=$(awk '/^Max open files/ { print $4 }' "/proc/$NSPID/limits")
[ "$soft" = 4096 ] && ok "soft limit raised to the hard 4096" || fail "soft limit is $soft"
grep -q "RLIMIT_NOFILE is" "$D/high.err" && fail "capacity warning under 4096: $(cat "$D/high.err")"
[ "$(metric tether_connections_limit)" = 1024 ] && ok "--max-connections kept at 1024" ||
	fail "tether_connections_limit is '$(metric tether_connections_limit)'"
out=$(timeout 60 python3 "$D/clients.py" 600 "$PORT" "$UP")
[ "$out" = "200=600" ] && ok "600 tunnels at once served" || fail "600 tunnels: $out"
# 40 idle admin connections: past 32 they are closed at once, and a proxy
# flow is still served while they are held
cat >"$D/admin_flood.py" <<'EOF'
import socket, sys, time
admin, port, up = (int(a) for a in sys.argv[1:])
idle = [socket.create_connection(("127.0.0.1", admin), timeout=5) for _ in range(40)]
time.sleep(0.3)
closed = 0
for s in idle:
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
t = socket.create_connection(("127.0.0.1", port), timeout=5)
t.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % up)
line = t.recv(200).split(b"\r\n")[0].decode()
print("closed=%d tunnel=%s" % (closed, line.split(" ")[1]))
EOF
out=$(timeout 30 python3 "$D/admin_flood.py" "$ADMIN" "$PORT" "$UP")
[ "$out" = "closed=8 tunnel=200" ] && ok "admin connections capped at 32 ($out)" || fail "admin flood: $out"
for _ in $(seq 40); do [ -n "$(metric tether_ready)" ] && break; sleep 0.05; done
[ "$(metric tether_ready)" = 1 ] && ok "/metrics answers once the idle ones are gone" || fail "/metrics after the admin flood"
stop_ns

# --- 3: proc-supervisor ------------------------------------------------------
out=$( (exec prlimit --nofile=1000:5000 "$BIN/proc-supervisor" -- /bin/sh -c \
	'echo "child $(ulimit -Sn) $(ulimit -Hn) supervisor $(awk "/^Max open files/ { print \$4 }" /proc/$PPID/limits)"') 2>&1)
[ "$(echo "$out" | tail -1)" = "child 1000 5000 supervisor 5000" ] &&
	ok "proc-supervisor raised its own limit to 5000, its workload has 1000/5000" ||
	fail "proc-supervisor limits: $out"

finish "fd limit checks"
