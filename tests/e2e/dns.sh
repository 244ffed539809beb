#!/usr/bin/env bash
# tests/e2e/dns.sh CASE TOPO: the workload's resolver (net-supervisor
# --dns-listen) through `tether run` (CASE dns_resolve; TOPO as in
# topology.sh; env TETHER_BIN, TETHER_SRC).
#
# The fake internet of lib.sh also runs a tiny authoritative responder on
# 198.51.100.53:53 (dns_responder.py): name.test A 198.51.100.10 and AAAA
# 2001:db8:100::10, blocked.test A 127.0.0.1 and 198.51.100.11, alias.test
# CNAME name.test. `tether run` runs in a mount namespace of its own whose
# /etc/resolv.conf names that responder: the net-supervisor's default
# upstream. Inside the sandbox:
#   - getent (named by a rule with `host: name.test` etc.) resolves
#     name.test, over UDP and over TCP (RES_OPTIONS=use-vc), and alias.test
#     through its CNAME;
#   - blocked.test comes back without 127.0.0.1 (a blocked range), with
#     198.51.100.11;
#   - python3 (no rule at all) gets NXDOMAIN for name.test, audited
#     "dns" deny dns_no_rule with python3's identity (binary, pid);
#   - python3 may look up py.test (its one rule) but a TXT query for it is
#     REFUSED (dns_type_refused); the responder never sees a TXT query;
#   - curl through the proxy reaches http://name.test:8080/ (the proxy's
#     own lookup, the host rule);
#   - the workload's /etc/resolv.conf names only the proxy's addresses.
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"
PY3=python3
[ -x /usr/bin/python3 ] && PY3=/usr/bin/python3
python3() { command "$PY3" "$@"; }

"$NETSUP_BIN" --features | grep -qx dns-listen || skip "net-supervisor has no --dns-listen"

setup_dns() {
	ip netns exec "$INET" ip addr add 198.51.100.53/24 dev "${TAG}n" || fail "responder address"
	ip netns exec "$INET" "$PY3" "$SRC/tests/e2e/dns_responder.py" 198.51.100.53 53 "$WORK/dns.log" \
		name.test=A:198.51.100.10 name.test=AAAA:2001:db8:100::10 \
		blocked.test=A:127.0.0.1 blocked.test=A:198.51.100.11 alias.test=CNAME:name.test \
		>"$WORK/dns.err" 2>&1 &
	SERVER_PID="$SERVER_PID $!"
	wait_for 10 test -e "$WORK/dns.log.ready" || fail "DNS responder did not start: $(cat "$WORK/dns.err")"
	echo "nameserver 198.51.100.53" >"$WORK/resolv.conf"
	chmod 644 "$WORK/resolv.conf"
}

dns_policy() {
	cat >"$1" <<'YAML'
version: 1
network:
  mode: enforce
  policies:
    - name: getent-names
      binaries:
        - path: /usr/bin/getent
      endpoints:
        - host: name.test
          ports: [443]
        - host: blocked.test
          ports: [443]
        - host: alias.test
          ports: [443]
    - name: python-other-name
      binaries:
        - path: /usr/bin/python3*
      endpoints:
        - host: py.test
          ports: [443]
    - name: curl-name
      binaries:
        - path: /usr/bin/curl
      endpoints:
        - host: name.test
          ports: [8080]
YAML
}

# dns_events: "binary decision reason name type rcode answers" per dns line
dns_events() {
	python3 - "$AUDIT" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") != "dns":
        continue
    q = e.get("query") or {}
    b = (e.get("binary") or {}).get("path")
    print(b, e.get("decision"), e.get("reason"), q.get("name"), q.get("type"), e.get("rcode"),
          ",".join(e.get("answers") or []), e.get("identity_source"), e.get("pid"),
          (e.get("client") or {}).get("transport"), ",".join(e.get("removed_blocked") or []))
PY
}

case "$CASE" in
dns_resolve)
	setup_net
	setup_dns
	dns_policy "$WORK/p.yaml"
	inside unshare --mount --propagation private sh -c 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"' sh \
		"$WORK/resolv.conf" timeout 40 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" --policy "$WORK/p.yaml" -- \
		sh "$SRC/tests/e2e/dns_workload.sh" "$PY3" >"$WORK/out" 2>&1
	RC=$?
	[ "$RC" = 0 ] || fail "tether run rc=$RC"
	check_audit_common
	grep -q "^nameserver 198.51.100.53" "$WORK/out" && fail "the workload sees the host's resolver"
	if [ "$POD" = 1 ]; then
		grep -qx "nameserver 127.0.0.1" "$WORK/out" || fail "workload resolv.conf does not name 127.0.0.1"
	else
		grep -q "^nameserver 192\.0\.2\.[0-9]*$" "$WORK/out" || fail "workload resolv.conf does not name the proxy's address"
	fi
	grep -q "^udp4 198.51.100.10 " "$WORK/out" || fail "name.test (A, UDP) did not resolve"
	grep -q "^udp6 2001:db8:100::10 " "$WORK/out" || fail "name.test (AAAA, UDP) did not resolve"
	grep -q "^tcp4 198.51.100.10 " "$WORK/out" || fail "name.test (A, TCP) did not resolve"
	grep -q "^alias 198.51.100.10 " "$WORK/out" || fail "alias.test (CNAME) did not resolve"
	grep -qx "blocked 198.51.100.11" "$WORK/out" || fail "blocked.test lost its allowed address"
	grep -q "^blocked 127" "$WORK/out" && fail "blocked.test kept 127.0.0.1"
	grep -qx "py-error -2" "$WORK/out" || fail "python3 (no rule) was not answered NXDOMAIN (EAI_NONAME)"
	grep -qx "txt-rcode 5" "$WORK/out" || fail "python3's TXT query for py.test was not REFUSED"
	grep -qx "curl 200" "$WORK/out" || fail "curl through the proxy to name.test failed"
	dns_events >"$WORK/dns_events"
	cat "$WORK/dns_events"
	grep -q "^/usr/bin/getent allow allowed name.test A NOERROR 198.51.100.10 $IDSRC [0-9]* udp" "$WORK/dns_events" ||
		fail "no allowed, attributed UDP A query of getent in the audit"
	grep -q "^/usr/bin/getent allow allowed name.test A NOERROR 198.51.100.10 $IDSRC [0-9]* tcp" "$WORK/dns_events" ||
		fail "no allowed, attributed TCP A query of getent in the audit"
	grep -q "^/usr/bin/getent allow allowed blocked.test A NOERROR 198.51.100.11 $IDSRC [0-9]* udp 127.0.0.1" "$WORK/dns_events" ||
		fail "blocked.test: no removed_blocked 127.0.0.1 in the audit"
	grep -q "^/usr/bin/python3[.0-9]* deny dns_no_rule name.test A NXDOMAIN  $IDSRC [0-9]* udp" "$WORK/dns_events" ||
		fail "python3's query not audited deny dns_no_rule with its identity"
	grep -q "^/usr/bin/python3[.0-9]* deny dns_type_refused py.test TXT REFUSED  $IDSRC [0-9]* udp" "$WORK/dns_events" ||
		fail "python3's TXT query not audited deny dns_type_refused"
	grep -q "^None " "$WORK/dns_events" && fail "a dns event without an identity"
	# the upstream saw only what was allowed: no TXT, nothing for python3
	grep -q " 16$" "$WORK/dns.log" && fail "a TXT query reached the upstream"
	true
	;;
*) echo "unknown case $CASE" >&2; exit 2 ;;
esac
echo "PASS [$CASE $TOPO]"
