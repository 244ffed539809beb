#!/bin/bash
# The daemon with its services on the same loop: an exec-gateway session is
# spawned as the supervisor's own child (hardened like the entrypoint, exit
# status carried back), the status socket lists it as exec_session, and a
# SIGTERM still shuts everything down.
. "$(dirname "$0")/lib.sh"
TETHER="$TETHER_BIN/tether"
[ -x "$TETHER" ] || { echo "tether CLI not built: skipped"; exit 77; }

"$PS" --exec-socket "$D/gw.sock" --status-socket "$D/st.sock" -- sleep 60 2>"$D/sup.err" &
sup=$!
BG_PIDS+=("$sup")
n=0; while [ ! -S "$D/gw.sock" ] || [ ! -S "$D/st.sock" ]; do sleep 0.1; n=$((n+1)); [ $n -gt 100 ] && break; done
out=$(timeout 20 "$TETHER" exec --socket "$D/gw.sock" -- sh -c 'grep -E "^(NoNewPrivs|Seccomp):" /proc/self/status | tr -s "\t" " " | tr "\n" ";"; echo "ppid=$PPID"; exit 4')
rc=$?
expect_eq "session exit status" "$rc" 4
expect_eq "session hardened, child of the supervisor" "$out" "NoNewPrivs: 1;Seccomp: 2;ppid=$sup"
ps_out=$(timeout 10 "$TETHER" ps --socket "$D/st.sock" --json)
printf '%s' "$ps_out" | jq -e '.processes[] | select(.join == "exec_session")' >/dev/null &&
	ok "tether ps lists the exec session" || fail "tether ps: $ps_out"
printf '%s' "$ps_out" | jq -e '.processes[] | select(.join == "entrypoint")' >/dev/null &&
	ok "tether ps lists the entrypoint" || fail "tether ps: $ps_out"
kill -TERM "$sup"
wait "$sup"
expect_eq "SIGTERM: entrypoint's status" "$?" 143
finish
