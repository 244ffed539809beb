#!/bin/bash
# The net-supervisor's workers (--workers N, docs/net-supervisor.md
# "Workers"): N event loops, each with its own SO_REUSEPORT socket on the
# proxy port. With real curl clients through the proxy:
#  1. --workers 2: 200 concurrent requests, half allowed, half denied, all
#     answered as the policy says, both workers accepted some
#     (tether_worker_accepted_total), every audit line whole;
#  2. a policy reload is seen by every worker: the next requests on both
#     are decided under the new generation, and tunnels on both that the
#     new policy no longer allows are revoked;
#  3. --max-connections is one limit over all workers: K admitted in total;
#  4. --workers 1 is one loop; bad --workers values are refused.
. "${TETHER_SRC:?}/tests/common/script_lib.sh" workers

UP=$(freeport) DENY=$(freeport)
while [ "$DENY" = "$UP" ]; do DENY=$(freeport); done
# Two upstream HTTP servers (the denied one must be reachable, so that only
# the policy can answer 403).
for p in "$UP" "$DENY"; do
	python3 -m http.server --bind 127.0.0.1 "$p" --directory "$D" >/dev/null 2>&1 &
	PIDS+=("$!")
done
echo hello >"$D/index.html"
for p in "$UP" "$DENY"; do
	for _ in $(seq 300); do curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.1; done
done

policy() { # PORTS...: the policy file allowing /x/client to those ports of 127.0.0.1
	local ports
	ports=$(IFS=,; echo "$*")
	printf 'version: 1\nnetwork:\n  policies:\n    - name: t\n      binaries: [{path: /x/client}]\n      endpoints: [{cidr: 127.0.0.1/32, ports: [%s]}]\n' \
		"$ports" >"$D/p.yaml.new"
	mv "$D/p.yaml.new" "$D/p.yaml"
}
metric() { curl -s --noproxy '*' "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
accepted() { metric "tether_worker_accepted_total{worker=\"$1\"}"; }
wait_metric() { # NAME VALUE: up to 30 s
	for _ in $(seq 300); do [ "$(metric "$1")" = "$2" ] && return 0; sleep 0.1; done
	return 1
}
NSPID=
start() { # ARGS...: a net-supervisor-testing on fresh ports, ready
	PORT=$(freeport) ADMIN=$(freeport)
	while [ "$ADMIN" = "$PORT" ]; do ADMIN=$(freeport); done
	: >"$D/a.jsonl"
	"$BIN/net-supervisor-testing" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" --policy "$D/p.yaml" \
		--audit "$D/a.jsonl" --identity-static /x/client "$@" 2>"$D/ns.err" &
	NSPID=$!
	PIDS+=("$NSPID")
	wait_metric tether_ready 1 || { echo "FAIL: net-supervisor not ready: $(cat "$D/ns.err")" >&2; exit 1; }
}
stop() {
	kill -TERM "$NSPID" 2>/dev/null
	for _ in $(seq 300); do kill -0 "$NSPID" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$NSPID" 2>/dev/null && fail "net-supervisor still running 30 s after SIGTERM"
	wait "$NSPID" 2>/dev/null
}
# N requests, CONC at once, to PORT's upstream through the proxy: one HTTP
# status a line in FILE
requests() { # N CONC UPPORT FILE
	seq "$1" | xargs -P "$2" -I{} curl -s -o /dev/null -w '%{http_code}\n' --max-time 30 \
		-x "http://127.0.0.1:$PORT" "http://127.0.0.1:$3/?{}" >"$4"
}
count() { grep -c "^$1\$" "$2"; }

# ---- 1. two workers, many concurrent clients
policy "$UP"
start --workers 2
[ "$(metric tether_workers)" = 2 ] && ok "tether_workers 2" || fail "tether_workers '$(metric tether_workers)'"
requests 100 16 "$UP" "$D/allowed" & R1=$!
requests 100 16 "$DENY" "$D/denied" & R2=$!
wait "$R1" "$R2"
[ "$(count 200 "$D/allowed")" = 100 ] && ok "100 allowed requests answered 200" ||
	fail "allowed: $(sort "$D/allowed" | uniq -c | tr '\n' ' ')"
[ "$(count 403 "$D/denied")" = 100 ] && ok "100 denied requests answered 403" ||
	fail "denied: $(sort "$D/denied" | uniq -c | tr '\n' ' ')"
a0=$(accepted 0) a1=$(accepted 1)
echo "accepted: worker 0 $a0, worker 1 $a1"
[ "${a0:-0}" -gt 0 ] && [ "${a1:-0}" -gt 0 ] && ok "both workers accepted connections" ||
	fail "worker 0 accepted '$a0', worker 1 '$a1'"
[ $((a0 + a1)) = 200 ] && ok "accepted counts sum to the 200 clients" || fail "accepted sum $((a0 + a1))"
wait_metric tether_connections_active 0 || fail "connections still active: $(metric tether_connections_active)"
n=$(jq -c 'select(.event == "egress_decision")' "$D/a.jsonl" | wc -l)
bad=$(jq -R 'fromjson? // "BAD"' "$D/a.jsonl" | grep -c '^"BAD"$')
[ "$n" = 200 ] && [ "$bad" = 0 ] && ok "200 decisions in the audit, every line whole JSON" ||
	fail "audit: $n decisions, $bad broken lines"
na=$(jq -c 'select(.event == "egress_decision" and .decision == "allow")' "$D/a.jsonl" | wc -l)
[ "$na" = 100 ] && ok "100 allow decisions audited" || fail "allow decisions audited: $na"
dec=$(metric 'tether_egress_decisions_total{decision="allow",reason="allowed",source="static_test"}')
[ "${dec:-0}" = 100 ] && ok "/metrics: the two workers' decisions summed (100 allowed)" ||
	fail "tether_egress_decisions_total allow ok: '$dec'"

# SIGUSR1 (log rotation) while both workers write: the old file keeps what
# was written, the new one takes the rest, every line whole in both
mv "$D/a.jsonl" "$D/a.1.jsonl"
kill -USR1 "$NSPID"
for _ in $(seq 300); do [ -e "$D/a.jsonl" ] && break; sleep 0.1; done
requests 40 8 "$UP" "$D/rot"
[ "$(count 200 "$D/rot")" = 40 ] && ok "40 requests after SIGUSR1" || fail "after SIGUSR1: $(sort "$D/rot" | uniq -c)"
n1=$(jq -c 'select(.event == "egress_decision")' "$D/a.1.jsonl" | wc -l)
n2=$(jq -c 'select(.event == "egress_decision")' "$D/a.jsonl" 2>/dev/null | wc -l)
bad=$(cat "$D/a.1.jsonl" "$D/a.jsonl" | jq -R 'fromjson? // "BAD"' | grep -c '^"BAD"$')
[ "$n1" = 200 ] && [ "$n2" = 40 ] && [ "$bad" = 0 ] && ok "SIGUSR1 reopened the audit file: 200 + 40 decisions, whole lines" ||
	fail "after SIGUSR1: $n1 decisions in the old file, $n2 in the new, $bad broken lines"

# ---- 2. reload: every worker decides with the new policy, revokes the old tunnels
# 24 tunnels to UP held open on both workers
cat >"$D/hold.py" <<'EOF'
import socket, sys, time
port, up, n, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
socks, status = [], []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % up)
    socks.append(s)
