#!/bin/bash
# Two builds side by side (issue 25, CPU per new flow): local identity with
# the identity feed, default --workers, each build's net-supervisor anchored
# on its own proc-supervisor, beside tinyproxy with the same supervised
# client; 1 client (3000 requests) and 8 clients (6000), rows interleaved in
# every round. Each row: proxy_bench's line, then the proxy's CPU per flow
# (utime+stime of all its threads) and the client tree's (the
# proc-supervisor, its feed worker, the client and the upstream server of
# proxy_bench, and the readiness wait of the tether rows: a few curl runs).
#   bench/netsup_ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]
set -u
BB=$1 AB=$2 ROUNDS=${3:-3}
T=$(mktemp -d /tmp/tether-netsup-ab-XXXXXX); mkdir $T/log
B=$(readlink -f $AB/bench/proxy_bench)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf $T' EXIT
cat > $T/p.yaml <<P
version: 1
network:
  policies:
    - name: bench
      binaries: [{path: $B}]
      endpoints: [{cidr: 127.0.0.1/32, ports: [19520]}]
P
$BB/bin/net-supervisor --listen 127.0.0.1:19521 --policy $T/p.yaml --audit $T/log/b.jsonl --identity local --anchor-socket unix:$T/ab.sock --identity-feed unix:$T/bf.sock --admin 127.0.0.1:19522 2>$T/b.err & PIDS+=($!); BP=$!
$AB/bin/net-supervisor --listen 127.0.0.1:19523 --policy $T/p.yaml --audit $T/log/a.jsonl --identity local --anchor-socket unix:$T/aa.sock --identity-feed unix:$T/af.sock --admin 127.0.0.1:19524 2>$T/a.err & PIDS+=($!); AP=$!
printf 'Port 19525\nListen 127.0.0.1\nTimeout 600\nMaxClients 1000\nLogLevel Critical\nAllow 127.0.0.1\nDisableViaHeader Yes\n' > $T/tp.conf
tinyproxy -d -c $T/tp.conf >$T/tp.log 2>&1 & PIDS+=($!); TP=$!
sleep 0.5
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
# row LABEL PROXYPID PORT ADMIN CONC REQS [proc-supervisor options]
row() {
	local ps=$1; shift
	local label=$1 pid=$2 port=$3 admin=$4 conc=$5 reqs=$6; shift 6
	local w=""
	[ $admin != - ] && w="for i in \$(seq 200); do curl -sf --noproxy '*' -o /dev/null http://127.0.0.1:$admin/readyz && break; sleep 0.02; done;"
	local p0=$(ticks $pid)
	local out=$(bash -c '"$@"; awk "{print \$16+\$17}" /proc/$$/stat >&2' _ $ps/bin/proc-supervisor "$@" -- /bin/sh -c "$w exec $B short --port 19520 --requests $reqs --concurrency $conc --proxy 127.0.0.1:$port --label $label" 2>$T/tree.out)
	local p1=$(ticks $pid) tree=$(tail -1 $T/tree.out) hz=$(getconf CLK_TCK)
	echo "$out proxy_cpu_us=$(awk -v d=$((p1-p0)) -v hz=$hz -v n=$reqs 'BEGIN{printf "%.0f", d/hz*1e6/n}') tree_cpu_us=$(awk -v d=$tree -v hz=$hz -v n=$reqs 'BEGIN{printf "%.0f", d/hz*1e6/n}')"
}
kv() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
# ratios LINE TINYPROXY_LINE: "conn/s ratio,machine CPU ratio"
ratios() {
	awk -v a=$(echo "$1" | kv conn_per_s) -v b=$(echo "$2" | kv conn_per_s) \
		-v ca=$(( $(echo "$1" | kv proxy_cpu_us) + $(echo "$1" | kv tree_cpu_us) )) \
		-v cb=$(( $(echo "$2" | kv proxy_cpu_us) + $(echo "$2" | kv tree_cpu_us) )) \
		'BEGIN{ if (b > 0 && cb > 0) printf "%.2f,%.2f", a / b, ca / cb; else print "-" }'
}
declare -A R=([1]="" [8]="")
echo "# netsup_ab $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq $ROUNDS); do
	for c in 1 8; do
		n=$((c == 1 ? 3000 : 6000))
		rm -f $T/ab.sock $T/bf.sock
		X=$(row $BB before-c$c $BP 19521 19522 $c $n --status-socket $T/ab.sock --identity-feed $T/bf.sock); echo "$X"
		rm -f $T/aa.sock $T/af.sock
		Y=$(row $AB after-c$c $AP 19523 19524 $c $n --status-socket $T/aa.sock --identity-feed $T/af.sock); echo "$Y"
		Z=$(row $AB tinyproxy-c$c $TP 19525 - $c $n); echo "$Z"
		R[$c]+="$(ratios "$X" "$Z")/$(ratios "$Y" "$Z"); "
	done
done
echo "# over tinyproxy per round, before/after (conn/s, machine CPU per flow = proxy + client tree): 1 client: ${R[1]}8 clients: ${R[8]}"
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg); audit lines: before $(wc -l < $T/log/b.jsonl) after $(wc -l < $T/log/a.jsonl)"
