#!/bin/bash
# The pods of deploy/kubernetes, played by `podman kube play` (Debian's
# podman 4.3: pods, shareProcessNamespace, init containers, ConfigMaps,
# Secrets, emptyDir) on a podman network on TEST-NET-3 whose host end is
# the fake internet.
#   shared-pid  deploy/kubernetes/shared-pid.yaml: one PID namespace, local
#               identity (the anchor socket's peer, SO_PEERPIDFD)
#   split       deploy/kubernetes/split/split.yaml: a PID namespace per
#               container, delegated identity over the control socket on
#               the shared emptyDir; the provisioning key pair made by
#               `tether keygen`, the secret half a Secret mounted into the
#               agent container only, the public half a ConfigMap mounted
#               into the sidecar
# From inside the agent container: an allowed request works, a denied one
# is 403 with the reason in the sidecar's audit (the variant's topology; in
# split identity_source delegated), a process entered with podman exec is
# denied, a direct connection fails (the fence); the sidecar's
# net-supervisor SIGKILLed: no request is allowed until the pod's restart
# policy has brought it back, then allowed again. split also checks that
# the containers' PID namespaces differ, that the secret key is in the
# agent container only (mode 0400) and the sidecar runs with no
# capabilities.
# podman 4.3 has no native sidecars (initContainers with restartPolicy:
# Always): the net-supervisor is an ordinary container, and the agent
# waits for its ready file instead.
#   tests/deploy/test_kube.sh BUILD_DIR IMAGE [shared-pid|split]
. "$(dirname "$0")/lib.sh"
IMAGE=${2:?usage: test_kube.sh BUILD_DIR IMAGE [shared-pid|split]}
VARIANT=${3:-shared-pid}
TNAME="$TNAME($VARIANT)"
W=$(mktemp -d /tmp/tether-deploy-kube.XXXXXX)
on_exit "rm -rf $W"
podman_env "$W"
NET=tether-test-$$ POD=tether-kube-$$
SUBNET=203.0.113.0/24 GW=203.0.113.1
K=$SRC/deploy/kubernetes
case $VARIANT in
shared-pid) YAML=$K/shared-pid.yaml TOPO=shared-pid IDSRC=local_procfs ;;
split) YAML=$K/split/split.yaml TOPO=split-shared-netns IDSRC=delegated ;;
*) die "unknown variant $VARIANT (shared-pid or split)" ;;
esac
pod_name=$(sed -n -E 's/^  name: ([a-z0-9-]+)$/\1/p' "$YAML" | head -1)
[ -n "$pod_name" ] || die "no pod name in $YAML"

podman network create --subnet "$SUBNET" --gateway "$GW" "$NET" >/dev/null || die "podman network create"
on_exit "podman network rm -f $NET"
# podman 4.3 keeps a ConfigMap volume as a named volume of the ConfigMap's
# name, reuses one of that name and does not remove it with the pod
# (kube down): the test's ConfigMaps get names of their own, removed at
# exit.
POLICY_CM=tether-policy-$$
sed -e "s#localhost/tether:dev#$IMAGE#" -e "s#^  name: $pod_name\$#  name: $POD#" \
	-e "s#^        name: tether-policy\$#        name: $POLICY_CM#" "$YAML" >"$W/pod.yaml"
sed -e "s#^  name: tether-policy\$#  name: $POLICY_CM#" "$K/policy/policy-configmap.yaml" >"$W/policy-cm.yaml"
on_exit "podman volume rm -f $POLICY_CM"
play=(--configmap "$W/policy-cm.yaml" "$W/pod.yaml")
if [ "$VARIANT" = split ]; then
	# The key pair as a user makes it; the Secret and the ConfigMap as the
	# kustomization's generators make them (kubectl kustomize, checked
	# below when kubectl is installed).
	"$BUILD/bin/tether" keygen --out "$W/keys" >/dev/null || die "tether keygen"
	SECRET=tether-provisioning-key-$$
	sed -i "s#secretName: tether-provisioning-key\$#secretName: $SECRET#" "$W/pod.yaml"
	# podman 4.3 writes a Secret's data values into the volume as they are
	# written (no base64 decoding) and ignores defaultMode (the files are
	# 0644, which the proc-supervisor refuses for a secret key): the test
	# gives podman the key text itself and sets the mode before the pod
	# starts (docs/deploy.md says the same for a user of podman 4.3).
	cat >"$W/secret.yaml" <<SEC
