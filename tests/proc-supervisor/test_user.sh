#!/bin/bash
# --user: every workload process runs as the given uid/gid with no
# supplementary groups and no capabilities, gets that user's HOME/USER, is
# still hardened (no_new_privs, seccomp) and attributable at connect time;
# a bad --user is a usage error.
. "$(dirname "$0")/lib.sh"
chmod 755 "$D"

out=$(timeout 20 "$PS" --cgroup none --user nobody -- sh -c 'id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"; grep -E "^(CapEff|CapPrm|NoNewPrivs|Seccomp):" /proc/self/status')
expect_eq "rc" "$?" 0
nobody_uid=$(id -u nobody) nobody_gid=$(id -g nobody)
home=$(getent passwd nobody | cut -d: -f6)
expect_eq "uid" "$(sed -n 1p <<<"$out")" "$nobody_uid"
expect_eq "gid" "$(sed -n 2p <<<"$out")" "$nobody_gid"
expect_eq "groups" "$(sed -n 3p <<<"$out")" "$nobody_gid"
expect_eq "HOME USER LOGNAME" "$(sed -n 4p <<<"$out")" "$home nobody nobody"
expect_eq "CapEff" "$(awk '/^CapEff:/{print $2}' <<<"$out")" 0000000000000000
expect_eq "CapPrm" "$(awk '/^CapPrm:/{print $2}' <<<"$out")" 0000000000000000
expect_eq "NoNewPrivs" "$(awk '/^NoNewPrivs:/{print $2}' <<<"$out")" 1
expect_eq "Seccomp (filter)" "$(awk '/^Seccomp:/{print $2}' <<<"$out")" 2

# numeric uid without a passwd entry, explicit gid
out=$(timeout 20 "$PS" --cgroup none --user 43210:4321 -- sh -c 'echo $(id -u) $(id -g) $(id -G)')
expect_eq "numeric uid:gid" "$out" "43210 4321 4321"

# the supervisor itself stays root (it must be able to read the workload)
timeout 20 "$PS" --cgroup none --user nobody -- sh -c 'cat /proc/$PPID/status' >"$D/st" 2>&1
expect_eq "supervisor uid" "$(awk '/^Uid:/{print $2}' "$D/st")" 0

# a non-root workload's connect is attributed to it
"$T/probe_connect" serve "$D/port" 30 &
BG_PIDS+=("$!")
disown "$!"
wait_file "$D/port" || { fail "server never listened"; finish; }
out=$(timeout 20 "$PS" --user nobody --debug-registry "$D/reg.json" -- "$T/probe_connect" connect "$(cat "$D/port")")
cookie=$(printf '%s' "$out" | sed -n 's/^cookie=\([0-9]*\) pid=.*/\1/p')
got=$(jq -r --arg c "$cookie" '.attributions[] | select(.cookie == $c) | "\(.found) \(.exe)"' "$D/reg.json")
expect_eq "non-root connect attributed" "$got" "true $T/probe_connect"

# usage errors
timeout 5 "$PS" --user no-such-user-here -- true 2>"$D/err"
expect_eq "unknown user rc" "$?" 2
grep -q "no such user" "$D/err" && ok "unknown user message" || fail "message: $(cat "$D/err")"
timeout 5 "$PS" --user 5:x -- true 2>/dev/null
expect_eq "bad gid rc" "$?" 2
timeout 5 "$PS" --user "" -- true 2>/dev/null
expect_eq "empty user rc" "$?" 2
finish
