#!/bin/bash
# tether connect: stdin/stdout through the egress proxy's CONNECT, as ssh's
# ProxyCommand uses it. Against a real net-supervisor (the static test
# identity names the tether binary, as the flow is tether connect's own):
# an echo upstream, a server that speaks first (as sshd does), 8 MiB
# byte-exact, the proxy from HTTPS_PROXY, denied flows (exit 1 with the
# status and reason word), the audit line; and against stand-in proxies: no
# proxy, refused, garbage, an oversized head, a close before answering, a
# silent one (--timeout), tunnel bytes in the answer's own segment.
. "${TETHER_SRC:?}/tests/common/script_lib.sh" tconnect
TETHER=$(readlink -f "$BIN/tether")

# Upstreams: ECHO echoes until the client half-closes, then closes; BANNER
# sends a line first, then echoes the same way; WRITER sends 32 MiB before
# it reads anything, then reads to the client's end and closes.
cat >"$D/up.py" <<'EOF'
import socket, sys, threading, time
def serve(s, banner):
    while True:
        c, _ = s.accept()
        def run(c=c):
            if banner == "writer":
                c.sendall(b"w" * (32 << 20))
                while c.recv(65536):
                    pass
                c.close()
                return
            if banner:
                c.sendall(b"SSH-2.0-tether-test\r\n")
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)
            c.close()
        threading.Thread(target=run, daemon=True).start()
ports = []
for banner in (False, True, "writer"):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0)); s.listen(64); ports.append(s.getsockname()[1])
    threading.Thread(target=serve, args=(s, banner), daemon=True).start()
open(sys.argv[1], "w").write("%d %d %d" % tuple(ports))
time.sleep(120)
EOF
python3 "$D/up.py" "$D/ports" & PIDS+=("$!")
for _ in $(seq 50); do [ -s "$D/ports" ] && break; sleep 0.1; done
ECHO=$(cut -d' ' -f1 "$D/ports" 2>/dev/null) BANNER=$(cut -d' ' -f2 "$D/ports" 2>/dev/null)
WRITER=$(cut -d' ' -f3 "$D/ports" 2>/dev/null)
[ -n "$ECHO" ] && [ -n "$BANNER" ] && [ -n "$WRITER" ] || { echo "FAIL: upstream did not start" >&2; exit 1; }
DENIED=$(freeport)
printf 'version: 1\nnetwork:\n  policies:\n    - name: ssh-through-tether\n      binaries: [{path: %s}]\n      endpoints: [{cidr: 127.0.0.1/32, ports: [%s, %s, %s]}]\n' \
	"$TETHER" "$ECHO" "$BANNER" "$WRITER" >"$D/p.yaml"
PORT=$(freeport) ADMIN=$(freeport)
while [ "$ADMIN" = "$PORT" ]; do ADMIN=$(freeport); done
"$BIN/net-supervisor-testing" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" --policy "$D/p.yaml" \
	--audit "$D/a.jsonl" --identity-static "$TETHER" 2>"$D/ns.err" &
PIDS+=("$!")
for _ in $(seq 100); do curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$ADMIN/readyz" && break; sleep 0.05; done
curl -sf --noproxy '*' -o /dev/null "http://127.0.0.1:$ADMIN/readyz" || { echo "FAIL: proxy not ready: $(cat "$D/ns.err")" >&2; exit 1; }

# tc [ENV=...] ARGS...: tether connect with stdin from $D/in, stdout to
# $D/out, stderr to $D/err; RC is its exit status (bounded in time)
tc() { timeout 20 env "$@" <"$D/in" >"$D/out" 2>"$D/err"; RC=$?; }

printf 'hello through the proxy\n' >"$D/in"
tc "$TETHER" connect --proxy "127.0.0.1:$PORT" 127.0.0.1 "$ECHO"
[ "$RC" = 0 ] && [ "$(cat "$D/out")" = "hello through the proxy" ] &&
	ok "echo through the tunnel, exit 0" || fail "echo: rc $RC out '$(cat "$D/out")' err $(cat "$D/err")"

head -c 8388608 /dev/urandom >"$D/in"
tc "$TETHER" connect --proxy "127.0.0.1:$PORT" 127.0.0.1 "$ECHO"
[ "$RC" = 0 ] && cmp -s "$D/in" "$D/out" && ok "8 MiB byte-exact both ways" ||
	fail "8 MiB: rc $RC, $(stat -c %s "$D/out") bytes back: $(cat "$D/err")"

# both ends write 32 MiB before reading: a relay that blocks on one
# direction's write while the other fills would wait forever
head -c 33554432 /dev/zero >"$D/in"
tc "$TETHER" connect --proxy "127.0.0.1:$PORT" 127.0.0.1 "$WRITER"
[ "$RC" = 0 ] && [ "$(stat -c %s "$D/out")" = 33554432 ] &&
	ok "32 MiB each way while the far end writes before it reads: no deadlock" ||
	fail "writer: rc $RC (124: timed out), $(stat -c %s "$D/out") bytes: $(cat "$D/err")"

printf 'after the banner\n' >"$D/in"
tc HTTPS_PROXY="http://127.0.0.1:$PORT/" "$TETHER" connect 127.0.0.1 "$BANNER"
[ "$RC" = 0 ] && [ "$(head -1 "$D/out" | tr -d '\r')" = "SSH-2.0-tether-test" ] &&
	[ "$(sed -n 2p "$D/out")" = "after the banner" ] &&
	ok "a server that speaks first, proxy from HTTPS_PROXY" || fail "banner: rc $RC out '$(cat "$D/out")' $(cat "$D/err")"

