#!/bin/bash
# Context switches and CPU per flow of the net-supervisor with local
# identity and the identity feed, for each --workers count given (issue 25:
# one feed subscription shared by the workers). One proxy per row, anchored
# on its own proc-supervisor that runs proxy_bench (1 client, then 8). Per
# row: proxy_bench's line, then the proxy's voluntary and involuntary
# context switches per flow (all its threads, /proc/PID/task/*/status) and
# its CPU per flow (utime+stime).
#   bench/netsup_feed_cs.sh BUILD [ROUNDS] [WORKERS...]   (default: 1 2)
set -u
BD=$1 ROUNDS=${2:-3}
shift $(($# < 2 ? $# : 2))
WORKERS=${*:-1 2}
T=$(mktemp -d /tmp/tether-feed-cs-XXXXXX); mkdir $T/log
B=$(readlink -f $BD/bench/proxy_bench)
NSP=
trap '[ -n "$NSP" ] && kill $NSP 2>/dev/null; wait 2>/dev/null; rm -rf $T' EXIT
cat > $T/p.yaml <<P
version: 1
network:
  policies:
    - name: bench
      binaries: [{path: $B}]
      endpoints: [{cidr: 127.0.0.1/32, ports: [19530]}]
P
cs() { cat /proc/$1/task/*/status 2>/dev/null | awk -v k="$2" '$1 == k":" {s += $2} END {print s + 0}'; }
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
echo "# netsup_feed_cs $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq $ROUNDS); do
	for w in $WORKERS; do
		for c in 1 8; do
			n=$((c == 1 ? 3000 : 6000))
			rm -f $T/a.sock $T/f.sock
			$BD/bin/net-supervisor --workers $w --listen 127.0.0.1:19531 --policy $T/p.yaml --audit $T/log/a.jsonl \
				--identity local --anchor-socket unix:$T/a.sock --identity-feed unix:$T/f.sock \
				--admin 127.0.0.1:19532 2>$T/ns.err &
			NSP=$!
			for _ in $(seq 100); do curl -s --noproxy '*' -o /dev/null http://127.0.0.1:19532/healthz && break; sleep 0.05; done
			ready="for i in \$(seq 300); do curl -sf --noproxy '*' -o /dev/null http://127.0.0.1:19532/readyz && break; sleep 0.02; done"
			# warm-up (anchor, feed connected), then the measured run
			$BD/bin/proc-supervisor --status-socket $T/a.sock --identity-feed $T/f.sock -- /bin/sh -c \
				"$ready; $B short --port 19530 --requests 200 --concurrency $c --proxy 127.0.0.1:19531 --label warm >/dev/null; echo go; for i in \$(seq 1500); do [ -e $T/go ] && break; sleep 0.02; done; exec $B short --port 19530 --requests $n --concurrency $c --proxy 127.0.0.1:19531 --label workers$w-c$c" \
				> $T/out 2>&1 &
			PSP=$!
			for _ in $(seq 600); do grep -q '^go$' $T/out && break; sleep 0.05; done
			v0=$(cs $NSP voluntary_ctxt_switches) i0=$(cs $NSP nonvoluntary_ctxt_switches) t0=$(ticks $NSP)
			touch $T/go
			wait $PSP
			v1=$(cs $NSP voluntary_ctxt_switches) i1=$(cs $NSP nonvoluntary_ctxt_switches) t1=$(ticks $NSP)
			rm -f $T/go
			line=$(grep '^mode=' $T/out | tail -1)
			echo "$line vcs_per_flow=$(awk -v d=$((v1 - v0)) -v n=$n 'BEGIN{printf "%.2f", d/n}') ivcs_per_flow=$(awk -v d=$((i1 - i0)) -v n=$n 'BEGIN{printf "%.2f", d/n}') proxy_cpu_us=$(awk -v d=$((t1 - t0)) -v hz=$(getconf CLK_TCK) -v n=$n 'BEGIN{printf "%.0f", d/hz*1e6/n}') hits=$(curl -s --noproxy '*' http://127.0.0.1:19532/metrics | awk '/^tether_identity_feed_total\{result="hit"\}/ {print $2}')"
			kill $NSP; wait $NSP 2>/dev/null; NSP=
			# each worker's feed line at exit: flows answered from it / of them after waiting / wake-ups
			echo "#   feed at exit (per worker, answered/waited/wake-ups): $(sed -n 's/.*identity feed: \([0-9]*\) flows answered from it (\([0-9]*\) after.* \([0-9]*\) wake-ups.*/\1\/\2\/\3/p' $T/ns.err | tr '\n' ' ')"
		done
	done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
