#!/bin/bash
# TLS inspection in the net-supervisor (endpoint `tls: inspect`;
# net-supervisor/tls_ca.c, tls_inspect.c), with real curl and Python
# requests. Two test netns joined by a veth (203.0.113.1 ↔ 203.0.113.10):
# the proxy and the clients in one (its /etc/hosts, in a mount namespace of
# the proxy's own, names echo.tether.test), in the other an HTTPS echo
# server (tests/common/https_echo.py) with the test's own CA:
#   8443  a certificate for echo.tether.test and 203.0.113.10 (test CA)
#   8444  a certificate for echo.tether.test by a CA nobody trusts
#   8445  a certificate for other.tether.test (test CA): a name mismatch
#   8446  HTTP/2 and HTTP/1.1 (tests/common/h2_echo.js, Node's http2), the
#         8443 certificate
# The proxy verifies upstream against the test CA (--upstream-ca).
# Checks: --tls-ca-out / --tls-bundle-out (system CAs + sandbox CA); an
# inspected request arrives (the client saw a leaf issued by the sandbox CA,
# its body both ways intact, 3 MiB); a client that does not trust the
# sandbox CA fails and is audited client_tls_failed; passthrough is
# untouched (the client sees the server's own certificate); a bad upstream
# certificate (unknown CA, wrong name) is a 502 upstream_cert_invalid
# (inside the client's TLS: the upstream handshake waits for the client's
# ClientHello, whose ALPN offer it carries), audited, and the server never
# gets a request.
# HTTP/2 (tls_h2.c; ALPN carried through): curl --http2 and Node's http2
# get h2 end to end; an h1-only client to the h2-capable server gets h1;
# an h2 client to the h1-only server gets h1; an allowed and a denied
# stream multiplexed on one connection (one egress decision): 200 and 403
# http_rule_deny with x-tether-reason, the denied one never at the server;
# a credential swapped in an h2 header (the server shows the secret) and
# another binary's placeholder refused credential_not_permitted on its
# stream; an upstream RST_STREAM reaches the client; trailers pass; an
# h2-only client to a server that fails verification gets 502 on its stream.
. "${TETHER_SRC:?}/tests/common/script_lib.sh" tlsinspect
for t in openssl curl python3 unshare; do
	command -v "$t" >/dev/null || { echo "SKIP: $t missing"; exit 77; }
done
P="tlsi$$p" S="tlsi$$s" V="tl$$"
netcleanup() { ip netns del "$P" 2>/dev/null; ip netns del "$S" 2>/dev/null; }
trap 'cleanup; netcleanup' EXIT
netcleanup
ip netns add "$P" && ip netns add "$S" || { echo "FAIL: cannot create netns" >&2; exit 1; }
ip -n "$P" link set lo up && ip -n "$S" link set lo up
ip link add "${V}a" netns "$P" type veth peer name "${V}b" netns "$S" || { echo "FAIL: veth" >&2; exit 1; }
ip -n "$P" addr add 203.0.113.1/24 dev "${V}a" && ip -n "$P" link set "${V}a" up
ip -n "$S" addr add 203.0.113.10/24 dev "${V}b" && ip -n "$S" link set "${V}b" up
inp() { ip netns exec "$P" "$@"; }

# --- certificates: the test CA, a rogue CA, three server certificates
mkca() { # mkca NAME CN
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$2" \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
		-keyout "$D/$1.key" -out "$D/$1.pem" 2>>"$D/openssl.log"
}
mkleaf() { # mkleaf NAME CA SAN
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
		-keyout "$D/$1.key" -out "$D/$1.csr" 2>>"$D/openssl.log" &&
	printf '%s\n' "subjectAltName=$3" "extendedKeyUsage=serverAuth" "basicConstraints=CA:FALSE" >"$D/$1.ext" &&
	openssl x509 -req -in "$D/$1.csr" -CA "$D/$2.pem" -CAkey "$D/$2.key" -CAcreateserial -days 2 \
		-extfile "$D/$1.ext" -out "$D/$1.pem" 2>>"$D/openssl.log"
}
mkca ca tether-test-ca && mkca rogue rogue-ca &&
	mkleaf good ca "DNS:echo.tether.test,DNS:rules.tether.test,DNS:audit.tether.test,IP:203.0.113.10" &&
	mkleaf bad rogue "DNS:echo.tether.test,IP:203.0.113.10" &&
	mkleaf other ca "DNS:other.tether.test" || { echo "FAIL: openssl: $(cat "$D/openssl.log")" >&2; exit 1; }

