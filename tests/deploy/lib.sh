# Shared helpers of the deploy tests (sourced). Every test script:
#   - runs as root, takes the build dir as $1;
#   - registers what it creates with `on_exit` right after creating it, so
#     the EXIT trap removes it even when a check fails midway;
#   - exits 0 (pass), 1 (fail) or 77 (skipped, with the reason printed).
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd) || { echo "deploy: no build dir ${1:-}" >&2; exit 1; }
TNAME=$(basename "$0" .sh)
[ "$(id -u)" = 0 ] || { echo "$TNAME: must run as root" >&2; exit 77; }

# Debian's python3 for the test servers (a pyenv shim first in PATH can
# take seconds to start on a loaded machine).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

_cleanups=()
on_exit() { _cleanups+=("$*"); }
_run_cleanups() {
	local i
	for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do
		eval "${_cleanups[$i]}" >/dev/null 2>&1 || true
	done
}
trap _run_cleanups EXIT
trap 'exit 130' INT TERM

FAILS=0
pass() { echo "ok - $TNAME: $*"; }
fail() { echo "FAIL - $TNAME: $*" >&2; FAILS=$((FAILS + 1)); }
die() { echo "FAIL - $TNAME: $*" >&2; exit 1; }
finish() { [ "$FAILS" = 0 ] && { echo "$TNAME: passed"; exit 0; }; echo "$TNAME: $FAILS check(s) failed" >&2; exit 1; }

# wait_for SECONDS CMD...: run CMD every 0.1 s until it succeeds.
wait_for() {
	local t=$1; shift
	local end=$((SECONDS + t))
	while ! "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.1
	done
}

# The private podman configuration: runc (crun refuses this machine's
# hybrid cgroup layout) and default ulimits no higher than ours (no
# CAP_SYS_RESOURCE here); netavark (Debian's podman also finds a CNI config
# whose plugins are not installed), its network files in DIR/networks (by
# default netavark writes each network to /etc/containers/networks). /etc
# is never edited.
podman_env() {
	local d=$1
	mkdir -p "$d/networks"
	cat >"$d/containers.conf" <<CONF
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[network]
network_backend = "netavark"
network_config_dir = "$d/networks"
CONF
	export CONTAINERS_CONF="$d/containers.conf"
}

# The fake internet: netns NAME with python's http.server on ADDR:8080,
# reached from here through a veth on ADDR's /24 (.1 on our side).
fake_internet() {
	local ns=$1 addr=$2 www=$3
	local pfx=${addr%.*}
	ip netns add "$ns" || return 1
	on_exit "ip netns del $ns"
	ip link add "${ns}h" type veth peer name "${ns}n" || return 1
	on_exit "ip link del ${ns}h"
	ip link set "${ns}n" netns "$ns"
	ip addr add "$pfx.1/24" dev "${ns}h"
	ip link set "${ns}h" up
	ip netns exec "$ns" ip addr add "$addr/24" dev "${ns}n"
	ip netns exec "$ns" ip link set "${ns}n" up
	ip netns exec "$ns" ip link set lo up
	mkdir -p "$www" && echo "hello from the fake internet" >"$www/index.html"
	ip netns exec "$ns" "$PY" -m http.server 8080 --bind "$addr" --directory "$www" \
		>"$www/../server.log" 2>&1 &
	local pid=$!
	on_exit "kill $pid; wait $pid"
	wait_for 30 curl -s -o /dev/null --noproxy '*' --max-time 1 "http://$addr:8080/"
}

# podman_inventory: one line per pod, container, image (but podman's own
# pause image), volume and secret, per bridge link, and per netns of the
# deploy tests' own (td*; the tt*/te* of e2e runs going on beside are not
# ours): what a run may leave behind (run.sh compares before and after).
podman_inventory() {
	{
		podman pod ps --format 'pod {{.Name}}'
		podman ps -a --format 'container {{.Names}}'
		podman images --format 'image {{.Repository}}:{{.Tag}}' | grep -v '^image localhost/podman-pause:'
		podman volume ls --format 'volume {{.Name}}'
		podman secret ls --format 'secret {{.Name}}'
		ip -o link show type bridge | awk -F': ' '{ print "bridge " $2 }'
		ip netns list | awk '$1 ~ /^td/ { print "netns " $1 }'
	} 2>/dev/null | sort -u
}
