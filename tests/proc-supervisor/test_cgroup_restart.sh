#!/bin/bash
# A proc-supervisor restarted after SIGKILL comes up at full strength: as
# PID 1 of its own PID namespace it is always tether-1, and the dead one's
# tether-1 is still there. Five SIGKILL + restart rounds with --cgroup PATH
# and with --cgroup auto: every restart has cgroup membership in the same
# tether-1 (the net side's --sandbox-cgroup names it), no error, no
# membership_degraded. Then the proofs the reuse rests on: processes left
# in a dead supervisor's cgroup are killed; a live supervisor's (its lock
# held) is never touched and the next name is used, with a warning; a
# directory without the owner mark that holds processes is left alone. A
# degraded membership is a warning and the audit's membership_degraded.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
cg_root=""
for r in /sys/fs/cgroup/unified /sys/fs/cgroup; do
	if [ "$(stat -f -c %T "$r" 2>/dev/null)" = cgroup2fs ]; then cg_root=$r; break; fi
done
[ -n "$cg_root" ] || { echo "SKIP: no cgroup v2"; exit 77; }

# Our own parents (one per form), removed at exit with all below them.
PARENT="$cg_root/tether-test-restart-$$"
AUTOP="$cg_root/tether-test-restart-auto-$$"
EXTRA=()
cg_cleanup() {
	local p
	for p in "$PARENT" "$AUTOP"; do
		[ -d "$p" ] || continue
		# everything below these is this test's: kill it, then remove bottom-up
		echo 1 >"$p/cgroup.kill" 2>/dev/null
		for _ in $(seq 50); do grep -q '^populated 0' "$p/cgroup.events" 2>/dev/null && break; sleep 0.1; done
		find "$p" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	for p in "${EXTRA[@]}"; do kill -KILL "$p" 2>/dev/null; done
	cleanup
}
trap cg_cleanup EXIT
mkdir "$PARENT" "$AUTOP" || { echo "FAIL: cannot create test cgroups"; exit 1; }

# start_pid1 TAG CGROUP-ARG [PARENT-CGROUP-TO-RUN-IN]: a PID-1 supervisor in
# the background; sets U (unshare's pid) and SUP (the supervisor's host pid)
start_pid1() {
	local tag=$1 arg=$2 runin=${3:-}
	rm -f "$D/$tag.jsonl" "$D/$tag.err"
	if [ -n "$runin" ]; then
		sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$runin" \
			unshare -p -f --mount-proc "$PS" --cgroup "$arg" --audit "$D/$tag.jsonl" -- \
			sh -c 'setsid sleep 1000 & sleep 1000' 2>"$D/$tag.err" &
	else
		unshare -p -f --mount-proc "$PS" --cgroup "$arg" --audit "$D/$tag.jsonl" -- \
			sh -c 'setsid sleep 1000 & sleep 1000' 2>"$D/$tag.err" &
	fi
	U=$!
	BG_PIDS+=("$U")
	SUP=""
	for _ in $(seq 100); do
		grep -q '"event":"process_spawn"' "$D/$tag.jsonl" 2>/dev/null && break
		kill -0 "$U" 2>/dev/null || break
		sleep 0.05
	done
	SUP=$(cat /proc/"$U"/task/"$U"/children 2>/dev/null | awk '{print $1}')
}
spawn_field() { # TAG FIELD -> the value in the process_spawn event
	jq -r --arg f "$2" 'select(.event == "process_spawn") | .[$f] // "-"' "$D/$1.jsonl" 2>/dev/null | head -1
}

for form in path auto; do
	if [ $form = path ]; then arg=$PARENT runin="" want="$PARENT/tether-1/workload"
	else arg=auto runin=$AUTOP want="$AUTOP/tether-1/workload"; fi
	for i in 1 2 3 4 5; do
		start_pid1 "$form$i" "$arg" "$runin"
		[ -n "$SUP" ] || { fail "[$form] round $i: did not start: $(cat "$D/$form$i.err")"; continue; }
		expect_eq "[$form] round $i: membership" "$(spawn_field "$form$i" membership)" cgroup
		expect_eq "[$form] round $i: cgroup" "$(spawn_field "$form$i" cgroup)" "$want"
		expect_eq "[$form] round $i: not degraded" "$(spawn_field "$form$i" membership_degraded)" -
		no_sanitizer_noise <"$D/$form$i.err" | grep -q "error" &&
			fail "[$form] round $i: $(cat "$D/$form$i.err")"
		if [ "$i" -gt 1 ]; then
			grep -q "was left by a dead proc-supervisor" "$D/$form$i.err" ||
				fail "[$form] round $i: reuse not reported: $(cat "$D/$form$i.err")"
		fi
		kill -KILL "$SUP"
		gone "$U" || fail "[$form] round $i: unshare did not end after its PID 1 was killed"
	done