ip netns exec "$S" sh -c 'echo $$ >"$1" && shift && exec "$@"' sh "$D/server.pid" \
	python3 "$TETHER_SRC/tests/common/https_echo.py" "$D/server.log" 203.0.113.10 \
	"8443:$D/good.pem:$D/good.key" "8444:$D/bad.pem:$D/bad.key" "8445:$D/other.pem:$D/other.key" \
	2>"$D/server.err" &
PIDS+=("$!")
for _ in $(seq 300); do grep -q ready "$D/server.log" 2>/dev/null && break; sleep 0.1; done
PIDS+=("$(cat "$D/server.pid")")
grep -q ready "$D/server.log" 2>/dev/null || { echo "FAIL: echo server: $(cat "$D/server.err")" >&2; exit 1; }
H2=0
if command -v node >/dev/null; then
	ip netns exec "$S" sh -c 'echo $$ >"$1" && shift && exec "$@"' sh "$D/h2server.pid" \
		node "$TETHER_SRC/tests/common/h2_echo.js" "$D/h2server.log" 203.0.113.10 \
		"8446:$D/good.pem:$D/good.key" 2>"$D/h2server.err" &
	PIDS+=("$!")
	for _ in $(seq 300); do grep -q ready "$D/h2server.log" 2>/dev/null && break; sleep 0.1; done
	PIDS+=("$(cat "$D/h2server.pid")")
	grep -q ready "$D/h2server.log" 2>/dev/null && H2=1 || fail "h2 echo server: $(cat "$D/h2server.err")"
else
	echo "SKIP: node missing: no HTTP/2 checks"
fi

cat >"$D/p.yaml" <<'Y'
version: 1
network:
  policies:
    - name: inspected
      binaries: [{path: /usr/bin/curl}]
      endpoints:
        - {host: echo.tether.test, ports: [8443, 8444, 8445, 8446], tls: inspect}
        - {host: 203.0.113.10, ports: [8443], tls: passthrough}
        - host: rules.tether.test
          ports: [8443, 8446]
          tls: inspect
          rules:
            - {method: GET, path: "/allowed/**"}
            - {name: no-secrets, method: "*", path: "/allowed/secret/**", action: deny}
            - {name: ws, method: GET, path: /ws, websocket: true}
        - {host: audit.tether.test, ports: [8443, 8446], tls: inspect, mode: audit, rules: [{method: GET, path: /only}]}
credentials:
  - name: GITHUB
    source: {file: @D@/gh-token}
    binaries: [{path: /usr/bin/curl}]
    endpoints: [{host: echo.tether.test, ports: [8443, 8446]}]
  - name: INJECTED
    source: {file: @D@/inj-key}
    binaries: [{path: /usr/bin/curl}]
    endpoints: [{host: audit.tether.test, ports: [8443, 8446]}]
    header: {name: X-Api-Key, format: "key={}"}
  - name: MODEL
    source: {env: TETHER_TEST_MODEL_KEY}
    binaries: [{path: /usr/bin/python3}]
    endpoints: [{host: echo.tether.test, ports: [8443]}]
Y
sed -i "s#@D@#$D#" "$D/p.yaml"
SECRET1=ghp-REAL-SECRET-$RANDOM$RANDOM SECRET2=ghp-ROTATED-$RANDOM$RANDOM MODELKEY=sk-model-$RANDOM$RANDOM
INJ=inj-$RANDOM$RANDOM$RANDOM
(umask 077 && echo "$SECRET1" >"$D/gh-token" && echo "$INJ" >"$D/inj-key")
printf '127.0.0.1 localhost\n203.0.113.10 echo.tether.test rules.tether.test audit.tether.test\n' >"$D/hosts"
PORT=3128 ADMIN=3129
# (`ip netns exec` may fork: the daemon's own pid comes from its shell)
inp unshare -m sh -c 'echo $$ >"$1.pid" && mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "$D/hosts" \
	env TETHER_TEST_MODEL_KEY="$MODELKEY" "$BIN/net-supervisor-testing" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" --policy "$D/p.yaml" \
	--audit "$D/a.jsonl" --identity-static /usr/bin/curl --upstream-ca "$D/ca.pem" \
	--tls-ca-out "$D/sandbox-ca.pem" --tls-bundle-out "$D/bundle.pem" 2>"$D/ns.err" &
