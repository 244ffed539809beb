#!/bin/bash
# e2e: rules that match the binaries that really connect (issue 20).
#
#   learn.sh CASE [TOPO]
#
# learn_roundtrip: `tether run --learn` (no policy at all) records curl and
#   Python (started as /usr/bin/python3, a symlink, and as the versioned
#   interpreter) as learned; `tether policy suggest --pin` writes a policy;
#   enforced, it allows exactly those flows: another binary (wget) and
#   another destination (a port never used) are denied.
# policy_symlink: a policy naming /usr/bin/python3 allows the flows of the
#   interpreter it resolves to; check/explain say so; a path that resolves
#   to nothing is a warning of `tether run`.
# The harness (netns, fake internet, audit checks) is lib.sh.
CASE=${1:?case}
TOPO=${2:-combined}
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
[ -L "$PY" ] || skip "$PY is not a symlink here"
PYV=$(readlink -f "$PY")
[ -x "$PYV" ] || skip "$PY resolves to nothing"
command -v wget >/dev/null || skip "no wget"
OTHER=http://198.51.100.10:8099/

setup_net

# The workload: curl, then Python through the symlink and as itself (each
# prints "NAME STATUS"; a refusal is the proxy's 403).
cat >"$WORK/fetch.py" <<'EOF'
import sys, urllib.request, urllib.error
try:
    print(sys.argv[1], urllib.request.urlopen(sys.argv[2], timeout=10).status)
except urllib.error.HTTPError as e:
    print(sys.argv[1], e.code)
EOF
chmod 644 "$WORK/fetch.py"
CLIENTS="curl -sS -o /dev/null -w 'curl %{http_code}\n' --max-time 10 $URL; \
$PY $WORK/fetch.py py $URL; $PYV $WORK/fetch.py pyv $URL"

case "$CASE" in
learn_roundtrip)
	# learning records nothing without an audit file: refused, nothing built
	"$TETHER" run --topology "$TOPO" --learn -- true 2>"$WORK/err"; [ $? = 2 ] || fail "--learn without --audit not a usage error"
	grep -q "needs --audit" "$WORK/err" || fail "no reason for refusing --learn: $(cat "$WORK/err")"
	run --learn -- sh -c "$CLIENTS"
	[ "$RC" = 0 ] || fail "learn run rc=$RC"
	for w in "curl 200" "py 200" "pyv 200"; do
		grep -qx "$w" "$WORK/out" || fail "learn run: no '$w' (nothing may be denied while learning)"
	done
	grep -q "LEARN MODE: nothing is enforced" "$WORK/out" || fail "no stderr note that nothing is enforced"
	expect_decision /usr/bin/curl allow:no_matching_policy
	expect_decision "$PYV" allow:no_matching_policy
	python3 - "$AUDIT" <<'PY' || fail "learned decisions are not marked learn/would"
import json, sys
n = 0
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") != "egress_decision":
        continue
    n += 1
    if not (e.get("learn") is True and e.get("would") == "deny" and e.get("decision") == "allow"
            and e.get("mode") == "learn" and e["binary"]["path"]):
        print(l); sys.exit(1)
sys.exit(0 if n >= 3 else 1)
PY
	check_audit_common
	cp "$AUDIT" "$WORK/learned.jsonl"
	"$TETHER" policy suggest --pin "$WORK/learned.jsonl" -o "$WORK/suggested.yaml" 2>"$WORK/suggest.err" ||
		fail "suggest failed: $(cat "$WORK/suggest.err")"
	grep -q "path: $PYV" "$WORK/suggested.yaml" || fail "no rule for $PYV: $(cat "$WORK/suggested.yaml")"
	grep -q "path: /usr/bin/curl" "$WORK/suggested.yaml" || fail "no rule for curl"
	grep -q "sha256:" "$WORK/suggested.yaml" || fail "--pin wrote no sha256"
	grep -q "path: $PY\$" "$WORK/suggested.yaml" && fail "the symlink, not the binary, was suggested"
	echo "--- suggested policy"; cat "$WORK/suggested.yaml"; cat "$WORK/suggest.err"
	"$TETHER" policy check "$WORK/suggested.yaml" >/dev/null || fail "suggested policy does not load"
	chmod 644 "$WORK/suggested.yaml"
	# enforce it: the learned flows pass; wget and another port do not
	: >"$AUDIT"
	run --policy "$WORK/suggested.yaml" -- sh -c "$CLIENTS; \
wget -q -O /dev/null $URL && echo wget-ok; \
curl -sS -o /dev/null -w 'other %{http_code}\n' --max-time 10 $OTHER; true"
	for w in "curl 200" "py 200" "pyv 200" "other 403"; do
		grep -qx "$w" "$WORK/out" || fail "enforcing the suggestion: no '$w'"
	done
	grep -q wget-ok "$WORK/out" && fail "wget was allowed by a policy learned without it"
	expect_decision /usr/bin/curl allow:allowed
	expect_decision /usr/bin/curl deny:no_matching_policy
	expect_decision "$PYV" allow:allowed
	expect_decision /usr/bin/wget deny:no_matching_policy
	grep -q '"learn":true' "$AUDIT" && fail "an enforcing run recorded learned flows"
	check_audit_common
	;;
policy_symlink)
	cat >"$WORK/p.yaml" <<EOF
version: 1
network:
  policies:
    - name: python
      binaries:
        - path: $PY
        - path: /usr/bin/no-such-binary-here
      endpoints:
        - host: 198.51.100.10
          ports: [8080]
EOF
	chmod 644 "$WORK/p.yaml"
	"$TETHER" policy check "$WORK/p.yaml" >/dev/null 2>"$WORK/check.err" || fail "check failed"
	grep -q "$PY is a symlink: it matches $PYV" "$WORK/check.err" || fail "check does not say $PY matches $PYV: $(cat "$WORK/check.err")"
	grep -q "no-such-binary-here resolves to nothing" "$WORK/check.err" || fail "no warning for a path that resolves to nothing"
	"$TETHER" policy explain --policy "$WORK/p.yaml" --binary "$PY" --dest 198.51.100.10:8080 >/dev/null 2>&1 ||
		fail "explain --binary $PY does not allow"
	run --policy "$WORK/p.yaml" -- sh -c "$PY $WORK/fetch.py py $URL; $PYV $WORK/fetch.py pyv $URL; \
curl -sS -o /dev/null -w 'curl %{http_code}\n' --max-time 10 $URL"
	for w in "py 200" "pyv 200" "curl 403"; do
		grep -qx "$w" "$WORK/out" || fail "no '$w'"
	done
	grep -q "no-such-binary-here resolves to nothing" "$WORK/out" || fail "tether run did not warn about the missing path"
	expect_decision "$PYV" allow:allowed
	expect_decision /usr/bin/curl deny:no_matching_policy
	python3 - "$AUDIT" <<'PY' || fail "policy_loaded lacks the warning"
import json, sys
ok = any(e.get("event") == "policy_loaded" and any("resolves to nothing" in w for w in e.get("warnings", []))
         for e in map(json.loads, open(sys.argv[1])))
sys.exit(0 if ok else 1)
PY
	check_audit_common
	;;
*) fail "unknown case" ;;
esac
grep -q "AddressSanitizer\|LeakSanitizer\|runtime error:" "$WORK/out" 2>/dev/null &&
	fail "sanitizer report in the output"
echo "PASS [$CASE $TOPO]"
exit 0
