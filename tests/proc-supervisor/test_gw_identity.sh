#!/bin/bash
# Identity service end to end (split-style delegation over a Unix control
# socket): a gateway-spawned process's flow yields a SignedContext that a
# verifier pinned to the `tether keygen` public key accepts, subject = that
# process, anchor = the supervisor; a flow from a process outside the tree
# yields an error, never a context; a restarted supervisor presents a new
# certificate and the old instance's contexts are refused; an impostor
# without the provisioning key is refused.
. "$(dirname "$0")/gw_lib.sh"

"$B/tether" keygen --out "$TMP/keys" >/dev/null || exit 1
"$B/tether" keygen --out "$TMP/other" >/dev/null || exit 1
PUB=$TMP/keys/provisioning.pub

start_harness a "$TMP/keys/provisioning.key" || exit 1
APID=$HPID
IDC=$TT/gw_idclient
CONN=$TT/gw_connect
# A top-level scalar of gw_idclient's flat JSON lines (python would cost seconds here).
jget() { sed -n 's/.*"'"$2"'":"\{0,1\}\([^",}]*\).*/\1/p' <<<"$1"; }

# 1. a gateway-spawned process: attributed, verified, anchored
rm -f "$TMP/port"
timeout 30 "$IDC" query --control "unix:$TMP/a.ctl" --pub "$PUB" --port-file "$TMP/port" \
	--wait-file "$TMP/restarted" >"$TMP/q1.out" 2>"$TMP/q1.log" &
QPID=$!
PIDS+=($QPID)
wait_file "$TMP/port" 50 || fail "query client did not listen"
PORT=$(cat "$TMP/port")
timeout 20 "$B/tether" exec --socket "$TMP/a.exec" -- "$CONN" 127.0.0.1 "$PORT" 3 >"$TMP/c1.out" 2>>"$TMP/bg.err" &
PIDS+=($!)
for _ in $(seq 1 300); do [ "$(wc -l <"$TMP/q1.out")" -ge 1 ] && break; sleep 0.1; done
L1=$(sed -n 1p "$TMP/q1.out")
C1=$(awk '{print $1}' "$TMP/c1.out")
echo "first: $L1"
check "in-tree flow: verified context" [ "$(jget "$L1" reason)" = ok ]
check "in-tree flow: subject is the connecting process ($C1)" [ "$(jget "$L1" subject_pid)" = "$C1" ]
check "in-tree flow: subject exe hashed" [ "$(jget "$L1" subject_hashed)" = true ]
check "in-tree flow: anchor is the supervisor ($APID)" [ "$(jget "$L1" anchor_pid)" = "$APID" ]
check "audit: anchor_established" grep -q '"event":"anchor_established"' "$TMP/a.audit"
check "audit: identity_issued ok for the subject" grep -q "\"event\":\"identity_issued\".*\"reason\":\"ok\".*\"pid\":$C1" "$TMP/a.audit"

# 2. restart: a new instance (new certificate) on the same endpoint; the
# query client reconnects, gets a context from the new instance, and the
# FIRST context (old instance key) is now refused by the same verifier.
kill -TERM "$APID"; wait_gone "$APID" 50
start_harness a "$TMP/keys/provisioning.key" || exit 1
BPID=$HPID
touch "$TMP/restarted"
timeout 20 "$B/tether" exec --socket "$TMP/a.exec" -- "$CONN" 127.0.0.1 "$PORT" 3 >"$TMP/c2.out" 2>>"$TMP/bg.err" &
PIDS+=($!)
for _ in $(seq 1 300); do [ "$(wc -l <"$TMP/q1.out")" -ge 3 ] && break; sleep 0.1; done
L2=$(sed -n 2p "$TMP/q1.out"); L3=$(sed -n 3p "$TMP/q1.out")
C2=$(awk '{print $1}' "$TMP/c2.out")
echo "second: $L2"; echo "old: $L3"
check "restart: new instance answers" [ "$(jget "$L2" reason)" = ok ]
check "restart: subject of the new flow ($C2)" [ "$(jget "$L2" subject_pid)" = "$C2" ]
check "restart: anchor is the new supervisor ($BPID)" [ "$(jget "$L2" anchor_pid)" = "$BPID" ]
OLD=$(jget "$L3" old_reason)
check "restart: old instance's context refused ($OLD)" [ "$OLD" = anchor_unknown ]
certs=$(grep -c '"event":"anchor_established"' "$TMP/a.audit")
check "restart: a second anchor certificate was issued" [ "$certs" = 2 ]

