# Shared helpers for the proc-supervisor script tests (sourced).
set -u
PS="${TETHER_BIN:?}/proc-supervisor"
T="${TETHER_TESTS:?}"
D=$(mktemp -d /tmp/tether-procsup.XXXXXX)
FAILS=0
BG_PIDS=()
cleanup() {
	for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	for f in "$D"/*.pids; do
		[ -f "$f" ] || continue
		while read -r p; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null; done <"$f"
	done
	# A supervisor killed by SIGKILL cannot remove its cgroup: do it here
	# (only for supervisors this test started), once their trees are gone.
	for p in "${BG_PIDS[@]}"; do
		for r in /sys/fs/cgroup/unified /sys/fs/cgroup; do
			[ -d "$r/tether-$p" ] || continue
			[ -f "$r/tether-$p/workload/cgroup.kill" ] && echo 1 >"$r/tether-$p/workload/cgroup.kill" 2>/dev/null
			for _ in 1 2 3 4 5 6 7 8 9 10; do
				rmdir "$r/tether-$p/workload" 2>/dev/null; rmdir "$r/tether-$p" 2>/dev/null && break
				sleep 0.1
			done
		done
	done
	rm -rf "$D"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }
expect_eq() { # what got want
	if [ "$2" = "$3" ]; then ok "$1 = $3"; else fail "$1: got '$2', want '$3'"; fi
}
# wait_file FILE [tenths]: wait until FILE exists and is non-empty
wait_file() {
	local n=${2:-100}
	while [ $n -gt 0 ]; do [ -s "$1" ] && return 0; sleep 0.1; n=$((n - 1)); done
	return 1
}
# alive PID: the process exists and is not a zombie
alive() {
	[ -r "/proc/$1/stat" ] || return 1
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
	[ -n "$st" ] && [ "$st" != Z ]
}
# gone PID [tenths]: wait (bounded) until PID has exited or is a zombie
gone() {
	local n=${2:-100}
	while [ $n -gt 0 ]; do alive "$1" || return 0; sleep 0.1; n=$((n - 1)); done
	return 1
}
finish() {
	if [ "$FAILS" -ne 0 ]; then echo "$FAILS failure(s)" >&2; exit 1; fi
	echo "all passed"; exit 0
}

. "${TETHER_SRC:?}/tests/sanitizer_noise.sh"
