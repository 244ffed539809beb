#!/bin/bash
# net-supervisor vs direct vs tinyproxy on loopback (bench/proxy_bench.c):
# bulk throughput through a CONNECT tunnel and short requests (absolute-form
# GET, one per connection: connections/s and time to first byte). Identity is
# the STATIC TEST strategy (--identity-static, net-supervisor-testing) in the bulk and plain short
# rows: no identity lookup cost is in those. The "net-supervisor-local-identity"
# short row is the real thing: the client runs as the workload of a
# proc-supervisor (seccomp connect attribution included) and the proxy
# resolves every connection with local identity against that anchor
# (sock_diag, holder search, ancestry walk, hash); "net-supervisor-delegated-identity"
# the same with --identity delegated against that supervisor's identity
# service (connect-time registry, signed context, verification);
# "tinyproxy-supervised-client" is tinyproxy with that same supervised
# client, so the proxies can be compared with the client's own sandbox
# cost (the connect notification) on both sides. The "-c8" rows repeat
# those three with 8 client threads (connection rate when the machine is
# the limit, not one request's latency). Rounds are interleaved; every line
# is printed. The "net-supervisor-transparent" rows (issue 21) are the same
# bulk and short clients without --proxy, as uid 65534 in a private netns
# whose nftables redirect its TCP to a net-supervisor --transparent-listen
# there (static identity; SO_ORIGINAL_DST, the peek; --transparent-peek-ms 5
# because the bulk upstream speaks first and the client sends nothing), with
# a "direct-netns" row of the same clients uncaptured beside them.
# "net-supervisor-delegated-identity-signed" is the delegated row with
# --no-identity-mac (protocol 1.1 behaviour: every answer's Ed25519
# signature made and verified on the connect path), beside the default
# (1.2: answers MAC'd, signatures after them), interleaved in each round.
# "net-supervisor-delegated-identity-nopush" is the delegated row with the
# proc side's --no-identity-push (protocol 1.2 behaviour: every flow asked
# for over the control channel), beside the default (1.3: identities pushed
# at connect time, the flow a table lookup), interleaved in each round.
# ROWS=delegated runs only the delegated and tinyproxy short rows.
# ROWS=workers (issue 25, "both cores") runs only the local-identity short
# rows at --workers 1 ("-w1") and at the default (one loop per online CPU)
# beside tinyproxy with the same supervised client, 1 and 8 clients,
# interleaved; each with the proxy's CPU per flow and the client tree's.
#   bench/netsup_bench.sh BUILD_DIR [ROUNDS] [BULK_BYTES] [REQUESTS]
set -eu
BUILD=${1:-build}
ROUNDS=${2:-3}
BYTES=${3:-1073741824}
REQS=${4:-2000}
B=$BUILD/bench/proxy_bench
NS=$BUILD/bin/net-supervisor
NST=$BUILD/bin/net-supervisor-testing   # the test build: --identity-static
TMP=$(mktemp -d /tmp/tether-netsup-bench-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
# Audit files apart from the policy files, as deployed: the policy watcher
# watches the policy's directory, and each audit line written beside it
# would wake the proxy's loop for nothing.
mkdir $TMP/log
UP=19400 NSP=19401 TPP=19402
cat > $TMP/policy.yaml <<P
version: 1
network:
  policies:
    - name: bench
      binaries: [{path: /usr/bin/true}]
      endpoints: [{cidr: 127.0.0.1/32, ports: [$UP]}]
P
$NST --listen 127.0.0.1:$NSP --policy $TMP/policy.yaml --audit $TMP/log/audit.jsonl \
	--identity-static /usr/bin/true 2> $TMP/ns.err & PIDS+=($!)
NSQ=19403   # the same with the splice(2) relay (--splice)
$NST --splice --listen 127.0.0.1:$NSQ --policy $TMP/policy.yaml --audit $TMP/log/audit2.jsonl \
	--identity-static /usr/bin/true 2> $TMP/ns2.err & PIDS+=($!)
NSL=19404   # local identity: the anchor is the proc-supervisor at $TMP/anchor.sock
PS=$BUILD/bin/proc-supervisor
BREAL=$(readlink -f $B)
cat > $TMP/policy-local.yaml <<P
version: 1
network:
  policies:
    - name: bench
      binaries: [{path: $BREAL}]
      endpoints: [{cidr: 127.0.0.1/32, ports: [$UP]}]
P
$NS --listen 127.0.0.1:$NSL --policy $TMP/policy-local.yaml --audit $TMP/log/audit3.jsonl \
	--identity local --anchor-socket unix:$TMP/anchor.sock --admin 127.0.0.1:19405 2> $TMP/ns3.err & PIDS+=($!)
NSL_PID=$!
NSL1=19742  # the same, --workers 1: one event loop
$NS --workers 1 --listen 127.0.0.1:$NSL1 --policy $TMP/policy-local.yaml --audit $TMP/log/audit7.jsonl \
	--identity local --anchor-socket unix:$TMP/anchor7.sock --admin 127.0.0.1:19743 2> $TMP/ns7.err & PIDS+=($!)
NSL1_PID=$!
NSF=19720   # local identity with the anchor's identity feed at $TMP/feed.sock (connect-time identity)
$NS --listen 127.0.0.1:$NSF --policy $TMP/policy-local.yaml --audit $TMP/log/audit5.jsonl \
	--identity local --anchor-socket unix:$TMP/anchor5.sock --identity-feed unix:$TMP/feed.sock \
	--admin 127.0.0.1:19721 2> $TMP/ns5.err & PIDS+=($!)
NSF_PID=$!
NSD=19406   # delegated identity: the proc-supervisor's identity service at $TMP/dctl.sock
$BUILD/bin/tether keygen --out $TMP/keys >/dev/null
$NS --listen 127.0.0.1:$NSD --policy $TMP/policy-local.yaml --audit $TMP/log/audit4.jsonl \
	--identity delegated --control unix:$TMP/dctl.sock --provisioning-pubkey $TMP/keys/provisioning.pub \
	--admin 127.0.0.1:19407 2> $TMP/ns4.err & PIDS+=($!)
NSD_PID=$!
NSS=19408   # the same, --no-identity-mac: signed answers on the connect path
$NS --listen 127.0.0.1:$NSS --policy $TMP/policy-local.yaml --audit $TMP/log/audit6.jsonl \
	--identity delegated --control unix:$TMP/sctl.sock --provisioning-pubkey $TMP/keys/provisioning.pub \
	--no-identity-mac --admin 127.0.0.1:19409 2> $TMP/ns6.err & PIDS+=($!)
NSS_PID=$!
NSN=19410   # the same, the proc side with --no-identity-push: every flow asked for
$NS --listen 127.0.0.1:$NSN --policy $TMP/policy-local.yaml --audit $TMP/log/audit7.jsonl \
	--identity delegated --control unix:$TMP/nctl.sock --provisioning-pubkey $TMP/keys/provisioning.pub \
	--admin 127.0.0.1:19411 2> $TMP/ns7.err & PIDS+=($!)
NSN_PID=$!
# short_supervised LABEL PROXY_PORT ADMIN_PORT [proc-supervisor options]: the
# short-request client as a proc-supervisor workload, started once that
# proxy is ready (it anchors on the supervisor's status socket, or
# connects to its identity service)
short_supervised() {
	local label=$1 pp=$2 ap=$3 wait=
	shift 3
	[ "$ap" != - ] && wait="for i in \$(seq 100); do curl -sf --noproxy '*' -o /dev/null http://127.0.0.1:$ap/readyz && break; sleep 0.05; done;"
	$PS "$@" -- /bin/sh -c \
		"$wait exec $BREAL short --port $UP --requests $REQS --concurrency ${CONC:-1} --proxy 127.0.0.1:$pp --label $label" \
		2>>$TMP/ps.err
}
short_local() {
	rm -f $TMP/anchor.sock
	short_supervised $1 $NSL 19405 --status-socket $TMP/anchor.sock
}
short_local1() {
	rm -f $TMP/anchor7.sock
	short_supervised $1 $NSL1 19743 --status-socket $TMP/anchor7.sock
}
short_feed() {
	rm -f $TMP/anchor5.sock $TMP/feed.sock
	short_supervised $1 $NSF 19721 --status-socket $TMP/anchor5.sock --identity-feed $TMP/feed.sock
}
# cpu_per_flow PID CMD...: run CMD; print its line plus the proxy PID's CPU
# per request (utime+stime of all its threads, clock ticks: read it over
# 2000 requests, not 500) and the CPU of CMD's process tree per request
# (the supervisor, its feed worker and the client: reaped children's time).
cpu_per_flow() {
	local pid=$1 s0 s1 out t0 t1 me=$BASHPID
	shift
	s0=$(ticks $pid)
	t0=$(awk '{print $16+$17}' /proc/$me/stat)
	out=$("$@")
	s1=$(ticks $pid)
	t1=$(awk '{print $16+$17}' /proc/$me/stat)
	local n=$(echo "$out" | sed -n 's/.* requests=\([0-9]*\).*/\1/p')
	local hz=$(getconf CLK_TCK)
	echo "$out proxy_cpu_us_per_flow=$(awk -v d=$((s1 - s0)) -v hz=$hz -v n=$n 'BEGIN{printf "%.0f", d / hz * 1e6 / n}') client_tree_cpu_us_per_flow=$(awk -v d=$((t1 - t0)) -v hz=$hz -v n=$n 'BEGIN{printf "%.0f", d / hz * 1e6 / n}')"
}
short_delegated() {
	rm -f $TMP/dctl.sock
	short_supervised $1 $NSD 19407 --control unix:$TMP/dctl.sock --provisioning-key $TMP/keys/provisioning.key
}
short_nopush() {
	rm -f $TMP/nctl.sock
	short_supervised $1 $NSN 19411 --control unix:$TMP/nctl.sock --provisioning-key $TMP/keys/provisioning.key \
		--no-identity-push
}
short_signed() {
	rm -f $TMP/sctl.sock
	short_supervised $1 $NSS 19409 --control unix:$TMP/sctl.sock --provisioning-key $TMP/keys/provisioning.key
}
# The proxy's own identity-resolution histogram (/metrics): mean, the share
# of resolutions within 100, 200 and 300 us, and the median's bucket.
idlat() {
	curl -s --noproxy '*' http://127.0.0.1:$1/metrics | awk '
		/identity_resolution_seconds_bucket\{le="[0-9.e+-]*"\}/ {
			le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le); nb++; L[nb] = le + 0; C[nb] = $2 }
		/identity_resolution_seconds_sum/ {s = $2}
		/identity_resolution_seconds_count/ {n = $2}
		END {
			if (n == 0) exit
			for (i = 1; i <= nb; i++) {
				if (L[i] == 0.00003) z = C[i]; if (L[i] == 0.00006) y = C[i]
				if (L[i] == 0.0001) a = C[i]; if (L[i] == 0.0002) b = C[i]; if (L[i] == 0.0003) c = C[i]
				if (med == "" && C[i] * 2 >= n) med = (i > 1 ? L[i - 1] * 1e6 : 0) "-" L[i] * 1e6
			}
			printf "mean %.0f us, p50 in %s us, <= 30 us %.0f%%, <= 60 us %.0f%%, <= 100 us %.0f%%, <= 200 us %.0f%%, <= 300 us %.0f%% (n=%d)", s / n * 1e6, med, z * 100 / n, y * 100 / n, a * 100 / n, b * 100 / n, c * 100 / n, n }'
}
# Transparent capture: a private netns (ports 19600-19699 inside it).
TNS=tether-bench-$$ TPORT=19600
cat > $TMP/policy-tcp.yaml <<P
version: 1
network:
  policies:
    - name: bench
      binaries: [{path: /usr/bin/true}]
      endpoints: [{cidr: 127.0.0.1/32, ports: [$UP], protocol: tcp}]
