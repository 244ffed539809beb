#!/bin/bash
# The supervisor as PID 1 of a new PID namespace: same init behaviour.
. "$(dirname "$0")/lib.sh"
U="unshare -p -f --mount-proc"

out=$(timeout 20 $U "$PS" -- sh -c 'echo $PPID')
expect_eq "the supervisor is PID 1" "$out" 1
for c in 0 42 255; do
	timeout 20 $U "$PS" -- sh -c "exit $c"
	expect_eq "[pid1] exit code $c" "$?" "$c"
done
timeout 20 $U "$PS" -- sh -c 'kill -KILL $$'
expect_eq "[pid1] SIGKILL -> 137" "$?" 137
out=$(timeout 30 $U "$PS" -- "$T/probe_tree" orphans 100)
expect_eq "[pid1] orphans reaped" "$out" "zombies=0 alive=0"

# SIGTERM from outside the namespace reaches PID 1 and is forwarded.
rm -f "$D/ready"
$U "$PS" -- sh -c "trap 'exit 7' TERM; echo ready >$D/ready; while :; do sleep 0.1; done" &
u=$!
BG_PIDS+=("$u")
wait_file "$D/ready" || fail "[pid1] never ready"
sup=$(cat /proc/$u/task/$u/children 2>/dev/null | awk '{print $1}')
[ -n "$sup" ] && kill -TERM "$sup"
wait "$u"
expect_eq "[pid1] SIGTERM forwarded" "$?" 7

# Graceful shutdown as PID 1: nothing survives (the namespace is gone).
rm -f "$D/ready" "$D/p.pids"
$U "$PS" --grace 1 -- sh -c "trap '' TERM; sleep 1000 & echo go >$D/ready; wait" &
u=$!
BG_PIDS+=("$u")
wait_file "$D/ready" || fail "[pid1] graceful: never ready"
sup=$(cat /proc/$u/task/$u/children 2>/dev/null | awk '{print $1}')
kill -TERM "$sup"
wait "$u"
expect_eq "[pid1] graceful: SIGKILL after grace" "$?" 137

# Workload escape probes behave the same under PID 1; and the kernel fact:
# clone(CLONE_PARENT) by a PID-namespace init itself is EINVAL.
out=$(timeout 20 $U "$PS" -- "$T/probe_escape" clone_parent kill_parent | tr '\n' ' ')
expect_eq "[pid1] clone_parent, kill(1)" "$out" "clone_parent=EPERM kill_parent=EPERM "
out=$(timeout 20 $U "$T/probe_escape" clone_parent)
expect_eq "kernel: CLONE_PARENT from a pidns init" "$out" "clone_parent=EINVAL"
finish