PIDS+=("$!")
for _ in $(seq 100); do [ -s "$D/hosts.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$D/hosts.pid")")
for _ in $(seq 300); do
	[ "$(inp curl -s --noproxy '*' "http://127.0.0.1:$ADMIN/readyz" -o /dev/null -w '%{http_code}')" = 200 ] && break
	sleep 0.1
done
[ -s "$D/sandbox-ca.pem" ] || { echo "FAIL: net-supervisor did not start: $(cat "$D/ns.err")" >&2; exit 1; }

# --- the CA files
openssl x509 -in "$D/sandbox-ca.pem" -noout -text >"$D/ca.txt" 2>&1
grep -q 'ASN1 OID: prime256v1' "$D/ca.txt" && grep -q 'CA:TRUE, pathlen:0' "$D/ca.txt" &&
	ok "sandbox CA: P-256, CA:TRUE pathlen 0" || fail "sandbox CA: $(head -30 "$D/ca.txt")"
nsys=$(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt)
nb=$(grep -c 'BEGIN CERTIFICATE' "$D/bundle.pem")
[ "$nb" = $((nsys + 1)) ] && tail -n "$(wc -l <"$D/sandbox-ca.pem")" "$D/bundle.pem" | cmp -s - "$D/sandbox-ca.pem" &&
	ok "bundle: the $nsys system CAs, then the sandbox CA" || fail "bundle has $nb certificates, system $nsys"
grep -q 'PRIVATE KEY' "$D/bundle.pem" "$D/sandbox-ca.pem" && fail "a private key was written"

PX=(--proxy "http://127.0.0.1:$PORT" --max-time 30)
# --- inspected: the client trusts the bundle, sees the sandbox CA's leaf
inp curl -sS -v "${PX[@]}" --cacert "$D/bundle.pem" https://echo.tether.test:8443/hello?x=1 \
	-o "$D/out1" 2>"$D/err1"
grep -q '"path": "/hello?x=1"' "$D/out1" && ok "inspected GET arrives" || fail "inspected GET: $(cat "$D/out1" "$D/err1")"
grep -q 'issuer: .*CN=tether sandbox CA' "$D/err1" && grep -q 'subject: .*CN=echo.tether.test' "$D/err1" &&
	ok "the client saw a leaf for echo.tether.test issued by the sandbox CA" ||
	fail "leaf: $(grep -E 'issuer|subject' "$D/err1")"
grep -q 'ALPN: server accepted http/1.1' "$D/err1" && ok "ALPN http/1.1" || fail "ALPN: $(grep ALPN "$D/err1")"
grep '"event":"egress_decision"' "$D/a.jsonl" | grep '"port":8443' | grep -q '"tls":"inspect"' &&
	ok "egress_decision says tls inspect" || fail "no tls:inspect on the decision"
head -c 3145728 /dev/urandom | base64 -w0 >"$D/big"
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" --data-binary @"$D/big" https://echo.tether.test:8443/up \
	-o "$D/out2" 2>"$D/err2"
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["body"] != open(sys.argv[2]).read())' \
	"$D/out2" "$D/big" && ok "4 MiB up and back through both TLS sessions, intact" || fail "big POST: $(head -c 300 "$D/err2")"
# a second name reuses the minted leaf: the CA minted once for echo.tether.test
if python3 -c 'import requests' 2>/dev/null; then
	inp env HTTPS_PROXY="http://127.0.0.1:$PORT" REQUESTS_CA_BUNDLE="$D/bundle.pem" python3 -c '
import requests, sys
r = requests.get("https://echo.tether.test:8443/py", timeout=30)
sys.exit(0 if r.json()["path"] == "/py" else 1)' 2>"$D/err3" && ok "Python requests through the bundle" ||
		fail "requests: $(tail -3 "$D/err3")"
else
	echo "SKIP: python3-requests missing"
fi
# --- a client that does not trust the sandbox CA: refused by the client
inp curl -sS "${PX[@]}" --cacert "$D/ca.pem" https://echo.tether.test:8443/untrusted -o /dev/null 2>"$D/err4" &&
	fail "a client trusting only the server's CA accepted the minted leaf"
