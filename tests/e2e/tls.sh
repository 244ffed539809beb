#!/bin/bash
# e2e: TLS inspection under `tether run` (issue 24, stage 1). The fake
# internet of lib.sh gets an HTTPS echo server (tests/common/https_echo.py)
# with the test's own CA at 198.51.100.10: 8443 with a certificate for that
# address, 8444 with one from a CA nobody trusts. The policy inspects both
# (`tls: inspect`); `tether run --upstream-ca` verifies the servers against
# the test CA. The workload trusts nothing but what tether hands it.
#
#   tls.sh tls_inspect [TOPO]   (env: TETHER_BIN, TETHER_SRC)
#
#   tls_inspect  curl and Python requests reach 8443 through the proxy,
#                trusting the run's bundle (system CAs + sandbox CA) through
#                the trust-bundle variables; curl saw a leaf issued by the
#                sandbox CA; the server got the requests; 8444 is refused
#                502 upstream_cert_invalid (egress_error in the audit with
#                curl's path) and the server never sees that request.
#                Credentials: the workload's GITHUB_TOKEN is the placeholder;
#                curl's request arrives with the real secret (server log),
#                python3's with the same placeholder is refused
#                credential_not_permitted; the secret is in no output, audit
#                line, --dry-run or file of the workload (a --dry-run whose
#                argv carries it prints [REDACTED]). git clones over
#                HTTPS (fakenet.py, 8446) a repository that needs the token
#                as Basic x-access-token:SECRET: git's credential helper
#                gives it the placeholder, the proxy swaps it for
#                git-remote-http only. Behind tinyproxy (--upstream-proxy) an
#                inspected tunnel is still verified and inspected.
#                HTTP/2: nghttpd (8447, h2 only) gets curl --http2's request
#                over h2 with the real secret in its header (its log shows
#                it); Node's http2 client (another binary) with the same
#                placeholder gets 403 credential_not_permitted on its stream.
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip "openssl missing"
"$NETSUP_BIN" --features 2>/dev/null | grep -qx tls-inspect || skip "net-supervisor cannot inspect TLS"

setup_net
mkca() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$2" \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
		-keyout "$WORK/$1.key" -out "$WORK/$1.pem" 2>>"$WORK/openssl.log"
}
mkleaf() {
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
		-keyout "$WORK/$1.key" -out "$WORK/$1.csr" 2>>"$WORK/openssl.log" &&
	printf '%s\n' "subjectAltName=IP:198.51.100.10" "extendedKeyUsage=serverAuth" >"$WORK/$1.ext" &&
	openssl x509 -req -in "$WORK/$1.csr" -CA "$WORK/$2.pem" -CAkey "$WORK/$2.key" -CAcreateserial \
		-days 2 -extfile "$WORK/$1.ext" -out "$WORK/$1.pem" 2>>"$WORK/openssl.log"
}
mkca ca tether-e2e-ca && mkca rogue rogue-ca && mkleaf good ca && mkleaf bad rogue ||
	fail "openssl: $(cat "$WORK/openssl.log")"
