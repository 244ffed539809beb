# Shared prelude of the shell tests: source it as
#   . "${TETHER_SRC:?}/tests/common/script_lib.sh" NAME
# It sets BIN (the built binaries), D (a scratch directory /tmp/tether-NAME.*,
# removed on exit), PIDS (append every process you start: each is killed
# on exit, pass or fail), FAILS with fail/ok, finish (the exit status), and
# freeport (a free loopback TCP port).
set -u
BIN="${TETHER_BIN:?}"
D=$(mktemp -d "/tmp/tether-${1:-test}.XXXXXX")
PIDS=()
FAILS=0
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
ok() { echo "ok: $*"; }
freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# finish WHAT: exit 1 with the failure count, or 0 with "all WHAT passed"
finish() {
	[ "$FAILS" = 0 ] || { echo "$FAILS failure(s)" >&2; exit 1; }
	echo "all $1 passed"
}
