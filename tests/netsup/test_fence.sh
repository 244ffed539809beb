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
ip netns exec $POD setpriv --reuid 4242 --regid 4242 --clear-groups $BIN/net-supervisor --listen 127.0.0.1:3128 --policy $TMP/policy.yaml --audit - \
	--identity-static /usr/bin/curl > $TMP/audit.jsonl 2> $TMP/ns.err & PIDS+=($!)
for i in $(seq 50); do inpod $HELPER tcp 127.0.0.1 3128 && break; sleep 0.1; done
out=$(as 65534 curl -s --max-time 5 -x http://127.0.0.1:3128 http://198.51.100.1:8080/) || fail "curl through the proxy failed"
[ "$out" = "fence-ok" ] || fail "unexpected answer through the proxy: $out"
out=$(as 65534 curl -s --max-time 5 -p -x http://127.0.0.1:3128 http://198.51.100.1:8080/) || fail "CONNECT through the proxy failed"
[ "$out" = "fence-ok" ] || fail "unexpected answer through the CONNECT tunnel: $out"
grep -q '"decision":"allow"' $TMP/audit.jsonl || fail "no allow decision audited"

# Removing the fence restores direct access; removing twice is fine.
inpod $BIN/tether fence remove || fail "fence remove"
inpod $BIN/tether fence remove || fail "second fence remove"
as 65534 $HELPER tcp 198.51.100.1 8080 || fail "no direct path after remove"
inpod nft list table inet tether_fence >/dev/null 2>&1 && fail "table still there"
# Usage errors exit 2.
$BIN/tether fence install >/dev/null 2>&1; [ $? -eq 2 ] || fail "install without --proxy-uid should exit 2"
echo "PASS"
