#!/bin/bash
# The shared-pid pod of deploy/kubernetes, played by `podman kube play`
# (Debian's podman 4.3: pods, shareProcessNamespace, init containers,
# ConfigMaps, emptyDir) on a podman network on TEST-NET-3 whose host end
# is the fake internet. From inside the agent container: an allowed
# request works, a denied one is 403 with the reason in the sidecar's
# audit (topology shared-pid), a direct connection fails (the fence).
# podman 4.3 has no native sidecars (initContainers with restartPolicy:
# Always): the net-supervisor is an ordinary container, and the agent
# waits for its ready file instead.
#   tests/deploy/test_kube.sh BUILD_DIR IMAGE
. "$(dirname "$0")/lib.sh"
IMAGE=${2:?usage: test_kube.sh BUILD_DIR IMAGE}
W=$(mktemp -d /tmp/tether-deploy-kube.XXXXXX)
on_exit "rm -rf $W"
podman_env "$W"
NET=tether-test-$$ POD=tether-kube-$$
SUBNET=203.0.113.0/24 GW=203.0.113.1

podman network create --subnet "$SUBNET" --gateway "$GW" "$NET" >/dev/null || die "podman network create"
on_exit "podman network rm -f $NET"
sed -e "s#localhost/tether:dev#$IMAGE#" -e "s#^  name: tether-shared-pid\$#  name: $POD#" "$SRC/deploy/kubernetes/shared-pid.yaml" >"$W/pod.yaml"
on_exit "podman kube down $W/pod.yaml"
podman kube play --network "$NET" --configmap "$SRC/deploy/kubernetes/policy-configmap.yaml" \
	"$W/pod.yaml" >"$W/play.log" 2>&1 || { cat "$W/play.log"; die "podman kube play"; }
A() { podman exec "$POD-agent" "$@"; }
ready() { A test -e /run/tether/net.ready; }
wait_for 60 ready && pass "pod up, the sidecar ready (net.ready)" ||
	{ podman pod ps; podman ps -a --pod; for c in fence net-supervisor agent; do podman logs "$POD-$c" 2>&1 | tail -20; done; die "pod not ready"; }

mkdir -p "$W/www" && echo "hello from the fake internet" >"$W/www/index.html"
"$PY" -m http.server 8080 --bind "$GW" --directory "$W/www" >"$W/server.log" 2>&1 &
SRVPID=$!
on_exit "kill $SRVPID; wait $SRVPID"
wait_for 30 curl -s -o /dev/null --noproxy '*' --max-time 1 "http://$GW:8080/" || die "fake internet"

TX() { A tether exec --socket /run/tether/exec.sock -- "$@"; }
out=$(TX curl -s -o /dev/null -w %{http_code} http://203.0.113.1:8080/ 2>&1)
[ "$out" = 200 ] && pass "allowed request from inside the tree: 200" || fail "allowed: $out"
out=$(TX curl -s -o /dev/null -w %{http_code} http://203.0.113.1:8081/ 2>&1)
[ "$out" = 403 ] && pass "denied request: 403" || fail "denied: $out"

# A request from outside the sandbox: through the supervisor's tree (a
# process entered with podman exec is not a member and is denied).
out=$(A sh -c 'su -s /bin/sh agent -c "curl -s -o /dev/null -w %{http_code} -x http://127.0.0.1:3128 http://203.0.113.1:8080/"' 2>&1)
[ "$out" = 403 ] && pass "a process entered from outside the tree is denied (403)" || fail "entered process: $out"
out=$(A sh -c 'su -s /bin/sh agent -c "curl -s -o /dev/null --noproxy \"*\" --max-time 3 http://203.0.113.1:8080/ && echo open || echo blocked"' 2>&1)
[ "$out" = blocked ] && pass "direct connection from the agent uid fails (fence)" || fail "direct: $out"
podman exec "$POD-net-supervisor" cat /var/log/tether/net.jsonl >"$W/net.jsonl" 2>/dev/null
python3 - "$W/net.jsonl" <<'PY' && pass "sidecar audit: allow, deny no_matching_policy, topology shared-pid" || fail "audit"
import json, sys
dec = [e for e in map(json.loads, filter(str.strip, open(sys.argv[1]))) if e.get("event") == "egress_decision"]
for e in dec: print("   ", e["decision"], (e.get("binary") or {}).get("path"), e.get("reason"), e.get("topology"))
ok = any(e["decision"] == "allow" for e in dec) and any(e["decision"] == "deny" and e.get("reason") == "no_matching_policy" for e in dec)
sys.exit(0 if ok and all(e.get("topology") == "shared-pid" for e in dec) else 1)
PY
# The sidecar killed: the pod's restart policy brings it back; in between
# the agent's request is not allowed (the proxy is gone and the fence
# keeps the agent's uid from going direct).
N() { podman exec "$POD-net-supervisor" "$@"; }
nspid=$(N sh -c 'for p in /proc/[0-9]*; do [ "$(readlink $p/exe)" = /usr/bin/net-supervisor ] && echo ${p#/proc/}; done' | head -1)
[ -n "$nspid" ] || die "no net-supervisor process in the sidecar"
restarts0=$(podman inspect -f '{{.RestartCount}}' "$POD-net-supervisor")
N kill -9 "$nspid"
out=$(TX curl -s -o /dev/null -w %{http_code} --max-time 5 http://203.0.113.1:8080/ 2>&1)
[ "$out" != 200 ] && pass "sidecar killed: the agent's request is not allowed ($out)" || fail "allowed with the sidecar dead"
restarted() { [ "$(podman inspect -f '{{.RestartCount}}' "$POD-net-supervisor")" -gt "$restarts0" ]; }
allowed() { [ "$(TX curl -s -o /dev/null -w %{http_code} --max-time 5 http://203.0.113.1:8080/)" = 200 ]; }
if wait_for 60 restarted && wait_for 60 allowed; then
	pass "sidecar restarted by the pod's restart policy; allowed again"
else
	podman ps -a --pod; podman logs "$POD-net-supervisor" 2>&1 | tail; fail "sidecar not recovered"
fi
finish
