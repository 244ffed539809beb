#!/bin/bash
# TLS inspection cost (issue 24): the net-supervisor inspecting (`tls:
# inspect`) vs passing through (`tls: passthrough`) the same HTTPS server,
# with Debian's mitmproxy (mitmdump, bodies over 1 MiB streamed, as a
# user would set it for downloads) as the reference interceptor and a
# direct row (no proxy), with curl. Two network namespaces joined by a
# veth (203.0.113.1 <-> 203.0.113.10; a host endpoint cannot reach
# loopback): the proxies and curl in one, the servers in the other; ports
# 19800-19899. Needs root (ip netns).
#   first   one request on a new connection: CONNECT, both TLS handshakes
#           (and, the first time a name is seen, minting its leaf), the
#           request; median of K connections, and the very first one
#           (cold: the leaf is minted) apart
#   steady  N requests over one connection (curl's URL range reuses it):
#           requests/s, HTTP/1.1 and HTTP/2 (--http2: ALPN is carried
#           through, so the inspected h2 row is h2 on both sides)
#   bulk    one download of BYTES (a Python TLS server): MiB/s
#   h2load  (Debian's nghttp2-client, when installed) HTTP/2 with h2load,
#           which speaks to no proxy: a CONNECT forwarder in Python
#           (asyncio, one per path) opens the tunnel for each of its
#           connections, so the proxied rows share that extra hop (direct
#           goes straight to the server). h2load-first: one request on a
#           new connection, time to first byte (both handshakes, the
#           CONNECT), median of K; h2load-steady: N requests on one
#           connection (10 × N of them: they go fast), 10 streams at a
#           time: requests/s.
# The upstream for first/steady is HAProxy terminating TLS (ALPN h2 and
# http/1.1) and answering every request itself ("http-request return").
#   bench/tls_bench.sh BUILD_DIR [ROUNDS] [REQUESTS] [BULK_BYTES] [K]
# (defaults 3, 2000, 268435456, 20). Every figure of every round is printed.
set -eu
BUILD=${1:-build}
ROUNDS=${2:-3}
REQS=${3:-2000}
BYTES=${4:-268435456}
K=${5:-20}
SRC=$(cd "$(dirname "$0")/.." && pwd)
NST=$BUILD/bin/net-supervisor-testing
for t in curl openssl haproxy python3; do
	command -v $t >/dev/null || { echo "tls_bench: $t missing" >&2; exit 1; }
done
TMP=$(mktemp -d /tmp/tether-tls-bench-XXXXXX)
PIDS=()
# each background process leads a process group of its own (setsid):
# `ip netns exec` may fork, so the group is what is ended
cleanup() { for p in "${PIDS[@]}"; do kill -- -"$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${TLS_BENCH_KEEP:-}" ] || rm -rf "$TMP"; }
P=tlsb$$p S=tlsb$$s V=tb$$
netcleanup() { ip netns del $P 2>/dev/null || true; ip netns del $S 2>/dev/null || true; }
trap 'cleanup; netcleanup' EXIT
ip netns add $P && ip netns add $S
ip -n $P link set lo up && ip -n $S link set lo up
ip link add ${V}a netns $P type veth peer name ${V}b netns $S
ip -n $P addr add 203.0.113.1/24 dev ${V}a && ip -n $P link set ${V}a up
ip -n $S addr add 203.0.113.10/24 dev ${V}b && ip -n $S link set ${V}b up
inp() { ip netns exec $P "$@"; }
ins() { ip netns exec $S "$@"; }
SRV=203.0.113.10
INS=19810 PAS=19811 BINS=19812 BPAS=19813 NSP=19820 NSA=19821 MITM=19830
FWD_PAS=19840 FWD_INS=19841 FWD_MITM=19842

# --- the test CA and a leaf for $SRV
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
	-keyout $TMP/ca.key -out $TMP/ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=$SRV \
	-keyout $TMP/srv.key -out $TMP/srv.csr 2>/dev/null
printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' $SRV >$TMP/srv.ext
openssl x509 -req -in $TMP/srv.csr -CA $TMP/ca.pem -CAkey $TMP/ca.key -CAcreateserial -days 2 \
	-extfile $TMP/srv.ext -out $TMP/srv.pem 2>/dev/null
cat $TMP/srv.pem $TMP/srv.key >$TMP/srv.combined

# --- upstreams: HAProxy answers every request; Python streams BYTES
cat >$TMP/haproxy.cfg <<H
global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend f
  bind $SRV:$INS ssl crt $TMP/srv.combined alpn h2,http/1.1
  bind $SRV:$PAS ssl crt $TMP/srv.combined alpn h2,http/1.1
  http-request return status 200 content-type text/plain string "ok"
