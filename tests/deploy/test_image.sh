#!/bin/bash
# The image built from Debian's packages (deploy/image/build.sh: mmdebstrap
# + the project's .deb, `apt-get install ./tether_*.deb` in the fresh root,
# `podman import`) runs every role's binary, runs a real sandbox, and the
# package is removed cleanly (apt-get purge leaves none of its files).
#   tests/deploy/test_image.sh BUILD_DIR IMAGE
. "$(dirname "$0")/lib.sh"
IMAGE=${2:?usage: test_image.sh BUILD_DIR IMAGE}
W=$(mktemp -d /tmp/tether-deploy-image.XXXXXX)
on_exit "rm -rf $W"
chmod 0755 "$W"
podman_env "$W"
NET=tether-test-$$
SUBNET=203.0.113.0/24 GW=203.0.113.1

R() { podman run --rm --network none "$@"; }
v=$(R "$IMAGE" tether --version) && [[ "$v" == "tether "* ]] && pass "tether --version: $v" || fail "tether --version"
for b in proc-supervisor net-supervisor; do
	R "$IMAGE" $b --help >/dev/null && pass "$b --help" || fail "$b --help"
done
R "$IMAGE" tether policy check /usr/share/doc/tether/examples/policy.yaml >/dev/null &&
	pass "policy check of the shipped example" || fail "policy check"
R "$IMAGE" dpkg-query -W -f '${Status} ${Version}\n' tether | grep -q "install ok installed" &&
	pass "dpkg: tether installed" || fail "dpkg status"

# Clean removal: every file the package listed is gone after a purge, and
# apt sees nothing broken.
R "$IMAGE" sh -ec '
	dpkg -L tether >/tmp/files
	DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq tether >/dev/null
	left=0
	while read -r f; do [ -f "$f" ] && { echo "left: $f"; left=1; }; done </tmp/files
	[ ! -e /usr/share/tether ] || { echo "left: /usr/share/tether"; left=1; }
	apt-get check -qq
	exit $left' >"$W/purge.log" 2>&1 && pass "apt-get purge tether removes every file" ||
	{ cat "$W/purge.log"; fail "purge"; }

# A real sandbox inside the image (combined topology: netns, veth, cgroup,
# seccomp need --privileged here), upstream over a podman network on
# TEST-NET-3 to the host's end of it.
podman network create --subnet "$SUBNET" --gateway "$GW" "$NET" >/dev/null || die "podman network create"
on_exit "podman network rm -f $NET"
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
# The server binds the bridge address, which exists once a container is
# attached: start a holder container first.
podman run -d --name "tether-hold-$$" --network "$NET" "$IMAGE" sleep 600 >/dev/null || die "holder container"
on_exit "podman rm -f -t 0 tether-hold-$$"
mkdir -p "$W/www" && echo "hello from the fake internet" >"$W/www/index.html"
wait_for 10 ip -4 addr show to "$GW/32" | grep -q . || true
"$PY" -m http.server 8080 --bind "$GW" --directory "$W/www" >"$W/server.log" 2>&1 &
SRVPID=$!
on_exit "kill $SRVPID; wait $SRVPID"
wait_for 30 curl -s -o /dev/null --noproxy '*' --max-time 1 "http://$GW:8080/" || die "fake internet"
podman run --rm --privileged --network "$NET" -v "$W:/t" "$IMAGE" \
	timeout 60 tether run --policy /t/policy.yaml --audit /t/audit.jsonl -- sh -c '
		curl -s -o /dev/null -w "allowed=%{http_code}\n" http://203.0.113.1:8080/
		curl -s -o /dev/null -w "denied=%{http_code}\n" http://203.0.113.1:8081/
		curl -s -o /dev/null --noproxy "*" --max-time 3 http://203.0.113.1:8081/ && echo direct=open || echo direct=blocked
		curl -s -o /dev/null -w "captured=%{http_code}\n" --noproxy "*" --max-time 10 http://203.0.113.1:8080/
	' >"$W/run.log" 2>&1
sed 's/^/    /' "$W/run.log"
grep -qx allowed=200 "$W/run.log" && pass "sandbox in the image: allowed 200" || fail "allowed"
grep -qx denied=403 "$W/run.log" && pass "sandbox in the image: denied 403" || fail "denied"
# a connection that ignores the proxy is captured (transparent capture is on
# by default) and decided like any other: the denied port stays shut, the
# allowed one is reached through the net-supervisor
grep -qx direct=blocked "$W/run.log" && pass "sandbox in the image: a direct connection to a denied port fails" ||
	fail "direct"
grep -qx captured=200 "$W/run.log" && grep -q '"capture":"transparent"' "$W/audit.jsonl" 2>/dev/null &&
	pass "sandbox in the image: a direct connection to an allowed destination is captured and allowed" ||
	fail "captured"
grep -q '"decision":"allow"' "$W/audit.jsonl" 2>/dev/null && pass "audit written" || fail "audit"
finish
