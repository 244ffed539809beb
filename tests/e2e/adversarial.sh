#!/bin/bash
# e2e: adversarial cases through `tether run --topology TOPO`, one CASE per call.
#
#   adversarial.sh CASE TOPO   (env: TETHER_BIN, TETHER_SRC; TETHER_BIN_DIR optional)
#
#   pid_reuse           (every topology) the entrypoint runs the allowed curl
#                       through the proxy; once it has exited, the test sets
#                       the sandbox PID namespace's ns_last_pid so that the
#                       entrypoint's next child, wget (not in the policy),
#                       gets curl's pid. That flow must be denied with
#                       wget's own identity: a pid never carries another
#                       process's identity (no stale cache, no stale walk).
#   vm_pid1_unstatable  (vm-local, vm-delegated) the guest's PID 1 (the
#                       runtime init) runs from an image whose path no
#                       longer exists, and still an allowed curl is allowed
#                       in the same run, with no ancestor above the anchor.
#
# The harness (netns, fake internet, audit checks) is lib.sh.
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"

# On a failure the entrypoint may still block on its FIFO: SIGKILL our
# `tether run` (its guardian tears the sandbox down, as launcher_killed
# shows) before lib.sh's cleanup, instead of leaving it to `timeout`.
adversarial_cleanup() {
	local t
	if [ -n "$RUN_PID" ] && t=$(descendant_of_exe "$RUN_PID" "$(readlink -f "$TETHER")"); then
		kill -9 "$t" 2>/dev/null
		wait_for 8 sh -c "! kill -0 $RUN_PID 2>/dev/null || [ \"\$(cut -d' ' -f3 /proc/$RUN_PID/stat)\" = Z ]"
	fi
	cleanup
}
trap adversarial_cleanup EXIT

# Start the entrypoint (a script) in the background; wait until it runs
# and the proxy is ready.
start_run() { # start_run SCRIPT
	inside timeout 30 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" --policy "$WORK/p.yaml" \
		-- "$1" >"$WORK/out" 2>&1 &
	RUN_PID=$!
	wait_for 10 grep -qs '"event":"process_spawn"' "$AUDIT" || fail "entrypoint did not start"
	wait_ready
}

finish_run() {
	touch "$WORK/rw/done"
	wait "$RUN_PID"; RC=$?; RUN_PID=""
}

# The proc-supervisor's host pid (the walk in lib.sh starts from our own
# `tether run`).
procsup_pid() { sandbox_pid_of_exe "$(readlink -f "$PROCSUP_BIN")"; }

# Last field of NSpid: the pid as the process's own PID namespace sees it.
ns_pid() { awk '/^NSpid:/ { print $NF }' /proc/"$1"/status 2>/dev/null; }

case "$CASE:$TOPO" in
vm_pid1_unstatable:vm-local|vm_pid1_unstatable:vm-delegated|pid_reuse:*) ;;
vm_pid1_unstatable:*) skip "only the vm topologies have a foreign PID 1" ;;
esac
setup_net
policy "$WORK/p.yaml"

case "$CASE" in
pid_reuse)
	# The entrypoint: per attempt, curl (allowed) in the background, its
	# pid recorded, reaped; then block on a FIFO (a builtin read: no fork
	# consumes a pid meanwhile) until the test has set ns_last_pid, and
	# start wget at once. Attempts repeat (bounded) in case something else
	# in the namespace (a daemon's thread) took the pid first.
	FIFO="$WORK/rw/go"
	mkfifo -m 666 "$FIFO" || fail "mkfifo"
	cat >"$WORK/e.sh" <<EOF
#!/bin/bash
for n in 1 2 3 4 5; do
	curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 $URL >$WORK/rw/curl.\$n 2>&1 &
	p=\$!
	wait \$p
	echo \$p >$WORK/rw/curl.\$n.pid
	read -r go <$FIFO || exit 3
	wget -q -O /dev/null -T 10 -t 1 $URL >$WORK/rw/wget.\$n 2>&1 &
	q=\$!
	wait \$q
	echo "\$? \$q" >$WORK/rw/wget.\$n.pid
	read -r next <$FIFO || exit 3
	[ "\$next" = again ] || exit 0
done
EOF
	chmod 755 "$WORK/e.sh"
	start_run "$WORK/e.sh"
	P=$(procsup_pid) || fail "proc-supervisor not found"
	matched=""
	for n in 1 2 3 4 5; do
		wait_for 12 test -s "$WORK/rw/curl.$n.pid" || fail "attempt $n: curl did not finish"
		cpid=$(cat "$WORK/rw/curl.$n.pid")
		grep -qx 200 "$WORK/rw/curl.$n" || fail "attempt $n: the allowed curl did not get 200: $(cat "$WORK/rw/curl.$n")"
		# the next pid allocated in the sandbox PID namespace is cpid: the
		# writer (nsenter's child) already has its own pid
		nsenter --target "$P" --pid -- sh -c "echo $((cpid - 1)) >/proc/sys/kernel/ns_last_pid" ||
			skip "cannot write ns_last_pid in the sandbox PID namespace"
		timeout 10 sh -c "echo go >$FIFO" || fail "attempt $n: the entrypoint does not read its FIFO"
		wait_for 12 test -s "$WORK/rw/wget.$n.pid" || fail "attempt $n: wget did not finish"
		read -r wrc wpid <"$WORK/rw/wget.$n.pid"
		[ "$wrc" = 0 ] && fail "attempt $n: wget (pid $wpid) got through the proxy"
		if [ "$wpid" = "$cpid" ]; then
			matched=$n
			break
		fi
		echo "attempt $n: wget got pid $wpid, curl had $cpid; again"
		[ "$n" = 5 ] || timeout 10 sh -c "echo again >$FIFO" || fail "attempt $n: the entrypoint does not read its FIFO"
	done
	timeout 10 sh -c "echo stop >$FIFO" || fail "the entrypoint does not read its FIFO"
	finish_run
	[ -n "$matched" ] || skip "pid $cpid was never reused in 5 attempts"
	echo "attempt $matched: wget reused curl's pid $cpid"
	# Every curl flow allowed, every wget flow denied as wget's own
	# (no_matching_policy) or with no identity at all: never an allow
	# beyond one per curl run, never curl's identity for a wget flow.
	python3 - "$AUDIT" "$matched" "$cpid" <<'PY' || fail "pid reuse: wrong decisions"