chmod 644 "$WORK"/*.pem
ip netns exec "$INET" python3 "$SRC/tests/common/https_echo.py" "$WORK/https.log" 198.51.100.10 \
	"8443:$WORK/good.pem:$WORK/good.key" "8444:$WORK/bad.pem:$WORK/bad.key" 2>"$WORK/https.err" &
SERVER_PID="$SERVER_PID $!"
wait_for 30 grep -qs ready "$WORK/https.log" || fail "HTTPS echo server: $(cat "$WORK/https.err")"
SECRET="ghp-e2e-secret-$RANDOM$RANDOM$RANDOM"
(umask 077 && echo "$SECRET" >"$WORK/gh-token")
# git smart HTTP that needs the token (fakenet.py), on 8446
F="$WORK/fake" && mkdir -p "$F/www" "$F/git/private" && echo hi >"$F/www/index.html"
git init -q --bare "$F/git/private/demo.git" && git -C "$F/git/private/demo.git" symbolic-ref HEAD refs/heads/main &&
	(d="$WORK/seed" && mkdir -p "$d" && cd "$d" && git init -q -b main && echo tether-git-cred-payload >README &&
		git add README && git -c user.name=t -c user.email=t@example.test commit -q -m seed &&
		git push -q "$F/git/private/demo.git" main) || fail "git seed"
ip netns exec "$INET" env FAKENET_GIT_AUTH="x-access-token:$SECRET" python3 "$SRC/tests/e2e/fakenet.py" "$F" \
	"$WORK/good.pem" "$WORK/good.key" 198.51.100.10 8446 >"$WORK/fakenet.log" 2>&1 &
SERVER_PID="$SERVER_PID $!"
wait_for 30 grep -qsx ready "$WORK/fakenet.log" || fail "fakenet.py: $(cat "$WORK/fakenet.log")"
# HTTP/2 only (Debian's nghttp2-server), 8447: -v logs every header it receives
H2=0
if command -v nghttpd >/dev/null && command -v node >/dev/null; then
	mkdir -p "$WORK/h2www" && echo h2-payload >"$WORK/h2www/h2cred" && cp "$WORK/h2www/h2cred" "$WORK/h2www/h2node"
	ip netns exec "$INET" nghttpd -v -d "$WORK/h2www" -a 198.51.100.10 8447 "$WORK/good.key" "$WORK/good.pem" \
		>"$WORK/nghttpd.log" 2>&1 &
	SERVER_PID="$SERVER_PID $!"
	wait_for 30 sh -c "ss -Htln -N $INET | grep -qF '198.51.100.10:8447'" || fail "nghttpd: $(cat "$WORK/nghttpd.log")"
	H2=1
else
	echo "SKIP part: nghttpd or node not installed (HTTP/2 through inspection)"
fi

cat >"$WORK/policy.yaml" <<'Y'
version: 1
network:
  mode: enforce
  policies:
    - name: inspected
      binaries: [{path: /usr/bin/curl}, {path: /usr/bin/python3}, {path: /usr/lib/git-core/git-remote-https},
                 {path: /usr/bin/node}]
      endpoints:
        - {host: 198.51.100.10, ports: [8443, 8444, 8446, 8447], tls: inspect}
credentials:
  - name: GITHUB
    variable: GITHUB_TOKEN
    source: {file: @WORK@/gh-token}
    binaries: [{path: /usr/bin/curl}, {path: /usr/lib/git-core/git-remote-https}]
    endpoints: [{host: 198.51.100.10, ports: [8443, 8446, 8447]}]
Y
sed -i "s#@WORK@#$WORK#" "$WORK/policy.yaml"
cat >"$WORK/w.sh" <<'W'
#!/bin/sh
env | grep -E '^(SSL_CERT_FILE|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|GIT_SSL_CAINFO|GITHUB_TOKEN)='
curl -sS -v --max-time 20 https://198.51.100.10:8443/hello 2>&1 | grep -E '^\* +(issuer|subject):|"path"'
echo
/usr/bin/python3 -c '
import requests
print("requests:", requests.get("https://198.51.100.10:8443/py", timeout=20).json()["path"])' 2>&1 | tail -1
curl -sS -v --max-time 20 https://198.51.100.10:8444/secret 2>&1 | grep -iE '^< (HTTP|X-Tether-Reason)|CONNECT tunnel failed'
echo "cred-curl: $(curl -sS -o /dev/null -w '%{http_code}' --max-time 20 -H "Authorization: Bearer $GITHUB_TOKEN" https://198.51.100.10:8443/cred)"
/usr/bin/python3 -c '
import os, requests
r = requests.get("https://198.51.100.10:8443/credpy", timeout=20,
                 headers={"Authorization": "Bearer " + os.environ["GITHUB_TOKEN"]})
print("cred-py:", r.status_code, r.headers.get("X-Tether-Reason"))' 2>&1 | tail -1
HOME=$RW git -c credential.helper='!f() { echo username=x-access-token; echo "password=$GITHUB_TOKEN"; }; f' \
	clone -q https://198.51.100.10:8446/git/private/demo.git "$RW/clone" 2>&1 | tail -3
echo "git-clone: $(cat "$RW/clone/README" 2>/dev/null)"
if [ @H2@ = 1 ]; then
	echo "h2-curl: $(curl -sS --http2 -o /dev/null -w '%{http_code} %{http_version}' --max-time 20 \
		-H "Authorization: Bearer $GITHUB_TOKEN" https://198.51.100.10:8447/h2cred)"
	echo "h2-node: $(/usr/bin/node @SRC@/tests/common/h2_client.js 198.51.100.10:8447 \
		-H "authorization: Bearer $GITHUB_TOKEN" /h2node 2>&1 | tr '\n' ' ')"
fi
# a captured flow (no proxy) to the inspected endpoint would pass its
# rules and credentials by: refused (reset), audited
echo "captured: $(curl -sS -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 20 https://198.51.100.10:8443/captured 2>/dev/null || echo refused)"
echo done
W
sed -i -e "s#\$RW#$WORK/rw#g" -e "s#@H2@#$H2#" -e "s#@SRC@#$SRC#" "$WORK/w.sh"
chmod 755 "$WORK/w.sh"
run --policy "$WORK/policy.yaml" --upstream-ca "$WORK/ca.pem" -- /bin/sh "$WORK/w.sh"
[ "$RC" = 0 ] || fail "tether run exited $RC: $(tail -20 "$WORK/out")"
grep -q '^done' "$WORK/out" || fail "the workload did not finish"
for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO; do
	grep -q "^$v=/.*/tls-bundle.pem$" "$WORK/out" || fail "$v is not the run's bundle: $(grep "^$v=" "$WORK/out")"
