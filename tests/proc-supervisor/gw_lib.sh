# Shared helpers for the exec gateway / identity service tests (bash).
# Every wait is bounded; cleanup() kills only the pids we started.
set -u
B=${TETHER_BIN:?}
TT=${TETHER_TESTS:?}
TMP=$(mktemp -d /tmp/tt-gw.XXXXXX)
PIDS=()
FAILS=0

# descendants PID...: every live process below the given ones (what we
# started through wrappers such as timeout), depth-bounded
descendants() {
	local pids="$*" all="" next c p
	for _ in 1 2 3 4 5 6; do
		next=""
		for p in $pids; do
			for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do next="$next $c"; done
		done
		[ -z "$next" ] && break
		all="$all $next"
		pids=$next
	done
	echo "$all"
}

cleanup() {
	local p below
	below=$(descendants "${PIDS[@]}")
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 1 15); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
	done
	# a wrapper killed before its child (timeout, tether exec) must not
	# leave that child holding our output open
	for p in $below; do kill -KILL "$p" 2>/dev/null; done
	[ -n "${EXTRA_CLEANUP:-}" ] && eval "$EXTRA_CLEANUP"
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' TERM INT HUP

# Fail at once (not after every bounded wait) when a helper is not built.
need() {
	local f
	for f in "$@"; do
		[ -x "$f" ] || { echo "FAIL: $f is not built (build the tests/proc-supervisor targets)"; exit 1; }
	done
}
need "$B/tether" "$TT/gw_harness" "$TT/gw_idclient" "$TT/gw_connect"
[ "${GW_SUP:-harness}" = procsup ] && need "${GW_PROCSUP:-$B/proc-supervisor}"

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
check() { # check DESC CMD...
	local d=$1; shift
	if "$@"; then pass "$d"; else fail "$d"; fi
}

wait_file() { # wait_file PATH [tenths]
	local n=${2:-50}
	for _ in $(seq 1 "$n"); do [ -e "$1" ] && return 0; sleep 0.1; done
	return 1
}

# start_harness NAME KEYFILE [extra args]: a gw_harness with all three sockets.
start_harness() {
	local name=$1 key=$2; shift 2
	rm -f "$TMP/$name.ready"
	if [ "${GW_SUP:-harness}" = procsup ]; then
		# The real supervisor code: procsup_init + procsup_services_start.
		rm -f "$TMP/$name.exec" "$TMP/$name.ctl"
		"${GW_PROCSUP:-$B/proc-supervisor}" --exec-socket "$TMP/$name.exec" --status-socket "$TMP/$name.status" \
			--control "unix:$TMP/$name.ctl" --provisioning-key "$key" --audit "$TMP/$name.audit" \
			--grace 1 "$@" -- sleep 60 >"$TMP/$name.ready" 2>"$TMP/$name.log" &
		PIDS+=($!)
		HPID=$!
		# the control socket comes after the exec socket (the identity
		# service hashes its own exe first): a client started before it
		# would back off and fail its first request at once
		wait_file "$TMP/$name.exec" 50 && wait_file "$TMP/$name.ctl" 50 && return 0
		echo "supervisor $name did not start:"; cat "$TMP/$name.log"
		return 1
	fi
	"$TT/gw_harness" --exec-socket "$TMP/$name.exec" --status-socket "$TMP/$name.status" \
		--control "unix:$TMP/$name.ctl" --provisioning-key "$key" --audit "$TMP/$name.audit" "$@" \
		>"$TMP/$name.ready" 2>"$TMP/$name.log" &
	PIDS+=($!)
	HPID=$!
	for _ in $(seq 1 50); do grep -q '^ready' "$TMP/$name.ready" 2>/dev/null && return 0; sleep 0.1; done
	echo "harness $name did not start:"; cat "$TMP/$name.log"
	return 1
}

# Process state letter of pid ("" when gone).
pstate() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null; }
gone() { local s; s=$(pstate "$1"); [ -z "$s" ] || [ "$s" = Z ] || [ "$s" = X ]; }
wait_gone() { for _ in $(seq 1 ${2:-50}); do gone "$1" && return 0; sleep 0.1; done; return 1; }

finish() {
	if [ "$FAILS" -ne 0 ]; then
		echo "$FAILS check(s) failed"
		for f in "$TMP"/*.log; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
		exit 1
	fi
	echo "all passed"
	exit 0
}
