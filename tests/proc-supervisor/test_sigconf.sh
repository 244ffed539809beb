#!/bin/bash
# Inherited signal configuration (tini's signal-configuration check, done
# directly): what is ignored and blocked when the supervisor starts is what
# the workload starts with, exactly (SigIgn/SigBlk of /proc/self/status),
# however the supervisor handles those signals itself; SIGCHLD is never
# handed down ignored. The supervisor still reaps and forwards when it was
# started with SIGCHLD and SIGTERM blocked. (The workload reads its own
# status with cat: grep installs a SIGSEGV handler of its own.)
. "$(dirname "$0")/lib.sh"

mask() { # signal numbers -> the 16-hex-digit mask procfs prints
	local m=0 s
	for s in "$@"; do m=$((m | (1 << (s - 1)))); done
	printf '%016x' "$m"
}
field() { awk -v f="$1:" '$1 == f {print $2}' <<<"$2"; }

# tini's set (TTOU, SEGV, INT ignored; TTIN, ILL, TERM blocked), plus HUP
# and PIPE ignored (nohup; a parent that ignores SIGPIPE), CHLD and USR1
# blocked, and a real-time signal of each kind (40 ignored, 41 blocked).
# (12, not tini's 11: a sanitizer build's runtime owns SIGSEGV)
IGN=22,12,2,1,13,40 BLK=21,4,15,17,10,41
for mode in "none" "auto"; do
	out=$(timeout -s KILL 20 "$T/probe_sigconf" "$IGN" "$BLK" "$PS" --cgroup $mode -- cat /proc/self/status)
	expect_eq "[$mode] rc (SIGCHLD blocked at start: still reaped)" "$?" 0
	expect_eq "[$mode] SigIgn as at start" "$(field SigIgn "$out")" "$(mask 22 12 2 1 13 40)"
	expect_eq "[$mode] SigBlk as at start" "$(field SigBlk "$out")" "$(mask 21 4 15 17 10 41)"
done

# as PID 1 of a PID namespace, the same
out=$(timeout -s KILL 20 "$T/probe_sigconf" "$IGN" "$BLK" unshare -p -f --mount-proc "$PS" -- cat /proc/self/status)
expect_eq "[pid1] SigIgn as at start" "$(field SigIgn "$out")" "$(mask 22 12 2 1 13 40)"
expect_eq "[pid1] SigBlk as at start" "$(field SigBlk "$out")" "$(mask 21 4 15 17 10 41)"

# nothing inherited: nothing ignored or blocked (the supervisor's own
# SIGPIPE/SIGTTOU/SIGTTIN ignores and its libuv handlers do not leak)
out=$(timeout -s KILL 20 "$T/probe_sigconf" - - "$PS" -- cat /proc/self/status)
expect_eq "clean start: SigIgn" "$(field SigIgn "$out")" 0000000000000000
expect_eq "clean start: SigBlk" "$(field SigBlk "$out")" 0000000000000000

# glibc's own signals (32, 33) ignored by whoever started us (a CI runner
# does this): never handed down ignored; the workload's C library owns them
out=$(timeout -s KILL 20 "$T/probe_sigconf" 32,33,13 - "$PS" -- cat /proc/self/status)
expect_eq "32/33 ignored at start: not in the workload's SigIgn" "$(field SigIgn "$out")" "$(mask 13)"

# SIGCHLD ignored at start is not handed down (the workload's children
# would vanish unwaited); a shell in the workload can still wait
out=$(timeout -s KILL 20 "$T/probe_sigconf" 17,1 - "$PS" -- sh -c 'sleep 0 & wait $!; echo wait=$?; grep "^SigIgn:" /proc/self/status')
expect_eq "SIGCHLD ignored: wait works" "$(sed -n 1p <<<"$out")" "wait=0"
expect_eq "SIGCHLD ignored: only SIGHUP handed down" "$(awk '/^SigIgn:/{print $2}' <<<"$out")" "$(mask 1)"

# under nohup: SIGHUP stays ignored in the workload
out=$(cd "$D" && timeout -s KILL 20 "$T/probe_sigconf" - - nohup "$PS" -- cat /proc/self/status 2>/dev/null)
expect_eq "nohup: SIGHUP ignored in the workload" "$(field SigIgn "$out")" "$(mask 1)"

# with SIGTERM blocked at start the supervisor still takes a SIGTERM and
# forwards it; the entrypoint (SIGTERM blocked, as at start) is killed
# after the grace period
rm -f "$D/ready"
"$T/probe_sigconf" - 15,17 "$PS" --cgroup none --grace 1 -- sh -c "echo go >$D/ready; exec sleep 1000" &
sup=$!
BG_PIDS+=("$sup")
wait_file "$D/ready" || fail "SIGTERM blocked: never ready"
kill -TERM "$sup"
if gone "$sup" 100; then
	wait "$sup"
	expect_eq "SIGTERM blocked at start: supervisor shuts down (137 after grace)" "$?" 137
else
	fail "SIGTERM blocked at start: the supervisor never took the SIGTERM"
fi

# exec sessions get the same configuration as the entrypoint
if command -v jq >/dev/null && [ -x "$TETHER_BIN/tether" ]; then
	rm -f "$D/ready"
	"$T/probe_sigconf" 1,22 21 "$PS" --cgroup none --exec-socket "$D/exec.sock" -- sh -c "echo go >$D/ready; exec sleep 1000" &
	sup=$!
	BG_PIDS+=("$sup")
	wait_file "$D/ready" || fail "exec session: never ready"
	out=$(timeout 20 "$TETHER_BIN/tether" exec --socket "$D/exec.sock" -- cat /proc/self/status)
	expect_eq "exec session: SigIgn" "$(field SigIgn "$out")" "$(mask 1 22)"
	expect_eq "exec session: SigBlk" "$(field SigBlk "$out")" "$(mask 21)"
	kill -TERM "$sup"
	gone "$sup" 100 || fail "exec session: the supervisor did not stop"
fi
finish
