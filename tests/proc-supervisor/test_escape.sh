#!/bin/bash
# The workload profile: each escape-shaped call denied, ordinary ones not;
# a workload cannot kill or ptrace the supervisor (Landlock scope, and the
# seccomp fallback with --no-landlock).
. "$(dirname "$0")/lib.sh"

want="fork=OK thread=OK posix_spawn=OK tcp_socket=OK udp_socket=OK netlink_socket=OK
clone_parent=EPERM clone_newuser=EPERM unshare_user=EPERM clone3=ENOSYS prctl_mm=EPERM
prctl_mm_highbits=EPERM io_uring=EPERM raw_socket=EPERM raw6_socket=EPERM packet_socket=EPERM
ping_socket=EPERM setns=EPERM mount=EPERM bpf=EPERM perf_event_open=EPERM keyctl=EPERM
userfaultfd=EPERM pidfd_getfd=EPERM open_by_handle_at=EPERM process_vm_readv=EPERM reboot=EPERM
tiocsti=EPERM tiocsti_highbits=EPERM ptrace_self_child=EPERM own_listener=EBUSY
x32_connect=SIGSYS x32_getpid=SIGSYS prlimit_parent=EPERM prlimit_parent_read=OK prlimit_self=OK
setrlimit_self=OK vsock_socket=EPERM setown_self=OK
vhangup=EPERM"
out=$(timeout 20 "$PS" -- "$T/probe_escape" all </dev/null)
expect_eq "probe rc" "$?" 0
for w in $want; do
	name=${w%%=*}
	got=$(printf '%s\n' "$out" | grep "^$name=" | head -1)
	expect_eq "$name" "$got" "$w"
done

# The same probes without the profile succeed (or fail otherwise): the
# denials above come from the filter, not from the machine.
out=$(timeout 20 "$PS" --no-seccomp -- "$T/probe_escape" raw_socket io_uring clone_parent clone3 prlimit_parent \
	vsock_socket x32_connect 2>/dev/null | tr '\n' ' ')
case "$out" in
*"raw_socket=EPERM"* | *"io_uring=EPERM"* | *"clone_parent=EPERM"* | *"clone3=ENOSYS"* | *"prlimit_parent=EPERM"* | \
	*"vsock_socket=EPERM"* | *"x32_connect=SIGSYS"*)
	fail "without seccomp the probes still fail: $out" ;;
*) ok "control run without seccomp: $out" ;;
esac

# i386 syscalls (int $0x80) meet the filter's bad-arch action: the process
# is killed. Only where the kernel runs IA-32 code at all (without the
# profile int $0x80 then works; with IA-32 emulation off it faults first).
ctl=$(timeout 20 "$PS" --no-seccomp -- "$T/probe_escape" int80_getpid 2>/dev/null)
if [ "$ctl" = "int80_getpid=OK" ]; then
	got=$(timeout 20 "$PS" -- "$T/probe_escape" int80_getpid </dev/null)
	expect_eq "int80_getpid" "$got" "int80_getpid=SIGSYS"
else
	ok "int \$0x80 not available here ($ctl): i386 covered by test_procsup_seccomp_bpf only"
fi

# /dev/userfaultfd hands out the same userfaultfd the syscall rule denies.
if [ -c /dev/userfaultfd ]; then
	got=$(timeout 20 "$PS" -- "$T/probe_escape" userfaultfd_dev </dev/null)
	expect_eq "userfaultfd_dev" "$got" "userfaultfd_dev=EPERM"
	got=$(timeout 20 "$PS" --no-seccomp -- "$T/probe_escape" userfaultfd_dev </dev/null 2>/dev/null)
	[ "$got" != "userfaultfd_dev=EPERM" ] && ok "control: $got" || fail "without seccomp: $got"
else
	ok "no /dev/userfaultfd here"
fi

# Threat 10: signals (kill, pidfd, rt_sigqueueinfo with si_code SI_QUEUE),
# ptrace, and limits the kernel enforces with SIGKILL (RLIMIT_CPU), which
# Landlock does not scope.
for ll in "" --no-landlock; do
	out=$(timeout 20 "$PS" $ll -- "$T/probe_escape" kill_parent0 ptrace_parent pidfd_kill_parent kill_parent \
		sigqueue_parent0 tgsigqueue_parent0 sigqueue_parent tgsigqueue_parent prlimit_parent_cpu 2>/dev/null)
	rc=$?
	expect_eq "[${ll:-landlock}] supervisor survives (rc)" "$rc" 0
	for w in kill_parent0=EPERM ptrace_parent=EPERM pidfd_kill_parent=EPERM kill_parent=EPERM \
		sigqueue_parent0=EPERM tgsigqueue_parent0=EPERM sigqueue_parent=EPERM tgsigqueue_parent=EPERM \
		prlimit_parent_cpu=EPERM; do
		got=$(printf '%s\n' "$out" | grep "^${w%%=*}=")
		expect_eq "[${ll:-landlock}] ${w%%=*}" "$got" "$w"
	done
done

# SIGIO: F_SETOWN names the receiver, F_SETSIG makes it SIGKILL. Under
# Landlock setting the owner works and the signal is not delivered; the
# seccomp fallback refuses the owner (and F_SETOWN_EX / FIOSETOWN, whose
# pid it cannot read).
out=$(timeout 20 "$PS" -- "$T/probe_escape" sigio_kill_parent setown_self 2>/dev/null)
expect_eq "[landlock] SIGIO SIGKILL: supervisor survives (rc)" "$?" 0
expect_eq "[landlock] setown_self" "$(printf '%s\n' "$out" | grep '^setown_self=')" "setown_self=OK"
out=$(timeout 20 "$PS" --no-landlock -- "$T/probe_escape" sigio_kill_parent setown_ex_parent fiosetown_parent \
	setown_self 2>/dev/null)
expect_eq "[--no-landlock] SIGIO SIGKILL: supervisor survives (rc)" "$?" 0
for w in sigio_kill_parent=EPERM setown_ex_parent=EPERM fiosetown_parent=EPERM setown_self=OK; do
	expect_eq "[--no-landlock] ${w%%=*}" "$(printf '%s\n' "$out" | grep "^${w%%=*}=")" "$w"
done

# The rule table is listed (and documented in docs/threat-model.md).
n=$("$PS" --list-seccomp | wc -l)
[ "$n" -ge 40 ] && ok "--list-seccomp lists $n rules" || fail "--list-seccomp: $n lines"
if [ -n "${TETHER_SRC:-}" ] && [ -f "$TETHER_SRC/docs/threat-model.md" ]; then
	missing=""
	for s in $("$PS" --list-seccomp | awk '{print $1}' | sort -u); do
		case "$s" in "(any") continue ;; esac
		s=${s%,} # the first of a list ("kill, tkill, ...")
		grep -q "\`$s\`" "$TETHER_SRC/docs/threat-model.md" || missing="$missing $s"
	done
	[ -z "$missing" ] && ok "every rule documented" || fail "rules not in docs/threat-model.md:$missing"
fi
finish
