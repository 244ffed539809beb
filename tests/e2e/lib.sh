# Shared harness of the e2e scripts (sourced after CASE and TOPO are set):
# a private "outer" netns and a fake-internet netns on TEST-NET-2
# (198.51.100.10:8080, a python3 http.server) joined to it by a veth, then
# helpers to run `tether run` inside the outer netns and read its audit.
# Every audit line is checked for `topology` (= TOPO's canonical name) and
# every egress decision for identity_source (local_procfs or delegated as
# the topology says; a denial without any identity says "none").
# Exit 0 pass, 1 fail, 77 skip (a daemon lacks a feature this case needs).
set -u
BIN=${TETHER_BIN:?TETHER_BIN}
SRC=${TETHER_SRC:?TETHER_SRC}
TETHER="$BIN/tether"
TAG="te$$"
OUTER="${TAG}o" INET="${TAG}i"
WORK=$(mktemp -d /tmp/tether-e2e.XXXXXX)
# the workload may run as another uid (nobody in the pod topologies): it
# reads the scripts here and writes into rw/
chmod 755 "$WORK"
mkdir -m 1777 "$WORK/rw"
AUDIT="$WORK/audit.jsonl"
. "$SRC/tests/sanitizer_noise.sh"
SERVER_PID="" RUN_PID=""
URL=http://198.51.100.10:8080/
# the fake internet's IPv6 side (setup_net6): documentation prefix only
URL6='http://[2001:db8:100::10]:8080/'

fail() { echo "FAIL [$CASE $TOPO]: $*" >&2; dump; exit 1; }
skip() { echo "SKIP [$CASE $TOPO]: $*"; exit 77; }
dump() {
	# a test's own files are under $WORK: if it is gone, another process
	# removed it and nothing below can be trusted (say so, not a mystery)
	[ -d "$WORK" ] || echo "--- $WORK was removed while the test ran (not by this test)" >&2
	[ -s "$AUDIT" ] && { echo "--- audit (events other than env_boundary)"; grep -v '"event":"env_boundary"' "$AUDIT" | tail -20; } >&2
	[ -s "$WORK/out" ] && { echo "--- output"; tail -20 "$WORK/out"; } >&2
	true
}

cleanup() {
	if [ -n "$RUN_PID" ]; then
		# RUN_PID is the background subshell; `tether run` is below it
		# (nsenter, timeout): end that one too, its guardian removes the
		# sandbox
		local t
		t=$(descendant_of_exe "$RUN_PID" "$(readlink -f "$TETHER")" 2>/dev/null)
		[ -n "$t" ] && kill -9 "$t" 2>/dev/null
		kill -9 "$RUN_PID" 2>/dev/null
	fi
	# shellcheck disable=SC2086 # a list of pids
	[ -n "$SERVER_PID" ] && kill $SERVER_PID 2>/dev/null
	wait 2>/dev/null
	ip netns del "$INET" 2>/dev/null
	ip netns del "$OUTER" 2>/dev/null
	[ -n "${KEEP_WORK:-}" ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || skip "needs root"
# the identity strategy (audit identity_source) and network shape per topology
case "$TOPO" in
split|split-shared-netns|split-veth|vm-delegated) IDSRC=delegated ;;
*) IDSRC=local_procfs ;;
esac
case "$TOPO" in
shared-pid|split|split-shared-netns) POD=1 ;;
*) POD=0 ;;
esac
NETSUP_BIN="${TETHER_BIN_DIR:-$BIN}/net-supervisor"
PROCSUP_BIN="${TETHER_BIN_DIR:-$BIN}/proc-supervisor"
if [ -z "${TETHER_BIN_DIR:-}" ] && ! "$NETSUP_BIN" --features 2>/dev/null | grep -qx anchor-pid; then
	case "$CASE" in dry_run) ;; *) skip "net-supervisor has no --identity local / --anchor-pid yet";; esac
fi

# nsenter, not `ip netns exec`: that one remounts /sys, hiding the cgroup
# tree (the sandbox would fall back to lineage membership)
inside() { nsenter --net=/run/netns/"$OUTER" "$@"; }