: >"$D/in"
tc "$TETHER" connect --proxy "127.0.0.1:$PORT" 127.0.0.1 "$DENIED"
[ "$RC" = 1 ] && grep -q "403" "$D/err" && grep -q "reason: blocked_destination" "$D/err" &&
	ok "a loopback port no endpoint names: exit 1, 403 blocked_destination" || fail "denied: rc $RC err $(cat "$D/err")"
# denied by policy before any connect (TEST-NET-1: nothing is sent there)
tc "$TETHER" connect --proxy "127.0.0.1:$PORT" 192.0.2.1 22
[ "$RC" = 1 ] && grep -q "403" "$D/err" && grep -q "reason: no_matching_policy" "$D/err" &&
	ok "a host no policy names: exit 1, 403 no_matching_policy" || fail "no policy: rc $RC err $(cat "$D/err")"

n_allow=$(jq -c --arg b "$TETHER" --argjson p "$ECHO" \
	'select(.event == "egress_decision" and .decision == "allow" and .binary.path == $b and .dest.port == $p)' "$D/a.jsonl" | wc -l)
n_deny=$(jq -c --argjson p "$DENIED" \
	'select(.event == "egress_decision" and .decision == "deny" and .dest.port == $p and .reason == "blocked_destination")' "$D/a.jsonl" | wc -l)
[ "$n_allow" -ge 2 ] && [ "$n_deny" = 1 ] && ok "audit: $n_allow allowed flows of $TETHER, the denied one" ||
	fail "audit: allow $n_allow deny $n_deny: $(tail -3 "$D/a.jsonl")"

# usage and configuration errors
tc "$TETHER" connect 127.0.0.1
[ "$RC" = 2 ] && ok "one argument: usage, exit 2" || fail "one argument: rc $RC"
tc "$TETHER" connect --proxy "127.0.0.1:$PORT" 127.0.0.1 99999
[ "$RC" = 2 ] && ok "port out of range: exit 2" || fail "bad port: rc $RC"
tc HTTPS_PROXY= https_proxy= ALL_PROXY= all_proxy= HTTP_PROXY= http_proxy= "$TETHER" connect 127.0.0.1 "$ECHO"
[ "$RC" = 3 ] && grep -q "no proxy" "$D/err" && ok "no proxy set: exit 3, said so" || fail "no proxy: rc $RC $(cat "$D/err")"
tc HTTPS_PROXY=https://127.0.0.1:1 "$TETHER" connect 127.0.0.1 "$ECHO"
[ "$RC" = 2 ] && grep -q "only http://" "$D/err" && ok "an https:// proxy: exit 2, said so" || fail "https proxy: rc $RC $(cat "$D/err")"
CLOSED=$(freeport)
tc "$TETHER" connect --proxy "127.0.0.1:$CLOSED" 127.0.0.1 "$ECHO"
[ "$RC" = 3 ] && grep -q "cannot reach the proxy" "$D/err" && ok "nothing listening: exit 3" || fail "refused: rc $RC $(cat "$D/err")"

# stand-in proxies: each accepts one connection, reads the request head,
# then does what its mode says
cat >"$D/fake.py" <<'EOF'
import socket, sys, time
mode = sys.argv[2]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
c, _ = s.accept()
head = b""
while b"\r\n\r\n" not in head:
    b = c.recv(4096)
    if not b:
        break
    head += b
if mode == "garbage":
    c.sendall(b"garbage garbage\r\n\r\n")
elif mode == "shortstatus":
    c.sendall(b"HTTP/1.1 2 OK\r\n\r\n")
elif mode == "huge":
    c.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n")
elif mode == "extra":
    c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\nEXTRA")
elif mode == "silent":
    time.sleep(10)
c.close()
time.sleep(1)
EOF
fake() { # MODE: start a stand-in proxy, FAKE=its port
	rm -f "$D/fport"
	python3 "$D/fake.py" "$D/fport" "$1" & PIDS+=("$!")
	for _ in $(seq 50); do [ -s "$D/fport" ] && break; sleep 0.1; done
	FAKE=$(cat "$D/fport")
}
# no_answer MODE MESSAGE WHAT: against a stand-in proxy in MODE, exit 3
# with MESSAGE on stderr
no_answer() {
	fake "$1"
	tc "$TETHER" connect --proxy "127.0.0.1:$FAKE" example.test 22
	[ "$RC" = 3 ] && grep -q "$2" "$D/err" && ok "$3: exit 3" || fail "$3: rc $RC $(cat "$D/err")"
}
no_answer garbage "malformed answer" "garbage answer"
no_answer shortstatus "malformed answer" "a one-digit status (http-parser takes it)"
no_answer huge "over 16384 bytes" "a 20 KiB answer head"
no_answer close "closed the connection before answering" "closed before answering"
fake extra
tc "$TETHER" connect --proxy "127.0.0.1:$FAKE" example.test 22
[ "$RC" = 0 ] && [ "$(cat "$D/out")" = EXTRA ] && ok "tunnel bytes in the answer's segment are relayed" ||
	fail "extra: rc $RC out '$(cat "$D/out")' $(cat "$D/err")"
fake silent
t0=$(date +%s%N)
tc "$TETHER" connect --timeout 1 --proxy "127.0.0.1:$FAKE" example.test 22
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$RC" = 3 ] && grep -q "no answer from the proxy in time" "$D/err" && [ "$ms" -lt 5000 ] &&
	ok "a silent proxy: exit 3 after the 1 s timeout (${ms} ms)" || fail "silent: rc $RC in ${ms} ms $(cat "$D/err")"

finish "tether connect checks"
