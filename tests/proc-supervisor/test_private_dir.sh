#!/bin/bash
# A program in a directory the workload's uid cannot enter (a build in a
# 0700 home): the supervisor, which can, opens it and the workload execs
# that fd, the same file (/proc/self/exe names it, same dev:ino; audit
# exec_by_fd). A #! script there cannot run that way and fails at once
# with a message that says what to do; a file the uid may not execute
# still fails as before, naming the uid. Without --user nothing changes.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
jq --version >/dev/null 2>&1 || { echo "SKIP: no jq"; exit 77; }
P=$(mktemp -d /tmp/tether-private.XXXXXX) # 0700, root's
trap 'rm -rf "$P"; cleanup' EXIT
chmod 700 "$P"
mkdir -m 755 "$P/bin"
for b in readlink stat cat; do cp "$(command -v $b)" "$P/bin/$b"; done
chmod 755 "$P/bin"/*
spawn_field() { jq -r --arg f "$2" 'select(.event == "process_spawn") | .[$f] // "-"' "$1" | head -1; }

# sanity: nobody really cannot reach it (through sh: setpriv's own exec
# still has its capabilities)
setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c '"$0" /dev/null' "$P/bin/cat" 2>/dev/null &&
	{ echo "SKIP: nobody can enter $P"; exit 77; }

out=$(timeout 20 "$PS" --cgroup none --user nobody --audit "$D/a1.jsonl" -- "$P/bin/readlink" /proc/self/exe 2>>"$D/stderr")
expect_eq "[fd] rc" "$?" 0
expect_eq "[fd] /proc/self/exe is the file" "$out" "$P/bin/readlink"
expect_eq "[fd] audit exec_by_fd" "$(spawn_field "$D/a1.jsonl" exec_by_fd)" true
expect_eq "[fd] audit exe" "$(spawn_field "$D/a1.jsonl" exe)" "$P/bin/readlink"
out=$(timeout 20 "$PS" --cgroup none --user nobody -- "$P/bin/stat" -L -c '%d:%i' /proc/self/exe 2>>"$D/stderr")
expect_eq "[fd] exe dev:ino" "$out" "$(stat -c '%d:%i' "$P/bin/stat")"
out=$(timeout 20 "$PS" --cgroup none --user nobody -- "$P/bin/cat" /proc/self/status 2>&1)
expect_eq "[fd] runs as nobody" "$(awk '/^Uid:/{print $2}' <<<"$out")" "$(id -u nobody)"
# comm follows the file's name where the kernel supports it (6.14: before,
# execveat(AT_EMPTY_PATH) named the process after the fd number)
echo "info: comm of a process exec'd by fd: $(timeout 20 "$PS" --cgroup none --user nobody -- "$P/bin/cat" /proc/self/comm)"

# connect-time attribution of a process exec'd by fd names the file
cp "$T/probe_connect" "$P/bin/probe_connect" && chmod 755 "$P/bin/probe_connect"
"$T/probe_connect" serve "$D/port" 30 &
BG_PIDS+=("$!")
disown "$!"
if wait_file "$D/port"; then
	out=$(timeout 20 "$PS" --cgroup none --user nobody --debug-registry "$D/reg.json" -- \
		"$P/bin/probe_connect" connect "$(cat "$D/port")")
	cookie=$(printf '%s' "$out" | sed -n 's/^cookie=\([0-9]*\) pid=.*/\1/p')
	got=$(jq -r --arg c "$cookie" '.attributions[] | select(.cookie == $c) | "\(.found) \(.exe) \(.exe_ino)"' "$D/reg.json")
	expect_eq "[fd] connect attributed to the file" "$got" "true $P/bin/probe_connect $(stat -c %i "$P/bin/probe_connect")"
else
	fail "[fd] test server never listened"
fi

# a #! script: clear failure, 126
printf '#!/bin/sh\necho script-ran\n' >"$P/bin/s.sh"
chmod 755 "$P/bin/s.sh"
out=$(timeout 20 "$PS" --cgroup none --user nobody -- "$P/bin/s.sh" 2>&1)
expect_eq "[script] rc" "$?" 126
grep -q "is a #! script in a directory uid $(id -u nobody) cannot enter" <<<"$out" && ok "[script] message says why" ||
	fail "[script] message: $out"

# a file nobody may not execute at all (mode 0700, root's): 126, names the uid
mkdir -m 755 "$D/pub"
cp /bin/true "$D/pub/t" && chmod 700 "$D/pub/t"
chmod 755 "$D"
out=$(timeout 20 "$PS" --cgroup none --user nobody -- "$D/pub/t" 2>&1)
expect_eq "[mode] rc" "$?" 126
grep -q "Permission denied for the workload's uid $(id -u nobody)" <<<"$out" && ok "[mode] message names the uid" ||
	fail "[mode] message: $out"

# without --user: the path, as before (no fd)
out=$(timeout 20 "$PS" --cgroup none --audit "$D/a2.jsonl" -- "$P/bin/readlink" /proc/self/exe 2>>"$D/stderr")
expect_eq "[root] /proc/self/exe" "$out" "$P/bin/readlink"
expect_eq "[root] no exec_by_fd" "$(spawn_field "$D/a2.jsonl" exec_by_fd)" -

# git over ssh names tether by its path, which cannot be exec'd by fd: a
# tether beside the supervisor out of the workload's reach is a warning
if [ -x "$TETHER_BIN/tether" ]; then
	cp "$PS" "$P/bin/proc-supervisor" && cp "$TETHER_BIN/tether" "$P/bin/tether"
	printf 'version: 1\nenvironment:\n  git_ssh_via_proxy: true\n' >"$D/git.yaml"
	chmod 644 "$D/git.yaml"
	out=$(timeout 20 "$P/bin/proc-supervisor" --cgroup none --user nobody --policy "$D/git.yaml" \
		--proxy http://127.0.0.1:9 -- true 2>&1)
	grep -q "warning: environment.git_ssh_via_proxy: uid $(id -u nobody) cannot execute $P/bin/tether" <<<"$out" &&
		ok "[git ssh] warned" || fail "[git ssh] no warning: $out"
fi
finish
