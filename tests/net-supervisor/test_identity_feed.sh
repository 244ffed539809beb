#!/bin/bash
# Connect-time identity (the identity feed) end to end, real proc-supervisor
# and net-supervisor on loopback, real curl and python:
#   1. fast path: flows the notifier saw are answered from the feed (metric
#      tether_identity_feed_total{result="hit"}), allow and deny alike, with
#      identity_source local_procfs and the right binary;
#   2. TETHER_FORCE_FALLBACK=idfeed: no feed; the same flows are resolved by
#      the holder search, same decisions;
#   3. a socket the notifier never saw (connected outside the tree, handed to
#      the workload as its stdin): the feed has no record, the flow falls
#      back to the holder search and is attributed to the workload process;
#   4. a forged feed (a socket served by a process that is not the anchor,
#      offering records for every small cookie): never connected to,
#      nothing from it used; decisions come from the holder search;
#   5. the per-process cache: one python process makes two flows (the
#      second published from the cache), then execs the curl copy (the
#      same process, another image): that flow is the copy's (denied), never
#      python's cached identity; with TETHER_IDFEED_NO_CACHE the same;
#   6. --workers 2: ONE feed subscription (the proc side's feed socket has
#      one connected peer, `ss`), and flows accepted by both workers are all
#      answered from it (hits = flows).
# Every wait is bounded; only pids started here are killed.
set -u
B=${TETHER_BIN:?}
TMP=$(mktemp -d /tmp/tether-idfeed.XXXXXX)
PIDS=()
FAILS=0
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 1 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
	done
	[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
check() { local d=$1; shift; if "$@"; then pass "$d"; else fail "$d"; fi; }
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 0; }
PY=$(readlink -f /usr/bin/python3)
CURL=$(readlink -f /usr/bin/curl)
cp "$CURL" "$TMP/curl-copy" # same image, a path the policy does not name

HP=$(freeport)
python3 -c '
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.send_header("Content-Length", "3"); s.end_headers(); s.wfile.write(b"ok\n")
    def log_message(*a): pass
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$HP" &
PIDS+=($!)
cat >"$TMP/policy.yaml" <<P
version: 1
network:
  policies:
    - name: feed
      binaries: [{path: $CURL}, {path: $PY}]
      endpoints: [{cidr: 127.0.0.1/32, ports: [$HP]}]
P

NS_PID=
# start_ns NAME FEED_SOCKET WAIT_MS [env...]: a local-identity proxy
# anchored on $TMP/NAME.anchor, reading the feed at FEED_SOCKET; a flow
# waits up to WAIT_MS for its record (long where the test needs the feed
# to answer whatever the machine's load, short where it must fall back)
start_ns() {
	local name=$1 feed=$2 wait=$3
	shift 3
	PP=$(freeport); AP=$(freeport)
	while [ "$AP" = "$PP" ]; do AP=$(freeport); done
	env "$@" "$B/net-supervisor" ${NS_WORKERS:+--workers $NS_WORKERS} --listen 127.0.0.1:$PP --admin 127.0.0.1:$AP --policy "$TMP/policy.yaml" \
		--audit "$TMP/$name.audit" --identity local --anchor-socket "unix:$TMP/$name.anchor" \
		--identity-feed "unix:$feed" --identity-feed-wait "$wait" 2>"$TMP/$name.ns.err" &
	NS_PID=$!
	PIDS+=($NS_PID)
}
stop_ns() { kill -TERM "$NS_PID" 2>/dev/null; for _ in $(seq 1 50); do kill -0 "$NS_PID" 2>/dev/null || break; sleep 0.1; done; }
metric() { curl -s --noproxy '*' --max-time 5 "http://127.0.0.1:$AP/metrics" | awk -v k="$1" 'index($0, k) == 1 {print $2; f=1} END {if (!f) print 0}'; }
# The workload (the supervisor passes no environment of ours: values are
# spelled into the command): wait for the proxy to be ready (its anchor is
# us), then three curl flows and one by the copy.
run_workload() { # NAME [proc-supervisor options]
	local name=$1
	shift
	local ready="for i in \$(seq 300); do curl -s --noproxy '*' -o /dev/null --max-time 2 -w '%{http_code}' http://127.0.0.1:$AP/readyz | grep -q 200 && break; sleep 0.1; done"
	local flows="for i in 1 2 3; do curl -s --max-time 20 -x http://127.0.0.1:$PP http://127.0.0.1:$HP/; done; $TMP/curl-copy -s -o /dev/null -w 'copy:%{http_code}\\n' --max-time 20 -x http://127.0.0.1:$PP http://127.0.0.1:$HP/"
	timeout 60 "$B/proc-supervisor" --status-socket "$TMP/$name.anchor" "$@" -- \
		/bin/sh -c "$ready; $flows" >"$TMP/$name.out" 2>"$TMP/$name.ps.err"
}
allowed_curl() { grep '"allow"' "$TMP/$1.audit" | grep -c "\"$CURL\""; }
denied_copy() { grep '"deny"' "$TMP/$1.audit" | grep -c "curl-copy"; }

