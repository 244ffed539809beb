#!/usr/bin/env bash
# tests/e2e/transparent.sh CASE TOPO: transparent capture through `tether
# run` (issue 21). CASE transparent_clients: one run whose workload
# (transparent/workload.sh) uses clients that ignore HTTP(S)_PROXY, each
# allowed by a per-binary rule or denied for another binary:
#   - curl --noproxy '*' to 198.51.100.10:8080 (cidr rule; name_source none)
#     and to web.test:8080 (Host confirmed by the workload's own lookup:
#     http_host), and over IPv6;
#   - curl telnet:// to :2222, where curl's endpoint is http only: a raw
#     stream, denied protocol_not_allowed;
#   - python3 (no rule) with a raw socket: denied no_matching_policy (reset);
#   - python3 TLS with SNI web.test: allowed at web.test's address, denied
#     (no name, peeked_name kept) at an address its lookups never gave;
#   - python3 reading a banner from a server that speaks first (the peek
#     times out: a raw stream, allowed by its protocol: tcp endpoint);
#   - Node's fetch() (http_host) and https.get (TLS: sni);
#   - a Go raw net.Dial (cidr rule; its Host web.test was never looked up:
#     name_source none, peeked_name kept) and Go net/http with Proxy: nil;
#   - ssh without ProxyCommand to an sshd in the fake internet and git clone
#     over ssh (protocol: tcp; the name from the dns table: name_source dns);
#   - a UDP datagram elsewhere: refused, egress_bypass_attempt audited;
#   - the capture's port named directly: refused, no decision.
# The fake internet serves HTTP on :8080, HTTPS on :8443, sshd on :2222 and
# DNS (web.test A 198.51.100.10) on 198.51.100.53.
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"
PY3=python3
[ -x /usr/bin/python3 ] && PY3=/usr/bin/python3

"$NETSUP_BIN" --features | grep -qx transparent-listen || skip "net-supervisor has no --transparent-listen"
for t in /usr/sbin/sshd /usr/bin/ssh ssh-keygen git node go openssl; do
	command -v "$t" >/dev/null || skip "$t missing"
done

setup_services() {
	# DNS: web.test A only (no AAAA: every client goes to the IPv4 services)
	ip netns exec "$INET" ip addr add 198.51.100.53/24 dev "${TAG}n" || fail "responder address"
	ip netns exec "$INET" "$PY3" "$SRC/tests/e2e/dns_responder.py" 198.51.100.53 53 "$WORK/dns.log" \
		web.test=A:198.51.100.10 >"$WORK/dns.err" 2>&1 &
	SERVER_PID="$SERVER_PID $!"
	echo "nameserver 198.51.100.53" >"$WORK/resolv.conf"
	chmod 644 "$WORK/resolv.conf"
	# HTTPS on :8443 (a self-signed certificate for web.test)
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=web.test -keyout "$WORK/tls.key" \
		-out "$WORK/tls.crt" >/dev/null 2>&1 || fail "openssl req"
	ip netns exec "$INET" "$PY3" -c '
import http.server, ssl, sys
s = http.server.HTTPServer(("198.51.100.10", 8443), http.server.SimpleHTTPRequestHandler)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()' "$WORK/tls.crt" "$WORK/tls.key" >"$WORK/https.log" 2>&1 &
	SERVER_PID="$SERVER_PID $!"
	# a server that speaks first on :2223 (a banner, as MySQL or SMTP do)
	ip netns exec "$INET" "$PY3" -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.10", 2223)); s.listen(8)
while True:
    c, _ = s.accept(); c.sendall(b"220 banner-first\r\n"); c.close()' >"$WORK/banner.log" 2>&1 &
	SERVER_PID="$SERVER_PID $!"
	# sshd on :2222 and a bare repository for git clone
	start_sshd
	git init -q "$WORK/src" && echo transparent-git >"$WORK/src/README" &&
		git -C "$WORK/src" add README && git -C "$WORK/src" -c user.name=t -c user.email=t@example.org commit -qm one &&
		git clone -q --bare "$WORK/src" "$WORK/repo.git" || fail "git repository"
	chmod -R a+rX "$WORK/repo.git"
	# Go clients, built now (stdlib only, no network)
	for p in dial noproxy; do
		GOCACHE="$WORK/gocache" GOPATH="$WORK/gopath" GO111MODULE=off GOFLAGS= \
			go build -o "$WORK/go-$p" "$SRC/tests/e2e/transparent/$p.go" || fail "go build $p"
	done
	mv "$WORK/go-noproxy" "$WORK/go-http"
	chmod 755 "$WORK"/go-*
	wait_for 10 test -e "$WORK/dns.log.ready" || fail "DNS responder did not start: $(cat "$WORK/dns.err")"
	wait_for 30 ip netns exec "$INET" bash -c 'exec 3<>/dev/tcp/198.51.100.10/8443' 2>/dev/null || fail "https server did not start"
	wait_for 30 ip netns exec "$INET" bash -c 'exec 3<>/dev/tcp/198.51.100.10/2223' 2>/dev/null || fail "banner server did not start"
}

