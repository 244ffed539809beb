#!/bin/bash
# make demo: one combined-topology sandbox, one allowed and one denied
# request to a local test server, and a summary of the audit decisions.
#
#   examples/demo.sh BUILD_DIR
#
# Creates a "fake internet" network namespace with an HTTP server on
# 198.51.100.10:8080 (TEST-NET-2), joined to this netns by a veth, then runs
#   tether run --policy examples/policy.yaml -- examples/workload-demo.sh
# where curl (named by the policy) is allowed and wget (not named) is denied.
# Exit 0 only when exactly that happened. Everything is removed on exit.
set -u
BUILD=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$BUILD" && pwd) || { echo "demo: no build dir $1" >&2; exit 1; }
TETHER="$BUILD/bin/tether"
[ "$(id -u)" = 0 ] || { echo "demo: must run as root (namespaces, veth)" >&2; exit 1; }
[ -x "$TETHER" ] || { echo "demo: $TETHER not built" >&2; exit 1; }

NS="tdemo$$"
VETH_H="tdm$$h" VETH_N="tdm$$n"
WORK=$(mktemp -d /tmp/tether-demo.XXXXXX)
AUDIT="$WORK/audit.jsonl"
SERVER_PID=""

cleanup() {
	[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
	ip link del "$VETH_H" 2>/dev/null
	ip netns del "$NS" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the fake internet: a netns with an HTTP server on TEST-NET-2
ip netns add "$NS" || exit 1
ip link add "$VETH_H" type veth peer name "$VETH_N" || exit 1
ip link set "$VETH_N" netns "$NS"
ip addr add 198.51.100.1/24 dev "$VETH_H"
ip link set "$VETH_H" up
ip netns exec "$NS" ip addr add 198.51.100.10/24 dev "$VETH_N"
ip netns exec "$NS" ip link set "$VETH_N" up
ip netns exec "$NS" ip link set lo up
mkdir -p "$WORK/www" && echo "hello from the fake internet" > "$WORK/www/index.html"
ip netns exec "$NS" python3 -m http.server 8080 --bind 198.51.100.10 --directory "$WORK/www" \
	>"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
	curl -s -o /dev/null --noproxy '*' --max-time 1 http://198.51.100.10:8080/ && break
	sleep 0.1
done
curl -s -o /dev/null --noproxy '*' --max-time 1 http://198.51.100.10:8080/ ||
	{ echo "demo: the test server did not start" >&2; cat "$WORK/server.log" >&2; exit 1; }
echo "demo: fake internet up: http://198.51.100.10:8080/ in netns $NS"

# --- the sandbox
echo "demo: tether run --topology combined --policy examples/policy.yaml -- examples/workload-demo.sh"
timeout 60 "$TETHER" run --topology combined --policy "$SRC/examples/policy.yaml" --audit "$AUDIT" \
	-- "$SRC/examples/workload-demo.sh" http://198.51.100.10:8080/
rc=$?
echo "demo: tether run exited with $rc"

# --- the summary, from the JSONL audit log
python3 - "$AUDIT" <<'PY'
import json, sys
path = sys.argv[1]
try:
    lines = [json.loads(l) for l in open(path) if l.strip()]
except (OSError, ValueError) as e:
    print(f"demo: cannot read the audit log: {e}")
    sys.exit(1)
dec = [e for e in lines if e.get("event") == "egress_decision"]
print(f"\naudit: {len(lines)} events, {len(dec)} egress decisions")
for e in dec:
    b = (e.get("binary") or {}).get("path", "?")
    d = e.get("dest") or {}
    print(f"  {e.get('decision','?'):5}  {b:16} -> {d.get('host','?')}:{d.get('port','?')}"
          f"  reason={e.get('reason','?')} identity={e.get('identity_source','?')}"
          f" topology={e.get('topology','?')} policy={e.get('policy') or '-'}")
ok_allow = any(e.get("decision") == "allow" and (e.get("binary") or {}).get("path") == "/usr/bin/curl" for e in dec)
ok_deny = any(e.get("decision") == "deny" and (e.get("binary") or {}).get("path") != "/usr/bin/curl"
              and e.get("reason") == "no_matching_policy" for e in dec)
bad = [e for e in dec if (e.get("binary") or {}).get("path") == "/usr/bin/curl" and e.get("decision") != "allow"]
if ok_allow and ok_deny and not bad:
    print("\ndemo: OK - curl was allowed, the binary the policy does not name was denied")
    sys.exit(0)
print("\ndemo: FAILED - expected curl allowed and the other binary denied (no_matching_policy)")
sys.exit(1)
PY
st=$?
[ "$rc" = 0 ] || st=1
exit $st
