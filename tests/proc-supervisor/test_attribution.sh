#!/bin/bash
# Connect-time attribution end to end: a workload connects to a loopback
# listener the test owns and exits at once; the cookie registry holds the
# cookie -> that workload's ProcessRef. Also a double-forked daemon. And
# fail closed: with the supervisor killed, a surviving workload's connect
# gets ENOSYS.
. "$(dirname "$0")/lib.sh"

"$T/probe_connect" serve "$D/port" 30 &
BG_PIDS+=("$!")
disown "$!" # no "Killed" job report when cleanup ends it
wait_file "$D/port" || { fail "server never listened"; finish; }
port=$(cat "$D/port")

# registry_has LABEL REGFILE OUTPUT: probe_connect printed "cookie=N pid=P";
# the registry written at exit holds N -> that pid and the probe's exe.
# Sets COOKIE.
registry_has() {
	local pid got
	COOKIE=$(printf '%s' "$3" | sed -n 's/^cookie=\([0-9]*\) pid=.*/\1/p')
	pid=$(printf '%s' "$3" | sed -n 's/.* pid=\([0-9]*\)$/\1/p')
	[ -n "$COOKIE" ] && [ "$COOKIE" != 0 ] || fail "[$1] no cookie: $3"
	got=$(jq -r --arg c "$COOKIE" '.attributions[] | select(.cookie == $c) | "\(.found) \(.pid) \(.exe)"' "$2")
	expect_eq "[$1] registry: cookie -> workload" "$got" "true $pid $T/probe_connect"
}

# connect-and-exit, with the kernel's pidfs keys and with every fallback
for fb in "" all; do
	out=$(TETHER_FORCE_FALLBACK=$fb timeout 20 "$PS" --debug-registry "$D/reg.json" -- "$T/probe_connect" connect "$port")
	expect_eq "[${fb:-fast}] connect rc" "$?" 0
	registry_has "${fb:-fast}" "$D/reg.json" "$out"
	key=$(jq -r --arg c "$COOKIE" '.attributions[] | select(.cookie == $c) | .key' "$D/reg.json")
	nparts=$(printf '%s' "$key" | awk -F: '{print NF}')
	expect_eq "[${fb:-fast}] key shape ($key)" "$nparts" "$([ -z "$fb" ] && echo 2 || echo 3)"
	rec=$(jq -r '.stats.recorded' "$D/reg.json")
	[ "$rec" -ge 1 ] && ok "[${fb:-fast}] stats.recorded=$rec" || fail "stats: $(cat "$D/reg.json")"
done

# TCP Fast Open: the connect happens inside sendto/sendmsg/sendmmsg with
# MSG_FASTOPEN; the workload exits at once, so only the registry can
# attribute it (it was not notified before: no entry, found by nothing)
for how in sendto sendmsg sendmmsg; do
	out=$(timeout 20 "$PS" --debug-registry "$D/reg_$how.json" -- "$T/probe_connect" connect "$port" "$how")
	expect_eq "[fastopen $how] rc" "$?" 0
	registry_has "fastopen $how" "$D/reg_$how.json" "$out"
done

# a double-forked daemon (its parent exited) connects: attributed to it
rm -f "$D/c2"
timeout 20 "$PS" --debug-registry "$D/reg2.json" -- sh -c "(setsid $T/probe_connect connect $port >$D/c2 &); sleep 0.5; while [ ! -s $D/c2 ]; do sleep 0.1; done"
registry_has "daemon" "$D/reg2.json" "$(cat "$D/c2")"

# with --no-seccomp nothing is attributed (the test can fail)
timeout 20 "$PS" --no-seccomp --debug-registry "$D/reg3.json" -- "$T/probe_connect" connect "$port" >/dev/null 2>&1
expect_eq "no attribution without the filter" "$(jq '.attributions | length' "$D/reg3.json")" 0

# fail closed: the supervisor dies (SIGKILL); a workload that survives it
# (a background process: only the entrypoint has PDEATHSIG) then connects.
rm -f "$D/out" "$D/bg.pids"
"$PS" -- sh -c "$T/probe_connect connect-later $port $D/out 1500 & echo \$! >$D/bg.pids; sleep 100" &
sup=$!
BG_PIDS+=("$sup")
wait_file "$D/bg.pids" || fail "no background pid"
kill -KILL "$sup"
wait "$sup" 2>/dev/null
wait_file "$D/out" 60 || fail "background workload never reported"
expect_eq "connect after the supervisor died" "$(cat "$D/out")" "connect=ENOSYS"
finish