grep -q '/untrusted' "$D/server.log" && fail "the untrusted client's request reached the server"
for _ in $(seq 100); do grep -q '"reason":"client_tls_failed"' "$D/a.jsonl" && break; sleep 0.1; done
grep -q '"reason":"client_tls_failed"' "$D/a.jsonl" && ok "untrusting client: audited client_tls_failed" ||
	fail "no client_tls_failed in the audit"
# --- passthrough: the server's own certificate
inp curl -sS -v "${PX[@]}" --cacert "$D/ca.pem" https://203.0.113.10:8443/pass -o "$D/out5" 2>"$D/err5"
grep -q '"path": "/pass"' "$D/out5" && grep -q 'issuer: CN=tether-test-ca' "$D/err5" &&
	ok "passthrough: untouched (the server's own certificate)" || fail "passthrough: $(cat "$D/err5")"
# --- bad upstream certificates: 502 upstream_cert_invalid, nothing relayed
for port in 8444 8445; do
	inp curl -sS -f -v "${PX[@]}" --cacert "$D/bundle.pem" "https://echo.tether.test:$port/secret" \
		-o /dev/null 2>"$D/err$port" && fail "$port: the request went through"
	grep -q '< HTTP/1.1 502' "$D/err$port" && grep -qi '< X-Tether-Reason: upstream_cert_invalid' "$D/err$port" &&
		ok "$port: 502 upstream_cert_invalid" || fail "$port: $(grep '^<' "$D/err$port")"
done
grep -q '/secret' "$D/server.log" && fail "a request reached a server with a bad certificate"
n=$(grep '"event":"egress_error"' "$D/a.jsonl" | grep -c '"reason":"upstream_cert_invalid"')
[ "$n" = 2 ] && ok "both audited egress_error upstream_cert_invalid" || fail "upstream_cert_invalid in the audit: $n"
grep -q 'certificate verify failed\|unable to get local issuer\|hostname mismatch' "$D/ns.err" &&
	ok "the log says why" || fail "log: $(tail -5 "$D/ns.err")"

# --- HTTP rules: each request its own decision, inside the TLS session
R=https://rules.tether.test:8443
http_line() { # http_line PATH-as-sent → the audit's http_request line for it
	python3 -c 'import json,sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["event"] == "http_request" and e["path"] == sys.argv[2]: print(l.strip())' "$D/a.jsonl" "$1"
}
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" "$R/allowed/a" "$R/allowed/b" -o "$D/o1" -o "$D/o2" 2>"$D/e6"
grep -q '"path": "/allowed/a"' "$D/o1" && grep -q '"path": "/allowed/b"' "$D/o2" &&
	ok "two allowed requests on one connection" || fail "allowed: $(cat "$D/e6")"
l=$(http_line /allowed/b)
echo "$l" | grep -q '"decision":"allow"' && echo "$l" | grep -q '"status":200' &&
	echo "$l" | grep -q '"rule":"GET /allowed/\*\*"' && echo "$l" | grep -q '"binary":"/usr/bin/curl"' &&
	echo "$l" | grep -q '"method":"GET"' && ok "http_request: allow, status 200, rule, binary" || fail "http_request line: $l"
refused() { # refused WHAT REASON CURL-ARGS... : 403 with the reason inside TLS, never at the server
	local what=$1 why=$2
	shift 2
	inp curl -sS -i "${PX[@]}" --cacert "$D/bundle.pem" "$@" -o "$D/o7" 2>"$D/e7"
	if grep -q '^HTTP/1.1 403' "$D/o7" && grep -qi "^X-Tether-Reason: $why" "$D/o7"; then
		ok "$what: 403 $why inside the TLS session"
	else
		fail "$what: $(head -c 400 "$D/o7") $(cat "$D/e7")"
	fi
}
refused "deny rule wins" http_rule_deny "$R/allowed/secret/k"
refused "no rule for POST" http_no_matching_rule -d x "$R/allowed/p"
refused "dot segments" http_path_not_canonical --path-as-is "$R/allowed/../secret/k"
refused "WebSocket without a websocket rule" websocket_not_allowed -H 'Connection: Upgrade' \
	-H 'Upgrade: websocket' "$R/allowed/w"
