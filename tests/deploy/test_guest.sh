#!/bin/bash
# The VM guest under systemd, and the SSH exec gateway in it, booted for
# real: a container of the tether image whose PID 1 is systemd
# (podman run --systemd=always) is a guest whose runtime init sits above the
# supervisor. The shipped units start the proc-supervisor (anchor, agent's
# tree) and the net-supervisor (proxy + nftables fence), sshd takes the
# shipped drop-in (deploy/ssh/tether-exec.conf). From the host, over a
# podman network on TEST-NET-3 (the fake internet is the host's end of it):
#   - both units active, /readyz 200, audit topology vm-local;
#   - ssh non-PTY and PTY sessions are children of the proc-supervisor;
#     curl in them is allowed to the fake internet, denied elsewhere (403
#     with the reason), a direct connection fails (fence);
#   - the walk stops at the anchor: no ancestor of an allowed flow is
#     systemd (pid 1);
#   - ssh -W / -L port forwarding is refused;
#   - a dropped ssh client ends its session's processes;
#   - systemctl restart of either unit recovers (allowed again after).
#   tests/deploy/test_guest.sh BUILD_DIR IMAGE
. "$(dirname "$0")/lib.sh"
IMAGE=${2:?usage: test_guest.sh BUILD_DIR IMAGE}
W=$(mktemp -d /tmp/tether-deploy-guest.XXXXXX)
on_exit "rm -rf $W"
podman_env "$W"
NET=tether-test-$$ CTR=tether-guest-$$
SUBNET=203.0.113.0/24 GW=203.0.113.1 IP=203.0.113.20

podman network create --subnet "$SUBNET" --gateway "$GW" "$NET" >/dev/null || die "podman network create"
on_exit "podman network rm -f $NET"

ssh-keygen -q -t ed25519 -N '' -f "$W/userkey" || die "ssh-keygen"
cp "$W/userkey.pub" "$W/authorized_keys"
cat >"$W/policy.yaml" <<'POL'
version: 1
network:
  mode: enforce
  policies:
    - name: fake-internet
      binaries:
        - path: /usr/bin/curl
      endpoints:
        - cidr: 203.0.113.1/32
          ports: [8080]
POL
cat >"$W/default" <<'DEF'
TETHER_USER=agent
TETHER_SSH_USER=agent
TETHER_AGENT="sleep infinity"
DEF
chmod 0644 "$W/policy.yaml" "$W/default"

# NET_ADMIN: the net-supervisor's nftables fence; SYS_PTRACE: it reads the
# agent user's /proc/PID/fd to attribute flows. Nothing else is added.
podman run -d --name "$CTR" --systemd=always --network "$NET" --ip "$IP" \
	--cap-add NET_ADMIN --cap-add SYS_PTRACE \
	-v "$W/policy.yaml:/etc/tether/policy.yaml:ro" \
	-v "$W/default:/etc/default/tether:ro" \
	-v "$SRC/deploy/ssh/tether-exec.conf:/etc/ssh/sshd_config.d/tether-exec.conf:ro" \
	"$IMAGE" /sbin/init >"$W/cid" 2>"$W/run.err" || { cat "$W/run.err" >&2; die "podman run"; }
on_exit "podman rm -f -t 0 $CTR"
X() { podman exec "$CTR" "$@"; }
podman exec -i "$CTR" sh -ec 'install -d -o agent -g agent -m 0700 /home/agent/.ssh
	cat >/home/agent/.ssh/authorized_keys; chown agent: /home/agent/.ssh/authorized_keys' <"$W/authorized_keys" ||
	die "authorized_keys"