setup_net() {
	# Names carry our pid: one left by an earlier test with the same pid
	# (killed by ctest's timeout before its trap ran) is stale, since that
	# test is dead; no live test can own it.
	ip netns del "$OUTER" 2>/dev/null
	ip netns del "$INET" 2>/dev/null
	ip netns add "$OUTER" && ip netns add "$INET" || fail "cannot create netns"
	ip netns exec "$OUTER" ip link set lo up
	ip netns exec "$INET" ip link set lo up
	ip link add "${TAG}h" netns "$OUTER" type veth peer name "${TAG}n" netns "$INET" || fail "veth"
	inside ip addr add 198.51.100.1/24 dev "${TAG}h"
	inside ip link set "${TAG}h" up
	ip netns exec "$INET" ip addr add 198.51.100.10/24 dev "${TAG}n"
	ip netns exec "$INET" ip link set "${TAG}n" up
	mkdir -p "$WORK/www" && echo hello > "$WORK/www/index.html"
	ip netns exec "$INET" python3 -m http.server 8080 --bind 198.51.100.10 --directory "$WORK/www" \
		>"$WORK/server.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 100); do
		inside curl -s -o /dev/null --noproxy '*' --max-time 1 "$URL" && return 0
		sleep 0.1
	done
	fail "test server did not start"
}

# IPv6 on the same veth (after setup_net): 2001:db8:100::1 (outer) and
# 2001:db8:100::10 (fake internet), nodad so they work at once, and a second
# http.server bound to [2001:db8:100::10]:8080 (killed by cleanup).
setup_net6() {
	inside ip -6 addr add 2001:db8:100::1/64 dev "${TAG}h" nodad || fail "outer IPv6 address"
	ip netns exec "$INET" ip -6 addr add 2001:db8:100::10/64 dev "${TAG}n" nodad || fail "fake internet IPv6 address"
	ip netns exec "$INET" "${PY3:-python3}" -m http.server 8080 --bind 2001:db8:100::10 --directory "$WORK/www" \
		>"$WORK/server6.log" 2>&1 &
	SERVER_PID="$SERVER_PID $!"
	for _ in $(seq 100); do
		inside curl -g -s -o /dev/null --noproxy '*' --max-time 1 "$URL6" && return 0
		sleep 0.1
	done
	fail "IPv6 test server did not start"
}

policy() { # policy FILE [sha256-pin]
	{
		echo "version: 1"
		echo "network:"
		echo "  mode: enforce"
		echo "  policies:"
		echo "    - name: test-server"
		echo "      binaries:"
		echo "        - path: /usr/bin/curl"
		[ -n "${2:-}" ] && echo "          sha256: \"$2\""
		echo "      endpoints:"
		echo "        - cidr: 198.51.100.0/24"
		echo "          ports: [8080]"
	} >"$1"
}

run() { # run [tether run options] -- CMD...; sets RC
	inside timeout 30 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" "$@" >"$WORK/out" 2>&1
	RC=$?
}

# Every line has topology $TOPO; every egress decision local_procfs (or none on a denial).
check_audit_common() {
	python3 - "$AUDIT" "$TOPO" "$IDSRC" <<'PY' || fail "audit lines lack topology/identity_source"
import json, sys
ok = True
idsrc = sys.argv[3]
for n, l in enumerate(open(sys.argv[1]), 1):
    e = json.loads(l)
    if e.get("topology") != sys.argv[2] or "ts" not in e or "event" not in e:
        print(f"line {n}: topology={e.get('topology')} event={e.get('event')}"); ok = False
    if e.get("event") == "egress_decision":
        # allowed flows are attributed locally; a denial may have no identity at all
        want = {idsrc} if e.get("decision") == "allow" else {idsrc, "none"}
        if e.get("identity_source") not in want:
            print(f"line {n}: {e.get('decision')} with identity_source={e.get('identity_source')}"); ok = False
sys.exit(0 if ok else 1)
PY
}

# decisions BINARY -> "decision:reason" lines
decisions() {
	python3 - "$AUDIT" "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "egress_decision" and (e.get("binary") or {}).get("path") == sys.argv[2]:
        print(f"{e.get('decision')}:{e.get('reason')}")
PY
}

expect_decision() { # BINARY decision:reason
	local got
	got=$(decisions "$1")
	echo "$got" | grep -qx "$2" || fail "expected $2 for $1, audit says: ${got:-nothing}"
}