transparent_policy() {
	cat >"$1" <<YAML
version: 1
network:
  mode: enforce
  policies:
    - name: curl-direct
      binaries: [{path: /usr/bin/curl}]
      endpoints:
        - {cidr: 198.51.100.0/24, ports: [8080]}
        - {cidr: "2001:db8:100::/64", ports: [8080]}
        - {cidr: 198.51.100.0/24, ports: [2222]}
    - name: node-names
      binaries: [{path: /usr/bin/node}]
      endpoints:
        - {host: web.test, ports: [8080, 8443]}
    - name: python-sni
      binaries: [{path: /usr/bin/python3}]
      endpoints:
        - {host: web.test, ports: [8443]}
        - {cidr: 198.51.100.10/32, ports: [2223], protocol: tcp}
    - name: go-dial-cidr
      binaries: [{path: $WORK/go-dial}]
      endpoints:
        - {cidr: 198.51.100.0/24, ports: [8080]}
    - name: go-http-name
      binaries: [{path: $WORK/go-http}]
      endpoints:
        - {host: web.test, ports: [8080]}
    - name: ssh-raw
      binaries: [{path: /usr/bin/ssh}]
      endpoints:
        - {host: web.test, ports: [2222], protocol: tcp}
YAML
}

# "binary decision reason capture name_source peek dest_host dest_port peeked_name" per decision
flows() {
	python3 - "$AUDIT" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") != "egress_decision":
        continue
    d = e.get("dest") or {}
    print((e.get("binary") or {}).get("path"), e.get("decision"), e.get("reason"), e.get("capture"),
          e.get("name_source"), e.get("peek"), d.get("host"), d.get("port"), e.get("peeked_name"))
PY
}

expect_flow() { # PATTERN (grep -E over flows lines) WHAT
	grep -Eq "$1" "$WORK/flows" && return 0
	# what the identity service said about the flows it could not name
	python3 - "$AUDIT" <<'PY' >&2
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "identity_issued" and e.get("reason") != "ok":
        e.pop("signed_context", None)
        print("identity service:", json.dumps(e))
PY
	fail "$2: no audit line matching '$1'"
}
expect_out() { # LINE-PATTERN WHAT
	grep -Eq "$1" "$WORK/out" || fail "$2: workload output lacks '$1'"
}

