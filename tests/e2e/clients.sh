#!/bin/bash
# e2e: the real clients an AI coding agent uses, under `tether run`
# (issue 20, "Tests"). The fake internet of lib.sh gets, at 198.51.100.10:
# HTTPS on 8443 and 8444 with the test's own CA (openssl CLI, now;
# fakenet.py: a page, git smart HTTP through `git http-backend`, a pip
# simple index, an npm packument and tarball) and an sshd on 2222. The
# policy trusts the CA through environment.trust_bundle only, and allows
# 8443 to the binaries that really connect (/usr/bin/python3 and
# /usr/lib/git-core/git-remote-https are symlinks: the rules name what a
# user would write), 8444 to curl only, ssh through `tether connect`.
#
#   clients.sh CASE [TOPO]   (env: TETHER_BIN, TETHER_SRC)
#
#   clients   one `tether run` drives every client: curl, wget, git clone
#             over HTTPS and over ssh, pip download and install, npm view
#             and install, Python urllib and requests. Each is allowed once
#             (the bytes arrive: page text, cloned commit, installed module)
#             and denied once (port 8444, which only curl may reach; curl
#             itself on 8445; ssh on 2223), and so is a Go program (net/http)
#             built at test time: the client fails, stderr has
#             `tether: denied BINARY (...) -> DEST reason=WORD`, the audit
#             has the deny with that binary path and reason.
# A client that is not installed is reported and skipped (requests:
# python3-requests), never passed silently: the case fails if curl, wget,
# git or python3 is missing.
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
for t in curl wget git openssl ssh-keygen /usr/sbin/sshd /usr/bin/ssh "$PY"; do
	command -v "$t" >/dev/null || skip "$t missing"
done
HAVE_NODE=0 HAVE_REQUESTS=0 HAVE_PIP=0
command -v node >/dev/null && command -v npm >/dev/null && HAVE_NODE=1
"$PY" -c 'import requests' 2>/dev/null && HAVE_REQUESTS=1
"$PY" -m pip --version >/dev/null 2>&1 && HAVE_PIP=1
HAVE_GO=0
command -v go >/dev/null && HAVE_GO=1

setup_net
F="$WORK/fake"
mkdir -p "$F/www" "$F/git" "$F/pypi" "$F/npm" && echo hello-https >"$F/www/index.html"

# --- the test CA and the server's certificate (IP SAN: no DNS needed)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=tether-e2e-ca \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
	-keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>"$WORK/openssl.log" || fail "CA: $(cat "$WORK/openssl.log")"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=198.51.100.10 \
	-keyout "$WORK/srv.key" -out "$WORK/srv.csr" 2>>"$WORK/openssl.log" || fail "server key"
printf '%s\n' "subjectAltName=IP:198.51.100.10,DNS:fake.tether.test" "extendedKeyUsage=serverAuth" \
	"keyUsage=critical,digitalSignature" "basicConstraints=CA:FALSE" >"$WORK/srv.ext"
openssl x509 -req -in "$WORK/srv.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial -days 2 \
	-extfile "$WORK/srv.ext" -out "$WORK/srv.pem" 2>>"$WORK/openssl.log" || fail "server certificate"
chmod 644 "$WORK/ca.pem"

