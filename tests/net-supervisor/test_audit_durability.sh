#!/bin/bash
# Audit records survive a full disk and a SIGKILL (issue 19 item 4).
#
# 1. The audit file on a 64 KiB tmpfs, filled up: no line is ever partial
#    or merged (every line parses after space returns), the failure is
#    named ENOSPC in one warning, recovery in one line and an
#    audit_resumed event; under the default --audit-failure deny every
#    flow is answered 503 audit_unavailable while its decision cannot be
#    written, and every flow answered 200 is in the file; with allow they
#    are relayed and counted.
# 2. Repeated kill -9 of the net-supervisor during bursts of allowed and
#    denied flows: every answer a client received has its decision in the
#    file (write before answer).
# Needs root for the tmpfs (in a private mount namespace: nothing to unmount).
. "${TETHER_SRC:?}/tests/common/script_lib.sh" auditdur
if [ -z "${AUDITDUR_IN_NS:-}" ]; then
	if [ "$(id -u)" != 0 ] || ! unshare --mount --propagation private true 2>/dev/null; then
		echo "SKIP: needs root and mount namespaces (tmpfs for the audit file)"
		exit 0
	fi
	rm -rf "$D"
	AUDITDUR_IN_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi

# An upstream that holds each connection until its client closes, and a
# client burst: W workers open CONNECTs (to the allowed port, or to a port
# no policy allows) one after another and append "client-port status" to
# OUT once they have the status line; they stop on DEADLINE, on COUNT
# answers, or when the proxy is gone.
cat >"$D/burst.py" <<'EOF'
import asyncio, random, sys, time
proxy, up, denied, out, count, secs, workers = sys.argv[1:8]
proxy, up, denied, count, secs, workers = int(proxy), int(up), int(denied), int(count), float(secs), int(workers)
f = open(out, "w", buffering=1)
n = 0
async def one(dest):
    global n
    r, w = await asyncio.open_connection("127.0.0.1", proxy)
    try:
        lp = w.get_extra_info("sockname")[1]
        w.write(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (dest, dest))
        head = await r.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1].decode()
        why = ""
        for l in head.split(b"\r\n"):
            if l.lower().startswith(b"x-tether-reason:"):
                why = l.split(b":", 1)[1].strip().decode()
        f.write("%d %d %s %s\n" % (lp, dest, status, why or "-"))
        n += 1
    finally:
        w.close()
async def worker(end):
    while time.time() < end and n < count:
        try:
            await one(random.choice([up, denied, denied]))
        except (OSError, asyncio.IncompleteReadError):
            return
async def main():
    end = time.time() + secs
    await asyncio.gather(*(worker(end) for _ in range(workers)))
asyncio.run(main())
EOF
cat >"$D/up.py" <<'EOF'
import asyncio, sys
async def h(r, w):
    try:
        await r.read()
    except OSError:
        pass
    w.close()
async def main():
    s = await asyncio.start_server(h, "127.0.0.1", 0, backlog=1024)
    open(sys.argv[1], "w").write(str(s.sockets[0].getsockname()[1]))
    await s.serve_forever()
asyncio.run(main())
EOF
# check.py AUDIT ANSWERS [torn-ok]: every answer's decision is in the audit
# file (matched by client port, multiset), every line of the file parses;
# with torn-ok the last line may be cut short (a SIGKILL in the middle of
# a write(2): that line's answer had not gone out).
cat >"$D/check.py" <<'EOF'
import collections, json, sys
audit, answers = sys.argv[1], sys.argv[2]
have = collections.Counter()
bad = 0
torn = 0
lines = open(audit, "rb").read().split(b"\n")
if lines[-1] and len(sys.argv) > 3:
    lines, torn = lines[:-1], 1
for i, l in enumerate(lines):
    if not l and i == len(lines) - 1:
        continue
    try:
        e = json.loads(l)
    except ValueError:
        print("line %d is not JSON: %r" % (i + 1, l[:120])); bad += 1; continue
    if e.get("event") == "egress_decision" and e.get("client"):
        have[(e["client"]["port"], e["decision"])] += 1
want = collections.Counter()
for l in open(answers):
    port, dest, status, why = l.split()
    if status == "503" and why == "audit_unavailable":
        continue  # not recorded, by design
    want[(int(port), "allow" if status == "200" else "deny")] += 1
missing = want - have
print("answers %d, decisions in the file %d, missing %d, bad lines %d%s" %
      (sum(want.values()), sum(have.values()), sum(missing.values()), bad, ", last line torn by the kill" if torn else ""))