done

# Processes left in a dead supervisor's tether-1 (the round above left it
# behind): they belong to that workload, so the restart kills them.
sleep 1000 &
stray=$!
EXTRA+=("$stray")
echo "$stray" >"$PARENT/tether-1/workload/cgroup.procs" || fail "cannot move a process into the stale cgroup"
start_pid1 stale "$PARENT"
expect_eq "[stale] membership" "$(spawn_field stale membership)" cgroup
expect_eq "[stale] same name" "$(spawn_field stale cgroup)" "$PARENT/tether-1/workload"
gone "$stray" 50 && ok "[stale] left-over process killed" || fail "[stale] the dead supervisor's process survived"
grep -q "warning: .*with 1 process(es) still in it: killed them" "$D/stale.err" && ok "[stale] warned" ||
	fail "[stale] no warning: $(cat "$D/stale.err")"

# A live supervisor's tether-1 (the one just started) is never touched:
# a second PID 1 under the same parent takes tether-1-2, and says so.
first=$SUP firstu=$U
start_pid1 second "$PARENT"
expect_eq "[live] second gets the next name" "$(spawn_field second cgroup)" "$PARENT/tether-1-2/workload"
grep -q "warning: .*held by live proc-supervisors" "$D/second.err" && ok "[live] warned" ||
	fail "[live] no warning: $(cat "$D/second.err")"
alive "$first" && ok "[live] the first is untouched" || fail "[live] the first supervisor died"
grep -q "^$(cat /proc/"$first"/task/"$first"/children | awk '{print $1}')$" "$PARENT/tether-1/workload/cgroup.procs" &&
	ok "[live] the first's workload still in tether-1" || fail "[live] the first's workload left tether-1"
kill -KILL "$SUP"; gone "$U"
kill -KILL "$first"; gone "$firstu"

# An unmarked directory (not made by a locking supervisor) with a process
# in it is not provably a dead supervisor's: left alone, next name used.
echo 1 >"$PARENT/tether-1/cgroup.kill"
for _ in $(seq 50); do grep -q '^populated 0' "$PARENT/tether-1/cgroup.events" && break; sleep 0.1; done
find "$PARENT/tether-1" -depth -type d -exec rmdir {} +
mkdir -p "$PARENT/tether-1/workload"
sleep 1000 &
foreign=$!
EXTRA+=("$foreign")
echo "$foreign" >"$PARENT/tether-1/workload/cgroup.procs"
start_pid1 foreign "$PARENT"
expect_eq "[unmarked] next name" "$(spawn_field foreign cgroup)" "$PARENT/tether-1-2/workload"
alive "$foreign" && ok "[unmarked] its process untouched" || fail "[unmarked] its process was killed"
kill -KILL "$SUP"; gone "$U"

# The error names the directory it could not make, not the parent.
out=$(timeout 10 "$PS" --cgroup "$PARENT/no/such" -- true 2>&1)
expect_eq "bad PATH: 125" "$?" 125
grep -q "mkdir $PARENT/no/such/tether-[0-9]*: No such file" <<<"$out" && ok "bad PATH: names the directory" ||
	fail "bad PATH message: $out"

# Degraded membership is a warning and an audit field, never silent.
out=$(TETHER_FORCE_FALLBACK=cgroup timeout 10 "$PS" --audit "$D/deg.jsonl" -- true 2>&1)
grep -q "warning: cgroup: .*membership falls back to lineage" <<<"$out" && ok "degraded: warning" ||
	fail "degraded: no warning: $out"
expect_eq "degraded: membership" "$(spawn_field deg membership)" lineage
[ "$(spawn_field deg membership_degraded)" != - ] && ok "degraded: membership_degraded in the audit" ||
	fail "degraded: no membership_degraded: $(cat "$D/deg.jsonl")"
# --cgroup none is a choice, not a degradation
out=$(timeout 10 "$PS" --cgroup none --audit "$D/none.jsonl" -- true 2>&1 | no_sanitizer_noise)
expect_eq "none: quiet" "$out" ""
expect_eq "none: no membership_degraded" "$(spawn_field none membership_degraded)" -
finish