apiVersion: v1
kind: Secret
metadata:
  name: $SECRET
type: Opaque
data:
  provisioning.key: |
$(sed 's/^/    /' "$W/keys/provisioning.key")
SEC
	PUB_CM=tether-provisioning-pubkey-$$
	sed -i "s#^        name: tether-provisioning-pubkey\$#        name: $PUB_CM#" "$W/pod.yaml"
	on_exit "podman volume rm -f $PUB_CM"
	cat >"$W/pubkey.yaml" <<CM
apiVersion: v1
kind: ConfigMap
metadata:
  name: $PUB_CM
data:
  provisioning.pub: |
$(sed 's/^/    /' "$W/keys/provisioning.pub")
CM
	# podman keeps a kube Secret as a podman secret holding the whole
	# Secret document, which a secret volume then reads by name.
	podman secret create "$SECRET" "$W/secret.yaml" >/dev/null || die "podman secret create"
	on_exit "podman secret rm $SECRET; podman volume rm -f $SECRET"
	play=(--configmap "$W/pubkey.yaml" "${play[@]}")
	if command -v kubectl >/dev/null; then
		cp -r "$K" "$W/k" && cp -r "$W/keys" "$W/k/split/keys"
		kubectl kustomize "$W/k/split" >"$W/kustomized.yaml" 2>&1 &&
			python3 - "$W/kustomized.yaml" "$W/keys" <<'PY' && pass "kubectl kustomize split: the pod, the policy, the Secret and the public key" || { cat "$W/kustomized.yaml"; fail "kubectl kustomize split"; }
import base64, sys, yaml
docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(open(sys.argv[1]))}
key = open(sys.argv[2] + "/provisioning.key").read()
pub = open(sys.argv[2] + "/provisioning.pub").read()
ok = base64.b64decode(docs[("Secret", "tether-provisioning-key")]["data"]["provisioning.key"]).decode() == key
ok &= docs[("ConfigMap", "tether-provisioning-pubkey")]["data"]["provisioning.pub"] == pub
ok &= ("ConfigMap", "tether-policy") in docs and ("Pod", "tether-split") in docs
sys.exit(0 if ok else 1)
PY
	else
		echo "    (kubectl not installed: the kustomization is not rendered)"
	fi
fi
on_exit "podman kube down $W/pod.yaml"
grep -q "name: $POLICY_CM\$" "$W/pod.yaml" || die "the policy ConfigMap volume was not renamed"
podman kube play --start=false --network "$NET" "${play[@]}" \
	>"$W/play.log" 2>&1 || { cat "$W/play.log"; die "podman kube play"; }
if [ "$VARIANT" = split ]; then
	kv=$(podman volume inspect -f '{{.Mountpoint}}' "$SECRET") && chmod 0400 "$kv/provisioning.key" ||
		die "the secret volume $SECRET has no provisioning.key"
fi
podman pod start "$POD" >>"$W/play.log" 2>&1 || { cat "$W/play.log"; die "podman pod start"; }
A() { podman exec "$POD-agent" "$@"; }
N() { podman exec "$POD-net-supervisor" "$@"; }
ready() { if [ "$VARIANT" = split ]; then A test -e /run/tether-net/ready; else A test -e /run/tether/net.ready; fi; }
wait_for 60 ready && pass "pod up, the sidecar ready (net.ready)" ||
	{ podman pod ps; podman ps -a --pod; for c in fence net-supervisor agent; do podman logs "$POD-$c" 2>&1 | tail -20; done; die "pod not ready"; }

