# The workload of tests/e2e/transparent.sh (run inside the sandbox): every
# client ignores HTTP(S)_PROXY; each prints one "NAME RESULT" line.
# sh workload.sh WORK PY3 SSHKEY
W=$1 PY3=$2 KEY=$3
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
# UDP to elsewhere: refused (first: bypass reports are rate-limited)
"$PY3" -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("198.51.100.10", 5353)); s.send(b"x"); print("udp sent")
except OSError as e:
    print("udp", type(e).__name__)'
r=$(curl -sS --noproxy '*' --max-time 15 -o /dev/null -w '%{http_code}' http://198.51.100.10:8080/ 2>&1)
echo "curl-ip $r"
r=$(curl -sS --noproxy '*' --max-time 15 -o /dev/null -w '%{http_code}' http://web.test:8080/ 2>&1)
echo "curl-name $r"
if [ -n "${T6:-}" ]; then
	r=$(curl -g -sS --noproxy '*' --max-time 15 -o /dev/null -w '%{http_code}' 'http://[2001:db8:100::10]:8080/' 2>&1)
	echo "curl-ip6 $r"
fi
# curl's http-only endpoint on 2222: a raw stream (telnet sends nothing first)
r=$(echo | curl -sS --max-time 15 telnet://198.51.100.10:2222 2>&1 | head -c 20)
echo "curl-raw ${r:-empty}"
# python3: no rule at all, a raw socket
"$PY3" - <<'PY'
import socket
try:
    s = socket.create_connection(("198.51.100.10", 8080), timeout=15)
    s.sendall(b"GET / HTTP/1.0\r\nHost: evil.test\r\n\r\n")
    d = s.recv(12)
    print("py", "open" if d else "closed")
except OSError as e:
    print("py", type(e).__name__)
PY
# python3 may reach web.test:8443 (a host rule): by SNI, only at an address
# the sandbox's lookups gave for web.test; the same SNI to another address
# is no name at all
"$PY3" - <<'PY'
import socket, ssl
c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
for ip in ("198.51.100.10", "198.51.100.11"):
    try:
        t = c.wrap_socket(socket.create_connection((ip, 8443), timeout=15), server_hostname="web.test")
        print("py-sni", ip, "open"); t.close()
    except OSError as e:
        print("py-sni", ip, type(e).__name__)
PY
# a server that speaks first: the client sends nothing, the peek times out
"$PY3" - <<'PY'
import socket
try:
    s = socket.create_connection(("198.51.100.10", 2223), timeout=15)
    print("py-banner", s.recv(64).decode().strip())
except OSError as e:
    print("py-banner", type(e).__name__)
PY
node -e '
fetch("http://web.test:8080/").then(r => console.log("node-fetch", r.status), e => console.log("node-fetch error", e.cause && e.cause.code || e.message));
' 2>&1
NODE_TLS_REJECT_UNAUTHORIZED=0 node -e '
require("https").get("https://web.test:8443/", r => { console.log("node-https", r.statusCode); r.resume(); })
  .on("error", e => console.log("node-https error", e.code || e.message));
' 2>&1 | grep -v Warning
"$W/go-dial" 198.51.100.10:8080 other.test
"$W/go-http" http://web.test:8080/
SSHO="-F none -i $KEY -p 2222 -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
r=$(ssh $SSHO root@web.test 'echo ok-$((6*7))' 2>&1)
echo "ssh $r"
rm -rf "$W/rw/clone"
GIT_SSH_COMMAND="ssh $SSHO" git clone -q "ssh://root@web.test:2222$W/repo.git" "$W/rw/clone" 2>&1 | tail -1
echo "git $(cat "$W/rw/clone/README" 2>/dev/null || echo none)"
# the capture's own port, named directly: refused (nothing was redirected)
P=$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf)
r=$(curl -sS --noproxy '*' --max-time 10 -o /dev/null -w '%{http_code}' "http://$P:3129/" 2>&1 | tail -1)
echo "capture-direct $r"
