#!/bin/bash
# Exec gateway end to end: `tether exec` against a supervisor that owns the
# gateway (gw_harness by default; GW_SUP=procsup uses the real
# proc-supervisor). stdio/exit/signal propagation, sessions are the
# supervisor's children, PTY (isatty, resize seen by stty size), client
# disconnect kills the session's group, unauthorized uids refused, env
# overlay filter, --cwd, tether ps.
. "$(dirname "$0")/gw_lib.sh"

"$B/tether" keygen --out "$TMP/keys" >/dev/null || exit 1
KEY=$TMP/keys/provisioning.key

start_sup() { # start_sup NAME [harness args]: sets SOCK, STATUS, HPID
	local name=$1; shift
	if [ "${GW_SUP:-harness}" = procsup ]; then
		rm -f "$TMP/$name.exec"
		"${GW_PROCSUP:-$B/proc-supervisor}" --exec-socket "$TMP/$name.exec" --status-socket "$TMP/$name.status" \
			--grace 1 "$@" -- sleep 60 >"$TMP/$name.log" 2>&1 &
		HPID=$!
		PIDS+=($HPID)
		wait_file "$TMP/$name.exec" 50 || { echo "proc-supervisor did not start"; cat "$TMP/$name.log"; return 1; }
	else
		start_harness "$name" "$KEY" "$@" || return 1
	fi
	SOCK=$TMP/$name.exec
	STATUS=$TMP/$name.status
}

start_sup a || exit 1
TX() { timeout 20 "$B/tether" exec --socket "$SOCK" "$@"; }

# 1. stdout, stderr, exit code
out=$(TX -- sh -c 'echo out; echo err >&2; exit 7' 2>"$TMP/err")
rc=$?
check "exit code 7 propagated" [ "$rc" = 7 ]
check "stdout relayed" [ "$out" = out ]
check "stderr relayed" grep -qx err "$TMP/err"

# 2. signals: 128+N
TX -- sh -c 'kill -TERM $$'; rc=$?
check "SIGTERM -> 143" [ "$rc" = 143 ]
TX -- sh -c 'kill -KILL $$'; rc=$?
check "SIGKILL -> 137" [ "$rc" = 137 ]

# 3. the session is the supervisor's own child
ppid=$(TX -- sh -c 'echo $PPID')
check "session ppid is the supervisor ($ppid = $HPID)" [ "$ppid" = "$HPID" ]

# 4. exec errors
TX -- /nonexistent/prog 2>"$TMP/err"; rc=$?
check "not found -> 127" [ "$rc" = 127 ]
check "not found message" grep -q "not found\|No such file" "$TMP/err"
printf '#!/bin/sh\necho no\n' >"$TMP/noexec"; chmod 0644 "$TMP/noexec"
TX -- "$TMP/noexec" 2>/dev/null; rc=$?
check "not executable -> 126" [ "$rc" = 126 ]

# 5. env overlay: TERM passes, other names are dropped at the edge
out=$(TERM=xterm-tt FOO_SECRET=leak TX -- sh -c 'echo "$TERM/${FOO_SECRET:-}"')
check "env overlay: TERM kept, FOO_SECRET dropped ($out)" [ "$out" = "xterm-tt/" ]

# 6. --cwd
out=$(TX --cwd /tmp -- pwd)
check "--cwd" [ "$out" = /tmp ]

# 7. PTY: the child's stdio is a terminal, it is the controlling tty
TX --pty -- sh -c 'test -t 0 && test -t 1 && echo TTY; ps -o tty= -p $$ | grep -q pts && echo CTTY; exit 3' >"$TMP/out"
rc=$?
out=$(tr -d '\r' <"$TMP/out")
check "pty: isatty in the child" grep -qx TTY <<<"$out"
check "pty: controlling tty" grep -qx CTTY <<<"$out"
check "pty: exit code" [ "$rc" = 3 ]

# 8. PTY resize: the client's SIGWINCH becomes ExecResize, seen by stty size
cat >"$TMP/ptyrun.py" <<'EOF'
import fcntl, os, pty, select, struct, sys, termios, time
def setsize(fd, r, c):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", r, c, 0, 0))
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
setsize(fd, 30, 100)
out = b""
t0 = time.time(); resized = False
while time.time() - t0 < 10:
    if not resized and b"READY" in out:
        setsize(fd, 40, 120); resized = True
    r, _, _ = select.select([fd], [], [], 0.1)
    if fd in r:
        try:
            d = os.read(fd, 4096)
        except OSError:
            break
        if not d: break
        out += d
_, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
sys.exit(os.waitstatus_to_exitcode(st))
EOF
# The first size is the one the client sent in ExecRequest (the pty was
# sized before the child ran); the child then waits until the size changes.
out=$(timeout 20 python3 "$TMP/ptyrun.py" "$B/tether" exec --socket "$SOCK" --pty -- \
	sh -c 'stty size; echo READY; i=0; while [ "$(stty size)" = "30 100" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; stty size')
check "pty: initial size from the request" grep -qx "30 100" <<<"$out"
check "pty: resize seen by stty size" grep -qx "40 120" <<<"$out"

# 9. client disconnect kills the session's process group
rm -f "$TMP/lead" "$TMP/bg"
"$B/tether" exec --socket "$SOCK" -- sh -c 'echo $$ >'"$TMP/lead"'.t; mv '"$TMP/lead"'.t '"$TMP/lead"'; sleep 30 & echo $! >'"$TMP/bg"'.t; mv '"$TMP/bg"'.t '"$TMP/bg"'; wait' &
CPID=$!
PIDS+=($CPID)
if wait_file "$TMP/bg" 50 && wait_file "$TMP/lead" 50; then
	LEAD=$(cat "$TMP/lead"); BG=$(cat "$TMP/bg")
	check "session alive before disconnect" [ -n "$(pstate "$BG")" ]
	{ kill -KILL "$CPID"; wait "$CPID"; } 2>/dev/null
	check "disconnect: session leader killed" wait_gone "$LEAD" 50
	check "disconnect: group member killed" wait_gone "$BG" 50
else
	fail "disconnect: session did not start"
fi

# 10. unauthorized uids
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
$NOBODY timeout 10 "$B/tether" exec --socket "$SOCK" -- true 2>"$TMP/err"; rc=$?
check "0600 socket: other uid cannot connect (rc $rc)" [ "$rc" = 125 ]
chmod 0711 "$TMP"; chmod 0666 "$SOCK"
$NOBODY timeout 10 "$B/tether" exec --socket "$SOCK" -- sh -c 'echo RAN' >"$TMP/out" 2>"$TMP/err"; rc=$?
check "peer check: other uid refused (rc $rc)" [ "$rc" = 125 ]
check "peer check: refusal says why" grep -q "not allowed" "$TMP/err"
check "peer check: nothing ran" [ ! -s "$TMP/out" ]
chmod 0600 "$SOCK"

# 11. tether ps
"$B/tether" ps --socket "$STATUS" --json >"$TMP/ps.json"; rc=$?
check "tether ps --json" [ "$rc" = 0 ]
# (A session that exits before the supervisor reads its ref - the quick
# `sh -c 'exit 7'` ones, on a loaded machine - is not in the table; the
# disconnect test's leader lived for seconds, so it must be.)
check "ps: exec sessions recorded as exec_session under the anchor" python3 - "$TMP/ps.json" "$HPID" "${LEAD:-0}" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); anchor = int(sys.argv[2]); lead = int(sys.argv[3])
procs = d["processes"]
akey = [p["key"] for p in procs if p["pid"] == anchor][0]
assert akey == d["anchor_key"], "anchor key"
sess = [p for p in procs if p["join"] == "exec_session"]
assert any(p["pid"] == lead for p in sess), ("the long-lived session", lead, len(sess))
assert all(p["parent_key"] == akey for p in sess)
assert d["mode"] in ("lineage", "cgroup")
EOF
"$B/tether" ps --socket "$STATUS" >"$TMP/ps.txt"
check "ps: tree output" grep -q "exec_session" "$TMP/ps.txt"
check "ps: membership line" grep -q "^membership: " "$TMP/ps.txt"
# (no argument is valid: it looks for a tether run, tests/e2e/ux.sh ps_noarg)
"$B/tether" ps 1 2 >/dev/null 2>&1; rc=$?
check "ps: usage error -> 2" [ "$rc" = 2 ]
"$B/tether" exec --socket "$SOCK" >/dev/null 2>&1; rc=$?
check "exec: usage error -> 2" [ "$rc" = 2 ]

# 12. --ssh without SSH_ORIGINAL_COMMAND-less stdin tty: runs the command through the shell
out=$(SSH_ORIGINAL_COMMAND='echo ssh:$((6*7))' timeout 10 "$B/tether" exec --socket "$SOCK" --ssh </dev/null)
check "--ssh runs SSH_ORIGINAL_COMMAND through the shell's -c ($out)" [ "$out" = ssh:42 ]

finish
