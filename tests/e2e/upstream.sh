#!/bin/bash
# e2e: behind a corporate proxy (issue 20). Debian's tinyproxy, with
# BasicAuth on, is the corporate proxy in the fake internet
# (198.51.100.20:8888); `tether run --upstream-proxy` sends the
# net-supervisor's upstream connections through it, after its own decision.
#
#   upstream.sh CASE [TOPO]   (env: TETHER_BIN, TETHER_SRC)
#
#   upstream_proxy   good credentials: an allowed plain-HTTP request and an
#                    allowed CONNECT tunnel go through tinyproxy (its log
#                    names the checked address), a --no-upstream-proxy
#                    address goes direct (not in tinyproxy's log), a denied
#                    flow never reaches tinyproxy (stderr line, audit deny);
#                    bad credentials: reason upstream_proxy_auth_required in
#                    X-Tether-Reason, the audit and on stderr; nothing
#                    listening: upstream_proxy_unreachable; an auth file
#                    readable by others: 125 before anything is built;
#                    --upstream-proxy-connect name: the CONNECT names the host
#                    (tinyproxy resolves it from a private /etc/hosts); a
#                    proxy that sends the destination's first bytes with its
#                    200: the client gets them right after our 200
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"

command -v tinyproxy >/dev/null || skip "tinyproxy not installed (ci/install-deps.sh)"
"$NETSUP_BIN" --features | grep -qx upstream-proxy || skip "net-supervisor has no --upstream-proxy"

setup_net
# the corporate proxy and a second web server (the no-upstream one) beside
# the fake internet's
ip netns exec "$INET" ip addr add 198.51.100.20/24 dev "${TAG}n" || fail "proxy address"
ip netns exec "$INET" ip addr add 198.51.100.11/24 dev "${TAG}n" || fail "second server address"
ip netns exec "$INET" python3 -m http.server 8080 --bind 198.51.100.11 --directory "$WORK/www" \
	>"$WORK/server11.log" 2>&1 &
SERVER_PID="$SERVER_PID $!"
cat >"$WORK/tinyproxy.conf" <<EOF
Port 8888
Listen 198.51.100.20
Timeout 30
LogFile "$WORK/tinyproxy.log"
LogLevel Connect
MaxClients 20
Allow 198.51.100.0/24
BasicAuth corp s3cret
EOF
# a name both sides resolve (a private /etc/hosts in a mount namespace of
# each): for --upstream-proxy-connect name
{ cat /etc/hosts; echo "198.51.100.10 fake.tether.test"; } >"$WORK/hosts"
ip netns exec "$INET" unshare --mount --propagation private sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' \
	sh "$WORK/hosts" tinyproxy -d -c "$WORK/tinyproxy.conf" >"$WORK/tinyproxy.out" 2>&1 &
SERVER_PID="$SERVER_PID $!"
wait_for 30 sh -c "ss -Htln -N $INET | grep -qF '198.51.100.20:8888'" || fail "tinyproxy did not start: $(cat "$WORK/tinyproxy.out")"
wait_for 30 inside curl -s -o /dev/null --noproxy '*' --max-time 1 http://198.51.100.11:8080/ ||
	fail "second server did not start"

