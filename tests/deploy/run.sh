#!/bin/bash
# make test-deploy: the deployment tests, apart from `make test` (they need
# podman, runc, mmdebstrap and Debian's mirror for the image's packages).
#   tests/deploy/run.sh BUILD_DIR
# Builds the .deb's image once (localhost/tether-test:<pid>), runs each
# test, removes the image at the end whatever happened, and prints
# "N passed, N failed". TETHER_DEPLOY_IMAGE=NAME tests an image built
# before (by deploy/image/build.sh with TETHER_IMAGE_EXTRA=openssh-server)
# instead, and leaves it.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
. "$SRC/tests/deploy/lib.sh" "$BUILD"
W=$(mktemp -d /tmp/tether-deploy.XXXXXX)
on_exit "rm -rf $W"
podman_env "$W"
IMAGE=localhost/tether-test:$$
deb=$(ls -t "$BUILD"/tether_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || die "no $BUILD/tether_*.deb (make deb)"

passed=0 failed=0
t0=$SECONDS
# What podman and the host have before the tests: whatever is new after
# them (a pod, container, image, volume, secret, bridge or netns a test
# made and did not remove) fails the run.
podman_inventory >"$W/before"
run() {
	local name=$1; shift
	local s=$SECONDS
	echo "=== $name"
	if "$@"; then passed=$((passed + 1)); r=passed; else failed=$((failed + 1)); r=FAILED; fi
	echo "=== $name: $r in $((SECONDS - s)) s"
}
run install "$SRC/tests/deploy/test_install.sh" "$BUILD"
s=$SECONDS
if [ -n "${TETHER_DEPLOY_IMAGE:-}" ]; then
	IMAGE=$TETHER_DEPLOY_IMAGE
	echo "=== image: $IMAGE (given)"
	built=0
else
	echo "=== image: deploy/image/build.sh $deb $IMAGE"
	on_exit "podman rmi -f $IMAGE"
	TETHER_IMAGE_EXTRA=openssh-server "$SRC/deploy/image/build.sh" "$deb" "$IMAGE" >"$W/image.log" 2>&1
	built=$?
fi
if [ "$built" = 0 ]; then
	echo "=== image built in $((SECONDS - s)) s ($(podman image inspect -f '{{.Size}}' "$IMAGE") bytes)"
	run image "$SRC/tests/deploy/test_image.sh" "$BUILD" "$IMAGE"
	run guest "$SRC/tests/deploy/test_guest.sh" "$BUILD" "$IMAGE"
	run kube "$SRC/tests/deploy/test_kube.sh" "$BUILD" "$IMAGE" shared-pid
	run kube-split "$SRC/tests/deploy/test_kube.sh" "$BUILD" "$IMAGE" split
else
	tail -30 "$W/image.log"
	echo "=== image: FAILED"
	failed=$((failed + 1))
fi
if [ -z "${TETHER_DEPLOY_IMAGE:-}" ]; then
	podman rmi -f "$IMAGE" >/dev/null 2>&1
fi
podman_inventory >"$W/after"
left=$(comm -13 "$W/before" "$W/after")
if [ -n "$left" ]; then
	echo "=== left behind by the tests:"; sed 's/^/    /' <<<"$left"
	failed=$((failed + 1))
else
	echo "=== nothing left behind (pods, containers, images, volumes, secrets, bridges, netns)"
fi
# The build tree is whole after the tests (a test or a cleanup that removed
# it, or a mount left over it, fails the run here).
for f in CMakeCache.txt bin/tether "$(basename "$deb")"; do
	[ -e "$BUILD/$f" ] || { echo "=== build tree: $BUILD/$f is gone"; failed=$((failed + 1)); }
done
echo "test-deploy: $((SECONDS - t0)) s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