P
ip netns add $TNS
cleanup_tns() { ip netns del $TNS 2>/dev/null || true; }
trap 'cleanup; cleanup_tns' EXIT
ip -n $TNS link set lo up
ip netns exec $TNS nft -f - <<N
table inet tether_bench {
  chain capture {
    type nat hook output priority -100; policy accept;
    meta skuid 65534 tcp dport $UP redirect to :$TPORT
  }
}
N
ip netns exec $TNS $NST --listen 127.0.0.1:19601 --transparent-listen 127.0.0.1:$TPORT --transparent-peek-ms 5 \
	--policy $TMP/policy-tcp.yaml --audit $TMP/log/audit5.jsonl --identity-static /usr/bin/true 2> $TMP/ns5.err & PIDS+=($!)
NST_PID=$!
in_tns() { ip netns exec $TNS setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# HAProxy (Debian package) as the relay reference: TCP mode, option
# splice-auto, one process, forwarding to the bulk upstream.
HAVE_HA=0 HAP=19730
if command -v haproxy >/dev/null; then
	cat > $TMP/haproxy.cfg <<H
global
	nbthread 1
defaults
	mode tcp
	timeout connect 5s
	timeout client 600s
	timeout server 600s
	option splice-auto
listen bulk
	bind 127.0.0.1:$HAP
	server up 127.0.0.1:$UP
H
	haproxy -db -f $TMP/haproxy.cfg > $TMP/haproxy.log 2>&1 & PIDS+=($!)
	HA_PID=$!
	HAVE_HA=1
fi
HAVE_TP=0
if command -v tinyproxy >/dev/null; then
	printf 'Port %s\nListen 127.0.0.1\nTimeout 600\nMaxClients 1000\nLogLevel Critical\nAllow 127.0.0.1\nDisableViaHeader Yes\n' $TPP > $TMP/tinyproxy.conf
	tinyproxy -d -c $TMP/tinyproxy.conf > $TMP/tp.log 2>&1 & PIDS+=($!)
	TP_PID=$!
	HAVE_TP=1
fi
sleep 0.5
NS_PID=${PIDS[0]} NSQ_PID=${PIDS[1]}
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
kv() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
# The most a path can move on this machine: with every CPU busy, NCPU CPU-seconds
# per second, so a path costing C CPU-seconds per GiB (both bench ends + the
# proxy) moves at most NCPU/C GiB/s. Printed as a ratio to the direct row of
# the same round: no relay of this measured cost could beat it here.
cpu_bound() { # DIRECT_LINE PROXY_LINE
	awk -v n=$(nproc) -v ds=$(echo "$1" | kv seconds) -v db=$(echo "$1" | kv bytes) \
		-v bc=$(echo "$2" | kv bench_cpu_s_per_GiB) -v pc=$(echo "$2" | kv proxy_cpu_s_per_GiB) \
		'BEGIN{ if (bc + pc <= 0 || ds <= 0) { print "-"; exit } printf "%.2f", (n / (bc + pc)) / ((db / 1073741824) / ds) }'
}
# One bulk run through a proxy process: its line plus that process's CPU
# time per GiB relayed (utime+stime from /proc), so a ratio can be read
# next to the cost that bounds it.
bulk_via() { # PID PORT LABEL [relay]
	local c0 c1 out how=--proxy addr=127.0.0.1:$2
	[ "${4:-}" = relay ] && how=--relay addr=$2
	c0=$(ticks $1)
	out=$($B bulk --port $UP --bytes $BYTES $how $addr --label $3)
	c1=$(ticks $1)
	echo "$out proxy_cpu_s_per_GiB=$(awk -v t=$((c1 - c0)) -v hz=$(getconf CLK_TCK) -v b=$BYTES 'BEGIN{printf "%.3f", t / hz / (b / 1073741824)}')"
}
echo "# net-supervisor bench ($(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)); identity: static test strategy except the local-identity row"
HA_ROWS=() RATIOS=() BOUNDS=() R1L=() R1D=() R8L=() R8D=() R1F=() R8F=() TB=() TS=()
# ratio LINE_A LINE_B: A's connections/s over B's
ratio() { awk -v a=$(echo "$1" | kv conn_per_s) -v b=$(echo "$2" | kv conn_per_s) 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "-" }'; }
R1S=() R8S=() R1N=() R8N=()
ALL=1
[ "${ROWS:-all}" = delegated ] && ALL=0
if [ "${ROWS:-all}" = workers ]; then
	W1=() W8=()
	echo "# workers: default $(curl -s --noproxy '*' http://127.0.0.1:19405/metrics | awk '$1 == "tether_workers" {print $2}') event loops against --workers 1"
	for r in $(seq $ROUNDS); do
		A=$(cpu_per_flow $NSL1_PID short_local1 net-supervisor-local-identity-w1); echo "$A"
		L=$(cpu_per_flow $NSL_PID short_local net-supervisor-local-identity); echo "$L"
		T=$(cpu_per_flow $TP_PID short_supervised tinyproxy-supervised-client $TPP -); echo "$T"
		A8=$(CONC=8 cpu_per_flow $NSL1_PID short_local1 net-supervisor-local-identity-w1-c8); echo "$A8"
		L8=$(CONC=8 cpu_per_flow $NSL_PID short_local net-supervisor-local-identity-c8); echo "$L8"
		T8=$(CONC=8 cpu_per_flow $TP_PID short_supervised tinyproxy-supervised-client-c8 $TPP -); echo "$T8"
		W1+=("w1 $(ratio "$A" "$T") default $(ratio "$L" "$T")")
		W8+=("w1 $(ratio "$A8" "$T8") default $(ratio "$L8" "$T8")")
	done
	echo "# connections/s with local identity over tinyproxy (same supervised client) per round: 1 client: $(IFS=';'; echo "${W1[*]}"); 8 clients: $(IFS=';'; echo "${W8[*]}") (target >= 1.5)"
	echo "# accepted per worker (default): $(curl -s --noproxy '*' http://127.0.0.1:19405/metrics | awk '/^tether_worker_accepted_total/ {printf "%s ", $0}')"
	echo "# identity resolution: --workers 1 $(idlat 19743); default $(idlat 19405)"
	exit 0
fi
for r in $(seq $ROUNDS); do
	if [ $ALL = 1 ]; then
	D=$($B bulk --port $UP --bytes $BYTES --label direct); echo "$D"
	N=$(bulk_via $NS_PID $NSP net-supervisor); echo "$N"
	bulk_via $NSQ_PID $NSQ net-supervisor-splice
	[ $HAVE_TP = 1 ] && $B bulk --port $UP --bytes $BYTES --proxy 127.0.0.1:$TPP --label tinyproxy
	if [ $HAVE_HA = 1 ]; then
		H=$(bulk_via $HA_PID $HAP haproxy-tcp-splice-auto relay); echo "$H"
		HA_ROWS+=("$(awk -v d=$(echo "$D" | kv bench_cpu_s_per_GiB) -v nb=$(echo "$N" | kv bench_cpu_s_per_GiB) -v np=$(echo "$N" | kv proxy_cpu_s_per_GiB) -v hb=$(echo "$H" | kv bench_cpu_s_per_GiB) -v hp=$(echo "$H" | kv proxy_cpu_s_per_GiB) 'BEGIN{printf "tether %.2f haproxy %.2f floor %.2f", nb + np, hb + hp, 2 * d}')")
	fi
	RATIOS+=("$(awk -v n=$(echo "$N" | kv MiB_per_s) -v d=$(echo "$D" | kv MiB_per_s) 'BEGIN{printf "%.2f", n / d}')")
	# transparent: the same client without --proxy, captured
	DT=$(in_tns $B bulk --port $UP --bytes $BYTES --label direct-netns); echo "$DT"
	c0=$(ticks $NST_PID)
	NT=$(in_tns $B bulk --port $UP --bytes $BYTES --label net-supervisor-transparent)
	c1=$(ticks $NST_PID)
	echo "$NT proxy_cpu_s_per_GiB=$(awk -v t=$((c1 - c0)) -v hz=$(getconf CLK_TCK) -v b=$BYTES 'BEGIN{printf "%.3f", t / hz / (b / 1073741824)}')"
	TB+=("$(awk -v n=$(echo "$NT" | kv MiB_per_s) -v e=$(echo "$N" | kv MiB_per_s) 'BEGIN{printf "%.2f", n / e}')")
	BOUNDS+=("$(cpu_bound "$D" "$N")")
	$B short --port $UP --requests $REQS --label direct
	SE=$(cpu_per_flow $NS_PID $B short --port $UP --requests $REQS --proxy 127.0.0.1:$NSP --label net-supervisor); echo "$SE"
	in_tns $B short --port $UP --requests $REQS --label direct-netns
	ST=$(in_tns $B short --port $UP --requests $REQS --label net-supervisor-transparent); echo "$ST"
	TS+=("$(ratio "$ST" "$SE")")
	L1=$(cpu_per_flow $NSL_PID short_local net-supervisor-local-identity); echo "$L1"
	F1=$(cpu_per_flow $NSF_PID short_feed net-supervisor-local-identity-feed); echo "$F1"
	fi
	D1=$(cpu_per_flow $NSD_PID short_delegated net-supervisor-delegated-identity); echo "$D1"
	P1=$(cpu_per_flow $NSN_PID short_nopush net-supervisor-delegated-identity-nopush); echo "$P1"
	S1=$(cpu_per_flow $NSS_PID short_signed net-supervisor-delegated-identity-signed); echo "$S1"
	[ $HAVE_TP = 1 ] && $B short --port $UP --requests $REQS --proxy 127.0.0.1:$TPP --label tinyproxy
	# the same client as the identity rows (a proc-supervisor workload, its
	# connects notified) through tinyproxy: the proxies compared alone
	if [ $HAVE_TP = 1 ]; then
		T1=$(cpu_per_flow $TP_PID short_supervised tinyproxy-supervised-client $TPP -); echo "$T1"
		[ $ALL = 1 ] && R1L+=("$(ratio "$L1" "$T1")") R1F+=("$(ratio "$F1" "$T1")")
		R1D+=("$(ratio "$D1" "$T1")") R1S+=("$(ratio "$S1" "$T1")") R1N+=("$(ratio "$P1" "$T1")")
	fi
	# The same three with 8 client threads: connection rate when the
	# machine, not one request's latency, is the limit.
	if [ $ALL = 1 ]; then
	L8=$(CONC=8 cpu_per_flow $NSL_PID short_local net-supervisor-local-identity-c8); echo "$L8"
	F8=$(CONC=8 cpu_per_flow $NSF_PID short_feed net-supervisor-local-identity-feed-c8); echo "$F8"
	fi
	D8=$(CONC=8 cpu_per_flow $NSD_PID short_delegated net-supervisor-delegated-identity-c8); echo "$D8"
	P8=$(CONC=8 cpu_per_flow $NSN_PID short_nopush net-supervisor-delegated-identity-nopush-c8); echo "$P8"
	S8=$(CONC=8 cpu_per_flow $NSS_PID short_signed net-supervisor-delegated-identity-signed-c8); echo "$S8"
	if [ $HAVE_TP = 1 ]; then
		T8=$(CONC=8 cpu_per_flow $TP_PID short_supervised tinyproxy-supervised-client-c8 $TPP -); echo "$T8"
		[ $ALL = 1 ] && R8L+=("$(ratio "$L8" "$T8")") R8F+=("$(ratio "$F8" "$T8")")
		R8D+=("$(ratio "$D8" "$T8")") R8S+=("$(ratio "$S8" "$T8")") R8N+=("$(ratio "$P8" "$T8")")
	fi
done
echo "# bulk net-supervisor/direct per round (side by side, information: a relay is two hops): ${RATIOS[*]}"
[ $HAVE_HA = 1 ] && echo "# bulk machine CPU per GiB per round (bench ends + relay; target: tether <= haproxy; floor = 2 x direct): $(IFS=';'; echo "${HA_ROWS[*]}")"
echo "# transparent over explicit (same static identity) per round: bulk ${TB[*]}; connections/s ${TS[*]} (target: parity)"
echo "# bulk CPU bound per round ($(nproc) CPUs / (bench ends + proxy CPU per GiB), over direct): ${BOUNDS[*]}"
[ $HAVE_TP = 1 ] && echo "# connections/s with identity over tinyproxy (same supervised client) per round: 1 client: local ${R1L[*]}, local+feed ${R1F[*]}, delegated ${R1D[*]}, delegated no push ${R1N[*]}, delegated signed ${R1S[*]}; 8 clients: local ${R8L[*]}, local+feed ${R8F[*]}, delegated ${R8D[*]}, delegated no push ${R8N[*]}, delegated signed ${R8S[*]} (target >= 1.5)"
echo "# identity resolution as the proxies measured it: local $(idlat 19405); local+feed $(idlat 19721); delegated $(idlat 19407); delegated no push (--no-identity-push) $(idlat 19411); delegated signed (--no-identity-mac) $(idlat 19409)"
echo "# delegated allows answered from a push (context_request_id >= 2^62): $(python3 -c '
import json, sys
n = p = 0
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "egress_decision" and e.get("decision") == "allow":
        n += 1; p += int(e.get("context_request_id", 0) >= 1 << 62)
print(f"{p} of {n}")' $TMP/log/audit4.jsonl 2>/dev/null)"
echo "# identity feed (local+feed proxy): $(curl -s --noproxy '*' http://127.0.0.1:19721/metrics | awk '/^tether_identity_feed_total/ {sub(/tether_identity_feed_total/, ""); printf "%s ", $0}')"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); audit lines written: $(wc -l < $TMP/log/audit.jsonl); local identity: $(grep -c '"allow"' $TMP/log/audit3.jsonl 2>/dev/null || true) allowed, $(grep -c '"deny"' $TMP/log/audit3.jsonl 2>/dev/null || true) denied; delegated: $(grep -c '"allow"' $TMP/log/audit4.jsonl 2>/dev/null || true) allowed, $(grep -c '"deny"' $TMP/log/audit4.jsonl 2>/dev/null || true) denied"