case "$CASE" in
transparent_clients)
	setup_net
	setup_net6
	setup_services
	transparent_policy "$WORK/p.yaml"
	inside unshare --mount --propagation private sh -c 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"' sh \
		"$WORK/resolv.conf" env T6=1 timeout 120 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" \
		--policy "$WORK/p.yaml" -- env T6=1 sh "$SRC/tests/e2e/transparent/workload.sh" "$WORK" "$PY3" \
		"$WORK/rw/userkey" >"$WORK/out" 2>&1
	RC=$?
	cat "$WORK/out"
	[ "$RC" = 0 ] || fail "tether run rc=$RC"
	check_audit_common
	flows >"$WORK/flows"
	cat "$WORK/flows"
	expect_out '^curl-ip 200$' "curl --noproxy to an address"
	expect_flow '^/usr/bin/curl allow allowed transparent none http 198\.51\.100\.10 8080 None$' "curl by address"
	expect_out '^curl-name 200$' "curl --noproxy to a name"
	expect_flow '^/usr/bin/curl allow allowed transparent http_host http web\.test 8080 None$' "curl by name"
	expect_out '^curl-ip6 200$' "curl --noproxy over IPv6"
	expect_flow '^/usr/bin/curl allow allowed transparent none http 2001:db8:100::10 8080 None$' "curl over IPv6"
	# the sandbox's dns table names 198.51.100.10 by now (web.test): a raw
	# stream takes that name (dns)
	expect_flow '^/usr/bin/curl deny protocol_not_allowed transparent dns (other|incomplete) web\.test 2222 None$' \
		"curl's raw stream to an http endpoint"
	expect_out '^py (ConnectionResetError|closed)$' "python3 without a rule"
	# its Host evil.test was never looked up: not a name (peeked_name only)
	expect_flow '^/usr/bin/python3[.0-9]* deny no_matching_policy transparent none http 198\.51\.100\.10 8080 evil\.test$' \
		"python3's raw socket"
	expect_out '^py-sni 198.51.100.10 open$' "python3 TLS by SNI"
	expect_flow '^/usr/bin/python3[.0-9]* allow allowed transparent sni tls web\.test 8443 None$' "python3 TLS by SNI"
	expect_out '^py-sni 198.51.100.11 (ConnectionResetError|SSLEOFError|SSLZeroReturnError|OSError)$' "a spoofed SNI"
	expect_flow '^/usr/bin/python3[.0-9]* deny no_matching_policy transparent none tls 198\.51\.100\.11 8443 web\.test$' \
		"a spoofed SNI (web.test to an address its lookups never gave)"
	expect_out '^py-banner 220 banner-first$' "a server-first stream (protocol: tcp)"
	expect_flow '^/usr/bin/python3[.0-9]* allow allowed transparent dns incomplete web\.test 2223 None$' \
		"a server-first stream: decided after the peek time, raw"
	expect_out '^node-fetch 200$' "Node fetch()"
	expect_flow '^/usr/bin/node allow allowed transparent http_host http web\.test 8080 None$' "Node fetch()"
	expect_out '^node-https 200$' "Node https.get"
	expect_flow '^/usr/bin/node allow allowed transparent sni tls web\.test 8443 None$' "Node https.get"
	expect_out '^go-dial 200$' "Go net.Dial"
	expect_flow "^$WORK/go-dial allow allowed transparent none http 198\\.51\\.100\\.10 8080 other\\.test\$" "Go net.Dial"
	expect_out '^go-http 200$' "Go Proxy: nil"
	expect_flow "^$WORK/go-http allow allowed transparent http_host http web\\.test 8080 None\$" "Go Proxy: nil"
	expect_out '^ssh ok-42$' "ssh without ProxyCommand"
	expect_flow '^/usr/bin/ssh allow allowed transparent dns (other|incomplete) web\.test 2222 None$' "ssh"
	expect_out '^git transparent-git$' "git clone over ssh"
	[ "$(grep -c '^/usr/bin/ssh allow allowed transparent dns' "$WORK/flows")" -ge 2 ] || fail "git's ssh flow not audited"
	expect_out '^capture-direct 000$' "a direct connection to the capture port (no HTTP answer)"
	grep -q ' 3129 ' "$WORK/flows" && fail "a direct connection to the capture port was decided as a flow"
	expect_out '^udp ' "UDP datagram"
	grep '"event":"egress_bypass_attempt"' "$AUDIT" | grep '"destination":"198.51.100.10","port":5353,"transport":"udp"' |
		grep -q '"exe":"/usr/bin/python3' || fail "UDP datagram not audited as egress_bypass_attempt with python3's identity"
	grep '"event":"egress_bypass_attempt"' "$AUDIT" | grep -q '"port":53,' &&
		fail "a lookup at the workload's resolver was reported as egress_bypass_attempt"
	grep -q '"event":"egress_bypass_attempt".*"transport":"tcp"' "$AUDIT" &&
		fail "a captured TCP flow was reported as egress_bypass_attempt"
	grep -q "AddressSanitizer\|LeakSanitizer\|runtime error:" "$WORK/out" && fail "sanitizer report in the output"
	echo "PASS [$CASE $TOPO]"
	;;
*) fail "unknown case $CASE" ;;
esac