# 1. the fast path
start_ns fast "$TMP/fast.feed" 30000
run_workload fast --identity-feed "$TMP/fast.feed"
check "fast: curl got the page three times" [ "$(grep -c '^ok$' "$TMP/fast.out")" = 3 ]
check "fast: the copy was denied (403)" grep -q '^copy:403$' "$TMP/fast.out"
HITS=$(metric 'tether_identity_feed_total{result="hit"}')
check "fast: all four flows answered from the feed (hits $HITS)" [ "$HITS" = 4 ]
check "fast: three allows for $CURL" [ "$(allowed_curl fast)" = 3 ]
check "fast: one deny naming curl-copy" [ "$(denied_copy fast)" = 1 ]
check "fast: identity_source local_procfs" grep -q '"identity_source":"local_procfs"' "$TMP/fast.audit"
check "fast: the proxy read the anchor's feed" grep -q "reading connect-time identities" "$TMP/fast.ns.err"
stop_ns

# 2. the fallback forced
start_ns forced "$TMP/forced.feed" 30000 TETHER_FORCE_FALLBACK=idfeed
run_workload forced --identity-feed "$TMP/forced.feed"
check "forced: curl got the page three times" [ "$(grep -c '^ok$' "$TMP/forced.out")" = 3 ]
check "forced: the copy was denied" grep -q '^copy:403$' "$TMP/forced.out"
check "forced: no feed hits" [ "$(metric 'tether_identity_feed_total{result="hit"}')" = 0 ]
LOOP=$(metric 'tether_identity_local_answers_total{where="loop"}'); POOL=$(metric 'tether_identity_local_answers_total{where="pool"}')
check "forced: four flows by the holder search (loop $LOOP, pool $POOL)" [ $((LOOP + POOL)) = 4 ]
check "forced: three allows for $CURL" [ "$(allowed_curl forced)" = 3 ]
stop_ns

# 3. a socket the notifier never saw: connected here, outside the tree,
# and handed to the workload over a Unix socket (SCM_RIGHTS)
start_ns inh "$TMP/inh.feed" 3
python3 - "$PP" "$HP" "$AP" "$B/proc-supervisor" "$TMP" "$PY" >"$TMP/inh.out" 2>"$TMP/inh.err" <<'PYEOF'
import socket, subprocess, sys, time, urllib.request
pp, hp, ap, ps, tmp, py = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
lsn = socket.socket(socket.AF_UNIX); lsn.bind(tmp + "/handoff.sock"); lsn.listen(1); lsn.settimeout(60)
child = ("import socket\n"
         "u=socket.socket(socket.AF_UNIX); u.connect('%s/handoff.sock')\n"
         "_, fds, _, _ = socket.recv_fds(u, 16, 1)\n"
         "s=socket.socket(fileno=fds[0])\n"
         "s.sendall(b'GET http://127.0.0.1:%s/ HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\nConnection: close\\r\\n\\r\\n')\n"
         "d=b''\n"
         "while True:\n"
         "    c=s.recv(4096)\n"
         "    if not c: break\n"
         "    d+=c\n"
         "print(d.split(b'\\r\\n')[0].decode(), flush=True)\n") % (tmp, hp, hp)
