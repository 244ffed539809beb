#!/bin/bash
# e2e: IPv6 flows through `tether run --topology TOPO`, one CASE per call.
#
#   ipv6.sh CASE [TOPO]   (CASE: ipv6_allowed | ipv6_denied | ipv6_direct_blocked |
#                          ipv6_name | ipv6_off; TOPO as in topology.sh;
#                          env TETHER_BIN, TETHER_SRC)
#
# The fake internet of lib.sh gets 2001:db8:100::10 (a second http.server on
# [2001:db8:100::10]:8080). The sandbox side has IPv6 from the launcher: the
# veth's 2001:db8:0:K::/64 and a second proxy listener, [2001:db8:0:K::1]:3128
# on the veth topologies, [::1]:3128 in the pod netns. Two legs are tested:
# the workload's HTTP_PROXY (IPv4) to an IPv6 destination, and the
# workload->proxy leg itself over IPv6 (the net-supervisor, or the
# proc-supervisor's identity service when delegated, attributes the flow by
# an AF_INET6 sock_diag lookup). Only 2001:db8::/32 and ::1 are used.
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"
# the system python starts in 0.1 s, a PATH shim may take over a second:
# for our checks (lib.sh's too, through this function) and the helpers we run
PY3=python3
[ -x /usr/bin/python3 ] && PY3=/usr/bin/python3
python3() { command "$PY3" "$@"; }

policy6() { # policy6 FILE [any6]: curl may reach 2001:db8:100::/48 port 8080
	{
		echo "version: 1"
		echo "network:"
		echo "  mode: enforce"
		echo "  policies:"
		echo "    - name: test-server6"
		echo "      binaries:"
		echo "        - path: /usr/bin/curl"
		echo "      endpoints:"
		echo "        - cidr: 2001:db8:100::/48"
		echo "          ports: [8080]"
		if [ -n "${2:-}" ]; then
			# every IPv6 address: only the proxy's blocked ranges stand
			# between curl and ::1
			echo "    - name: any6"
			echo "      binaries:"
			echo "        - path: /usr/bin/curl"
			echo "      endpoints:"
			echo "        - cidr: \"::/0\""
			echo "          ports: [8080]"
		fi
	} >"$1"
}

# The workload's IPv6 proxy, computed inside it: the pod's [::1]:3128, or
# ::1 of the /64 on the workload's veth end (its own address is ::2).
PROXY6_SH='if [ "'"$POD"'" = 1 ]; then P6="[::1]:3128"; else a=$(ip -6 -o addr show scope global | awk "{print \$4}" | head -1); a=${a%/*}; P6="[${a%::2}::1]:3128"; fi; echo "proxy6=$P6"'

# checks over the audit's egress decisions, in python: ARGS are
#   BINARY DECISION:REASON CLIENT_FAMILY(4|6) [METHOD]  one decision each
decisions6() {
	python3 - "$AUDIT" "$IDSRC" "$@" <<'PY'
import ipaddress, json, sys
audit, idsrc, want = sys.argv[1], sys.argv[2], sys.argv[3:]
d = [json.loads(l) for l in open(audit)]
d = [e for e in d if e.get("event") == "egress_decision"]
for e in d:
    print("decision:", e.get("decision"), e.get("reason"), (e.get("binary") or {}).get("path"),
          e.get("identity_source"), e.get("method"), e.get("dest"), e.get("client"), e.get("policy"))
ok = True
if len(d) != len(want) // 3:
    print(f"expected {len(want) // 3} decisions, got {len(d)}"); ok = False
left = list(d)
for i in range(0, len(want), 3):
    binary, dr, fam = want[i], want[i + 1], int(want[i + 2])
    hit = None
    for e in left:
        if ((e.get("binary") or {}).get("path") == binary and f"{e['decision']}:{e['reason']}" == dr
                and ipaddress.ip_address(e["client"]["ip"]).version == fam):
            hit = e; break
    if not hit:
        print(f"no decision {binary} {dr} from an IPv{fam} client"); ok = False; continue
    left.remove(hit)
    # attributed: the topology's identity strategy, the real binary
    if hit.get("identity_source") != idsrc:
        print(f"{binary} {dr}: identity_source {hit.get('identity_source')}, want {idsrc}"); ok = False
    ip = hit["dest"].get("ip")
    if ipaddress.ip_address(ip).version != 6:
        print(f"{binary} {dr}: dest ip {ip} is not IPv6"); ok = False
    cl = ipaddress.ip_address(hit["client"]["ip"])
    if fam == 6 and not (cl == ipaddress.ip_address("::1") or cl in ipaddress.ip_network("2001:db8::/32")):
        print(f"{binary} {dr}: client {cl} outside 2001:db8::/32 and ::1"); ok = False
sys.exit(0 if ok else 1)
PY
}