# --- what the services serve: a git repository, a wheel, an npm tarball
git init -q --bare "$F/git/demo.git" || fail "git init"
git -C "$F/git/demo.git" symbolic-ref HEAD refs/heads/main
(
	d="$WORK/seed" && mkdir -p "$d" && cd "$d" && git init -q -b main &&
	echo "tether-git-payload" >README && git add README &&
	git -c user.name=t -c user.email=t@example.test commit -q -m seed &&
	git push -q "$F/git/demo.git" main
) || fail "git seed"
"$PY" - "$F/pypi/tetherdemo-1.0-py3-none-any.whl" <<'PY' || fail "wheel"
import base64, hashlib, sys, zipfile
files = {
    "tetherdemo/__init__.py": "MARK = 'tether-pip-payload'\n",
    "tetherdemo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tetherdemo\nVersion: 1.0\n",
    "tetherdemo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tether-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
        h = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={h},{len(text)}")
    record.append("tetherdemo-1.0.dist-info/RECORD,,")
    z.writestr("tetherdemo-1.0.dist-info/RECORD", "\n".join(record) + "\n")
PY
mkdir -p "$WORK/npmpkg/package"
printf '{"name":"tetherdemo","version":"1.0.0","main":"index.js"}\n' >"$WORK/npmpkg/package/package.json"
echo "module.exports = 'tether-npm-payload';" >"$WORK/npmpkg/package/index.js"
tar -C "$WORK/npmpkg" -czf "$F/npm/tetherdemo-1.0.0.tgz" package || fail "npm tarball"

# a Go client (net/http: HTTPS_PROXY, SSL_CERT_FILE), built now, offline
if [ "$HAVE_GO" = 1 ]; then
	mkdir -p "$WORK/gosrc" && cat >"$WORK/gosrc/main.go" <<'GO'
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// goclient URL WANT: GET URL, exit 0 when the body contains WANT
func main() {
	c := &http.Client{Timeout: 20 * time.Second}
	r, err := c.Get(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || !strings.Contains(string(b), os.Args[2]) {
		fmt.Fprintln(os.Stderr, "status", r.StatusCode)
		os.Exit(1)
	}
}
GO
	(cd "$WORK/gosrc" && GOCACHE="$WORK/gocache" GO111MODULE=off GOFLAGS='' go build -o "$WORK/goclient" main.go) \
		>"$WORK/go.log" 2>&1 || fail "go build: $(cat "$WORK/go.log")"
	chmod 755 "$WORK/goclient"
fi

# --- the services
ip netns exec "$INET" "$PY" "$SRC/tests/e2e/fakenet.py" "$F" "$WORK/srv.pem" "$WORK/srv.key" 198.51.100.10 8443 8444 \
	>"$WORK/fakenet.log" 2>&1 &
SERVER_PID="$SERVER_PID $!"
start_sshd
wait_for 30 grep -qx ready "$WORK/fakenet.log" || fail "fakenet.py did not start: $(cat "$WORK/fakenet.log")"
inside curl -sS --cacert "$WORK/ca.pem" --noproxy '*' --max-time 10 https://198.51.100.10:8443/ | grep -q hello-https ||
	fail "the fake HTTPS server does not answer with the test CA"

# the workload runs tether (connect) from a path it can read whatever its uid
cp "$(readlink -f "$TETHER")" "$WORK/tether" && chmod 755 "$WORK/tether"
cat >"$WORK/clients.yaml" <<EOF
version: 1
environment:
  trust_bundle: $WORK/ca.pem
  # a sanitizer build of tether connect runs under the workload's seccomp
  set: {ASAN_OPTIONS: "detect_leaks=0"}
network:
  mode: enforce
  policies:
    - name: fake-https
      binaries:
        - path: /usr/bin/curl
        - path: /usr/bin/wget
        - path: /usr/lib/git-core/git-remote-https
        - path: /usr/bin/python3
        - path: /usr/bin/node
$( [ "$HAVE_GO" = 1 ] && echo "        - path: $WORK/goclient" )
      endpoints:
        - cidr: 198.51.100.10/32
          ports: [8443]
    - name: curl-only
      binaries:
        - path: /usr/bin/curl
      endpoints:
        - cidr: 198.51.100.10/32
          ports: [8444]
    - name: ssh-tunnel
      binaries:
        - path: $WORK/tether
      ancestors:
        - path: /usr/bin/ssh
      endpoints:
        - cidr: 198.51.100.10/32
          ports: [2222]
EOF
printf '%s\n' "Host fake" "  HostName 198.51.100.10" "  User root" "  IdentityFile $WORK/rw/userkey" \
	"  IdentitiesOnly yes" "  BatchMode yes" "  StrictHostKeyChecking no" "  UserKnownHostsFile /dev/null" \
	"  LogLevel ERROR" "  ProxyCommand $WORK/tether connect %h %p" >"$WORK/ssh_config"
chmod 644 "$WORK/ssh_config"

# --- inside the sandbox: every client once allowed (8443), once denied
# (8444; curl 8445; ssh 2223); one line NAME=ok|failed each. Nothing but
# the trust bundle tells the clients about the CA.
H=https://198.51.100.10 HN=https://fake.tether.test R=$WORK/rw
P="$PY -m pip --disable-pip-version-check --no-cache-dir --retries 0 --timeout 20"
NPM="npm --fetch-retries=0 --fetch-timeout=20000"
cat >"$WORK/clients-run.sh" <<EOF
ok() { if "\$@" >>$R/client.log 2>&1; then echo "\$N=ok"; else echo "\$N=failed"; fi; }
N=curl_allow      ok sh -c 'curl -sS --max-time 20 $H:8443/ | grep -q hello-https'
N=curl_deny       ok curl -sS --max-time 20 -o /dev/null $H:8445/
N=wget_allow      ok sh -c 'wget -q -O - -T 20 -t 1 --ca-certificate="\$SSL_CERT_FILE" $H:8443/ | grep -q hello-https'
N=wget_deny       ok wget -q -O /dev/null -T 20 -t 1 $H:8444/
N=git_https_allow ok sh -c 'git clone -q $H:8443/git/demo.git $R/clone-https && grep -q tether-git-payload $R/clone-https/README'
N=git_https_deny  ok git clone -q $H:8444/git/demo.git $R/clone-https-denied
export GIT_SSH_COMMAND="ssh -F $WORK/ssh_config"
N=git_ssh_allow   ok sh -c 'git clone -q ssh://fake:2222$F/git/demo.git $R/clone-ssh && grep -q tether-git-payload $R/clone-ssh/README'
N=git_ssh_deny    ok git clone -q ssh://fake:2223$F/git/demo.git $R/clone-ssh-denied
N=urllib_allow    ok $PY -c 'import urllib.request as u; assert b"hello-https" in u.urlopen("$H:8443/", timeout=20).read()'
N=urllib_deny     ok $PY -c 'import urllib.request as u; u.urlopen("$H:8444/", timeout=20).read()'
if [ $HAVE_REQUESTS = 1 ]; then
N=requests_allow  ok $PY -c 'import requests; r = requests.get("$H:8443/", timeout=20); r.raise_for_status(); assert "hello-https" in r.text'
N=requests_deny   ok $PY -c 'import requests; requests.get("$H:8444/", timeout=20).raise_for_status()'
fi
if [ $HAVE_PIP = 1 ]; then
N=pip_download_allow ok $P download -q --no-deps -d $R/pipdl --index-url $H:8443/simple/ tetherdemo
N=pip_install_allow  ok sh -c '$P install -q --no-deps --target $R/pipinst --index-url $H:8443/simple/ tetherdemo && grep -q tether-pip-payload $R/pipinst/tetherdemo/__init__.py'
N=pip_deny           ok $P download -q --no-deps -d $R/pipdl-denied --index-url $H:8444/simple/ tetherdemo
fi
if [ $HAVE_NODE = 1 ]; then
export npm_config_cache=$R/npm-cache npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
N=npm_view_allow    ok sh -c '$NPM view tetherdemo version --registry $HN:8443/npm/ | grep -qx 1.0.0'
N=npm_install_allow ok sh -c 'mkdir -p $R/npmproj && cd $R/npmproj && $NPM install -s --no-package-lock --registry $HN:8443/npm/ tetherdemo && node -p "require(\"tetherdemo\")" | grep -qx tether-npm-payload'
N=npm_deny          ok $NPM view tetherdemo version --registry $HN:8444/npm/
fi
if [ $HAVE_GO = 1 ]; then
N=go_allow          ok $WORK/goclient $H:8443/ hello-https
N=go_deny           ok $WORK/goclient $H:8444/ hello-https
fi
true
EOF

case "$CASE" in
clients)
	# npm (node) checks an IP address against the name "localhost" behind
	# a proxy: it gets a name, from a private /etc/hosts in a mount
	# namespace of this run (the proxy resolves it, and so could the workload)
	{ cat /etc/hosts; echo "198.51.100.10 fake.tether.test"; } >"$WORK/hosts"
	inside unshare --mount --propagation private sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh \
		"$WORK/hosts" timeout 170 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" --policy "$WORK/clients.yaml" -- \
		sh "$WORK/clients-run.sh" >"$WORK/out" 2>"$WORK/err"
	RC=$?
	[ "$RC" = 0 ] || fail "tether run exited $RC: $(tail -5 "$WORK/err")"
	showlog() { echo "--- client log"; tail -40 "$WORK/rw/client.log"; echo "--- stderr"; tail -20 "$WORK/err"; }
	want() { # want NAME ok|failed
		grep -qx "$1=$2" "$WORK/out" || { showlog >&2; fail "expected $1=$2, got: $(grep "^$1=" "$WORK/out")"; }
	}
	denied() { # denied NAME BINARY DEST RULE: the client failed, the line on stderr, the audit deny
		want "$1" failed
		grep -q "^tether: denied $2 (.*) -> $3 reason=no_matching_policy" "$WORK/err" ||
			fail "$1: no denial line for $2 -> $3 on stderr: $(grep '^tether:' "$WORK/err")"
		if [ -n "$4" ]; then
			grep "^tether: denied $2 (.*) -> $3 " "$WORK/err" |
				grep -qF "; to allow: add to policy \"$4\": binaries: [{path: $2}]" ||
				fail "$1: the denial line has no hint naming \"$4\""
		fi
		python3 - "$AUDIT" "$2" "${3##*:}" <<'PY' || fail "$1: no audit deny no_matching_policy for $2 port ${3##*:}"
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if (e.get("event") == "egress_decision" and e.get("decision") == "deny"
            and (e.get("binary") or {}).get("path") == sys.argv[2]
            and e.get("reason") == "no_matching_policy"
            and (e.get("dest") or {}).get("port") == int(sys.argv[3])):
        sys.exit(0)
sys.exit(1)
PY
	}
	allowed() { # allowed NAME BINARY: the client did its job, the audit allow names the binary
		want "$1" ok
		expect_decision "$2" allow:allowed
	}
	allowed curl_allow /usr/bin/curl
	denied curl_deny /usr/bin/curl 198.51.100.10:8445 ""
	allowed wget_allow /usr/bin/wget
	denied wget_deny /usr/bin/wget 198.51.100.10:8444 curl-only
	allowed git_https_allow /usr/lib/git-core/git-remote-http
	denied git_https_deny /usr/lib/git-core/git-remote-http 198.51.100.10:8444 curl-only
	allowed git_ssh_allow "$WORK/tether"
	denied git_ssh_deny "$WORK/tether" 198.51.100.10:2223 ""
	PYX=$(readlink -f "$PY")
	allowed urllib_allow "$PYX"
	denied urllib_deny "$PYX" 198.51.100.10:8444 curl-only
	if [ "$HAVE_REQUESTS" = 1 ]; then
		want requests_allow ok
		want requests_deny failed
	else
		echo "NOTE [$CASE $TOPO]: python3-requests not installed: requests not tested" >&2
	fi
	if [ "$HAVE_PIP" = 1 ]; then
		want pip_download_allow ok
		want pip_install_allow ok
		want pip_deny failed
	else
		echo "NOTE [$CASE $TOPO]: pip not installed: pip not tested" >&2
	fi
	if [ "$HAVE_NODE" = 1 ]; then
		allowed npm_view_allow /usr/bin/node
		want npm_install_allow ok
		denied npm_deny /usr/bin/node fake.tether.test:8444 ""  # a name no rule could allow is not looked up: no rule to name
	else
		echo "NOTE [$CASE $TOPO]: node/npm not installed: npm not tested" >&2
	fi
	if [ "$HAVE_GO" = 1 ]; then
		allowed go_allow "$WORK/goclient"
		denied go_deny "$WORK/goclient" 198.51.100.10:8444 curl-only
	else
		echo "NOTE [$CASE $TOPO]: go not installed: a Go client not tested" >&2
	fi
	# python3.11's three clients (urllib, requests, pip) each leave a denial
	# to 8444; together at least as many as were run
	n=$(grep -c "^tether: denied $PYX (.*) -> 198.51.100.10:8444 " "$WORK/err")
	[ "$n" -ge $((1 + HAVE_REQUESTS + HAVE_PIP)) ] || fail "expected a denial line per python client, got $n"
	# the page, the git objects, the index and the tarball came from the server
	for p in "GET / 200" "POST /git/demo.git/git-upload-pack 200"; do
		grep -q "^8443 $p" "$WORK/fakenet.log" || fail "the server did not see '$p'"
	done
	[ "$HAVE_PIP" = 1 ] && { grep -q "^8443 GET /packages/tetherdemo-1.0-py3-none-any.whl 200" "$WORK/fakenet.log" || fail "no wheel download"; }
	[ "$HAVE_NODE" = 1 ] && { grep -q "^8443 GET /npm/tetherdemo/-/tetherdemo-1.0.0.tgz 200" "$WORK/fakenet.log" || fail "no npm tarball download"; }
	# a denied flow never reached the server
	grep -q "^8444 " "$WORK/fakenet.log" && fail "a denied flow reached port 8444: $(grep '^8444 ' "$WORK/fakenet.log")"
	check_audit_common
	;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS [$CASE $TOPO]"