p = subprocess.Popen([ps, "--status-socket", tmp + "/inh.anchor", "--identity-feed", tmp + "/inh.feed", "--", py, "-c", child])
conn, _ = lsn.accept()
for _ in range(300):  # the proxy needs its anchor (the supervisor) first
    try:
        if urllib.request.urlopen("http://127.0.0.1:%s/readyz" % ap, timeout=2).status == 200: break
    except Exception: pass
    time.sleep(0.1)
s = socket.create_connection(("127.0.0.1", pp))
socket.send_fds(conn, [b"x"], [s.fileno()])
s.close()
sys.exit(p.wait(timeout=60))
PYEOF
check "inherited: the workload got 200 on the inherited socket" grep -qE "HTTP/1.. 200" "$TMP/inh.out"
check "inherited: no feed hit" [ "$(metric 'tether_identity_feed_total{result="hit"}')" = 0 ]
check "inherited: the feed fell back" [ "$(metric 'tether_identity_feed_total{result="fallback"}')" -ge 1 ]
check "inherited: allowed as $PY" bash -c "grep '\"allow\"' '$TMP/inh.audit' | grep -q '\"$PY\"'"
stop_ns

# 4. a forged feed: served by a process that is not the anchor
python3 - "$TMP/forged.feed" <<'PYEOF' &
import json, os, socket, sys, threading
srv = socket.socket(socket.AF_UNIX); srv.bind(sys.argv[1]); srv.listen(4)
sha = "0" * 64
def feed(c):
    try:
        for k in range(1, 200000):
            c.sendall((json.dumps({"id": k, "pid": os.getpid(), "key": "x:1", "path": "/usr/bin/curl",
                                   "sha256": sha, "anc": []}) + "\n").encode())
    except OSError: pass
while True:
    c, _ = srv.accept(); threading.Thread(target=feed, args=(c,), daemon=True).start()
PYEOF
PIDS+=($!)
for _ in $(seq 1 50); do [ -S "$TMP/forged.feed" ] && break; sleep 0.1; done
start_ns forged "$TMP/forged.feed" 30000
run_workload forged
check "forged: curl got the page three times (holder search)" [ "$(grep -c '^ok$' "$TMP/forged.out")" = 3 ]
check "forged: the copy was still denied" grep -q '^copy:403$' "$TMP/forged.out"
check "forged: no feed hits" [ "$(metric 'tether_identity_feed_total{result="hit"}')" = 0 ]
check "forged: the proxy refused the feed's peer" grep -q "is not the anchor" "$TMP/forged.ns.err"
check "forged: never read from it" bash -c "! grep -q 'reading connect-time identities' '$TMP/forged.ns.err'"
stop_ns

# 5. the per-process cache, and an exec between two connects
for mode in cache nocache; do
	start_ns $mode "$TMP/$mode.feed" 30000
	ready="for i in \$(seq 300); do curl -s --noproxy '*' -o /dev/null --max-time 2 -w '%{http_code}' http://127.0.0.1:$AP/readyz | grep -q 200 && break; sleep 0.1; done"
	prog="import os, sys, urllib.request
o = urllib.request.build_opener(urllib.request.ProxyHandler({'http': 'http://127.0.0.1:$PP'}))
for _ in range(2):
    print('py:%d' % o.open('http://127.0.0.1:$HP/', timeout=20).status, flush=True)