H
setsid ip netns exec $S haproxy -f $TMP/haproxy.cfg -db >$TMP/haproxy.log 2>&1 & PIDS+=($!)
cat >$TMP/bulk.py <<'PY'
import socket, ssl, sys, threading
cert, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ctx.set_alpn_protocols(["http/1.1"])
chunk = b"\0" * 262144
def serve(c):
    try:
        s = ctx.wrap_socket(c, server_side=True)
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                return
            buf += d
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n" % n)
        left = n
        while left:
            w = min(left, len(chunk))
            s.sendall(chunk[:w])
            left -= w
        s.close()
    except OSError:
        pass
for port in sys.argv[5:]:
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[4], int(port)))
    l.listen(64)
    threading.Thread(target=lambda l=l: [threading.Thread(target=serve, args=(l.accept()[0],), daemon=True).start() for _ in iter(int, 1)], daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
PY
setsid ip netns exec $S python3 $TMP/bulk.py $TMP/srv.pem $TMP/srv.key $BYTES $SRV $BINS $BPAS >$TMP/bulk.log 2>&1 & PIDS+=($!)

# --- the net-supervisor: inspect INS and BINS, pass PAS and BPAS through
mkdir $TMP/log
cat >$TMP/policy.yaml <<P
version: 1
network:
  policies:
    - name: bench
      binaries: [{path: /usr/bin/curl}]
      endpoints:
        - {host: $SRV, ports: [$INS, $BINS], tls: inspect}
        - {host: $SRV, ports: [$PAS, $BPAS], tls: passthrough}
P
setsid ip netns exec $P $NST --listen 127.0.0.1:$NSP --admin 127.0.0.1:$NSA --policy $TMP/policy.yaml --audit $TMP/log/audit.jsonl \
	--identity-static /usr/bin/curl --upstream-ca $TMP/ca.pem --tls-bundle-out $TMP/bundle.pem \
	--tls-system-bundle $TMP/ca.pem 2>$TMP/ns.err & PIDS+=($!)
MITMOK=0
if command -v mitmdump >/dev/null; then
	setsid ip netns exec $P mitmdump -q --listen-host 127.0.0.1 --listen-port $MITM --set confdir=$TMP/mitm \
		--set ssl_verify_upstream_trusted_ca=$TMP/ca.pem --set stream_large_bodies=1m >$TMP/mitm.log 2>&1 & PIDS+=($!)
	MITMOK=1
fi
for _ in $(seq 300); do
	[ "$(inp curl -s "http://127.0.0.1:$NSA/readyz" -o /dev/null -w '%{http_code}')" = 200 ] &&
		grep -q ready $TMP/bulk.log && [ -s $TMP/bundle.pem ] &&
		{ [ $MITMOK = 0 ] || [ -s $TMP/mitm/mitmproxy-ca-cert.pem ]; } && break
	sleep 0.1
done
[ -s $TMP/bundle.pem ] || { echo "tls_bench: net-supervisor: $(cat $TMP/ns.err)" >&2; exit 1; }
[ $MITMOK = 1 ] && cat $TMP/ca.pem $TMP/mitm/mitmproxy-ca-cert.pem >$TMP/mitm-bundle.pem
# --- h2load's CONNECT forwarders (h2load has no proxy support)
H2LOAD=0
if command -v h2load >/dev/null; then
	cat >$TMP/fwd.py <<'PY'
import asyncio, sys
async def pipe(r, w):
    try:
        while True:
            d = await r.read(65536)
            if not d:
                break
            w.write(d)
            await w.drain()
    except OSError:
        pass
    finally:
        w.close()
def listener(proxy_port, target):
    async def handle(cr, cw):
        try:
            pr, pw = await asyncio.open_connection("127.0.0.1", proxy_port)
            pw.write(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
            head = await pr.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError):
            cw.close()
            return
        if b" 200 " not in head.split(b"\r\n")[0]:
            cw.close()
            pw.close()
            return
        await asyncio.gather(pipe(cr, pw), pipe(pr, cw))
    return handle
async def main():
    for spec in sys.argv[1:]:  # LISTEN_PORT:PROXY_PORT:TARGET_HOST:TARGET_PORT
        lp, pp, th, tp = spec.split(":")
        await asyncio.start_server(listener(int(pp), "%s:%s" % (th, tp)), "127.0.0.1", int(lp))
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
PY
	setsid ip netns exec $P python3 $TMP/fwd.py $FWD_PAS:$NSP:$SRV:$PAS $FWD_INS:$NSP:$SRV:$INS \
		$FWD_MITM:$MITM:$SRV:$PAS >$TMP/fwd.log 2>&1 & PIDS+=($!)
	for _ in $(seq 300); do grep -q ready $TMP/fwd.log && break; sleep 0.1; done
	grep -q ready $TMP/fwd.log && H2LOAD=1 || echo "# h2load forwarder did not start: $(cat $TMP/fwd.log)"
else
	echo "# h2load not installed (nghttp2-client): no h2load rows"
fi
h2url() {
	case $1 in
	direct) echo "https://$SRV:$PAS/h2" ;;
	passthrough) echo "https://127.0.0.1:$FWD_PAS/h2" ;;
	inspect) echo "https://127.0.0.1:$FWD_INS/h2" ;;
	mitmdump) echo "https://127.0.0.1:$FWD_MITM/h2" ;;
	esac
}
# h2load's "time to 1st byte" mean, in ms
ttfb_ms() { awk '/^time to 1st byte:/ { v = $7; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
	printf "%.2f\n", u == "s" ? v * 1000 : u == "us" ? v / 1000 : v }'; }
