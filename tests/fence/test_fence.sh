#!/bin/bash
# The nftables fence in a namespace pair this test creates:
#   pod  (198.51.100.2/24, 2001:db8::2/64)  --veth--  net (198.51.100.1/24, 2001:db8::1/64)
# With `tether fence install --proxy-uid 4242` in pod: TCP, UDP and ICMP from
# another uid (65534) to the net side fail, over IPv4 and IPv6; uid 4242 (the
# proxy) still gets out, and a client going through net-supervisor (running as
# 4242, static test identity) reaches the server. `fence remove` restores
# direct access (proving it was the fence).
set -u
BIN=${TETHER_BIN:?}
HELPER=${TETHER_TESTS:?}/fence_helper
ID=$$
POD=tfpod$ID NET=tfnet$ID
TMP=$(mktemp -d /tmp/tether-fence-XXXXXX)
PIDS=()
fail() { echo "FAIL: $*" >&2; [ -f $TMP/ns.err ] && sed 's/^/  ns: /' $TMP/ns.err >&2; exit 1; }
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
	ip netns del $POD 2>/dev/null
	ip netns del $NET 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
command -v curl >/dev/null || { echo "SKIP: curl missing"; exit 0; }

ip netns add $POD && ip netns add $NET || fail "cannot create namespaces"
ip link add tfa$ID type veth peer name tfb$ID || fail "veth"
ip link set tfa$ID netns $POD && ip link set tfb$ID netns $NET || fail "move veth"
inpod() { ip netns exec $POD "$@"; }
innet() { ip netns exec $NET "$@"; }
inpod ip link set lo up; innet ip link set lo up
inpod ip addr add 198.51.100.2/24 dev tfa$ID; innet ip addr add 198.51.100.1/24 dev tfb$ID
inpod ip addr add 2001:db8::2/64 dev tfa$ID nodad; innet ip addr add 2001:db8::1/64 dev tfb$ID nodad
inpod ip link set tfa$ID up; innet ip link set tfb$ID up
inpod sysctl -qw net.ipv4.ping_group_range="0 2147483647"

# Background processes are started without shell functions so $! is the
# process itself (ip netns exec and setpriv exec in place).
ip netns exec $NET $HELPER http 198.51.100.1 8080 & PIDS+=($!)
ip netns exec $NET $HELPER http 2001:db8::1 8080 & PIDS+=($!)
ip netns exec $NET $HELPER udp-sink 198.51.100.1 5353 $TMP/udp4 & PIDS+=($!)
ip netns exec $NET $HELPER udp-sink 2001:db8::1 5353 $TMP/udp6 & PIDS+=($!)
as() { local uid=$1; shift; inpod setpriv --reuid $uid --regid $uid --clear-groups "$@"; }
for i in $(seq 50); do inpod $HELPER tcp 198.51.100.1 8080 && inpod $HELPER tcp 2001:db8::1 8080 && break; sleep 0.1; done

# Before the fence: everybody gets out (the path works).
as 65534 $HELPER tcp 198.51.100.1 8080 || fail "no path before the fence"
as 65534 $HELPER ping 198.51.100.1 || fail "no ICMP path before the fence"

inpod $BIN/tether fence install --proxy-uid 4242 --allow-port 3128 || fail "fence install"
inpod nft list table inet tether_fence | grep -q "meta skuid 4242" || fail "table not installed"

# Another uid: TCP, UDP and ICMP, IPv4 and IPv6, all refused.
as 65534 $HELPER tcp 198.51.100.1 8080 && fail "direct TCPv4 from uid 65534 got through"
as 65534 $HELPER tcp 2001:db8::1 8080 && fail "direct TCPv6 from uid 65534 got through"
as 65534 curl -s --max-time 3 http://198.51.100.1:8080/ && fail "direct curl got through"
as 0 $HELPER tcp 198.51.100.1 8080 && fail "direct TCP from root (not the proxy uid) got through"
as 65534 $HELPER udp-send 198.51.100.1 5353
as 65534 $HELPER udp-send 2001:db8::1 5353
as 65534 $HELPER ping 198.51.100.1 && fail "ICMPv4 echo from uid 65534 got through"
as 65534 $HELPER ping 2001:db8::1 && fail "ICMPv6 echo from uid 65534 got through"
sleep 0.3
[ -s $TMP/udp4 ] && fail "UDPv4 datagram from uid 65534 arrived"
[ -s $TMP/udp6 ] && fail "UDPv6 datagram from uid 65534 arrived"

