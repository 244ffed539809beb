#!/bin/bash
# Shutdown leaves nothing behind: graceful (SIGTERM ignored -> killed after
# the grace period), forced (entrypoint exits, background tree killed), in
# cgroup mode and in lineage mode.
. "$(dirname "$0")/lib.sh"

all_gone() { # pidfile
	local p left=""
	while read -r p; do [ -n "$p" ] && alive "$p" && left="$left $p"; done <"$1"
	[ -z "$left" ] || { echo "left:$left"; return 1; }
}

cg_root=""
for r in /sys/fs/cgroup/unified /sys/fs/cgroup; do
	if [ "$(stat -f -c %T "$r" 2>/dev/null)" = cgroup2fs ]; then cg_root=$r; break; fi
done

for mode in auto none; do
	# Graceful: the entrypoint and its child ignore SIGTERM.
	rm -f "$D"/*.pids "$D/ready"
	"$PS" --cgroup $mode --grace 3 --audit "$D/a-$mode.jsonl" -- sh -c "trap '' TERM; sleep 1000 & echo \$! >>$D/g.pids; echo \$\$ >>$D/g.pids; echo go >$D/ready; wait" &
	sup=$!
	BG_PIDS+=("$sup")
	wait_file "$D/ready" || fail "[$mode] graceful: never ready"
	sleep 0.2
	start=$(date +%s%N)
	kill -TERM "$sup"
	sleep 0.5
	if all_gone "$D/g.pids" >/dev/null; then fail "[$mode] killed before the grace period"; else ok "[$mode] tree alive during grace"; fi
	wait "$sup"
	rc=$?
	ms=$((($(date +%s%N) - start) / 1000000))
	expect_eq "[$mode] graceful: entrypoint SIGKILLed after grace (rc)" "$rc" 137
	[ "$ms" -ge 2900 ] && [ "$ms" -lt 15000 ] && ok "[$mode] grace honoured (${ms} ms)" || fail "[$mode] grace took ${ms} ms"
	all_gone "$D/g.pids" && ok "[$mode] graceful: nothing left" || fail "[$mode] graceful: processes left"
	if [ $mode = auto ] && [ -n "$cg_root" ]; then
		grep -q '"membership":"cgroup"' "$D/a-$mode.jsonl" && ok "[auto] membership cgroup" || fail "[auto] membership: $(cat "$D/a-$mode.jsonl")"
	else
		grep -q '"membership":"lineage"' "$D/a-$mode.jsonl" && ok "[$mode] membership lineage" || fail "[$mode] membership: $(cat "$D/a-$mode.jsonl")"
	fi

	# Forced: the entrypoint exits 3 leaving a tree: plain background
	# children, a double-forked daemon in its own session, and one that
	# ignores SIGTERM (needs the SIGKILL after the grace period).
	rm -f "$D/f.pids"
	start=$(date +%s%N)
	rm -f "$D/f-$mode.jsonl"
	timeout 30 "$PS" --cgroup $mode --grace 1 --audit "$D/f-$mode.jsonl" -- sh -c "
		sleep 1000 & echo \$! >>$D/f.pids
		(setsid sleep 1000 & echo \$! >>$D/f.pids)
		(sh -c 'trap \"\" TERM; echo \$\$ >>$D/f.pids; exec sleep 1000' &)
		n=0; while [ \$(wc -l <$D/f.pids) -lt 3 ] && [ \$n -lt 100 ]; do sleep 0.05; n=\$((n+1)); done
		exit 3"
	rc=$?
	ms=$((($(date +%s%N) - start) / 1000000))
	expect_eq "[$mode] forced: entrypoint's status" "$rc" 3
	[ "$(wc -l <"$D/f.pids")" -eq 3 ] && ok "[$mode] forced: 3 background pids" || fail "[$mode] forced: pids $(cat "$D/f.pids")"
	all_gone "$D/f.pids" && ok "[$mode] forced: nothing left (${ms} ms)" || fail "[$mode] forced: processes left"
	# Only our own supervisors' cgroups (other suites may run in parallel).
	for a in "$D/a-$mode.jsonl" "$D/f-$mode.jsonl"; do
		cg=$(grep -o '"cgroup":"[^"]*"' "$a" | head -1 | sed 's/"cgroup":"\(.*\)"/\1/')
		[ -n "$cg" ] || continue
		[ -e "$cg" ] || [ -e "${cg%/workload}" ] && fail "[$mode] cgroup left: ${cg%/workload}" || ok "[$mode] cgroup removed: ${cg%/workload}"
	done
done

# In cgroup mode the whole tree sits in <cgroup>/tether-<pid>/workload.
if [ -n "$cg_root" ]; then
	out=$(timeout 10 "$PS" --cgroup auto -- sh -c 'cat /proc/self/cgroup; echo $PPID' | tr '\n' ' ')
	case "$out" in
	*"0::"*"/tether-"*"/workload "*) ok "entrypoint placed in the sandbox cgroup" ;;
	*) fail "cgroup of the entrypoint: $out" ;;
	esac
	out=$(TETHER_FORCE_FALLBACK=cgroup timeout 10 "$PS" --audit - -- true | grep -o '"membership":"[a-z]*"')
	expect_eq "forced fallback: lineage" "$out" '"membership":"lineage"'
fi
finish
