#!/bin/bash
# `tether exec --ssh` as sshd's ForceCommand, in an image without bash.
#
# A real sshd (Debian openssh-server) listens on 127.0.0.1 inside a test
# network namespace; its ForceCommand is `tether exec --socket S --ssh`.
# The supervisor (GW_SUP=procsup: the real proc-supervisor, else the module
# harness) runs in a private mount namespace where /usr/bin/bash (= /bin/bash)
# is an empty file, and exec.shell is unset: the passwd shell of root
# (/bin/bash) is unusable there, so /bin/sh (dash) runs the command. Checks:
# a non-PTY command and a PTY one (ssh -tt) and a login shell run as the
# supervisor's own children, through /bin/sh, the PTY one on a pts.
. "$(dirname "$0")/gw_lib.sh"

for t in /usr/sbin/sshd ssh ssh-keygen ip unshare; do
	command -v "$t" >/dev/null || { echo "SKIP: $t missing"; exit 0; }
done
NS=tt-gw-$$
EXTRA_CLEANUP='[ -f "$TMP/sshd.pid" ] && kill "$(cat "$TMP/sshd.pid")" 2>/dev/null; ip netns del '"$NS"' 2>/dev/null; true'
chmod 0711 "$TMP"

# The supervisor, bash-less.
: >"$TMP/empty"; chmod 0755 "$TMP/empty"
SOCK=$TMP/exec.sock
if [ "${GW_SUP:-harness}" = procsup ]; then
	SUPCMD="exec \"${GW_PROCSUP:-$B/proc-supervisor}\" --exec-socket \"$SOCK\" --status-socket \"$TMP/status.sock\" --grace 1 -- sleep 60"
else
	"$B/tether" keygen --out "$TMP/keys" >/dev/null || exit 1
	SUPCMD="exec \"$TT/gw_harness\" --exec-socket \"$SOCK\""
fi
unshare -m --propagation private sh -c "mount --bind \"$TMP/empty\" /usr/bin/bash && $SUPCMD" \
	>"$TMP/sup.out" 2>"$TMP/sup.log" &
SPID=$!
PIDS+=($SPID)
wait_file "$SOCK" 50 || { fail "supervisor did not start"; cat "$TMP/sup.log"; finish; }
check "bash is absent in the supervisor's mount namespace" \
	bash -c '[ ! -s /proc/$1/root/usr/bin/bash ]' _ "$SPID"

# sshd in its own netns, loopback only.
ip netns add "$NS" || { fail "netns"; finish; }
ip -n "$NS" link set lo up
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$TMP/hostkey" || exit 1
ssh-keygen -q -t ed25519 -N '' -f "$TMP/userkey" || exit 1
cp "$TMP/userkey.pub" "$TMP/authorized_keys"
cat >"$TMP/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port 2222
HostKey $TMP/hostkey
PidFile $TMP/sshd.pid
AuthorizedKeysFile $TMP/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
ForceCommand $B/tether exec --socket $SOCK --ssh
EOF
ip netns exec "$NS" /usr/sbin/sshd -D -e -f "$TMP/sshd_config" 2>"$TMP/sshd.log" &
PIDS+=($!)
for _ in $(seq 1 50); do ip netns exec "$NS" bash -c 'exec 3<>/dev/tcp/127.0.0.1/2222' 2>/dev/null && break; sleep 0.1; done
SSH() {
	timeout 20 ip netns exec "$NS" ssh -F none -i "$TMP/userkey" -p 2222 -o BatchMode=yes \
		-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR root@127.0.0.1 "$@"
}

# non-PTY
out=$(SSH 'echo "ppid=$PPID shell=$0"; test -t 0 && echo TTY || echo NOTTY; exit 5' </dev/null)
rc=$?
echo "non-pty: $out"
check "ssh non-PTY: exit code through ssh" [ "$rc" = 5 ]
check "ssh non-PTY: a child of the supervisor ($SPID)" grep -q "ppid=$SPID " <<<"$out"
check "ssh non-PTY: /bin/sh, not bash" grep -q "shell=/bin/sh$" <<<"$out"
check "ssh non-PTY: no tty" grep -qx NOTTY <<<"$out"

# PTY (ssh -tt)
out=$(SSH -tt 'echo "ppid=$PPID shell=$0"; tty' </dev/null | tr -d '\r')
echo "pty: $out"
check "ssh PTY: a child of the supervisor" grep -q "ppid=$SPID " <<<"$out"
check "ssh PTY: /bin/sh" grep -q "shell=/bin/sh$" <<<"$out"
check "ssh PTY: on a pts" grep -q "^/dev/pts/" <<<"$out"

# login shell (no command): the supervisor's /bin/sh -l on a pty
out=$( (sleep 1; printf 'echo "login ppid=$PPID"; exit 0\n'; sleep 2) | SSH -tt | tr -d '\r')
echo "login: $out"
check "ssh login shell: a child of the supervisor" grep -q "login ppid=$SPID" <<<"$out"

finish