dump() {
	X systemctl --no-pager status tether-proc-supervisor tether-net-supervisor ssh 2>&1 | sed 's/^/    /'
	X journalctl --no-pager -n 60 2>&1 | uniq -f 5 -c | sed 's/^/    /'
}
active() { [ "$(X systemctl is-active "$1")" = active ]; }
ready() { X curl -sf -o /dev/null --noproxy '*' --max-time 1 http://127.0.0.1:9090/readyz; }
if wait_for 90 active tether-net-supervisor.service && wait_for 30 ready && wait_for 30 active ssh.service; then
	pass "systemd guest: both units active, /readyz 200, sshd up"
else
	dump; die "the units did not come up"
fi
X test -e /run/tether/net.ready && pass "net.ready written (releases the agent)" || fail "no /run/tether/net.ready"

# The fake internet: the host's end of the podman network.
mkdir -p "$W/www" && echo "hello from the fake internet" >"$W/www/index.html"
"$PY" -m http.server 8080 --bind "$GW" --directory "$W/www" >"$W/server.log" 2>&1 &
SRVPID=$!
on_exit "kill $SRVPID; wait $SRVPID"
wait_for 30 curl -s -o /dev/null --noproxy '*' --max-time 1 "http://$GW:8080/" || die "fake internet"

SSH() {
	timeout 30 ssh -F none -i "$W/userkey" -o BatchMode=yes -o StrictHostKeyChecking=no \
		-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR agent@"$IP" "$@"
}
wait_for 30 SSH true </dev/null || { dump; die "ssh as agent failed"; }
SUP=$(X systemctl show -p MainPID --value tether-proc-supervisor.service)

out=$(SSH 'echo "ppid=$PPID"; test -t 0 && echo TTY || echo NOTTY; curl -s -o /dev/null -w "allowed=%{http_code}\n" http://203.0.113.1:8080/; curl -s -o /dev/null -w "denied=%{http_code}\n" http://203.0.113.1:8081/; curl -s -o /dev/null --noproxy "*" --max-time 3 http://203.0.113.1:8080/ && echo direct=open || echo direct=blocked' </dev/null)
echo "$out" | sed 's/^/    non-pty: /'
grep -qx "ppid=$SUP" <<<"$out" && pass "ssh non-PTY: child of the proc-supervisor ($SUP)" || fail "ssh non-PTY parent"
grep -qx NOTTY <<<"$out" && pass "ssh non-PTY: no tty" || fail "ssh non-PTY has a tty"
grep -qx allowed=200 <<<"$out" && pass "allowed request: 200" || fail "allowed request"
grep -qx denied=403 <<<"$out" && pass "denied request: 403" || fail "denied request"
grep -qx direct=blocked <<<"$out" && pass "direct connection fails (fence)" || fail "direct connection"

out=$(SSH -tt 'echo "ppid=$PPID"; tty; curl -s -o /dev/null -w "allowed=%{http_code}\n" http://203.0.113.1:8080/' </dev/null | tr -d '\r')
echo "$out" | sed 's/^/    pty: /'
grep -qx "ppid=$SUP" <<<"$out" && pass "ssh PTY: child of the proc-supervisor" || fail "ssh PTY parent"
grep -q '^/dev/pts/' <<<"$out" && pass "ssh PTY: on a pts" || fail "ssh PTY tty"
grep -qx allowed=200 <<<"$out" && pass "ssh PTY: allowed request 200" || fail "ssh PTY request"

X cat /var/log/tether/net.jsonl >"$W/net.jsonl" 2>/dev/null
python3 - "$W/net.jsonl" <<'PY' && pass "audit: allowed and denied curl, topology vm-local, walk stops at the anchor" || fail "audit"
import json, sys
dec = [e for e in map(json.loads, filter(str.strip, open(sys.argv[1]))) if e.get("event") == "egress_decision"]
for e in dec:
    print("   ", e["decision"], (e.get("binary") or {}).get("path"), e.get("reason"), e.get("topology"), e.get("identity_source"))
allow = [e for e in dec if e["decision"] == "allow" and (e.get("binary") or {}).get("path") == "/usr/bin/curl"]
deny = [e for e in dec if e["decision"] == "deny"]
ok = len(allow) >= 2 and deny and all(e.get("topology") == "vm-local" for e in dec)
for e in allow:
    for a in e.get("ancestors") or []:
        if a.get("pid") == 1 or "systemd" in (a.get("path") or ""):
            print("    ancestor above the anchor:", a); ok = False
sys.exit(0 if ok else 1)
PY

SSH -W 203.0.113.1:8080 </dev/null >/dev/null 2>"$W/w.err"
grep -q -E "prohibited|forwarding failed" "$W/w.err" && pass "ssh -W refused: $(head -1 "$W/w.err")" ||
	{ cat "$W/w.err"; fail "ssh -W not refused"; }
timeout 20 ssh -F none -i "$W/userkey" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
	-o ExitOnForwardFailure=yes -R 127.0.0.1:2200:127.0.0.1:22 agent@"$IP" true </dev/null 2>"$W/r.err"
[ $? = 255 ] && pass "ssh -R refused" || { cat "$W/r.err"; fail "ssh -R not refused"; }

# Disconnect: a session's process dies with its client.
ssh -F none -i "$W/userkey" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
	-o LogLevel=ERROR -tt agent@"$IP" 'exec sleep 7777' </dev/null >/dev/null 2>&1 &
CLI=$!
on_exit "kill $CLI"
has_sleep() { X sh -c 'for c in /proc/[0-9]*/cmdline; do tr "\0" " " <"$c" 2>/dev/null; echo; done' | grep -q '^sleep 7777'; }
if wait_for 20 has_sleep; then
	kill "$CLI"; wait "$CLI" 2>/dev/null
	no_sleep() { ! has_sleep; }
	wait_for 15 no_sleep &&
		pass "client disconnect ends the session's processes" || fail "session survived its client"
else
	fail "the disconnect session did not start"
fi

# Restarts.
allowed() { [ "$(SSH 'curl -s -o /dev/null -w %{http_code} http://203.0.113.1:8080/' </dev/null)" = 200 ]; }
for u in tether-net-supervisor tether-proc-supervisor; do
	X systemctl restart "$u.service" || fail "systemctl restart $u"
	if wait_for 60 active tether-net-supervisor.service && wait_for 30 ready && wait_for 30 allowed; then
		pass "systemctl restart $u: recovered, allowed again"
	else
		dump; fail "systemctl restart $u: not recovered"
	fi
done
finish
