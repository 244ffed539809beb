#!/usr/bin/env bash
# tether keygen and tether verify-context, end to end.
set -euo pipefail
T="${TETHER_BIN:?}/tether"
MK="${TETHER_TESTS:?}/proto_mklog"
dir=$(mktemp -d /tmp/tether-cli-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$T" keygen --help | grep -q "usage: tether keygen" || fail "keygen --help"
"$T" verify-context --help | grep -q "usage: tether verify-context" || fail "verify-context --help"
set +e
"$T" keygen; [ $? -eq 2 ] || fail "keygen without --out must exit 2"
"$T" verify-context; [ $? -eq 2 ] || fail "verify-context without args must exit 2"
set -e

"$T" keygen --out "$dir/keys" | grep -q "key id [0-9a-f]\{32\}" || fail "keygen output"
[ "$(stat -c %a "$dir/keys/provisioning.key")" = 600 ] || fail "secret key mode"
head -1 "$dir/keys/provisioning.pub" | grep -qx "tether-provisioning-public-v1" || fail "pub header"
if "$T" keygen --out "$dir/keys" 2>/dev/null; then fail "keygen overwrote"; fi

"$MK" "$dir/keys/provisioning.key" "$dir/good.jsonl"
out=$("$T" verify-context --pubkey "$dir/keys/provisioning.pub" "$dir/good.jsonl") || fail "valid log: $out"
echo "$out" | grep -q "line 2: valid" || fail "line 2 not valid: $out"
echo "$out" | grep -q "line 3: valid" || fail "line 3 not valid: $out"
echo "$out" | grep -q "2 checked, 2 valid, 0 invalid" || fail "summary: $out"
# stdin
"$T" verify-context --pubkey "$dir/keys/provisioning.pub" - < "$dir/good.jsonl" >/dev/null || fail "stdin"

"$MK" "$dir/keys/provisioning.key" "$dir/bad.jsonl" --bad
set +e
out=$("$T" verify-context --pubkey "$dir/keys/provisioning.pub" "$dir/bad.jsonl"); rc=$?
set -e
[ $rc -eq 1 ] || fail "bad log must exit 1, got $rc"
echo "$out" | grep -q "line 4: invalid: context_signature_invalid" || fail "flipped signature: $out"
echo "$out" | grep -q "line 5: invalid: anchor_certificate_invalid" || fail "foreign certificate: $out"

# the certificate logged once (anchor_established), decisions after it
"$MK" "$dir/keys/provisioning.key" "$dir/once.jsonl" --cert-once
set +e
out=$("$T" verify-context --pubkey "$dir/keys/provisioning.pub" "$dir/once.jsonl"); rc=$?
set -e
[ $rc -eq 1 ] || fail "once log must exit 1 (stray instance), got $rc: $out"
echo "$out" | grep -q "line 3: valid" || fail "line 3 with an earlier certificate: $out"
echo "$out" | grep -q "line 4: valid" || fail "line 4 with an earlier certificate: $out"
echo "$out" | grep -q "line 5: invalid: anchor_unknown" || fail "stray instance: $out"

# another provisioning key pins nothing of this log
"$T" keygen --out "$dir/other" >/dev/null
set +e
"$T" verify-context --pubkey "$dir/other/provisioning.pub" "$dir/good.jsonl" >/dev/null; rc=$?
set -e
[ $rc -eq 1 ] || fail "other key must not verify"
# a group-readable secret key is refused when read
chmod 0640 "$dir/keys/provisioning.key"
if "$MK" "$dir/keys/provisioning.key" "$dir/x.jsonl" 2>/dev/null; then fail "read a 0640 key"; fi
# no contexts at all
echo '{"event":"policy_loaded"}' > "$dir/none.jsonl"
set +e
"$T" verify-context --pubkey "$dir/keys/provisioning.pub" "$dir/none.jsonl" >/dev/null; rc=$?
set -e
[ $rc -eq 1 ] || fail "no contexts must exit 1"
echo "ok"
