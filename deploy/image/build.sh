#!/bin/bash
# deploy/image/build.sh DEB [IMAGE] [SUITE]: the tether image from Debian's
# packages only, no registry. mmdebstrap makes the rootfs from this
# machine's apt sources (no mirror argument), installs the .deb with its
# dependencies, and `podman import` makes it an OCI image (default
# localhost/tether:dev). Extra packages: TETHER_IMAGE_EXTRA (comma list).
set -euo pipefail
deb=$(realpath "${1:?usage: build.sh DEB [IMAGE] [SUITE]}")
image=${2:-localhost/tether:dev}
suite=${3:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
extra=${TETHER_IMAGE_EXTRA:-}
for t in mmdebstrap podman; do
	command -v "$t" >/dev/null || { echo "build.sh: $t missing (ci/install-deps.sh --deploy)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/tether-image.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# curl: readiness waits and probes; systemd: the VM-guest role (PID 1).
pkgs="curl,ca-certificates,iproute2,nftables,systemd,systemd-sysv,dbus${extra:+,$extra}"
# No manuals, locales or package docs in the image (tether's own stay).
mmdebstrap --variant=apt --include="$pkgs" \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/tether/*' \
	--customize-hook="copy-in $deb /tmp" \
	--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/$(basename "$deb")" \
	--customize-hook='rm -f "$1"/tmp/*.deb' \
	--customize-hook='chroot "$1" useradd --create-home --shell /bin/sh agent' \
	--customize-hook='chroot "$1" useradd --system --uid 65532 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin tether-net' \
	--customize-hook='chroot "$1" systemctl enable tether-proc-supervisor.service tether-net-supervisor.service' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
	"$suite" "$tmp/rootfs.tar"
podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["/usr/bin/tether","--help"]' "$tmp/rootfs.tar" "$image" >/dev/null
echo "$image"