grep -q 'secret\|/allowed/p\|/allowed/w' "$D/server.log" && fail "a refused request reached the server: $(cat "$D/server.log")"
l=$(http_line /allowed/secret/k)
echo "$l" | grep -q '"decision":"deny"' && echo "$l" | grep -q '"status":403' && echo "$l" | grep -q '"rule":"no-secrets"' &&
	ok "http_request: deny, 403, rule no-secrets" || fail "deny line: $l"
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" -H 'Connection: Upgrade' -H 'Upgrade: websocket' "$R/ws" \
	-o "$D/o8" 2>"$D/e8"
grep -q '"path": "/ws"' "$D/o8" && http_line /ws | grep -q '"rule":"ws"' &&
	ok "WebSocket upgrade by the explicit rule" || fail "ws: $(cat "$D/o8" "$D/e8")"
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" -X DELETE https://audit.tether.test:8443/x -o "$D/o9" 2>"$D/e9"
l=$(http_line /x)
grep -q '"method": "DELETE"' "$D/o9" && echo "$l" | grep -q '"mode":"audit"' &&
	echo "$l" | grep -q '"reason":"http_no_matching_rule"' && echo "$l" | grep -q '"decision":"allow"' &&
	ok "mode: audit lets a would-be denial through, audited" || fail "audit mode: $l $(cat "$D/e9")"

