#!/bin/bash
# e2e: what the person at the terminal sees of `tether run` (issue 20,
# "Seeing why"), one CASE per call, real curl/wget against the fake
# internet of lib.sh.
#
#   ux.sh CASE [TOPO]   (env: TETHER_BIN, TETHER_SRC)
#
#   deny_line        a denied flow prints one line on stderr: binary,
#                    destination, reason word, the rule that would allow it
#   rate_limit       a burst of denials: 20 lines, then one summary line
#   quiet            --quiet prints no denial line
#   verbose_allowed  -v prints a line for an allowed flow
#   clean_silent     a clean run prints nothing of tether's
#   missing_policy   no policy at all, or a .tether.yaml without `network:`:
#                    125 at once (well before a 5 s bound) naming what is missing
#   project_layer    a project .tether.yaml's network rules add to --policy's;
#                    the audit lists both files
#   entrypoint_exit  the entrypoint leaves a process behind: one line says it
#                    is stopped; --wait-all waits for it instead
#   ps_noarg         `tether ps` without arguments inside the sandbox
#   connect_path     `tether` is on the sandbox's PATH, and `tether connect`
#                    reaches the fake internet through the proxy
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"

# run_split [tether run options] -- CMD...: stdout to out, stderr to err
run_split() {
	inside timeout 30 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" "$@" >"$WORK/out" 2>"$WORK/err.raw"
	RC=$?
	no_sanitizer_noise <"$WORK/err.raw" >"$WORK/err"
}
err() { cat "$WORK/err"; }

setup_net
policy "$WORK/p.yaml"
WGET="wget -q -O /dev/null -T 10 -t 1 $URL"
CURL="curl -sS -o /dev/null -w %{http_code}\n --max-time 10 $URL"

case "$CASE" in
deny_line)
	run_split --policy "$WORK/p.yaml" -- $WGET
	[ "$RC" != 0 ] || fail "wget succeeded"
	expect_decision /usr/bin/wget deny:no_matching_policy
	grep -q '^tether: denied /usr/bin/wget .*-> 198\.51\.100\.10:8080 reason=no_matching_policy' "$WORK/err" ||
		fail "no denial line on stderr: $(err)"
	grep -qF '; to allow: add to policy "test-server": binaries: [{path: /usr/bin/wget}]' "$WORK/err" ||
		fail "no hint naming the rule and the binary: $(err)"
	[ "$(grep -c '^tether: denied' "$WORK/err")" = 1 ] || fail "not one line for one denied flow: $(err)"
	check_audit_common
	;;
rate_limit)
	# 25 denials in a burst: 20 lines, then one line with the rest's count
	run_split --policy "$WORK/p.yaml" -- sh -c "for i in \$(seq 25); do $WGET; done; true"
	[ "$(decisions /usr/bin/wget | grep -c deny:no_matching_policy)" = 25 ] || fail "not 25 denials in the audit"
	[ "$(grep -c '^tether: denied /usr/bin/wget ' "$WORK/err")" = 20 ] ||
		fail "not 20 denial lines: $(grep -c '^tether: denied' "$WORK/err")"
	grep -qx 'tether: 5 more denials not shown (see the audit log)' "$WORK/err" || fail "no summary line: $(err)"
	;;
quiet)
	run_split --quiet --policy "$WORK/p.yaml" -- $WGET
	[ "$RC" != 0 ] || fail "wget succeeded"
	expect_decision /usr/bin/wget deny:no_matching_policy
	grep -q 'tether: denied' "$WORK/err" && fail "--quiet printed a denial: $(err)"
	# the contrary, so the check above proves something
	run_split --policy "$WORK/p.yaml" -- $WGET
	grep -q '^tether: denied /usr/bin/wget ' "$WORK/err" || fail "no denial line without --quiet: $(err)"
	;;
verbose_allowed)
	run_split -v --policy "$WORK/p.yaml" -- $CURL
	[ "$RC" = 0 ] || fail "rc=$RC: $(err)"
	grep -qx 200 "$WORK/out" || fail "curl did not get 200"
	grep -q '^tether: allowed /usr/bin/curl .*-> 198\.51\.100\.10:8080 policy=test-server' "$WORK/err" ||
		fail "-v printed no allowed line: $(err)"
	run_split --policy "$WORK/p.yaml" -- $CURL
	grep -q 'tether: allowed' "$WORK/err" && fail "an allowed line without -v: $(err)"
	true
	;;
clean_silent)
	run_split --policy "$WORK/p.yaml" -- true
	[ "$RC" = 0 ] || fail "rc=$RC: $(err)"
	[ -s "$WORK/err" ] && fail "a clean run printed on stderr: $(err)"
	[ -s "$WORK/out" ] && fail "a clean run printed on stdout: $(cat "$WORK/out")"
	run_split --policy "$WORK/p.yaml" -- $CURL
	[ -s "$WORK/err" ] && fail "an allowed flow printed on stderr: $(err)"
	true
	;;