import json, sys
n, reused = int(sys.argv[2]), int(sys.argv[3])
d = [json.loads(l) for l in open(sys.argv[1])]
d = [e for e in d if e.get("event") == "egress_decision"]
print("decisions:", [(e["decision"], e["reason"], (e.get("binary") or {}).get("path"), e.get("pid")) for e in d])
allows = [e for e in d if e["decision"] == "allow"]
denies = [e for e in d if e["decision"] == "deny"]
ok = True
if len(allows) != n or any((e.get("binary") or {}).get("path") != "/usr/bin/curl" for e in allows):
    print(f"expected exactly {n} allows, all /usr/bin/curl"); ok = False
if len(denies) != n:
    print(f"expected exactly {n} denies (one per wget)"); ok = False
for e in denies:
    path = (e.get("binary") or {}).get("path")
    if path not in ("/usr/bin/wget", None):
        print(f"a wget flow carries the identity of {path}"); ok = False
    if path == "/usr/bin/wget" and e["reason"] != "no_matching_policy":
        print(f"wget denied with {e['reason']}, not no_matching_policy"); ok = False
# the daemon saw the reuse: the last curl and the wget it was denied as
# share the pid (as the sandbox's PID namespace numbers it)
if not any(e.get("pid") == reused for e in allows) or \
   not any(e.get("pid") == reused and (e.get("binary") or {}).get("path") == "/usr/bin/wget" for e in denies):
    print(f"no allowed curl and denied wget both with pid {reused} in the audit"); ok = False
sys.exit(0 if ok else 1)
PY
	check_audit_common
	;;
vm_pid1_unstatable)
	cat >"$WORK/e.sh" <<EOF
#!/bin/sh
curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 $URL >$WORK/rw/curl.out 2>&1
echo finished >>$WORK/rw/curl.out
i=0; while [ ! -e $WORK/rw/done ] && [ \$i -lt 400 ]; do sleep 0.05; i=\$((i+1)); done
EOF
	chmod 755 "$WORK/e.sh"
	start_run "$WORK/e.sh"
	P=$(procsup_pid) || fail "proc-supervisor not found"
	# the guest's PID 1 is the proc-supervisor's parent
	I=$(awk '/^PPid:/ { print $2 }' /proc/"$P"/status)
	[ "$(ns_pid "$I")" = 1 ] || fail "the proc-supervisor's parent $I is not PID 1 of its namespace (NSpid $(ns_pid "$I"))"
	exe=$(readlink /proc/"$I"/exe) || fail "cannot read the runtime init's exe link"
	case "$exe" in
	*" (deleted)") ;;
	*) fail "the runtime init runs from a live file: $exe" ;;
	esac
	path=${exe% (deleted)}
	echo "guest PID 1 (host pid $I) runs from: $exe"
	case "$path" in */tether-runtime-init) ;; *) fail "PID 1 is not the runtime init: $exe" ;; esac
	# The path its exe link names resolves nowhere: not in its own mount
	# namespace (through /proc/PID/root and by entering it), not here.
	stat "/proc/$I/root$path" >/dev/null 2>&1 && fail "$path still stat-able in the guest's mount namespace"
	nsenter --target "$I" --mount -- stat "$path" >/dev/null 2>&1 && fail "$path stat-able after entering PID 1's mount ns"
	if stat "$path" >/dev/null 2>&1 && [ "$(stat -L -c %d:%i "$path")" = "$(stat -L -c %d:%i /proc/"$I"/exe)" ]; then
		fail "$path is PID 1's image, stat-able from the host"
	fi
	wait_for 12 grep -qx finished "$WORK/rw/curl.out" || fail "curl did not finish"
	finish_run
	[ "$RC" = 0 ] || fail "tether run rc=$RC"
	grep -qx 200 "$WORK/rw/curl.out" || fail "allowed curl did not get 200 under an unstat-able PID 1: $(cat "$WORK/rw/curl.out")"
	expect_decision /usr/bin/curl allow:allowed
	# the walk stopped at the anchor: no ancestor is the runtime init
	python3 - "$AUDIT" <<'PY' || fail "an allowed flow's ancestry went above the anchor"
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "egress_decision" and e.get("decision") == "allow":
        for a in e.get("ancestors") or []:
            if "tether-runtime-init" in (a.get("path") or "") or a.get("pid") == 1:
                print("ancestor above the anchor:", a); sys.exit(1)
PY
	check_audit_common
	;;
*) fail "unknown case" ;;
esac
# a sanitizer build reports on stderr; any report is a failure
grep -q "AddressSanitizer\|LeakSanitizer\|runtime error:" "$WORK/out" 2>/dev/null &&
	fail "sanitizer report in the output"
echo "PASS [$CASE $TOPO]"
exit 0