policy "$WORK/p.yaml"
printf 'corp:s3cret\n' >"$WORK/auth" && chmod 600 "$WORK/auth"
printf 'corp:wrong\n' >"$WORK/bad" && chmod 600 "$WORK/bad"
UP=(--upstream-proxy http://198.51.100.20:8888 --no-upstream-proxy 198.51.100.11)

run_split() {
	inside timeout 60 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" "$@" >"$WORK/out" 2>"$WORK/err"
	RC=$?
}
err() { cat "$WORK/err"; }
connects() { grep -c "Request (file descriptor [0-9]*): CONNECT $1 " "$WORK/tinyproxy.log" 2>/dev/null; }

case "$CASE" in
upstream_proxy)
	# 1. good credentials
	run_split "${UP[@]}" --upstream-proxy-auth-file "$WORK/auth" --policy "$WORK/p.yaml" -- sh -c '
		curl -sS -o /dev/null -w "plain=%{http_code}\n" --max-time 20 http://198.51.100.10:8080/
		curl -sS -p -o /dev/null -w "tunnel=%{http_code}\n" --max-time 20 http://198.51.100.10:8080/
		curl -sS -o /dev/null -w "direct=%{http_code}\n" --max-time 20 http://198.51.100.11:8080/
		wget -q -O /dev/null -T 10 -t 1 http://198.51.100.10:8080/ && echo wget=ok || echo wget=failed'
	for want in plain=200 tunnel=200 direct=200 wget=failed; do
		grep -qx "$want" "$WORK/out" || fail "expected $want: $(cat "$WORK/out") $(err)"
	done
	[ "$(connects 198.51.100.10:8080)" = 2 ] ||
		fail "not 2 CONNECTs to the checked address in tinyproxy's log: $(grep -i request "$WORK/tinyproxy.log")"
	[ "$(connects 198.51.100.11:8080)" = 0 ] || fail "the no-upstream address went through tinyproxy"
	grep -q "CONNECT 198.51.100.11" "$WORK/tinyproxy.log" && fail "no-upstream flow reached tinyproxy"
	grep -q '"GET / HTTP/1.1" 200' "$WORK/server11.log" || fail "the direct request did not reach its server"
	expect_decision /usr/bin/wget deny:no_matching_policy
	grep -q '^tether: denied /usr/bin/wget .*-> 198\.51\.100\.10:8080 reason=no_matching_policy' "$WORK/err" ||
		fail "no denial line for wget: $(err)"
	# 3 allowed curl flows, 1 denied wget flow; tinyproxy saw exactly the 2
	# allowed ones that were not exempt (the wget one never got there)
	[ "$(grep -c 'Request (file descriptor' "$WORK/tinyproxy.log")" = 2 ] || fail "tinyproxy saw other requests"
	# a root workload could read the credentials: said (pods run it as nobody)
	if [ "$POD" = 1 ]; then
		grep -q 'could read --upstream-proxy-auth-file' "$WORK/err" && fail "root-workload warning in a pod topology"
	else
		grep -q "^tether run: warning: the workload runs as root and could read --upstream-proxy-auth-file $WORK/auth;" "$WORK/err" ||
			fail "no warning that a root workload could read the credentials: $(err)"
	fi
	check_audit_common

	# 2. wrong credentials: the corporate proxy says no; the policy said yes
	: >"$AUDIT"
	run_split "${UP[@]}" --upstream-proxy-auth-file "$WORK/bad" --policy "$WORK/p.yaml" -- \
		curl -sS -D - -o /dev/null --max-time 20 http://198.51.100.10:8080/
	grep -q '^HTTP/1.1 502' "$WORK/out" || fail "expected 502: $(cat "$WORK/out")"
	grep -qi '^X-Tether-Reason: upstream_proxy_auth_required' "$WORK/out" || fail "no reason header: $(cat "$WORK/out")"
	expect_decision /usr/bin/curl allow:allowed
	grep '"event":"egress_error"' "$AUDIT" | grep '"reason":"upstream_proxy_auth_required"' |
		grep -q '"binary":"/usr/bin/curl"' || fail "no egress_error upstream_proxy_auth_required in the audit"
	grep -q '^tether: failed /usr/bin/curl -> 198\.51\.100\.10:8080 reason=upstream_proxy_auth_required' "$WORK/err" ||
		fail "no stderr line for the proxy's refusal: $(err)"

	# 3. nothing listening where the proxy should be
	: >"$AUDIT"
	run_split --upstream-proxy http://198.51.100.20:8889 --policy "$WORK/p.yaml" -- \
		curl -sS -p -o /dev/null --max-time 20 http://198.51.100.10:8080/
	[ "$RC" != 0 ] || fail "curl succeeded without a proxy"
	grep '"event":"egress_error"' "$AUDIT" | grep -q '"reason":"upstream_proxy_unreachable"' ||
		fail "no egress_error upstream_proxy_unreachable in the audit"

	# 4. --upstream-proxy-connect name: the CONNECT names the host, which
	# tinyproxy resolves itself (the policy still decided on our lookup)
	inside unshare --mount --propagation private sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' \
		sh "$WORK/hosts" timeout 60 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" "${UP[@]}" \
		--upstream-proxy-auth-file "$WORK/auth" --upstream-proxy-connect name --policy "$WORK/p.yaml" -- \
		curl -sS -p -o /dev/null -w "byname=%{http_code}\n" --max-time 20 http://fake.tether.test:8080/ \
		>"$WORK/out" 2>"$WORK/err"
	grep -qx byname=200 "$WORK/out" || fail "by name: $(cat "$WORK/out") $(err)"
	[ "$(connects fake.tether.test:8080)" = 1 ] || fail "no CONNECT by name in tinyproxy's log"

	# 5. a corporate proxy whose 200 and the destination's first bytes come
	# in one segment (a server that speaks first, e.g. sshd): those bytes
	# reach the client after our own 200, nothing lost or reordered
	ip netns exec "$INET" python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.20", 8890)); s.listen(4); s.settimeout(60)
