# The workload of tests/e2e/dns.sh dns_resolve (run inside the sandbox):
# sh dns_workload.sh PYTHON3
PY3=$1
echo "--- resolv.conf"; cat /etc/resolv.conf; echo "---"
getent ahostsv4 name.test | head -1 | sed 's/^/udp4 /'
getent ahostsv6 name.test | head -1 | sed 's/^/udp6 /'
RES_OPTIONS=use-vc getent ahostsv4 name.test | head -1 | sed 's/^/tcp4 /'
getent ahostsv4 alias.test | head -1 | sed 's/^/alias /'
getent ahostsv4 blocked.test | awk '{print "blocked " $1}' | sort -u
# python3 has no rule at all: NXDOMAIN (EAI_NONAME, -2)
"$PY3" -c 'import socket
try:
    print("py", socket.gethostbyname("name.test"))
except socket.gaierror as e:
    print("py-error", e.errno)'
# python3 may look up py.test (a rule names it), but not its TXT records:
# REFUSED (5), dns_type_refused
"$PY3" - <<'PY'
import socket, struct
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.connect((ns, 53))
s.send(struct.pack("!HHHHHH", 7, 0x100, 1, 0, 0, 0) + b"\x02py\x04test\x00" + struct.pack("!HH", 16, 1))
print("txt-rcode", s.recv(512)[3] & 15)
PY
curl -sS -o /dev/null -w "curl %{http_code}\n" --max-time 10 http://name.test:8080/