if [ "$VARIANT" = split ]; then
	pa=$(A readlink /proc/self/ns/pid) pn=$(N readlink /proc/self/ns/pid)
	[ -n "$pa" ] && [ "$pa" != "$pn" ] && pass "agent and sidecar in different PID namespaces ($pa, $pn)" ||
		fail "PID namespaces: agent $pa, sidecar $pn"
	[ "$(A cat /proc/1/comm)" = proc-supervisor ] && pass "the proc-supervisor is PID 1 of the agent container" ||
		fail "agent PID 1 is $(A cat /proc/1/comm)"
	m=$(A stat -L -c %a /etc/tether-provisioning/provisioning.key)
	[ "$m" = 400 ] && pass "secret key in the agent container, mode 0400" || fail "agent's key: mode '$m'"
	seed=$(sed -n 2p "$W/keys/provisioning.key")
	left=$(N sh -c "ls /etc/tether-provisioning; grep -rlsI $seed / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev")
	[ "$left" = provisioning.pub ] && pass "sidecar: the public key only, no secret key anywhere in it" ||
		fail "sidecar sees: $left"
	capeff=$(N sh -c 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = net-supervisor ] && sed -n "s/^CapEff:\t//p" $p/status; done')
	[ "$capeff" = 0000000000000000 ] && pass "sidecar's net-supervisor: no capabilities" || fail "sidecar CapEff '$capeff'"
	nsuid=$(N sh -c 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = net-supervisor ] && awk "/^Uid:/ {print \$2}" $p/status; done')
	[ "$nsuid" = 65532 ] && pass "sidecar's net-supervisor runs as uid 65532, not root" || fail "sidecar uid '$nsuid'"
	so=$(A stat -c '%u %a' /run/tether/control.sock)
	[ "$so" = "65532 600" ] && pass "control socket owned by the sidecar's uid, 0600" || fail "control socket: '$so'"
fi

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
if [ "$VARIANT" = split ]; then
	# only the sidecar's uid leaves the pod: root in the agent container too is fenced
	out=$(A sh -c 'curl -s -o /dev/null --noproxy "*" --max-time 3 http://203.0.113.1:8080/ && echo open || echo blocked' 2>&1)
	[ "$out" = blocked ] && pass "direct connection as root in the agent container fails (fence)" || fail "root direct: $out"
fi
N cat /var/log/tether/net.jsonl >"$W/net.jsonl" 2>/dev/null
python3 - "$W/net.jsonl" "$TOPO" "$IDSRC" <<'PY' && pass "sidecar audit: allow, deny no_matching_policy, topology $TOPO, identity $IDSRC" || fail "audit"
import json, sys
topo, idsrc = sys.argv[2], sys.argv[3]
dec = [e for e in map(json.loads, filter(str.strip, open(sys.argv[1]))) if e.get("event") == "egress_decision"]
for e in dec: print("   ", e["decision"], (e.get("binary") or {}).get("path"), e.get("reason"), e.get("topology"), e.get("identity_source"))
allow = [e for e in dec if e["decision"] == "allow"]
ok = any((e.get("binary") or {}).get("path") == "/usr/bin/curl" and e.get("identity_source") == idsrc for e in allow) and \
     any(e["decision"] == "deny" and e.get("reason") == "no_matching_policy" for e in dec)
sys.exit(0 if ok and all(e.get("topology") == topo for e in dec) else 1)
PY
# The sidecar killed: the pod's restart policy brings it back; until it is
# ready again no request of the agent is allowed (the proxy is gone and
# the fence keeps the agent's uid from going direct). Probed in a loop
# from the kill to the recovery: every answer before the first 200 is
# something else.
nspid=$(N sh -c 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = net-supervisor ] && echo ${p#/proc/}; done' | head -1)
[ -n "$nspid" ] || die "no net-supervisor process in the sidecar"
restarts0=$(podman inspect -f '{{.RestartCount}}' "$POD-net-supervisor")
N kill -9 "$nspid"
restarted() { [ "$(podman inspect -f '{{.RestartCount}}' "$POD-net-supervisor")" -gt "$restarts0" ]; }
codes=() end=$((SECONDS + 90)) recovered=0 early=0
while [ $SECONDS -lt $end ]; do
	c=$(TX curl -s -o /dev/null -w %{http_code} --max-time 5 http://203.0.113.1:8080/ 2>/dev/null)
	codes+=("${c:-none}")
	if [ "$c" = 200 ]; then
		restarted && recovered=1 || early=1
		break
	fi
	sleep 0.2
done
echo "    answers from the kill to the recovery: ${codes[*]}"
if [ $early = 1 ]; then
	fail "a request was allowed before the sidecar was restarted (${codes[*]})"
elif [ $recovered = 1 ]; then
	pass "sidecar killed: ${#codes[@]} request(s), the first allowed one after the restart policy brought it back"
else
	podman ps -a --pod; podman logs "$POD-net-supervisor" 2>&1 | tail; fail "sidecar not recovered in 90 s"
fi
finish
