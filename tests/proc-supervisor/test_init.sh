#!/bin/bash
# Init behaviour (tini/dumb-init style): exit codes, signals, reaping,
# the child's starting state.
. "$(dirname "$0")/lib.sh"

for c in 0 1 42 255; do
	timeout 20 "$PS" -- sh -c "exit $c"
	expect_eq "exit code $c preserved" "$?" "$c"
done
timeout 20 "$PS" -- sh -c 'kill -KILL $$'
expect_eq "SIGKILL -> 128+9" "$?" 137
timeout 20 "$PS" -- sh -c 'kill -TERM $$'
expect_eq "SIGTERM -> 128+15" "$?" 143
timeout 20 "$PS" -- /nonexistent/tether-cmd 2>"$D/err"
expect_eq "not found -> 127" "$?" 127
grep -q "command not found" "$D/err" && ok "not-found message" || fail "message: $(cat "$D/err")"
timeout 20 "$PS" -- /etc/passwd 2>"$D/err"
expect_eq "not executable -> 126" "$?" 126
timeout 5 "$PS" --grace nope -- true 2>/dev/null
expect_eq "usage error -> 2" "$?" 2
timeout 5 "$PS" --help | grep -q "Usage: proc-supervisor" && ok "--help" || fail "--help"

# SIGTERM forwarded to the entrypoint, which traps it and exits 7.
"$PS" -- sh -c "trap 'exit 7' TERM; echo ready >$D/ready; while :; do sleep 0.1; done" &
sup=$!
BG_PIDS+=("$sup")
wait_file "$D/ready" || fail "entrypoint never ready"
kill -TERM "$sup"
wait "$sup"
expect_eq "SIGTERM forwarded, entrypoint's exit 7" "$?" 7

# SIGUSR1 forwarded too (entrypoint exits 9 on it), with --signal-group.
rm -f "$D/ready"
"$PS" --signal-group -- sh -c "trap 'exit 9' USR1; echo ready >$D/ready; while :; do sleep 0.1; done" 2>/dev/null &
sup=$!
BG_PIDS+=("$sup")
wait_file "$D/ready" || fail "entrypoint never ready (2)"
kill -USR1 "$sup"
wait "$sup"
expect_eq "SIGUSR1 forwarded to the group" "$?" 9

# 100 double-forked, short-lived orphans: all reaped by the supervisor.
out=$(timeout 30 "$PS" -- "$T/probe_tree" orphans 100)
expect_eq "orphans reaped (rc)" "$?" 0
expect_eq "orphans reaped" "$out" "zombies=0 alive=0"

# The child's environment is built by the env boundary, never inherited
# wholesale: the supervisor's secrets and unknown variables stay out.
out=$(SECRET_TOKEN=xyz ANTHROPIC_API_KEY=sk-ant-test TETHER_PROBE_VAR=1 timeout 10 "$PS" --audit "$D/env.jsonl" -- /usr/bin/env)
printf '%s\n' "$out" | grep -qE '^(SECRET_TOKEN|ANTHROPIC_API_KEY|TETHER_PROBE_VAR)=' && fail "secret passed: $out" || ok "secrets not inherited"
printf '%s\n' "$out" | grep -q '^PATH=/' && ok "PATH set" || fail "no PATH: $out"
grep -q '"event":"env_boundary".*"name":"ANTHROPIC_API_KEY"' "$D/env.jsonl" && ok "env_boundary audited" || fail "env_boundary: $(cat "$D/env.jsonl")"
grep -q 'sk-ant-test' "$D/env.jsonl" && fail "a value reached the audit log" || ok "no values in the audit log"
timeout 10 "$PS" --audit "$D/argv.jsonl" -- /bin/true --api-key=hunter2 x
grep -q '"argv":\["/bin/true","--api-key=\[REDACTED\]","x"\]' "$D/argv.jsonl" && ok "argv redacted in process_spawn" || fail "argv: $(cat "$D/argv.jsonl")"

# Signal mask and ignored signals are as the supervisor was started with
# (USR1 and PIPE ignored here; test_sigconf.sh has the whole matrix), not
# its own SIGPIPE/SIGTTOU/SIGTTIN ignores; fds >2 closed; no_new_privs,
# seccomp, RLIMIT_CORE=0.
exec 7>"$D/leak"
out=$(sh -c "trap '' USR1 PIPE; exec timeout 10 $PS -- /bin/cat /proc/self/status" | grep -E '^(SigBlk|SigIgn|NoNewPrivs|Seccomp):' | tr -s '\t' ' ' | tr '\n' ';')
exec 7>&-
expect_eq "signal/nnp/seccomp state" "$out" "SigBlk: 0000000000000000;SigIgn: 0000000000001200;NoNewPrivs: 1;Seccomp: 2;"
exec 7>"$D/leak"
out=$(timeout 10 "$PS" -- /bin/ls /proc/self/fd | tr '\n' ' ')
exec 7>&-
expect_eq "only stdio (and ls's own dir fd) open" "$out" "0 1 2 3 "
out=$(timeout 10 "$PS" -- sh -c 'ulimit -c')
expect_eq "RLIMIT_CORE" "$out" "0"

# The supervisor is not dumpable and workloads lack CAP_SYS_PTRACE: a root
# workload can read neither its memory nor its environment (and the
# environment strings are zeroed besides), with or without Landlock.
for ll in "" --no-landlock; do
	out=$(TETHER_TEST_SECRET=hunter2 timeout 10 "$PS" $ll -- sh -c 'cat /proc/$PPID/mem >/dev/null 2>&1 && echo mem-readable || echo mem-denied; grep -c hunter2 /proc/$PPID/environ 2>/dev/null || true' | tr '\n' ' ')
	case "$out" in
	"mem-denied 0 " | "mem-denied ") ok "[${ll:-landlock}] supervisor memory/environ hidden ($out)" ;;
	*) fail "[${ll:-landlock}] supervisor memory/environ: $out" ;;
	esac
done
out=$(timeout 10 "$PS" -- grep CapEff /proc/self/status | awk '{print $2}')
[ $((0x$out & (1 << 19))) -eq 0 ] && ok "CAP_SYS_PTRACE dropped" || fail "CapEff $out"

# Audit events.
timeout 10 "$PS" --audit "$D/audit.jsonl" --topology combined -- sh -c 'exit 3'
grep -q '"event":"process_spawn".*"topology":"combined".*"kind":"entrypoint".*"argv0":"sh"' "$D/audit.jsonl" &&
	ok "process_spawn audited" || fail "process_spawn: $(cat "$D/audit.jsonl")"
grep -q '"event":"process_exit".*"exit_code":3' "$D/audit.jsonl" && ok "process_exit audited" ||
	fail "process_exit: $(cat "$D/audit.jsonl")"
finish