# --- a plain-HTTP forward request to an inspected endpoint would pass its
# rules and credentials by (only a CONNECT tunnel is inspected): refused
code=$(inp curl -s "${PX[@]}" -o "$D/o10" -w '%{http_code}' -D "$D/h10" http://echo.tether.test:8443/fwd)
[ "$code" = 403 ] && grep -qi '^X-Tether-Reason: tls_inspect_needs_connect' "$D/h10" &&
	grep -q '"reason":"tls_inspect_needs_connect"' "$D/a.jsonl" &&
	ok "a forward request to an inspected endpoint: 403 tls_inspect_needs_connect" ||
	fail "forward to an inspect endpoint: $code $(cat "$D/h10" 2>/dev/null)"
grep -q '/fwd' "$D/server.log" && fail "the forward request reached the server"

# --- credentials: only the permitted binary, on the permitted endpoint
E=https://echo.tether.test:8443
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" -H 'Authorization: Bearer tether-cred:GITHUB' "$E/cred1" \
	-o "$D/c1" 2>"$D/ce1"
grep -q "\"Authorization\": \"Bearer $SECRET1\"" "$D/c1" && ok "the permitted request carries the real secret" ||
	fail "bearer: $(cat "$D/c1" "$D/ce1")"
http_line /cred1 | grep -q '"credential":"GITHUB"' && ok "http_request names the credential" || fail "$(http_line /cred1)"
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" -u "x-access-token:tether-cred:GITHUB" "$E/cred2" -o "$D/c2" 2>"$D/ce2"
want=$(printf 'x-access-token:%s' "$SECRET1" | base64 -w0)
grep -q "\"Authorization\": \"Basic $want\"" "$D/c2" && ok "Basic: the placeholder inside USER:PASSWORD swapped" ||
	fail "basic: $(cat "$D/c2")"
refused "another binary's credential" credential_not_permitted -H 'X-Api-Key: tether-cred:MODEL' "$E/cred3"
refused "the credential on another endpoint" credential_not_permitted \
	-H 'Authorization: Bearer tether-cred:GITHUB' "$R/allowed/cred4"
refused "an unknown credential" credential_not_permitted -H 'X: tether-cred:NOPE' "$E/cred5"
grep -q '/cred3\|/cred4\|/cred5' "$D/server.log" && fail "a refused credential request reached the server"
http_line /cred3 | grep -q '"credential":"MODEL"' && ok "the refusal names the credential" || fail "$(http_line /cred3)"
# header: the proxy sets X-Api-Key itself (no placeholder in the client),
# replacing the client's value; never on another endpoint
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" -H 'x-api-key: mine' https://audit.tether.test:8443/only \
	-o "$D/c13" 2>"$D/ce13"
grep -qi "\"X-Api-Key\": \"key=$INJ\"" "$D/c13" && ! grep -q '"mine"' "$D/c13" &&
	http_line /only | grep -q '"credential":"INJECTED"' &&
	ok "header: the proxy sets the credential's header on the permitted endpoint" || fail "inject: $(cat "$D/c13" "$D/ce13")"
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" -H 'x-api-key: mine' "$E/inj2" -o "$D/c14" 2>"$D/ce14"
grep -q '"mine"' "$D/c14" && ! grep -q "$INJ" "$D/c14" &&
	ok "header: not set on another endpoint (the client's value passes)" || fail "inject elsewhere: $(cat "$D/c14")"
# rotation: a changed file is read again
(umask 077 && echo "$SECRET2" >"$D/gh-token.new") && mv "$D/gh-token.new" "$D/gh-token"
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" -H 'Authorization: Bearer tether-cred:GITHUB' "$E/cred6" \
	-o "$D/c6" 2>"$D/ce6"
grep -q "Bearer $SECRET2" "$D/c6" && ok "rotation: the new value after the file changed" || fail "rotation: $(cat "$D/c6")"
chmod 644 "$D/gh-token"
touch -d '+1 sec' "$D/gh-token"
refused "a source file others can read" credential_unavailable -H 'Authorization: Bearer tether-cred:GITHUB' "$E/cred7"
# --- the redactor knows every secret value: provoke lines that echo what
# the client sent (a path, a denied path, a CONNECT host) with a rotated-out
# value (SECRET1), the current one (SECRET2) and one never spent (MODELKEY:
# registered when the policy loaded)
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" "$E/leak/$SECRET1/$SECRET2" -o "$D/o11" 2>"$D/e11"
grep -q "\"path\": \"/leak/$SECRET1/$SECRET2\"" "$D/o11" || fail "leak path did not arrive: $(cat "$D/e11")"
refused "a denied path echoing a secret" http_rule_deny "$R/allowed/secret/$MODELKEY"
inp curl -sS "${PX[@]}" --cacert "$D/bundle.pem" "https://$MODELKEY.tether.test:8443/" -o /dev/null 2>"$D/e12"
http_line "/leak/[REDACTED]/[REDACTED]" | grep -q '"decision":"allow"' &&
	http_line "/allowed/secret/[REDACTED]" | grep -q '"decision":"deny"' &&
	grep '"event":"egress_decision"' "$D/a.jsonl" | grep -q '"host":"\[REDACTED\].tether.test"' &&
	ok "audit lines echo the paths and the host with the secrets as [REDACTED]" ||
	fail "redacted audit lines: $(grep -c REDACTED "$D/a.jsonl") $(tail -3 "$D/a.jsonl")"
for v in "$SECRET1" "$SECRET2" "$MODELKEY" "$INJ"; do
	grep -q "$v" "$D/a.jsonl" "$D/ns.err" && fail "a secret value is in the audit or the log: $(grep -h "$v" "$D/a.jsonl" "$D/ns.err" | head -3)"
done
ok "no secret value in the audit or the log"
# the process holding them: its environ (where MODELKEY came from) is
# zeroed, and it writes no core file
nspid=$(cat "$D/hosts.pid")
[ "$(readlink /proc/$nspid/exe)" = "$BIN/net-supervisor-testing" ] || fail "pid $nspid is not the net-supervisor"
tr '\0' '\n' </proc/$nspid/environ | grep -q "$MODELKEY" && fail "the model key is in /proc/<net-supervisor>/environ"
grep -q '^Max core file size *0 *0 ' /proc/$nspid/limits && ok "net-supervisor: environ zeroed, no core file" ||
	fail "core limit: $(grep core /proc/$nspid/limits)"
m=$(inp curl -s --noproxy '*' "http://127.0.0.1:$ADMIN/metrics")
echo "$m" | grep -q '^tether_tls_errors_total{reason="upstream_cert_invalid"} 2$' &&
	echo "$m" | grep -q '^tether_http_requests_total{decision="deny",reason="credential_not_permitted"} 3$' &&
	echo "$m" | grep -qE '^tether_tls_inspected_total [1-9]' &&
	ok "metrics: inspected tunnels, TLS errors and requests by decision" ||
	fail "metrics: $(echo "$m" | grep -E 'tether_(tls|http)_')"

# --- HTTP/2 through inspection
if [ "$H2" = 1 ]; then
	H=https://echo.tether.test:8446 R2=https://rules.tether.test:8446
	inp curl -sS -v --http2 "${PX[@]}" --cacert "$D/bundle.pem" "$H/h2a" -o "$D/h1" 2>"$D/he1"
	grep -q 'ALPN: server accepted h2' "$D/he1" && grep -q '"proto":"2.0"' "$D/h1" &&
		grep -q '"path":"/h2a"' "$D/h1" && ok "curl --http2: h2 to the client and to the server" ||
		fail "h2: $(grep -E 'ALPN|HTTP/' "$D/he1") $(cat "$D/h1")"
	l=$(http_line /h2a)
	echo "$l" | grep -q '"decision":"allow"' && echo "$l" | grep -q '"status":200' &&
		echo "$l" | grep -q '"method":"GET"' && echo "$l" | grep -q '"binary":"/usr/bin/curl"' &&
		ok "h2 stream audited as http_request (allow, 200, binary)" || fail "h2 http_request: $l"
	# 4 MiB up and back on one stream: both sessions' flow control (windows of 256 KiB a stream, 1 MiB
	# the connection)
	inp curl -sS --http2 "${PX[@]}" --cacert "$D/bundle.pem" --data-binary @"$D/big" "$H/h2up" -o "$D/hb" 2>"$D/heb"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["body"] != open(sys.argv[2]).read() or d["proto"] != "2.0")' \
		"$D/hb" "$D/big" && ok "h2: 4 MiB up and back, intact" || fail "h2 big POST: $(head -c 300 "$D/heb")"
	inp curl -sS -v --http1.1 "${PX[@]}" --cacert "$D/bundle.pem" "$H/h1a" -o "$D/h2" 2>"$D/he2"
	grep -q 'ALPN: server accepted http/1.1' "$D/he2" && grep -q '"proto":"1.1"' "$D/h2" &&
		ok "an h1-only client to an h2-capable server: h1 both sides" || fail "h1 to h2 server: $(grep ALPN "$D/he2") $(cat "$D/h2")"
	inp curl -sS -v --http2 "${PX[@]}" --cacert "$D/bundle.pem" "$E/h2toh1" -o "$D/h3" 2>"$D/he3"
	grep -q 'ALPN: server accepted http/1.1' "$D/he3" && grep -q '"path": "/h2toh1"' "$D/h3" &&
		ok "an h2 client to an h1-only server: h1" || fail "h2 to h1 server: $(grep ALPN "$D/he3") $(cat "$D/h3")"
	# allowed and denied streams multiplexed on one connection
	nd=$(grep '"event":"egress_decision"' "$D/a.jsonl" | grep -c '"port":8446')
	inp curl -sS --http2 --parallel "${PX[@]}" --cacert "$D/bundle.pem" \
		-w '%{http_code} %{url_effective} %header{x-tether-reason}\n' \
		"$R2/allowed/m1" "$R2/allowed/secret/m2" "$R2/allowed/m3" -o "$D/m1" -o "$D/m2" -o "$D/m3" >"$D/mw" 2>"$D/me"
	nd2=$(grep '"event":"egress_decision"' "$D/a.jsonl" | grep -c '"port":8446')
	grep -q '^200 .*/allowed/m1 $' "$D/mw" && grep -q '^200 .*/allowed/m3 $' "$D/mw" &&
		grep -q '^403 .*/allowed/secret/m2 http_rule_deny$' "$D/mw" && grep -q '"reason":"http_rule_deny"' "$D/m2" &&
		ok "h2: allowed and denied streams side by side (403 http_rule_deny on its stream only)" ||
		fail "h2 multiplexed: $(cat "$D/mw" "$D/me")"
	[ "$nd2" = $((nd + 1)) ] && ok "h2: the three streams shared one connection" || fail "h2 connections: $nd -> $nd2"
	grep -q 'secret/m2' "$D/h2server.log" && fail "a denied h2 stream reached the server"
	http_line /allowed/secret/m2 | grep -q '"rule":"no-secrets"' && ok "h2 denial audited with its rule" ||
		fail "h2 deny line: $(http_line /allowed/secret/m2)"
	# credentials in h2 headers (the source file back to 0600 after the check above)
	chmod 600 "$D/gh-token"
	touch -d '+2 sec' "$D/gh-token"
	inp curl -sS --http2 "${PX[@]}" --cacert "$D/bundle.pem" -H 'Authorization: Bearer tether-cred:GITHUB' \
		"$H/h2cred" -o "$D/h4" 2>"$D/he4"
	grep -qF "HDR /h2cred authorization: Bearer $SECRET2" "$D/h2server.log" &&
		ok "h2: the secret swapped into the header arrived" || fail "h2 cred: $(cat "$D/h4" "$D/he4")"
	http_line /h2cred | grep -q '"credential":"GITHUB"' && ok "h2 http_request names the credential" ||
		fail "$(http_line /h2cred)"
	# a header the proxy sets (credential INJECTED), over h2: lower-case, the client's value gone
	inp curl -sS --http2 "${PX[@]}" --cacert "$D/bundle.pem" -H 'X-Api-Key: mine' \
		https://audit.tether.test:8446/only -o "$D/h5" 2>"$D/he5"
	grep -qF "HDR /only x-api-key: key=$INJ" "$D/h2server.log" && ! grep -q "HDR /only x-api-key: mine" "$D/h2server.log" &&
		ok "h2: the credential's header set by the proxy" || fail "h2 inject: $(grep 'HDR /only' "$D/h2server.log") $(cat "$D/he5")"
	if inp env HTTPS_PROXY="http://127.0.0.1:$PORT" H2_CA="$D/bundle.pem" node "$TETHER_SRC/tests/common/h2_client.js" \
		echo.tether.test:8446 -H 'x-api-key: tether-cred:MODEL' /h2cred2 >"$D/n1" 2>&1; then
		grep -q '^/h2cred2 403 credential_not_permitted ' "$D/n1" && grep -q '^alpn h2$' "$D/n1" &&
			ok "h2 (Node): another binary's placeholder refused credential_not_permitted" || fail "node cred: $(cat "$D/n1")"
	else
		fail "node h2 client: $(cat "$D/n1")"
	fi
	grep -q '/h2cred2' "$D/h2server.log" && fail "a refused credential stream reached the server"
	inp env HTTPS_PROXY="http://127.0.0.1:$PORT" H2_CA="$D/bundle.pem" node "$TETHER_SRC/tests/common/h2_client.js" \
		echo.tether.test:8446 /rst/r1 /trailers/t1 /n1 >"$D/n2" 2>&1
	grep -q '^/rst/r1 error .* rst=7$' "$D/n2" && ok "h2: the upstream's RST_STREAM (REFUSED_STREAM) reaches the client" ||
		fail "rst: $(cat "$D/n2")"
	grep -q '^/trailers/t1 200 - x-checksum=ok ' "$D/n2" && grep -q '^/n1 200 ' "$D/n2" &&
		ok "h2: trailers pass; the other streams go on" || fail "trailers: $(cat "$D/n2")"
	# 100 Continue passes (the client sends its body only after it)
	inp env HTTPS_PROXY="http://127.0.0.1:$PORT" H2_CA="$D/bundle.pem" node "$TETHER_SRC/tests/common/h2_client.js" \
		echo.tether.test:8446 --expect-continue body-after-100 /cont1 >"$D/n4" 2>&1
	grep -q '^/cont1 200 - - [1-9]' "$D/n4" && grep -q '^2.0 POST /cont1 8446$' "$D/h2server.log" &&
		ok "h2: 100 Continue reaches the client, its body follows" || fail "100-continue: $(cat "$D/n4")"
	# an h2-only client (no http/1.1 offered, as gRPC's) to a server failing verification: 502 on its stream
	inp env HTTPS_PROXY="http://127.0.0.1:$PORT" H2_CA="$D/bundle.pem" node "$TETHER_SRC/tests/common/h2_client.js" \
		echo.tether.test:8444 /h2bad >"$D/n3" 2>&1
	grep -q '^/h2bad 502 upstream_cert_invalid ' "$D/n3" && grep -q '^alpn h2$' "$D/n3" &&
		ok "h2-only client, bad upstream certificate: 502 upstream_cert_invalid on its stream" || fail "h2 502: $(cat "$D/n3")"
	grep -q '/h2bad' "$D/server.log" && fail "a request reached the server with the bad certificate over h2"
	for v in "$SECRET1" "$SECRET2" "$MODELKEY" "$INJ"; do
		grep -q "$v" "$D/a.jsonl" "$D/ns.err" && fail "a secret value is in the audit or the log after h2"
	done
fi
finish "TLS inspection checks"