# the host pid of a descendant of $1 with exe $2 (breadth first, bounded
# depth; a walk down from processes we started, never a system-wide search)
descendant_of_exe() {
	local pids=$1 want=$2 p c
	for _ in 1 2 3 4 5 6 7; do
		local next=""
		for p in $pids; do
			for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
				[ "$(readlink /proc/"$c"/exe 2>/dev/null)" = "$want" ] && { echo "$c"; return 0; }
				next="$next $c"
			done
		done
		pids=$next
	done
	return 1
}
sandbox_pid_of_exe() { descendant_of_exe "$RUN_PID" "$1"; }

nothing_left() {
	local t=$1
	ip -n "$OUTER" -o link | grep -q "tt${t}a" && fail "veth tt${t}a left behind"
	[ -e "/run/netns/tt${t}w" ] && fail "netns tt${t}w left behind"
	ip netns exec "$OUTER" nft list table inet "tether_fence_tt${t}a" >/dev/null 2>&1 &&
		fail "veth fence table tether_fence_tt${t}a left behind"
	[ -e "/run/tether/run-$t" ] && fail "/run/tether/run-$t left behind"
	ls -d /sys/fs/cgroup/*/tether-run-"$t" /sys/fs/cgroup/tether-run-"$t" 2>/dev/null | grep -q . &&
		fail "cgroup tether-run-$t left behind"
	true
}

# the proxy is ready (policy and anchor): only then does the entrypoint run;
# the launcher opens that gate by creating its run directory's ready file
# (the daemons' info lines are not printed at the default level)
wait_ready() {
	local t
	t=$(descendant_of_exe "$RUN_PID" "$(readlink -f "$TETHER")") || fail "tether run process not found"
	wait_for 10 test -e "/run/tether/run-$t/ready" || fail "proxy never ready"
}

wait_for() { # wait_for SECONDS CMD...
	local n=$(( $1 * 20 )); shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
	return 1
}

# start_sshd: an sshd on 198.51.100.10:2222 in the fake internet that takes
# the key $WORK/rw/userkey (made here, readable by the workload's uid: nobody
# in the pod topologies); returns once it accepts connections (fails after
# 30 s). Its log is $WORK/sshd.log.
start_sshd() {
	mkdir -p /run/sshd
	ssh-keygen -q -t ed25519 -N '' -f "$WORK/hostkey" && ssh-keygen -q -t ed25519 -N '' -f "$WORK/rw/userkey" ||
		fail "ssh-keygen"
	cp "$WORK/rw/userkey.pub" "$WORK/authorized_keys"
	printf '%s\n' "ListenAddress 198.51.100.10" "Port 2222" "HostKey $WORK/hostkey" "PidFile none" \
		"AuthorizedKeysFile $WORK/authorized_keys" "PermitRootLogin prohibit-password" \
		"PasswordAuthentication no" "KbdInteractiveAuthentication no" "UsePAM no" "StrictModes no" \
		>"$WORK/sshd_config"
	ip netns exec "$INET" /usr/sbin/sshd -D -e -f "$WORK/sshd_config" 2>"$WORK/sshd.log" &
	SERVER_PID="$SERVER_PID $!"
	[ "$POD" = 1 ] && chown nobody "$WORK/rw/userkey"
	chmod 600 "$WORK/rw/userkey"
	wait_for 30 ip netns exec "$INET" bash -c 'exec 3<>/dev/tcp/198.51.100.10/2222' 2>/dev/null ||
		fail "sshd did not start: $(cat "$WORK/sshd.log")"
}

# udp_sink ADDR LOG SENDER: the fake internet answers UDP on ADDR:5353 and
# logs "source payload" lines to LOG (what reaches it is a bypass); SENDER
# is written as a script that sends its argument there, UDP_SEND runs it.
udp_sink() {
	local addr=$1 log=$2 sender=$3 fam=AF_INET shown=$1
	case "$addr" in *:*) fam=AF_INET6 shown="[$addr]" ;; esac
	ip netns exec "$INET" python3 -c '
import socket, sys
s = socket.socket(getattr(socket, sys.argv[1]), socket.SOCK_DGRAM)
s.bind((sys.argv[2], 5353)); s.settimeout(40)
while True:
    d, a = s.recvfrom(100)
    open(sys.argv[3], "a").write(a[0] + " " + d.decode("latin-1") + "\n")
' "$fam" "$addr" "$log" &
	SERVER_PID="$SERVER_PID $!"
	printf '%s\n' 'import socket, sys' \
		"s = socket.socket(socket.$fam, socket.SOCK_DGRAM)" \
		"s.sendto(sys.argv[1].encode(), (\"$addr\", 5353))" >"$sender"
	UDP_SEND="${PY3:-python3} $sender"
	wait_for 5 sh -c "ss -Hunl -N $INET | grep -qF '$shown:5353'" || fail "UDP listener on $shown did not start"
}


# direct_bypass_check 4|6 POLICY URL: no way out but the proxy, over TCP or
# UDP. The workload tries URL directly and sends a datagram to the fake
# internet's UDP sink; neither may arrive and the proxy sees nothing. In a
# pod topology the pod's default route is made to reach the fake internet
# (forwarding in our private outer netns, a route back) so that only the
# fence is in the way, and a control proves it: uid 0 (the proxy's uid,
# exempt) does get through, uid 65534 does not. Elsewhere the workload
# netns must have no default route at all. Both with --transparent off: the
# fence alone (transparent.sh covers the captured flows).
direct_bypass_check() {
	local fam=$1 pol=$2 url=$3 ipf="" g="" sink=198.51.100.10 fwd=net.ipv4.ip_forward back="192.0.2.0/24 via 198.51.100.1"
	if [ "$fam" = 6 ]; then
		ipf=-6 g=-g sink=2001:db8:100::10 fwd=net.ipv6.conf.all.forwarding back="2001:db8::/48 via 2001:db8:100::1"
	fi
	local log="$WORK/udp$fam.log"
	udp_sink "$sink" "$log" "$WORK/udp${fam}_send.py"
	local direct="ip $ipf route; curl $g -sS --noproxy '*' --max-time 3 -o /dev/null '$url' && echo DIRECT-OK; $UDP_SEND workload"
	if [ "$POD" = 1 ]; then
		inside sysctl -qw "$fwd=1" || fail "cannot enable IPv$fam forwarding in the outer netns"
		# shellcheck disable=SC2086 # "PREFIX via GW"
		ip -n "$INET" $ipf route add $back || fail "return route"
		inside timeout 30 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" --transparent off --policy "$pol" \
			-- sh -c "$direct; i=0; while [ ! -e $WORK/done ] && [ \$i -lt 400 ]; do sleep 0.05; i=\$((i+1)); done" \
			>"$WORK/out" 2>&1 &
		RUN_PID=$!
		wait_for 10 grep -q "^default" "$WORK/out" || fail "the pod netns has no IPv$fam default route: $(cat "$WORK/out")"
		TPID=$(descendant_of_exe "$RUN_PID" "$(readlink -f "$TETHER")") || fail "tether run process not found"
		local pod_ns=tt${TPID}w
		ip netns exec "$pod_ns" curl $g -sS --noproxy '*' --max-time 5 -o /dev/null "$url" ||
			fail "uid 0 in the pod netns cannot reach the fake internet over IPv$fam: the test proves nothing"
		ip netns exec "$pod_ns" sh -c "$UDP_SEND control"
		ip netns exec "$pod_ns" setpriv --reuid=65534 --regid=65534 --clear-groups \
			curl $g -sS --noproxy '*' --max-time 3 -o /dev/null "$url" 2>/dev/null && fail "uid 65534 bypassed the fence over IPv$fam"
		ip netns exec "$pod_ns" setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "$UDP_SEND nobody" 2>/dev/null
		touch "$WORK/done"
		wait "$RUN_PID"; RUN_PID=""
		wait_for 3 grep -q control "$log" || fail "the control datagram never arrived"
	else
		run --transparent off --policy "$pol" -- sh -c "$direct"
		grep -q "^default" "$WORK/out" && fail "workload netns has an IPv$fam default route"
		if [ "$fam" = 6 ]; then
			grep -q "^2001:db8:[0-9a-f:]*/64 dev tt" "$WORK/out" || fail "no on-link IPv6 /64 in the workload netns: $(cat "$WORK/out")"
		fi
	fi
	grep -q DIRECT-OK "$WORK/out" && fail "direct IPv$fam connection succeeded"
	sleep 0.3
	grep -q "workload\|nobody" "$log" 2>/dev/null && fail "a datagram bypassed the proxy: $(cat "$log")"
	[ -z "$(decisions /usr/bin/curl)" ] || fail "a direct connection reached the proxy"
}