for s in socks:
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(4096)
        if not d: break
        data += d
    status.append(data.split(b" ")[1].decode() if data else "closed")
open(out + ".tmp", "w").write(" ".join(status) + "\n")
import os; os.rename(out + ".tmp", out)
closed = 0
for s in socks:  # then wait for each tunnel to be closed by the proxy
    s.settimeout(60)
    try:
        while s.recv(4096): pass
    except OSError: pass
    closed += 1
open(out + ".closed", "w").write("%d\n" % closed)
EOF
b0=$(accepted 0) b1=$(accepted 1)
python3 "$D/hold.py" "$PORT" "$UP" 24 "$D/held" & HOLD=$!
PIDS+=("$HOLD")
for _ in $(seq 300); do [ -s "$D/held" ] && break; sleep 0.1; done
[ "$(tr ' ' '\n' <"$D/held" | grep -c '^200$')" = 24 ] && ok "24 tunnels open" || fail "tunnels: $(cat "$D/held" 2>/dev/null)"
h0=$(( $(accepted 0) - b0 )) h1=$(( $(accepted 1) - b1 ))
echo "held tunnels: worker 0 $h0, worker 1 $h1"
[ "$h0" -gt 0 ] && [ "$h1" -gt 0 ] && ok "the tunnels are on both workers" || fail "tunnels on worker 0 $h0, worker 1 $h1"
gen=$(metric tether_policy_generation)
policy "$DENY" # renamed into place: one reload (a SIGHUP too would make two)
wait_metric tether_policy_generation $((gen + 1)) && ok "policy reloaded (generation $((gen + 1)))" ||
	fail "generation '$(metric tether_policy_generation)', want $((gen + 1))"
for _ in $(seq 300); do [ -s "$D/held.closed" ] && break; sleep 0.1; done
[ "$(cat "$D/held.closed" 2>/dev/null)" = 24 ] && ok "all 24 tunnels closed by the reload" ||
	fail "tunnels closed: '$(cat "$D/held.closed" 2>/dev/null)'"