missing_policy)
	mkdir -p "$WORK/empty" "$WORK/proj"
	# no layer at all (no system/user policy here either)
	export TETHER_SYSTEM_POLICY_DIR="$WORK/none" TETHER_USER_POLICY_DIR="$WORK/none"
	(cd "$WORK/empty" && inside timeout 5 "$TETHER" run --topology "$TOPO" -- true >"$WORK/out" 2>"$WORK/err")
	RC=$?
	[ "$RC" = 124 ] && fail "no policy: still running after 5 s"
	[ "$RC" = 125 ] || fail "no policy: rc=$RC, want 125: $(err)"
	grep -q "no network policy: no --policy FILE given" "$WORK/err" || fail "no policy: message: $(err)"
	printf 'version: 1\nenvironment:\n  pass_through: [LANG]\n' >"$WORK/proj/.tether.yaml"
	(cd "$WORK/proj" && inside timeout 5 "$TETHER" run --topology "$TOPO" -- true >"$WORK/out" 2>"$WORK/err")
	RC=$?
	[ "$RC" = 124 ] && fail ".tether.yaml without network: still running after 5 s"
	[ "$RC" = 125 ] || fail ".tether.yaml without network: rc=$RC, want 125: $(err)"
	grep -q "no network policy: none of $WORK/proj/.tether.yaml has a 'network:' section" "$WORK/err" ||
		fail ".tether.yaml without network: message: $(err)"
	;;
project_layer)
	mkdir -p "$WORK/proj" && chmod 755 "$WORK/proj"
	cat >"$WORK/proj/.tether.yaml" <<EOF
version: 1
network:
  mode: enforce
  policies:
    - name: project-wget
      binaries:
        - path: /usr/bin/wget
      endpoints:
        - cidr: 198.51.100.0/24
          ports: [8080]
EOF
	export TETHER_SYSTEM_POLICY_DIR="$WORK/none" TETHER_USER_POLICY_DIR="$WORK/none"
	(cd "$WORK/proj" && inside timeout 30 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" --policy "$WORK/p.yaml" \
		-- sh -c "$WGET && echo WGET-OK; $CURL" >"$WORK/out" 2>"$WORK/err")
	grep -qx WGET-OK "$WORK/out" || fail "the project layer's rule did not allow wget: $(cat "$WORK/out") $(err)"
	grep -q "^200" "$WORK/out" || fail "the command layer's rule did not allow curl"
	expect_decision /usr/bin/wget allow:allowed
	expect_decision /usr/bin/curl allow:allowed
	python3 - "$AUDIT" "$WORK/proj/.tether.yaml" "$WORK/p.yaml" <<'PY' || fail "policy_loaded does not list both files"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
files = [e.get("files") for e in ev if e.get("event") == "policy_loaded"]
print("policy_loaded files:", files)
sys.exit(0 if files and files[0] == sys.argv[2:] else 1)
PY
	check_audit_common
	# the project file alone, no --policy: ready at once, its rule applies
	: >"$AUDIT"
	(cd "$WORK/proj" && inside timeout 30 "$TETHER" run --topology "$TOPO" --audit "$AUDIT" \
		-- sh -c "$WGET && echo WGET-OK" >"$WORK/out" 2>"$WORK/err")
	grep -qx WGET-OK "$WORK/out" || fail "the project file alone did not allow wget: $(cat "$WORK/out") $(err)"
	expect_decision /usr/bin/wget allow:allowed
	;;
entrypoint_exit)
	run_split --policy "$WORK/p.yaml" -- sh -c 'sleep 20 & exit 0'
	[ "$RC" = 0 ] || fail "rc=$RC: $(err)"
	grep -qx 'tether: entrypoint exited; stopping 1 remaining process (--wait-all waits for them)' \
		"$WORK/err" || fail "no line about the remaining process: $(err)"
	run_split --wait-all --policy "$WORK/p.yaml" -- sh -c '(sleep 0.3; echo BG-DONE) & exit 0'
	[ "$RC" = 0 ] || fail "--wait-all: rc=$RC: $(err)"
	grep -qx BG-DONE "$WORK/out" || fail "--wait-all did not wait for the background process: $(err)"
	grep -q 'entrypoint exited' "$WORK/err" && fail "--wait-all still stopped processes: $(err)"
	true
	;;
ps_noarg)
	run_split --policy "$WORK/p.yaml" -- sh -c 'tether ps; echo PS-RC=$?'
	grep -qx 'PS-RC=0' "$WORK/out" || fail "tether ps without arguments failed: $(cat "$WORK/out") $(err)"
	grep -q '^membership: ' "$WORK/out" || fail "no process table: $(cat "$WORK/out")"
	grep -q ' entrypoint .* live ' "$WORK/out" || fail "the entrypoint is not in the table: $(cat "$WORK/out")"
	;;
connect_path)
	{
		cat "$WORK/p.yaml"
		echo "    - name: tether-connect"
		echo "      binaries:"
		echo "        - path: $(readlink -f "$TETHER")"
		echo "      endpoints:"
		echo "        - cidr: 198.51.100.0/24"
		echo "          ports: [8080]"
	} >"$WORK/c.yaml"
	# a PATH without tether's directory, as a user's shell has it
	PATH=/usr/sbin:/usr/bin:/sbin:/bin run_split --policy "$WORK/c.yaml" -- sh -c \
		'command -v tether || echo NO-TETHER; printf "GET / HTTP/1.0\r\nHost: x\r\n\r\n" | tether connect 198.51.100.10 8080'
	grep -q NO-TETHER "$WORK/out" && fail "tether is not on the sandbox's PATH"
	grep -qx hello "$WORK/out" || fail "tether connect did not reach the fake internet: $(cat "$WORK/out") $(err)"
	expect_decision "$(readlink -f "$TETHER")" allow:allowed
	;;
*) fail "unknown case" ;;
esac
echo "PASS [$CASE $TOPO]"