done
grep -q '"path": "/hello"' "$WORK/out" || fail "curl through inspection did not arrive"
grep -q 'issuer: O=tether sandbox; CN=tether sandbox CA' "$WORK/out" || fail "curl did not see the sandbox CA's leaf"
grep -q '^requests: /py' "$WORK/out" || fail "Python requests through inspection failed"
grep -q 'GET /hello 8443' "$WORK/https.log" && grep -q 'GET /py 8443' "$WORK/https.log" ||
	fail "the server did not get the requests: $(cat "$WORK/https.log")"
grep -q '< HTTP/1.1 502' "$WORK/out" && grep -qi '< X-Tether-Reason: upstream_cert_invalid' "$WORK/out" ||
	fail "8444 was not refused 502 upstream_cert_invalid"
grep -q '/secret' "$WORK/https.log" && fail "a request reached the server with the bad certificate"
grep '"event":"egress_error"' "$AUDIT" | grep '"reason":"upstream_cert_invalid"' | grep -q '/usr/bin/curl' ||
	fail "no egress_error upstream_cert_invalid for curl in the audit"
grep -q '^GITHUB_TOKEN=tether-cred:GITHUB$' "$WORK/out" || fail "the workload's GITHUB_TOKEN is not the placeholder"
grep -q '^cred-curl: 200' "$WORK/out" || fail "curl's credential request: $(grep cred-curl "$WORK/out")"
grep -qF "HDR /cred Authorization: Bearer $SECRET" "$WORK/https.log" || fail "the server did not get the real secret"
grep -q '^cred-py: 403 credential_not_permitted' "$WORK/out" || fail "python3 with curl's placeholder: $(grep cred-py "$WORK/out")"
grep -q '^git-clone: tether-git-cred-payload' "$WORK/out" || fail "git clone with the credential: $(grep -A3 git "$WORK/out")"
grep -q '^8446 GET /git/private/demo.git/info/refs?service=git-upload-pack 200' "$WORK/fakenet.log" ||
	fail "the server did not accept git's swapped credential: $(cat "$WORK/fakenet.log")"
if [ "$H2" = 1 ]; then
	grep -q '^h2-curl: 200 2$' "$WORK/out" || fail "curl --http2 with the credential: $(grep h2-curl "$WORK/out")"
	grep -qF "authorization: Bearer $SECRET" "$WORK/nghttpd.log" || fail "nghttpd did not get the real secret over h2"
	grep -q '^h2-node: /h2node 403 credential_not_permitted .*alpn h2' "$WORK/out" ||
		fail "node's h2 stream with curl's placeholder: $(grep h2-node "$WORK/out")"
	grep -q '/h2node' "$WORK/nghttpd.log" && fail "node's h2 stream with the placeholder reached nghttpd"
	grep '"event":"http_request"' "$AUDIT" | grep '"path":"/h2node"' | grep '"binary":"/usr/bin/node"' |
		grep -q '"reason":"credential_not_permitted"' || fail "no http_request credential_not_permitted for node"