# a sanitizer build reports on stderr; any report is a failure
no_sanitizer_report() {
	grep -q "AddressSanitizer\|LeakSanitizer\|runtime error:" "$WORK"/*.out "$WORK/out" "$WORK/plan" 2>/dev/null &&
		fail "sanitizer report in the output"
	true
}

setup_net
if [ "$CASE" = ipv6_off ]; then
	# a caller netns with IPv6 disabled: the sandbox is IPv4-only, as it
	# was before IPv6 support, and IPv4 flows work as ever
	inside sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 ||
		fail "cannot disable IPv6 in the outer netns"
	policy "$WORK/p.yaml"
	inside "$TETHER" run --dry-run --topology "$TOPO" --policy "$WORK/p.yaml" -- true >"$WORK/plan" 2>&1 ||
		fail "dry-run failed: $(cat "$WORK/plan")"
	grep -q "^ipv6: off" "$WORK/plan" || fail "the plan does not say ipv6 off: $(grep -i ipv6 "$WORK/plan")"
	grep "^net-supervisor:" "$WORK/plan" | grep -q -- '--listen \[' && fail "an IPv6 listener without IPv6"
	run --policy "$WORK/p.yaml" -- sh -c "ip -6 -o addr show scope global; curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 $URL"
	[ "$RC" = 0 ] || fail "tether run rc=$RC"
	grep -qx 200 "$WORK/out" || fail "curl did not get 200"
	grep -q "2001:db8" "$WORK/out" && fail "IPv6 addresses in the sandbox: $(cat "$WORK/out")"
	expect_decision /usr/bin/curl allow:allowed
	check_audit_common
	no_sanitizer_report
	echo "PASS [$CASE $TOPO]"
	exit 0
fi
setup_net6
# what the IPv6 server logs from here on (setup_net6's own probes are before)
S6_BASE=$(wc -l <"$WORK/server6.log")
server6_log() { tail -n +$((S6_BASE + 1)) "$WORK/server6.log"; }

case "$CASE" in
ipv6_allowed)
	# curl to the IPv6 destination over both legs, plain GET and CONNECT
	# ([addr]:port authority) over the IPv6 leg
	policy6 "$WORK/p6.yaml"
	cat >"$WORK/a.sh" <<EOF
#!/bin/sh
$PROXY6_SH
curl -g -sS -o /dev/null -w 'v4leg %{http_code}\n' --max-time 10 '$URL6'
curl -g -sS -o /dev/null -w 'v6leg %{http_code}\n' --max-time 10 -x "http://\$P6" '$URL6'
curl -g -sS -o /dev/null -w 'v6tunnel %{http_code}\n' --max-time 10 -p -x "http://\$P6" '$URL6'
EOF
	chmod 755 "$WORK/a.sh"
	run --policy "$WORK/p6.yaml" -- "$WORK/a.sh"
	[ "$RC" = 0 ] || fail "tether run rc=$RC"
	for l in "v4leg 200" "v6leg 200" "v6tunnel 200"; do
		grep -qx "$l" "$WORK/out" || fail "curl: want '$l'"
	done
	decisions6 /usr/bin/curl allow:allowed 4 /usr/bin/curl allow:allowed 6 /usr/bin/curl allow:allowed 6 \
		>"$WORK/d.out" 2>&1 || { cat "$WORK/d.out" >&2; fail "IPv6 decisions"; }
	python3 - "$AUDIT" <<'PY' || fail "allowed flows: wrong policy, method or destination"
import json, sys
d = [json.loads(l) for l in open(sys.argv[1])]
d = [e for e in d if e.get("event") == "egress_decision"]
ok = all(e.get("policy") == "test-server6" and e["dest"] == {"host": "2001:db8:100::10", "port": 8080, "ip": "2001:db8:100::10"} for e in d)
ok = ok and sorted(e.get("method") for e in d) == ["CONNECT", "GET", "GET"]
sys.exit(0 if ok else 1)
PY
	# the upstream leg was IPv6: the fake internet saw the outer netns's
	# 2001:db8:100::1 (the proxy's side), three times
	n=$(server6_log | grep -c '^2001:db8:100::1 .*"GET / ')
	[ "$n" = 3 ] || fail "the IPv6 server saw $n requests from 2001:db8:100::1: $(server6_log)"
	check_audit_common
	;;
ipv6_name)
	# names the proxy resolves to IPv6 (getaddrinfo, AI_ADDRCONFIG): only
	# from a private /etc/hosts, bind-mounted in a mount namespace of this
	# run alone (*.tether.test: the reserved .test TLD). dual.tether.test
	# has an A and an AAAA record; the policy names only the IPv6 range,
	# so the IPv6 address must be the one checked and connected to.
	policy6 "$WORK/p6.yaml"
	{ cat /etc/hosts; echo "2001:db8:100::10 v6.tether.test"; echo "198.51.100.10 dual.tether.test"
	  echo "2001:db8:100::10 dual.tether.test"; } >"$WORK/hosts"
	S4_BASE=$(wc -l <"$WORK/server.log")
	inside unshare --mount --propagation private sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh \
		"$WORK/hosts" timeout 30 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" --policy "$WORK/p6.yaml" -- \
		sh -c "for h in v6 dual; do curl -sS -o /dev/null -w \"\$h %{http_code}\\n\" --max-time 10 http://\$h.tether.test:8080/; done" \
		>"$WORK/out" 2>&1
	RC=$?
	[ "$RC" = 0 ] || fail "tether run rc=$RC"
	grep -qx "v6 200" "$WORK/out" || fail "v6.tether.test not fetched"
	grep -qx "dual 200" "$WORK/out" || fail "dual.tether.test not fetched"
	decisions6 /usr/bin/curl allow:allowed 4 /usr/bin/curl allow:allowed 4 >"$WORK/d.out" 2>&1 ||
		{ cat "$WORK/d.out" >&2; fail "IPv6 decisions"; }
	python3 - "$AUDIT" <<'PY' || fail "named flows: wrong destination"
import json, sys
d = [json.loads(l) for l in open(sys.argv[1])]
d = [e["dest"] for e in d if e.get("event") == "egress_decision"]
sys.exit(0 if sorted(x["host"] for x in d) == ["dual.tether.test", "v6.tether.test"] and all(x["ip"] == "2001:db8:100::10" for x in d) else 1)
PY
	n=$(server6_log | grep -c '^2001:db8:100::1 .*"GET / ')
	[ "$n" = 2 ] || fail "the IPv6 server saw $n requests: $(server6_log)"
	[ -z "$(tail -n +$((S4_BASE + 1)) "$WORK/server.log")" ] || fail "the IPv4 server was reached: $(cat "$WORK/server.log")"
	check_audit_common
	;;
ipv6_denied)
	# wget (named by no policy) over both legs: no_matching_policy; curl to
	# [::1] with a policy allowing every IPv6 address: blocked_destination;
	# python3 (named by no policy) through a dual-stack AF_INET6 socket to
	# the IPv4 proxy (::ffff:a.b.c.d): attributed all the same, so
	# no_matching_policy for python3 rather than no identity
	policy6 "$WORK/p6.yaml" any6
	cat >"$WORK/mapped.py" <<'PY'
import os, socket
h, p = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/").rsplit(":", 1)
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(("::ffff:" + h, int(p)))
s.sendall(b"GET http://[2001:db8:100::10]:8080/ HTTP/1.1\r\nHost: [2001:db8:100::10]:8080\r\nConnection: close\r\n\r\n")
print("mapped", s.recv(64).split(b"\r\n")[0].decode())
PY
	cat >"$WORK/d.sh" <<EOF
#!/bin/sh
$PROXY6_SH
wget -q -O /dev/null -T 10 -t 1 '$URL6' && echo WGET4-OK
wget -q -O /dev/null -T 10 -t 1 -e use_proxy=on -e "http_proxy=http://\$P6" '$URL6' && echo WGET6-OK
env -u NO_PROXY -u no_proxy curl -g -sS -o /dev/null -w 'loopback %{http_code}\n' --max-time 10 -x "http://\$P6" 'http://[::1]:8080/'
$PY3 $WORK/mapped.py
EOF
	chmod 755 "$WORK/d.sh"
	run --policy "$WORK/p6.yaml" -- "$WORK/d.sh"
	grep -q 'WGET.-OK' "$WORK/out" && fail "wget was let through"
	grep -qx "loopback 403" "$WORK/out" || fail "curl to [::1] not refused with 403"
	grep -q "^mapped HTTP/1.1 403" "$WORK/out" || fail "the v4-mapped request was not refused with 403"
	decisions6 /usr/bin/wget deny:no_matching_policy 4 /usr/bin/wget deny:no_matching_policy 6 \
		/usr/bin/curl deny:blocked_destination 6 \
		"$(readlink -f "$(command -v "$PY3")")" deny:no_matching_policy 4 >"$WORK/d.out" 2>&1 ||
		{ cat "$WORK/d.out" >&2; fail "IPv6 decisions"; }
	[ -z "$(server6_log)" ] || fail "a refused flow reached the IPv6 server: $(server6_log)"
	check_audit_common
	;;
ipv6_direct_blocked)
	# no bypass over IPv6, TCP or UDP (the fake internet logs datagrams)
	policy6 "$WORK/p6.yaml"
	direct_bypass_check 6 "$WORK/p6.yaml" "$URL6"
	check_audit_common
	;;
*) fail "unknown case" ;;
esac
no_sanitizer_report
[ -s "$WORK/d.out" ] && cat "$WORK/d.out"
echo "PASS [$CASE $TOPO]"
exit 0