c, _ = s.accept(); c.settimeout(30)
head = b""
while b"\r\n\r\n" not in head:
    d = c.recv(4096)
    if not d: break
    head += d
open("'"$WORK"'/early-proxy.log", "wb").write(head)
c.sendall(b"HTTP/1.0 200 corp-says-ok\r\nProxy-Agent: corp\r\n\r\nSSH-2.0-early-banner\r\n")
c.recv(100)
' &
	SERVER_PID="$SERVER_PID $!"
	wait_for 30 sh -c "ss -Htln -N $INET | grep -qF '198.51.100.20:8890'" || fail "early-bytes proxy did not start"
	{ cat "$WORK/p.yaml"; printf '%s\n' "    - name: py" "      binaries:" "        - path: /usr/bin/python3" \
		"      endpoints:" "        - cidr: 198.51.100.10/32" "          ports: [22]"; } >"$WORK/py.yaml"
	: >"$AUDIT"
	run_split --upstream-proxy http://198.51.100.20:8890 --policy "$WORK/py.yaml" -- /usr/bin/python3 -c '
import os, socket, urllib.parse
u = urllib.parse.urlsplit(os.environ["http_proxy"])
s = socket.create_connection((u.hostname, u.port), timeout=20)
s.sendall(b"CONNECT 198.51.100.10:22 HTTP/1.1\r\nHost: 198.51.100.10:22\r\n\r\n")
got = b""
while b"early-banner" not in got:
    d = s.recv(4096)
    if not d: break
    got += d
print(repr(got))
s.sendall(b"SSH-2.0-client\r\n")
'
	grep -qF "b'HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-early-banner\r\n'" "$WORK/out" ||
		fail "the bytes after the corporate proxy's 200 were not passed on in order: $(cat "$WORK/out") $(err)"
	grep -q '^CONNECT 198.51.100.10:22 HTTP/1.1' "$WORK/early-proxy.log" || fail "no CONNECT at the early-bytes proxy"

	# 6. credentials others can read: refused before anything is built
	chmod 644 "$WORK/auth"
	run_split "${UP[@]}" --upstream-proxy-auth-file "$WORK/auth" --policy "$WORK/p.yaml" -- true
	[ "$RC" = 125 ] || fail "a 0644 auth file: exit $RC, expected 125"
	grep -q 'chmod 600' "$WORK/err" || fail "no chmod hint: $(err)"
	;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS [$CASE $TOPO]"
