#!/bin/bash
# tether policy check / explain: exit codes, FILE:LINE:COL errors, and the
# same decisions as the proxy engine (no network: --ip or IP literals only).
set -u
T=${TETHER_BIN:?}/tether
TMP=$(mktemp -d /tmp/tether-policy-cli-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat > $TMP/good.yaml <<'P'
version: 1
network:
  policies:
    - name: github
      binaries:
        - path: /usr/bin/git
      ancestors:
        - path: /usr/local/bin/agent
      endpoints:
        - host: "*.github.com"
          ports: [443]
    - name: pinned
      binaries:
        - path: /usr/bin/curl
          sha256: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      endpoints:
        - cidr: 198.51.100.0/24
          ports: [8080]
P
printf 'version: 1\nnetwork:\n  policies:\n    - name: x\n      binaries: [{path: /bin/x}]\n      endpoints: [{host: a.example}]\n' > $TMP/bad.yaml
out=$($T policy check $TMP/good.yaml) || fail "good policy rejected"
echo "$out" | grep -q "2 rule" || fail "check output: $out"
err=$($T policy check $TMP/bad.yaml 2>&1); rc=$?
[ $rc -eq 1 ] || fail "bad policy: exit $rc"
echo "$err" | grep -q "^$TMP/bad.yaml:6:[0-9]*: .*ports" || fail "bad policy message: $err"
$T policy check >/dev/null 2>&1; [ $? -eq 2 ] || fail "check without FILE should exit 2"

ex() { $T policy explain --policy $TMP/good.yaml "$@"; }
ex --binary /usr/bin/git --ancestor /usr/local/bin/agent --dest api.github.com:443 --ip 140.82.112.5 >/dev/null || fail "git under agent should be allowed"
out=$(ex --binary /usr/bin/git --dest api.github.com:443 --ip 140.82.112.5); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q ancestor_requirement_unmet || fail "git without agent: $rc $out"
out=$(ex --binary /usr/bin/git --ancestor /usr/local/bin/agent --dest api.github.com:443 --ip 127.0.0.1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q blocked_destination || fail "rebinding to loopback: $rc $out"
ex --binary /usr/bin/curl --sha256 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA --dest 198.51.100.9:8080 >/dev/null || fail "pinned curl should be allowed"
out=$(ex --binary /usr/bin/curl --sha256 bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb --dest 198.51.100.9:8080); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q binary_hash_mismatch || fail "wrong hash: $rc $out"
# As the proxy: a name no rule of the binary could allow is not looked up
# (localhost would resolve to a blocked address: the reason tells which path ran)
out=$(ex --binary /usr/bin/wget --dest localhost:443); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "not looked up" && echo "$out" | grep -q no_matching_policy || fail "unlookedup name: $rc $out"
out=$(ex --binary /usr/bin/curl --sha256 bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb --dest localhost:8080); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "not looked up" && echo "$out" | grep -q binary_hash_mismatch || fail "impostor, no lookup, precise reason: $rc $out"
out=$(ex --binary /usr/bin/curl --sha256 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa --dest localhost:8080); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q blocked_destination && ! echo "$out" | grep -q "not looked up" || fail "cidr rule: looked up: $rc $out"
ex --binary /usr/bin/curl --dest nope >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --dest should exit 2"
ex --binary relative --dest 198.51.100.9:8080 >/dev/null 2>&1; [ $? -eq 2 ] || fail "relative --binary should exit 2"
$T policy --help | grep -q explain || fail "help"
# --raw (issue 21): a captured stream that is neither TLS nor HTTP needs a
# protocol: tcp endpoint; an http one says protocol_not_allowed
cat > $TMP/raw.yaml <<'Y'
version: 1
network:
  policies:
    - name: web
      binaries: [{path: /usr/bin/curl}]
      endpoints: [{cidr: 198.51.100.0/24, ports: [22]}]
    - name: ssh
      binaries: [{path: /usr/bin/ssh}]
      endpoints: [{cidr: 198.51.100.0/24, ports: [22], protocol: tcp}]
Y
out=$($T policy explain --policy $TMP/raw.yaml --binary /usr/bin/curl --dest 198.51.100.7:22 --raw); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "protocol_not_allowed, policy web" || fail "raw via http endpoint: $rc $out"
$T policy explain --policy $TMP/raw.yaml --binary /usr/bin/curl --dest 198.51.100.7:22 >/dev/null || fail "http flow via http endpoint"
$T policy explain --policy $TMP/raw.yaml --binary /usr/bin/ssh --dest 198.51.100.7:22 --raw >/dev/null 2>&1 || fail "raw via tcp endpoint"
$T policy check $TMP/raw.yaml >/dev/null 2>&1 || fail "protocol: tcp does not load"
# credentials (issue 24): explain names the credential a binary → endpoint
# would spend (placeholder and source, never a value); check accepts them
cat >"$TMP/cred.yaml" <<'Y'
version: 1
network:
  policies:
    - name: gh
      binaries: [{path: /usr/bin/curl}, {path: /usr/bin/wget}]
      endpoints: [{host: 198.51.100.10, ports: [443], tls: inspect}]
credentials:
  - name: GITHUB
    variable: GITHUB_TOKEN
    source: {file: /etc/tether/gh}
    binaries: [{path: /usr/bin/curl}]
    endpoints: [{host: 198.51.100.10, ports: [443]}]
Y
$T policy check "$TMP/cred.yaml" >/dev/null 2>&1 || fail "check: a policy with credentials"
out=$($T policy explain --policy "$TMP/cred.yaml" --binary /usr/bin/curl --dest 198.51.100.10:443)
echo "$out" | grep -q 'credential GITHUB: GITHUB_TOKEN=tether-cred:GITHUB becomes the secret from file /etc/tether/gh' &&
	echo "$out" | grep -q 'TLS inspected' || fail "explain credential: $out"
out=$($T policy explain --policy "$TMP/cred.yaml" --binary /usr/bin/wget --dest 198.51.100.10:443)
echo "$out" | grep -q credential && fail "wget may not spend GITHUB: $out"
# one request inside an inspected flow: --method/--path (deny wins, rule named)
cat >"$TMP/rules.yaml" <<'Y'
version: 1
network:
  policies:
    - name: api
      binaries: [{path: /usr/bin/curl}]
      endpoints:
        - host: 198.51.100.10
          ports: [443]
          tls: inspect
          rules:
            - {method: GET, path: "/repos/**"}
            - {method: "*", path: "/repos/*/admin/**", action: deny}
        - {host: 198.51.100.11, ports: [443]}
Y
ex2() { $T policy explain --policy "$TMP/rules.yaml" --binary /usr/bin/curl "$@"; }
out=$(ex2 --dest 198.51.100.10:443 --method GET --path /repos/a/b) || fail "GET /repos allowed: $out"
echo "$out" | grep -q 'request GET /repos/a/b: allow, reason allowed, rule GET /repos/\*\*' || fail "allow line: $out"
out=$(ex2 --dest 198.51.100.10:443 --method GET --path /repos/a/admin/x) && fail "deny wins: $out"
echo "$out" | grep -q 'request GET /repos/a/admin/x: deny' || fail "deny line: $out"
ex2 --dest 198.51.100.10:443 --method POST --path /repos/a >/dev/null && fail "POST matches no allow rule"
ex2 --dest 198.51.100.10:443 --method GET --path '/repos/../x' >/dev/null && fail "dot segments"
out=$(ex2 --dest 198.51.100.10:443 --method GET --path /repos/a --websocket) && fail "websocket without a rule: $out"
out=$(ex2 --dest 198.51.100.11:443 --method GET --path /anything) || fail "passthrough endpoint: $out"
echo "$out" | grep -q 'not decided on its own' || fail "passthrough line: $out"
ex2 --dest 198.51.100.10:443 --method GET >/dev/null 2>&1; [ $? = 2 ] || fail "--method without --path"
ex2 --dest 198.51.100.10:443 --method GET --path rel >/dev/null 2>&1; [ $? = 2 ] || fail "relative --path"
printf 'version: 1\ncredentials:\n  - {name: X, source: {file: rel}, binaries: [{path: /x}], endpoints: [{host: a.example, ports: [443]}]}\n' >"$TMP/bad.yaml"
$T policy check "$TMP/bad.yaml" >/dev/null 2>&1 && fail "check: a relative source file"
# header: a token name, not a framing header; one {} in the format
hdr() { printf 'version: 1\ncredentials:\n  - {name: X, source: {file: /k}, binaries: [{path: /x}], endpoints: [{host: a.example, ports: [443]}], header: %s}\n' "$1" >"$TMP/hdr.yaml"; $T policy check "$TMP/hdr.yaml" 2>&1; }
hdr '{name: Authorization, format: "Bearer {}"}' >/dev/null || fail "check: a credential header"
out=$(hdr '{name: Host}') && fail "header Host accepted"
echo "$out" | grep -q "framing or hop-by-hop" || fail "header Host message: $out"
out=$(hdr '{name: X-K, format: "a {} {}"}') && fail "two {} accepted"
echo "$out" | grep -q "exactly one {}" || fail "format message: $out"
hdr '{name: "X K"}' >/dev/null && fail "a header name with a space"
hdr '{format: "{}"}' >/dev/null && fail "a header without a name"
cat >>"$TMP/cred.yaml" <<'Y'
    header: {name: Authorization, format: "token {}"}
Y
out=$($T policy explain --policy "$TMP/cred.yaml" --binary /usr/bin/curl --dest 198.51.100.10:443)
echo "$out" | grep -q 'sets Authorization: token {}' || fail "explain header: $out"
# tls: inspect reads HTTP: it does not go with protocol: tcp (any stream)
printf 'version: 1\nnetwork:\n  policies:\n    - name: x\n      binaries: [{path: /usr/bin/curl}]\n      endpoints: [{host: a.example, ports: [443], tls: inspect, protocol: tcp}]\n' >"$TMP/tlstcp.yaml"
out=$($T policy check "$TMP/tlstcp.yaml" 2>&1) && fail "check: tls: inspect with protocol: tcp loaded"
echo "$out" | grep -q "does not go" || fail "tls+tcp message: $out"
echo PASS