# 3. a flow from a process NOT in the tree: an error, never a context
rm -f "$TMP/port"
timeout 30 "$IDC" query --control "unix:$TMP/a.ctl" --pub "$PUB" --port-file "$TMP/port" >"$TMP/q3.out" 2>"$TMP/q3.log" &
PIDS+=($!)
wait_file "$TMP/port" 50 || fail "query client did not listen"
timeout 20 "$CONN" 127.0.0.1 "$(cat "$TMP/port")" 3 >/dev/null 2>>"$TMP/bg.err" &
PIDS+=($!)
for _ in $(seq 1 300); do [ -s "$TMP/q3.out" ] && break; sleep 0.1; done
L=$(sed -n 1p "$TMP/q3.out"); R=$(jget "$L" reason)
echo "foreign: $L"
check "foreign flow: refused ($R)" bash -c '[ "$1" = identity_unavailable ] || [ "$1" = foreign_process ]' _ "$R"
check "foreign flow: no subject in the answer" [ -z "$(jget "$L" subject_pid)" ]
check "audit: identity_issued with the reason" grep -q "\"event\":\"identity_issued\".*\"reason\":\"$R\"" "$TMP/a.audit"

# 3b. (real supervisor only: its seccomp notifier records connects) a
# grandchild: the chain is subject -> sh -> anchor.
if [ "${GW_SUP:-harness}" = procsup ]; then
	rm -f "$TMP/port"
	timeout 30 "$IDC" query --control "unix:$TMP/a.ctl" --pub "$PUB" --port-file "$TMP/port" >"$TMP/q5.out" 2>"$TMP/q5.log" &
	PIDS+=($!)
	wait_file "$TMP/port" 50 || fail "query client did not listen"
	timeout 20 "$B/tether" exec --socket "$TMP/a.exec" -- sh -c 'echo $$; "$0" 127.0.0.1 "$1" 3; true' \
		"$CONN" "$(cat "$TMP/port")" >"$TMP/c5.out" 2>>"$TMP/bg.err" &
	PIDS+=($!)
	for _ in $(seq 1 300); do [ -s "$TMP/q5.out" ] && break; sleep 0.1; done
	L=$(sed -n 1p "$TMP/q5.out")
	SHPID=$(sed -n 1p "$TMP/c5.out"); GPID=$(sed -n 2p "$TMP/c5.out" | awk '{print $1}')
	echo "grandchild: $L"
	check "grandchild: verified context" [ "$(jget "$L" reason)" = ok ]
	check "grandchild: subject ($GPID)" [ "$(jget "$L" subject_pid)" = "$GPID" ]
	check "grandchild: ancestors = [sh $SHPID], anchor = supervisor" \
		bash -c 'grep -q "\"ancestor_pids\":\[$2\],\"state_reason\"" <<<"$1" && grep -q "\"anchor_pid\":$3," <<<"$1"' _ "$L" "$SHPID" "$HPID"
fi

# 4. an impostor supervisor without the provisioning key (its own key pair)
start_harness imp "$TMP/other/provisioning.key" || exit 1
rm -f "$TMP/port"
timeout 30 "$IDC" query --control "unix:$TMP/imp.ctl" --pub "$PUB" --port-file "$TMP/port" >"$TMP/q4.out" 2>"$TMP/q4.log" &
PIDS+=($!)
wait_file "$TMP/port" 50 || fail "query client did not listen"
timeout 20 "$B/tether" exec --socket "$TMP/imp.exec" -- "$CONN" 127.0.0.1 "$(cat "$TMP/port")" 3 >/dev/null 2>>"$TMP/bg.err" &
PIDS+=($!)
for _ in $(seq 1 300); do [ -s "$TMP/q4.out" ] && break; sleep 0.1; done
L=$(sed -n 1p "$TMP/q4.out")
echo "impostor: $L"
check "impostor: no verified context" bash -c '[ -n "$1" ] && [ "$1" != ok ]' _ "$(jget "$L" reason)"
check "impostor: certificate refused by the pinned verifier" grep -q "anchor certificate refused: anchor_certificate_invalid" "$TMP/q4.log"

finish