[ $MITMOK = 1 ] || echo "# mitmdump not installed: no mitmproxy rows"

# via NAME → curl arguments for that path (the port is the caller's)
via() {
	case $1 in
	direct) echo "--cacert $TMP/ca.pem" ;;
	passthrough) echo "--proxy http://127.0.0.1:$NSP --cacert $TMP/ca.pem" ;;
	inspect) echo "--proxy http://127.0.0.1:$NSP --cacert $TMP/bundle.pem" ;;
	mitmdump) echo "--proxy http://127.0.0.1:$MITM --cacert $TMP/mitm-bundle.pem" ;;
	esac
}
port_for() { case $1 in inspect) echo $2 ;; *) echo $3 ;; esac; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
VIAS="direct passthrough inspect"
[ $MITMOK = 1 ] && VIAS="$VIAS mitmdump"
echo "# tls_bench: rounds=$ROUNDS requests=$REQS bulk_bytes=$BYTES first_k=$K load=$(cut -d' ' -f1 /proc/loadavg)"
echo "# row via what figure"
for r in $(seq $ROUNDS); do
	for v in $VIAS; do
		p=$(port_for $v $INS $PAS)
		# first request: K new connections (the inspected path mints the
		# leaf for $SRV in round 1's first connection only)
		: >$TMP/first
		for i in $(seq $K); do
			inp curl -s -o /dev/null --max-time 30 $(via $v) -w '%{time_total}\n' "https://$SRV:$p/first$i" >>$TMP/first || echo "# first $v: curl failed"
		done
		echo "first $v cold_ms $(head -1 $TMP/first | awk '{printf "%.2f", $1*1000}') (round $r)"
		echo "first $v median_ms $(median <$TMP/first | awk '{printf "%.2f", $1*1000}') (round $r)"
		for h in 1.1 2; do
			t0=$(date +%s.%N)
			inp curl -s -o /dev/null --max-time 300 $(via $v) --http$h "https://$SRV:$p/r[1-$REQS]" \
				-w '%{http_version}\n' >$TMP/steady
			t1=$(date +%s.%N)
			n=$(grep -c . $TMP/steady)
			echo "steady-h$h $v req_per_s $(echo "$n $t0 $t1" | awk '{printf "%.0f", $1/($3-$2)}') (round $r, $n answers, wire HTTP/$(sort -u $TMP/steady | tr '\n' ' '))"
		done
		bp=$(port_for $v $BINS $BPAS)
		s=$(inp curl -s -o /dev/null --max-time 300 $(via $v) -w '%{speed_download} %{size_download}' "https://$SRV:$bp/bulk")
		echo "bulk $v MiB_per_s $(echo $s | awk '{printf "%.0f", $1/1048576}') (round $r, $(echo $s | cut -d' ' -f2) bytes)"
		if [ $H2LOAD = 1 ]; then
			: >$TMP/h2first
			for i in $(seq $K); do
				inp h2load -n 1 -c 1 "$(h2url $v)" 2>&1 | ttfb_ms >>$TMP/h2first
			done
			echo "h2load-first $v median_ms $(median <$TMP/h2first | awk '{printf "%.2f", $1}') (round $r, $(grep -c . $TMP/h2first) connections)"
			inp h2load -n $((REQS * 10)) -c 1 -m 10 "$(h2url $v)" >$TMP/h2steady 2>&1 || true
			echo "h2load-steady $v req_per_s $(awk '/^finished in/ {printf "%.0f", $4}' $TMP/h2steady) (round $r, $(grep -E '^requests:' $TMP/h2steady | sed 's/^requests: //'))"
		fi
	done
done
m=$(inp curl -s "http://127.0.0.1:$NSA/metrics" | grep -E '^tether_tls_(inspected|errors)' | tr '\n' ' ')
echo "# net-supervisor: $m"