for k in list(missing)[:5]:
    print("  missing: client port %d %s" % k)
sys.exit(1 if missing or bad else 0)
EOF

python3 "$D/up.py" "$D/up.port" & PIDS+=("$!")
for _ in $(seq 50); do [ -s "$D/up.port" ] && break; sleep 0.1; done
UP=$(cat "$D/up.port" 2>/dev/null)
[ -n "$UP" ] || { echo "FAIL: upstream did not start" >&2; exit 1; }
DENIED=$(freeport)
printf 'version: 1\nnetwork:\n  policies:\n    - name: t\n      binaries: [{path: /x/client}]\n      endpoints: [{cidr: 127.0.0.1/32, ports: [%s]}]\n' "$UP" >"$D/p.yaml"

# start_ns NAME AUDIT_FILE [options]: sets PORT, ADMIN, NSPID
start_ns() {
	local name=$1 audit=$2
	shift 2
	PORT=$(freeport) ADMIN=$(freeport)
	while [ "$ADMIN" = "$PORT" ]; do ADMIN=$(freeport); done
	"$BIN/net-supervisor-testing" --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" --policy "$D/p.yaml" \
		--audit "$audit" --identity-static /x/client "$@" 2>"$D/$name.err" >"${NS_STDOUT:-/dev/null}" &
	NSPID=$!
	PIDS+=("$NSPID")
	local up=""
	for _ in $(seq 100); do
		up=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/readyz")
		[ "$up" = 200 ] && break
		sleep 0.05
	done
	[ "$up" = 200 ] || fail "$name: net-supervisor not ready: $(cat "$D/$name.err")"
}
metric() { curl -s --noproxy '*' "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
stop_ns() { kill "$NSPID" 2>/dev/null; wait "$NSPID" 2>/dev/null; }
# answers FILE: "200=N 403=N 503=N" counts
answers() { awk '{ c[$3]++ } END { for (s in c) printf "%s=%d ", s, c[s] }' "$1"; }
nstatus() { awk -v s="$2" '$3 == s { n++ } END { print n + 0 }' "$1"; }
# fill FS: take every free block of the tmpfs but the audit file's own
fill() { dd if=/dev/zero of="$1/filler" bs=1k count=128 2>/dev/null; sync; }

if [ -z "${AUDITDUR_ONLY_KILL:-}" ]; then
# --- 1: full disk, --audit-failure deny (the default) --------------------------
mkdir "$D/fs"
trap 'umount -l "$D/fs" 2>/dev/null; cleanup' EXIT
mount -t tmpfs -o size=64k tmpfs "$D/fs" || { fail "cannot mount a tmpfs"; finish "audit durability checks"; }
A="$D/fs/audit.jsonl"
start_ns deny "$A"
python3 "$D/burst.py" "$PORT" "$UP" "$DENIED" "$D/a0" 20 20 4 # some lines before the disk fills
fill "$D/fs"
python3 "$D/burst.py" "$PORT" "$UP" "$DENIED" "$D/a1" 60 20 4
echo "on the full disk: $(answers "$D/a1")"
n503=$(awk '$3 == 503 && $4 == "audit_unavailable"' "$D/a1" | wc -l)
other=$(awk '!($3 == 503 && $4 == "audit_unavailable")' "$D/a1" | wc -l)
[ "$n503" -ge 40 ] && ok "full disk: $n503 flows answered 503 audit_unavailable (deny default), $other before the file stopped taking lines" ||
	fail "full disk: $n503 answered 503 audit_unavailable ($(answers "$D/a1"))"
[ "$(metric tether_audit_writable)" = 0 ] && ok "tether_audit_writable 0" ||
	fail "tether_audit_writable is '$(metric tether_audit_writable)'"
den=$(metric 'tether_audit_unrecorded_flows_total{action="denied"}')
[ "$den" = "$n503" ] && ok "tether_audit_unrecorded_flows_total{action=\"denied\"} $den" ||
	fail "unrecorded denied metric '$den' for $n503 answers"
[ "$(metric tether_audit_write_failures_total)" -ge "$n503" ] && ok "write failures counted" ||
	fail "tether_audit_write_failures_total '$(metric tether_audit_write_failures_total)'"
warn=$(grep -c "audit: cannot write to $A: ENOSPC (No space left on device)" "$D/deny.err")
[ "$warn" = 1 ] && ok "one warning for the episode, naming ENOSPC" ||
	fail "$warn ENOSPC warnings: $(grep audit "$D/deny.err")"
rm -f "$D/fs/filler"
python3 "$D/burst.py" "$PORT" "$UP" "$DENIED" "$D/a2" 40 20 4
[ "$(nstatus "$D/a2" 503)" = 0 ] && [ "$(nstatus "$D/a2" 200)" -ge 1 ] && ok "space back: served again ($(answers "$D/a2"))" ||
	fail "after space returned: $(answers "$D/a2")"
[ "$(metric tether_audit_writable)" = 1 ] && ok "tether_audit_writable 1 again" ||
	fail "tether_audit_writable is '$(metric tether_audit_writable)' after recovery"
grep -q "audit: writing to $A again; [0-9]* events could not be written" "$D/deny.err" &&
	[ "$(grep -c "writing to $A again" "$D/deny.err")" = 1 ] && ok "one line on recovery" ||
	fail "recovery line: $(grep audit "$D/deny.err")"
grep -q '"event":"audit_resumed".*"error":"ENOSPC"' "$A" && ok "audit_resumed event in the file" ||
	fail "no audit_resumed event"
stop_ns
cat "$D/a0" "$D/a1" "$D/a2" >"$D/deny.answers"
out=$(python3 "$D/check.py" "$A" "$D/deny.answers") && ok "every line is JSON, every answered flow recorded: $out" ||
	fail "after the full disk: $out"

# --- 1b: --audit-failure allow --------------------------------------------------
rm -f "$A"
start_ns allow "$A" --audit-failure allow
python3 "$D/burst.py" "$PORT" "$UP" "$DENIED" "$D/b0" 20 20 4
fill "$D/fs"
python3 "$D/burst.py" "$PORT" "$UP" "$DENIED" "$D/b1" 60 20 4
[ "$(nstatus "$D/b1" 503)" = 0 ] && [ "$(nstatus "$D/b1" 200)" -ge 5 ] &&
	ok "allow: flows relayed while the file is full ($(answers "$D/b1"))" || fail "allow: $(answers "$D/b1")"
ans=$(metric 'tether_audit_unrecorded_flows_total{action="answered"}')
[ "${ans:-0}" -ge 40 ] && ok "allow: $ans unrecorded flows counted" || fail "allow: answered metric '$ans'"
rm -f "$D/fs/filler"
python3 "$D/burst.py" "$PORT" "$UP" "$DENIED" "$D/b2" 20 20 4
stop_ns
out=$(python3 "$D/check.py" "$A" "$D/b0")
[ $? = 0 ] && ok "allow: every line is JSON after space returned ($out)" || fail "allow: $out"
python3 - "$A" <<'EOF' && ok "allow: no partial or merged line" || fail "allow: a line does not parse"
import json, sys
for l in open(sys.argv[1], "rb"):
    json.loads(l)
EOF
umount "$D/fs"
fi

# --- 2: kill -9 during bursts ---------------------------------------------------
# Rounds 1-3 write a file; 4-5 write stdout into a pipe whose reader (a log
# collector) is slower than the burst: what is in the pipe when the proxy
# dies is read out after it, what the proxy still held is lost.
cat >"$D/slowcat.py" <<'EOF'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
out = open(sys.argv[2], "wb", buffering=0)
while True:
    b = os.read(fd, 1024)
    if not b:
        break
    out.write(b)
    time.sleep(0.005)
EOF
for round in 1 2 3 4 5; do
	A="$D/kill$round.jsonl"
	if [ "$round" -le 3 ]; then
		start_ns "kill$round" "$A"
	else
		mkfifo "$D/fifo$round"
		python3 "$D/slowcat.py" "$D/fifo$round" "$A" &
		CATPID=$!
		PIDS+=("$CATPID")
		NS_STDOUT="$D/fifo$round" start_ns "kill$round" -
	fi
	BPIDS=()
	for c in 1 2 3; do
		python3 "$D/burst.py" "$PORT" "$UP" "$DENIED" "$D/k$round.$c" 100000 30 48 &
		BPIDS+=("$!")
		PIDS+=("$!")
	done
	at=$((200 + RANDOM % 400))
	for _ in $(seq 500); do [ "$(cat "$D/k$round".* 2>/dev/null | wc -l)" -ge "$at" ] && break; sleep 0.02; done
	kill -KILL "$NSPID"
	wait "$NSPID" 2>/dev/null
	wait "${BPIDS[@]}"
	cat "$D/k$round".* >"$D/k$round"
	[ "$round" -gt 3 ] && wait "$CATPID"
	out=$(python3 "$D/check.py" "$A" "$D/k$round" torn-ok) && ok "kill -9 round $round (after ~$at answers): $out" ||
		fail "kill -9 round $round: $out"
done

finish "audit durability checks"
