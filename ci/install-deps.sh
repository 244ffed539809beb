#!/usr/bin/env bash
# Install every build and test dependency of tether from Debian's packages.
# Idempotent and non-interactive: installs only what is missing.
#   --deploy  also the tools of `make deb` / `make test-deploy` (podman, runc,
#             mmdebstrap, dpkg-dev); `make test` does not need them.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang llvm
  libsodium-dev libprotobuf-c-dev protobuf-c-compiler
  libseccomp-dev
  libnl-3-dev libnl-route-3-dev libnl-idiag-3-dev
  libuv1-dev libyaml-dev libjansson-dev libhttp-parser-dev
  libcmocka-dev libssl-dev libnghttp2-dev
  nftables libnftables-dev
  iproute2 util-linux procps psmisc curl wget python3
  openssh-server openssh-client tinyproxy haproxy
  # the real clients of tests/e2e/clients.sh (and the openssl CLI for its CA)
  # and of the transparent capture e2e (tests/e2e/transparent.sh: Node's
  # fetch/https.get, Go programs built at test time, git)
  git openssl python3-requests python3-pip nodejs golang-go
  # interpreters for tests/proc-supervisor/test_runtime_inject.sh (code-loading variables)
  ruby lua5.4 php-cli
  libfaketime
  # bench/tls_bench.sh: the reference TLS interceptor
  mitmproxy
  # HTTP/2 through TLS inspection: the test server (nghttpd) and clients
  # (nghttp, h2load) of test_tls_inspect.sh, tests/e2e/tls.sh, tls_bench.sh
  nghttp2-server nghttp2-client
)
# npm: Debian's package, unless the installed nodejs bundles one (NodeSource's
# does, and conflicts with it)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
if [ "${1:-}" = "--deploy" ]; then
  PKGS+=(dpkg-dev fakeroot podman runc netavark iptables catatonit mmdebstrap uidmap)
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root (or: sudo $0)" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq -o DPkg::Lock::Timeout=600
# Daemons in these packages (sshd, tinyproxy, haproxy) must not be started by the
# package scripts: tests start their own instances on loopback.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}"