# The proxy's uid still gets out.
as 4242 $HELPER tcp 198.51.100.1 8080 || fail "the proxy uid cannot get out"

# Through net-supervisor (as uid 4242) the same request works.
cat > $TMP/policy.yaml <<P
version: 1
network:
  policies:
    - name: testnet
      binaries:
        - path: /usr/bin/curl
      endpoints:
        - cidr: 198.51.100.0/24
          ports: [8080]
P
chmod 755 $TMP; chmod 644 $TMP/policy.yaml
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $BIN/net-supervisor-testing --listen 127.0.0.1:3128 --policy $TMP/policy.yaml --audit - \
	--identity-static /usr/bin/curl > $TMP/audit.jsonl 2> $TMP/ns.err & PIDS+=($!)
for i in $(seq 50); do inpod $HELPER tcp 127.0.0.1 3128 && break; sleep 0.1; done
out=$(as 65534 curl -s --max-time 5 -x http://127.0.0.1:3128 http://198.51.100.1:8080/) || fail "curl through the proxy failed"
[ "$out" = "fence-ok" ] || fail "unexpected answer through the proxy: $out"
out=$(as 65534 curl -s --max-time 5 -p -x http://127.0.0.1:3128 http://198.51.100.1:8080/) || fail "CONNECT through the proxy failed"
[ "$out" = "fence-ok" ] || fail "unexpected answer through the CONNECT tunnel: $out"
grep -q '"decision":"allow"' $TMP/audit.jsonl || fail "no allow decision audited"

# The workload's own loopback (issue 19 item 2): a dev server of uid 65534
# on 127.0.0.1 and ::1 is usable by uid 65534, TCP and UDP.
ip netns exec $POD setpriv --reuid 65534 --regid 65534 --clear-groups $HELPER http 127.0.0.1 3000 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 65534 --regid 65534 --clear-groups $HELPER http ::1 3000 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 65534 --regid 65534 --clear-groups $HELPER udp-echo 127.0.0.1 3001 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 65534 --regid 65534 --clear-groups $HELPER udp-echo ::1 3001 & PIDS+=($!)
# A supervisor's own loopback endpoints (uid 4242, the fence's proxy uid):
# 9090 declared (--supervisor-port), 9091 not.
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $HELPER http 127.0.0.1 9090 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $HELPER http ::1 9090 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $HELPER http 127.0.0.1 9091 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $HELPER http ::1 9091 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $HELPER udp-echo 127.0.0.1 9090 & PIDS+=($!)
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $HELPER udp-echo ::1 9092 & PIDS+=($!)
inpod $BIN/tether fence install --proxy-uid 4242 --allow-port 3128 --supervisor-port 9090 || fail "fence install with --supervisor-port"
for a in 127.0.0.1 ::1; do
	for i in $(seq 50); do as 4242 $HELPER tcp $a 3000 && as 4242 $HELPER tcp $a 9091 && break; sleep 0.1; done
	as 65534 $HELPER tcp $a 3000 || fail "uid 65534 cannot reach its own dev server on $a"
	as 65534 curl -gs --max-time 3 "http://${a/::1/[::1]}:3000/" | grep -q fence-ok || fail "curl to its own server on $a failed"
	as 65534 $HELPER udp-ask $a 3001 || fail "uid 65534 gets no UDP answer from itself on $a"
	as 4242 $HELPER tcp $a 3000 || fail "the proxy uid cannot reach the workload's server on $a"
	for p in 9090 9091; do
		as 65534 $HELPER tcp-refused $a $p; rc=$?
		[ $rc = 0 ] || fail "uid 65534 -> supervisor endpoint $a:$p not refused at once (rc $rc: 1 connected, 3 timeout)"
	done
	as 4242 $HELPER tcp $a 9091 || fail "the proxy uid cannot reach a supervisor endpoint on $a"
done
as 65534 $HELPER udp-ask 127.0.0.1 9090; rc=$?
[ $rc = 4 ] || fail "UDP to the declared supervisor port 9090 not refused (rc $rc)"
as 65534 $HELPER udp-ask ::1 9092 && fail "an undeclared supervisor UDP socket answered uid 65534"
inpod nft list table inet tether_fence | grep -q "ct mark set" || fail "no workload loopback rule"

# Removing the fence restores direct access; removing twice is fine.
inpod $BIN/tether fence remove || fail "fence remove"
inpod $BIN/tether fence remove || fail "second fence remove"
as 65534 $HELPER tcp 198.51.100.1 8080 || fail "no direct path after remove"
inpod nft list table inet tether_fence >/dev/null 2>&1 && fail "table still there"
# The veth fence (issue 19 item 1), on the net side's end of the veth: the
# pod may reach TCP 8081 on the net side's addresses and nothing else -
# whatever its uid (it is root here: rules in its own netns would not hold).
ip netns exec $NET $HELPER http :: 8081 & PIDS+=($!)
ip netns exec $NET $HELPER http :: 8082 & PIDS+=($!)
ip netns exec $NET $HELPER udp-echo :: 5354 & PIDS+=($!)
for i in $(seq 50); do innet $HELPER tcp ::1 8081 && innet $HELPER tcp ::1 8082 && break; sleep 0.1; done
inpod $HELPER udp-ask 198.51.100.1 5354 || fail "no UDP path before the veth fence"
innet $BIN/tether fence install --veth tfb$ID --allow-port 8081 --addr 198.51.100.1 --addr 2001:db8::1 || fail "veth fence install"
innet nft list table inet tether_fence_tfb$ID >/dev/null || fail "veth fence table missing"
for a in 198.51.100.1 2001:db8::1; do
	inpod $HELPER tcp $a 8081 || fail "the proxy port $a:8081 is not reachable through the veth fence"
	for p in 8080 8082; do
		inpod $HELPER tcp-refused $a $p; rc=$?
		[ $rc = 0 ] || fail "TCP $a:$p through the veth fence not refused at once (rc $rc)"
	done
	inpod $HELPER udp-ask $a 5354; rc=$?
	[ $rc = 4 ] || fail "UDP $a:5354 through the veth fence not refused at once (rc $rc)"
	inpod $HELPER ping $a && fail "ICMP echo to $a through the veth fence answered"
done
# Only the proxy's addresses: the port on another address of the net side is refused.
innet ip addr add 203.0.113.1/32 dev lo
inpod ip route add 203.0.113.1/32 via 198.51.100.1
inpod $HELPER tcp-refused 203.0.113.1 8081 || fail "8081 on an address other than the proxy's was not refused"
# Nothing is forwarded: a route through the net side (onward to a link
# where nobody answers ARP: a timeout without the fence) is refused at once.
innet sysctl -qw net.ipv4.ip_forward=1
innet ip link add tfd$ID type veth peer name tfe$ID && innet ip addr add 192.0.2.1/24 dev tfd$ID &&
	innet ip link set tfd$ID up && innet ip link set tfe$ID up || fail "onward link"
inpod ip route add 192.0.2.0/24 via 198.51.100.1
inpod $HELPER tcp-refused 192.0.2.77 80; rc=$?
[ $rc = 0 ] || fail "forwarding through the veth fence not refused at once (rc $rc)"
innet nft list table inet tether_fence_tfb$ID | grep -q "counter packets [1-9]" || fail "no refusal counted"
innet $BIN/tether fence remove --veth tfb$ID || fail "veth fence remove"
innet $BIN/tether fence remove --veth tfb$ID || fail "second veth fence remove"
inpod $HELPER tcp 198.51.100.1 8082 || fail "no direct path after the veth fence was removed"
$BIN/tether fence install --veth tfb$ID --proxy-uid 1 --allow-port 1 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--veth with --proxy-uid should exit 2"
$BIN/tether fence install --veth 'a b' --allow-port 1 >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --veth name should exit 2"
# Usage errors exit 2.
$BIN/tether fence install >/dev/null 2>&1; [ $? -eq 2 ] || fail "install without --proxy-uid should exit 2"
echo "PASS"