fi
grep -q '/credpy' "$WORK/https.log" && fail "python3's request with the placeholder reached the server"
grep -Eq '^captured: (000)?refused$' "$WORK/out" || fail "a captured flow to the inspected endpoint: $(grep captured: "$WORK/out")"
grep -q '/captured' "$WORK/https.log" && fail "a captured flow reached the inspected endpoint uninspected"
grep '"event":"egress_decision"' "$AUDIT" | grep '"capture":"transparent"' | grep -q '"reason":"tls_inspect_needs_connect"' ||
	fail "no egress_decision tls_inspect_needs_connect for the captured flow"
inside timeout 30 "$TETHER" run --topology "$TOPO" --policy "$WORK/policy.yaml" --upstream-ca "$WORK/ca.pem" \
	--dry-run -- /bin/sh "$WORK/w.sh" >"$WORK/dry" 2>&1 || fail "--dry-run: $(tail -5 "$WORK/dry")"
# the redactor knows the configured secret: a command line that carries
# it (in no shape the redactor would recognise) is printed [REDACTED]
inside timeout 30 "$TETHER" run --topology "$TOPO" --policy "$WORK/policy.yaml" --upstream-ca "$WORK/ca.pem" \
	--dry-run -- curl -H "X-Custom: $SECRET" "https://198.51.100.10:8443/$SECRET" >"$WORK/dry2" 2>&1 ||
	fail "--dry-run with the secret in argv: $(tail -5 "$WORK/dry2")"
grep -qF 'X-Custom: [REDACTED]' "$WORK/dry2" && grep -qF 'https://198.51.100.10:8443/[REDACTED]' "$WORK/dry2" ||
	fail "--dry-run did not redact the secret: $(grep command: "$WORK/dry2")"
for f in "$WORK/out" "$AUDIT" "$WORK/dry" "$WORK/dry2" "$WORK/w.sh" "$WORK/policy.yaml" "$WORK/rw/clone/.git/config"; do
	grep -qF "$SECRET" "$f" && fail "the secret is in $f"
done
# behind a corporate proxy (tinyproxy at 198.51.100.20:8888): the inspected
# tunnel goes through it and is still verified and inspected
if command -v tinyproxy >/dev/null; then
	ip netns exec "$INET" ip addr add 198.51.100.20/24 dev "${TAG}n" || fail "proxy address"
	printf 'Port 8888\nListen 198.51.100.20\nTimeout 30\nLogFile "%s"\nLogLevel Connect\nMaxClients 20\nAllow 198.51.100.0/24\n' \
		"$WORK/tinyproxy.log" >"$WORK/tinyproxy.conf"
	ip netns exec "$INET" tinyproxy -d -c "$WORK/tinyproxy.conf" >"$WORK/tinyproxy.out" 2>&1 &
	SERVER_PID="$SERVER_PID $!"
	wait_for 30 sh -c "ss -Htln -N $INET | grep -qF '198.51.100.20:8888'" || fail "tinyproxy: $(cat "$WORK/tinyproxy.out")"
	run --policy "$WORK/policy.yaml" --upstream-ca "$WORK/ca.pem" --upstream-proxy http://198.51.100.20:8888 -- \
		sh -c 'curl -sS -v --max-time 20 https://198.51.100.10:8443/via-corp 2>&1 | grep -E "issuer:|\"path\""
			curl -sS -o /dev/null -w "bad=%{http_code}\n" --max-time 20 https://198.51.100.10:8444/via-corp-bad'
	grep -q '"path": "/via-corp"' "$WORK/out" && grep -q 'issuer: O=tether sandbox' "$WORK/out" ||
		fail "inspection through the corporate proxy: $(tail -5 "$WORK/out")"
	grep -q 'CONNECT 198.51.100.10:8443' "$WORK/tinyproxy.log" || fail "the tunnel did not go through tinyproxy"
	grep -q '/via-corp-bad' "$WORK/https.log" && fail "a bad certificate behind the corporate proxy was relayed"
else
	echo "SKIP part: tinyproxy not installed (inspection through --upstream-proxy)"
fi
check_audit_common
echo "PASS [$CASE $TOPO]"