nr=$(jq -c 'select(.event == "tunnel_revoked" and .reason == "policy_changed")' "$D/a.jsonl" | wc -l)
[ "$nr" = 24 ] && ok "24 tunnel_revoked policy_changed (both workers)" || fail "tunnel_revoked: $nr"
# per flow, in order: each revoked tunnel's allow comes before its revocation
python3 - "$D/a.jsonl" <<'PY' && ok "each revoked tunnel: its allow, then its revocation" || fail "per-flow order"
import json, sys
seen, bad, n = set(), 0, 0
for l in open(sys.argv[1]):
    e = json.loads(l)
    key = (e.get("client") or {}).get("port")
    if e.get("event") == "egress_decision" and e.get("decision") == "allow":
        seen.add(key)
    elif e.get("event") == "tunnel_revoked":
        n += 1
        bad += key not in seen
sys.exit(0 if n == 24 and bad == 0 else 1)
PY
c0=$(accepted 0) c1=$(accepted 1)
requests 60 12 "$DENY" "$D/after"
[ "$(count 200 "$D/after")" = 60 ] && ok "after the reload the formerly denied port is allowed (60/60)" ||
	fail "after reload: $(sort "$D/after" | uniq -c | tr '\n' ' ')"
d0=$(( $(accepted 0) - c0 )) d1=$(( $(accepted 1) - c1 ))
[ "$d0" -gt 0 ] && [ "$d1" -gt 0 ] && ok "both workers decided under the new policy ($d0 + $d1)" ||
	fail "after reload: worker 0 $d0, worker 1 $d1"
ng=$(jq -c --argjson g $((gen + 1)) 'select(.event == "egress_decision" and .policy_generation == $g and .decision == "allow")' \
	"$D/a.jsonl" | wc -l)
[ "$ng" = 60 ] && ok "their 60 decisions carry the new generation" || {
	fail "decisions with generation $((gen + 1)): $ng"
}
stop

# ---- 3. one connection limit over all workers
policy "$UP"
start --workers 2 --max-connections 10
b0=$(accepted 0) b1=$(accepted 1)
python3 "$D/hold.py" "$PORT" "$UP" 30 "$D/lim" & HOLD=$!
PIDS+=("$HOLD")
for _ in $(seq 300); do [ -s "$D/lim" ] && break; sleep 0.1; done
st=$(cat "$D/lim" 2>/dev/null)
n200=$(tr ' ' '\n' <<<"$st" | grep -c '^200$') n503=$(tr ' ' '\n' <<<"$st" | grep -c '^503$')
[ "$n200" = 10 ] && [ "$n503" = 20 ] && ok "--max-connections 10 over 2 workers: 10 tunnels, 20 answered 503" ||
	fail "30 clients, limit 10: $st"
[ "$(metric tether_connections_active)" = 10 ] && ok "tether_connections_active 10" ||
	fail "tether_connections_active $(metric tether_connections_active)"
l0=$(( $(accepted 0) - b0 )) l1=$(( $(accepted 1) - b1 ))
[ "$l0" -gt 0 ] && [ "$l1" -gt 0 ] && ok "the 30 clients came in on both workers ($l0 + $l1)" ||
	fail "worker 0 $l0, worker 1 $l1"
kill "$HOLD" 2>/dev/null
wait_metric tether_connections_active 0 || fail "connections still active after the clients left"
stop

# ---- 4. --workers 1, and bad values
start --workers 1
requests 20 4 "$UP" "$D/one"
[ "$(count 200 "$D/one")" = 20 ] && ok "--workers 1: 20 requests allowed" || fail "--workers 1: $(sort "$D/one" | uniq -c)"
[ "$(metric tether_workers)" = 1 ] && [ "$(accepted 0)" = 20 ] && [ -z "$(accepted 1)" ] &&
	ok "--workers 1: one loop accepted all 20" || fail "--workers 1: workers $(metric tether_workers), accepted $(accepted 0)/$(accepted 1)"
stop
for bad in 0 9 x; do
	if "$BIN/net-supervisor-testing" --workers "$bad" --identity-static /x/client --policy "$D/p.yaml" \
		--audit /dev/null --listen "127.0.0.1:$(freeport)" 2>"$D/bad.err"; then
		fail "--workers $bad accepted"
	else
		grep -q -- "--workers" "$D/bad.err" && ok "--workers $bad refused: $(head -1 "$D/bad.err")" ||
			fail "--workers $bad: $(cat "$D/bad.err")"
	fi
done

finish "worker checks"