os.execv('$TMP/curl-copy', ['curl-copy', '-s', '-o', '/dev/null', '-w', 'copy:%{http_code}\\n', '--max-time', '20',
                            '-x', 'http://127.0.0.1:$PP', 'http://127.0.0.1:$HP/'])"
	env_cache=
	[ $mode = nocache ] && env_cache="TETHER_IDFEED_NO_CACHE=1"
	# -v: the feed's counts at exit (debug)
	env $env_cache timeout 60 "$B/proc-supervisor" -v --status-socket "$TMP/$mode.anchor" --identity-feed "$TMP/$mode.feed" -- \
		/bin/sh -c "$ready; exec $PY -c \"\$0\"" "$prog" >"$TMP/$mode.out" 2>"$TMP/$mode.ps.err"
	check "$mode: python got the page twice" [ "$(grep -c '^py:200$' "$TMP/$mode.out")" = 2 ]
	check "$mode: the exec'd copy was denied (403)" grep -q '^copy:403$' "$TMP/$mode.out"
	HITS=$(metric 'tether_identity_feed_total{result="hit"}')
	check "$mode: three flows answered from the feed (hits $HITS)" [ "$HITS" = 3 ]
	check "$mode: two allows for $PY" [ "$(grep '"allow"' "$TMP/$mode.audit" | grep -c "\"$PY\"")" = 2 ]
	check "$mode: one deny naming curl-copy" [ "$(denied_copy $mode)" = 1 ]
	cached=$(sed -n 's/.*identities published (\([0-9]*\) from the per-process cache).*/\1/p' "$TMP/$mode.ps.err")
	if [ $mode = cache ]; then
		check "cache: python's second flow published from the cache ($cached)" [ "${cached:-0}" = 1 ]
	else
		check "nocache: nothing from the cache ($cached)" [ "${cached:-0}" = 0 ]
	fi
	stop_ns
done

# 6. two workers share one feed subscription
NFLOWS=16
NS_WORKERS=2 start_ns w2 "$TMP/w2.feed" 30000
ready="for i in \$(seq 300); do curl -s --noproxy '*' -o /dev/null --max-time 2 -w '%{http_code}' http://127.0.0.1:$AP/readyz | grep -q 200 && break; sleep 0.1; done"
# the workload holds on (bounded) until the test has looked at the feed socket
flows="for i in \$(seq $NFLOWS); do curl -s --max-time 20 -x http://127.0.0.1:$PP http://127.0.0.1:$HP/; done; echo flows-done; for i in \$(seq 600); do [ -e $TMP/w2.go ] && break; sleep 0.1; done"
timeout 120 "$B/proc-supervisor" --status-socket "$TMP/w2.anchor" --identity-feed "$TMP/w2.feed" -- \
	/bin/sh -c "$ready; $flows" >"$TMP/w2.out" 2>"$TMP/w2.ps.err" &
W2_PID=$!
PIDS+=($W2_PID)
for _ in $(seq 1 600); do grep -q flows-done "$TMP/w2.out" 2>/dev/null && break; kill -0 $W2_PID 2>/dev/null || break; sleep 0.1; done
# connected stream sockets whose local address is the feed's path: one per subscriber
SUBS=$(ss -xH state connected 2>/dev/null | awk -v p="$TMP/w2.feed" '$5 == p' | wc -l)
touch "$TMP/w2.go"
for _ in $(seq 1 300); do kill -0 $W2_PID 2>/dev/null || break; sleep 0.1; done
check "w2: curl got the page $NFLOWS times" [ "$(grep -c '^ok$' "$TMP/w2.out")" = $NFLOWS ]
check "w2: the proc side's feed has ONE subscriber ($SUBS)" [ "$SUBS" = 1 ]
check "w2: the proxy connected to the feed once" [ "$(grep -c 'reading connect-time identities' "$TMP/w2.ns.err")" = 1 ]
A0=$(metric 'tether_worker_accepted_total{worker="0"}')
A1=$(metric 'tether_worker_accepted_total{worker="1"}')
check "w2: both workers accepted flows ($A0 + $A1)" [ "$A0" -ge 1 -a "$A1" -ge 1 ]
HITS=$(metric 'tether_identity_feed_total{result="hit"}')
check "w2: every flow answered from the feed (hits $HITS of $NFLOWS)" [ "$HITS" = $NFLOWS ]
check "w2: $NFLOWS allows for $CURL" [ "$(allowed_curl w2)" = $NFLOWS ]
stop_ns

[ "$FAILS" = 0 ] && echo "all passed" || { echo "$FAILS failed"; exit 1; }
