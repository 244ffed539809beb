#!/bin/bash
# e2e: delegated identity with the two daemons composed by hand (no
# `tether run`), one CASE per call.
#
#   delegated.sh CASE [TOPO]   (TOPO: the --topology both daemons are given,
#                               default split-shared-netns; env: TETHER_BIN,
#                               TETHER_SRC; TETHER_BIN_DIR optional)
#
# The arrangement: lib.sh's private outer netns (and its fake internet);
# the net-supervisor in it, --identity delegated, pinned to a provisioning
# public key, proxy and admin on its loopback; the proc-supervisor as PID 1
# of its own PID namespace (unshare) in the same netns, serving identity on
# a Unix control socket, its workload a loop that makes one curl request
# through the proxy per line the test writes into a FIFO.
#
#   restart_new_cert  allowed (delegated, signed context recorded); SIGKILL
#                     of the proc-supervisor -> every new flow denied, not
#                     ready; a new proc-supervisor (new instance key, new
#                     certificate) -> allowed again; the old context still
#                     verifies against the old certificate and is rejected
#                     against the new one (`tether verify-context`).
#   cert_renewal      a proc-supervisor whose certificate is valid 10 s
#                     renews it on the live channel (anchor_renewed on both
#                     sides, no reconnect); a flow after the first one ran
#                     out is allowed; its context verifies only with the
#                     renewed certificate, the earlier one with the first.
#   cert_renewal_fails  the provisioning key file turns unreadable for it
#                     (mode 0644): the renewal fails and is retried, and
#                     once the certificate ran out flows are denied
#                     anchor_certificate_invalid; the mode back to 0600, the
#                     next retry renews and flows are allowed again.
#   impostor          a proc-supervisor signing with another provisioning
#                     key is refused (the net-supervisor never becomes
#                     ready, flows are denied); then the genuine one is
#                     accepted and flows are allowed.
#   clock_behind / clock_ahead  the net-supervisor's clock 5 s behind / 6 s
#                     ahead of the proc side's (libfaketime on the real
#                     binary): ready, flows allowed, /metrics shows the
#                     skew, the allowed context verifies offline.
#   clock_past_bound  the net side 30 s ahead with --max-clock-skew 10: not
#                     ready (/readyz says clock_skew), anchor_refused
#                     audited clock_skew, flows denied clock_skew; the clock
#                     put right, ready and allowed again.
#   mac_audit / no_mac  protocol 1.2: three allows let through by the
#                     channel's MAC, each decision naming context_request_id,
#                     each followed by a context_signed event whose
#                     signature `tether verify-context` accepts; no_mac
#                     (--no-identity-mac): the decisions carry the signature.
#   push / push_off   protocol 1.3: the workload's three flows are answered
#                     from identities the proc side pushed at connect time
#                     (context_request_id with bit 62 set, no request), each
#                     signature in a context_signed event that verify-context
#                     accepts, the proc side's identity_issued lines name the
#                     push_id; push_off (proc-supervisor --no-identity-push):
#                     the same flows asked for (request ids), still allowed.
#   push_exec         the per-process cache of pushed identities: one python
#                     process makes two flows (the second pushed from the
#                     cache; python is not in the policy: denied naming
#                     python), then execs curl (the same process, another
#                     image): that flow is curl's (allowed), never python's
#                     cached identity.
#   clock_step        ready and allowed; then the net side's clock steps
#                     30 s ahead on the live channel: the next flow fails
#                     its time check, the skew is measured again, the
#                     channel is refused clock_skew; stepped back, allowed.
CASE=${1:?case}
TOPO=${2:-split-shared-netns}
. "$(dirname "$0")/lib.sh"

PROXY=127.0.0.1:3128 ADMIN=127.0.0.1:9100
CTL="unix:$WORK/control.sock"
FIFO="$WORK/rw/req"
NS_TO="" NS_PID="" PS_TO="" PS_PID=""

# our daemons first (by the pids we started), then lib.sh's cleanup
delegated_cleanup() {
	[ -n "$PS_PID" ] && kill -9 "$PS_PID" 2>/dev/null
	[ -n "$PS_TO" ] && kill -9 "$PS_TO" 2>/dev/null
	[ -n "$NS_PID" ] && kill -9 "$NS_PID" 2>/dev/null
	[ -n "$NS_TO" ] && kill -9 "$NS_TO" 2>/dev/null
	cleanup
}
trap delegated_cleanup EXIT

# a process we started has ended (gone, or a zombie not yet waited for)
gone() {
	local st
	st=$(cut -d' ' -f3 /proc/"$1"/stat 2>/dev/null)
	[ -z "$st" ] || [ "$st" = Z ]
}

# find_daemon PID BINARY: the daemon's own pid below the background job
# PID we started (subshell, nsenter, timeout, unshare in between); the
# job's pid itself is not the daemon, and killing it would orphan it.
find_daemon() {
	local exe p
	exe=$(readlink -f "$2")
	for _ in $(seq 100); do
		p=$(descendant_of_exe "$1" "$exe") && { echo "$p"; return 0; }
		sleep 0.05
	done
	return 1
}

# NS_ENV: environment for the net-supervisor alone (libfaketime);
# NS_EXTRA: more options.
start_netsup() { # start_netsup PUBKEY
	inside timeout 40 env ${NS_ENV:-} "$NETSUP_BIN" --topology "$TOPO" --identity delegated --control "$CTL" \
		--provisioning-pubkey "$1" --listen "$PROXY" --admin "$ADMIN" \
		--policy "$WORK/p.yaml" --audit "$AUDIT" ${NS_EXTRA:-} >"$WORK/out" 2>&1 &
	NS_TO=$!
	NS_PID=$(find_daemon "$NS_TO" "$NETSUP_BIN") || fail "net-supervisor did not start: $(cat "$WORK/out")"
	wait_for 10 inside curl -s -o /dev/null --noproxy '*' --max-time 1 "http://$ADMIN/healthz" ||
		fail "net-supervisor admin not listening"
}
# SIGTERM and wait: a sanitizer build reports leaks at exit
stop_netsup() {
	kill -TERM "$NS_PID" 2>/dev/null
	wait_for 5 gone "$NS_TO" || fail "net-supervisor did not stop on SIGTERM"
	wait "$NS_TO" 2>/dev/null
	NS_PID="" NS_TO=""
}

# start_procsup KEY N: proc-supervisor number N (audit procN.jsonl, log
# procN.log); its workload serves requests written into the FIFO.
start_procsup() {
	inside timeout 40 unshare --pid --fork --kill-child --mount-proc \
		"$PROCSUP_BIN" --topology "$TOPO" --cgroup none --grace 1 --audit "$WORK/proc$2.jsonl" \
		--control "$CTL" --provisioning-key "$1" ${PS_EXTRA:-} --proxy "http://$PROXY" -- "$WORK/w.sh" \
		>"$WORK/proc$2.log" 2>&1 &
	PS_TO=$!
	PS_PID=$(find_daemon "$PS_TO" "$PROCSUP_BIN") || fail "proc-supervisor $2 not found: $(cat "$WORK/proc$2.log")"
	wait_for 10 grep -qs '"event":"process_spawn"' "$WORK/proc$2.jsonl" || fail "proc-supervisor $2: no workload"
}

kill_procsup() {
	kill -9 "$PS_PID"
	wait "$PS_TO" 2>/dev/null
	PS_PID="" PS_TO=""
}

readyz_body() { inside curl -s --noproxy '*' --max-time 2 "http://$ADMIN/readyz"; }
metric() { inside curl -s --noproxy '*' --max-time 2 "http://$ADMIN/metrics" | sed -n "s/^$1 //p"; }
# the net-supervisor's clock, FAKETIME_TIMESTAMP_FILE re-read at every call
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
faketime_env() { # faketime_env OFFSET: NS_ENV for a net-supervisor OFFSET s off
	[ -e "$FAKETIME_LIB" ] || skip "libfaketime not installed (ci/install-deps.sh)"
	echo "$1" >"$WORK/faketime"
	chmod 644 "$WORK/faketime"
	NS_ENV="LD_PRELOAD=$FAKETIME_LIB FAKETIME_TIMESTAMP_FILE=$WORK/faketime FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1"
	# a sanitizer build refuses a preloaded library ahead of its runtime
	# unless told that the order is intended
	NS_ENV="$NS_ENV ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
}
set_clock() { echo "$1" >"$WORK/faketime.new" && mv "$WORK/faketime.new" "$WORK/faketime"; }
# near WANT TOL VALUE: |VALUE - WANT| <= TOL
near() { python3 -c "import sys; sys.exit(0 if abs(float('$3') - float('$1')) <= float('$2') else 1)" 2>/dev/null; }
readyz() { inside curl -s -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 2 "http://$ADMIN/readyz"; }
wait_readyz() { wait_for "$1" sh -c "[ \"\$(nsenter --net=/run/netns/$OUTER curl -s -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 1 http://$ADMIN/readyz)\" = 200 ]"; }

# req N: the workload makes request N; prints its HTTP status
req() {
	timeout 10 sh -c "echo $1 >$FIFO" || fail "request $1: the workload does not read its FIFO"
	wait_for 12 test -s "$WORK/rw/curl.$1" || fail "request $1: no answer"
	head -1 "$WORK/rw/curl.$1"
}
# the workload ends, and with it the proc-supervisor (its exit status)
stop_workload() {
	timeout 5 sh -c "echo stop >$FIFO" 2>/dev/null
	[ -n "$PS_TO" ] || return 0
	local t=$PS_TO
	wait_for 5 gone "$t" || fail "proc-supervisor did not exit after its workload"
	wait "$PS_TO"; local rc=$?
	PS_PID="" PS_TO=""
	[ "$rc" = 0 ] || fail "proc-supervisor exited $rc after its workload"
}

# a flow from the test side straight to the proxy (nobody's identity)
outside_req() {
	inside curl -s -o /dev/null -w '%{http_code}' --max-time 10 -x "http://$PROXY" "$URL"
}

# decisions after audit line L (1-based): "decision:reason:binary" lines
decisions_after() {
	python3 - "$AUDIT" "$1" <<'PY'
import json, sys
for n, l in enumerate(open(sys.argv[1]), 1):
    e = json.loads(l)
    if n > int(sys.argv[2]) and e.get("event") == "egress_decision":
        print(f"{e.get('decision')}:{e.get('reason')}:{(e.get('binary') or {}).get('path')}")
PY
}
audit_lines() { wc -l <"$AUDIT" 2>/dev/null || echo 0; }
# json_field FILE EVENT FIELD: FIELD of the last EVENT line
json_field() {
	python3 - "$@" <<'PY'
import json, sys
v = None
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == sys.argv[2]:
        v = e.get(sys.argv[3])
print(v if v is not None else "")
PY
}
# Every audit file we collected: topology, identity_source.
# sig_lines FROM PREFIX: for each delegated allow after audit line FROM,
# the line that carries its signature, into PREFIX1.jsonl, PREFIX2.jsonl...:
# the decision itself (signed_context, protocol 1.1 or --no-identity-mac),
# or, for an answer the channel's MAC let through (context_request_id), the
# `context_signed` event of that request (reason ok). Prints how many;
# exits 1 while a MAC'd allow has no good context_signed yet.
sig_lines() {
	python3 - "$AUDIT" "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
signed = {e.get("context_request_id"): e for e in lines if e.get("event") == "context_signed"}
n = 0
for i, e in enumerate(lines, 1):
    if i <= int(sys.argv[2]) or e.get("event") != "egress_decision" or e.get("decision") != "allow":
        continue
    if e.get("identity_source") != "delegated":
        sys.exit(1)
    if e.get("signed_context"):
        out = e
    else:
        s = signed.get(e.get("context_request_id"))
        if not e.get("context_request_id") or not s or s.get("reason") != "ok" or not s.get("signed_context"):
            sys.exit(1)
        out = s
    n += 1
    open(f"{sys.argv[3]}{n}.jsonl", "w").write(json.dumps(out) + "\n")
print(n)
PY
}
# three_signed_allows: requests 1-3 are allowed and audited, each allow with
# its signature (sig_lines into $WORK/ctx1..3.jsonl)
three_signed_allows() {
	for i in 1 2 3; do
		[ "$(req $i)" = 200 ] || fail "request $i not allowed: $(cat "$WORK/rw/curl.$i")"
	done
	wait_for 5 sh -c "[ \$(grep -c '\"decision\":\"allow\"' $AUDIT) -ge 3 ]" || fail "three allows not audited"
	wait_for 5 sig_lines 0 "$WORK/ctx" >/dev/null || fail "an allow without its signed context"
	[ "$(sig_lines 0 "$WORK/ctx")" = 3 ] || fail "not three signed contexts"
}

check_all_audits() {
	local a=$AUDIT f
	for f in "$a" "$WORK"/proc*.jsonl; do
		[ -s "$f" ] || continue
		AUDIT=$f check_audit_common
	done
	AUDIT=$a
}

setup_net
policy "$WORK/p.yaml"
mkfifo -m 666 "$FIFO" || fail "mkfifo"
# One request per line read from the FIFO (a new open per line); `stop`
# or a closed FIFO ends it. curl's status lands in rw/curl.N atomically.
cat >"$WORK/w.sh" <<EOF
#!/bin/sh
i=0
while [ \$i -lt 50 ]; do
	read -r n <$FIFO || exit 3
	[ "\$n" = stop ] && exit 0
	curl -sS -o /dev/null -w '%{http_code}\n' --max-time 10 $URL >$WORK/rw/tmp.\$n 2>&1
	mv $WORK/rw/tmp.\$n $WORK/rw/curl.\$n
	i=\$((i+1))
done
EOF
chmod 755 "$WORK/w.sh"
"$TETHER" keygen --out "$WORK/keys" >/dev/null || fail "keygen"

case "$CASE" in
restart_new_cert)
	start_netsup "$WORK/keys/provisioning.pub"
	start_procsup "$WORK/keys/provisioning.key" 1
	wait_readyz 10 || fail "net-supervisor never ready with the genuine proc-supervisor"
	[ "$(req 1)" = 200 ] || fail "request 1 not allowed: $(cat "$WORK/rw/curl.1")"
	wait_for 5 sh -c "grep -q '\"decision\":\"allow\"' $AUDIT" || fail "no allow in the audit"
	expect_decision /usr/bin/curl allow:allowed
	# the allow carries the signed context the proc side issued
	wait_for 5 sig_lines 0 "$WORK/oldctx" || fail "the allowed flow has no signed context"
	cp "$WORK/oldctx1.jsonl" "$WORK/old_ctx.jsonl"
	KID1=$(json_field "$WORK/proc1.jsonl" anchor_established instance_key_id)
	[ -n "$KID1" ] || fail "proc-supervisor 1 audited no instance_key_id"
	grep '"event":"anchor_established"' "$WORK/proc1.jsonl" >"$WORK/cert1.jsonl"
	grep -q anchor_certificate "$WORK/cert1.jsonl" || fail "proc-supervisor 1 audited no anchor_certificate"

	# the proc side dies: nothing is allowed until a new anchor comes
	kill_procsup
	L=$(audit_lines)
	wait_for 5 sh -c "[ \"\$(nsenter --net=/run/netns/$OUTER curl -s -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 1 http://$ADMIN/readyz)\" != 200 ]" ||
		fail "/readyz still 200 after the proc-supervisor was killed"
	for i in 1 2 3; do
		code=$(outside_req)
		case "$code" in 503|403) ;; *) fail "flow $i after the kill: HTTP $code" ;; esac
	done
	[ "$(readyz)" != 200 ] || fail "/readyz 200 without a proc-supervisor"
	for _ in $(seq 100); do
		got=$(decisions_after "$L")
		[ "$(echo "$got" | grep -c .)" -ge 3 ] && break
		sleep 0.05
	done
	echo "after the kill: $(echo $got)"
	[ "$(echo "$got" | grep -c .)" = 3 ] || fail "expected 3 decisions after the kill: $got"
	echo "$got" | grep -v -q '^deny:\(not_ready\|control_channel_lost\|identity_unavailable\):' &&
		fail "a flow after the kill was not denied as not ready: $got"
	grep -q '"event":"anchor_lost"' "$AUDIT" || fail "no anchor_lost audited"

	# a new proc-supervisor: new instance key, new certificate, allowed again
	start_procsup "$WORK/keys/provisioning.key" 2
	wait_readyz 10 || fail "net-supervisor never ready again with the new proc-supervisor"
	L=$(audit_lines)
	[ "$(req 2)" = 200 ] || fail "request 2 (new proc-supervisor) not allowed: $(cat "$WORK/rw/curl.2")"
	wait_for 5 sh -c "tail -n +$((L + 1)) $AUDIT | grep -q '\"decision\":\"allow\"'" ||
		fail "no allow audited for the new proc-supervisor"
	KID2=$(json_field "$WORK/proc2.jsonl" anchor_established instance_key_id)
	[ -n "$KID2" ] || fail "proc-supervisor 2 audited no instance_key_id"
	[ "$KID1" != "$KID2" ] || fail "the new proc-supervisor reused instance key $KID1"
	echo "instance keys: $KID1 -> $KID2"
	grep '"event":"anchor_established"' "$AUDIT" | tail -1 | grep -q "instance $KID2" ||
		fail "the net-supervisor's last anchor_established is not instance $KID2"
	# (no anchor_changed is required: the new proc-supervisor has a new PID
	# namespace, a new anchor for the verifier, unless the kernel happens to
	# reuse the old namespace's inode number)
	wait_for 5 sig_lines "$L" "$WORK/newctx" || fail "the new allow is not delegated or unsigned"
	cp "$WORK/newctx1.jsonl" "$WORK/new_ctx.jsonl"
	grep '"event":"anchor_established"' "$WORK/proc2.jsonl" >"$WORK/cert2.jsonl"
	stop_workload

	PUB="$WORK/keys/provisioning.pub"
	# the old context against the old certificate: valid (the check can pass)
	cat "$WORK/cert1.jsonl" "$WORK/old_ctx.jsonl" >"$WORK/v_old_old.jsonl"
	"$TETHER" verify-context --pubkey "$PUB" "$WORK/v_old_old.jsonl" >"$WORK/v1.out" 2>&1
	[ $? = 0 ] || fail "old context does not verify against the old certificate: $(cat "$WORK/v1.out")"
	grep -q "^line 2: valid" "$WORK/v1.out" || fail "verify-context: $(cat "$WORK/v1.out")"
	# the old context against the new certificate: rejected
	cat "$WORK/cert2.jsonl" "$WORK/old_ctx.jsonl" >"$WORK/v_old_new.jsonl"
	"$TETHER" verify-context --pubkey "$PUB" "$WORK/v_old_new.jsonl" >"$WORK/v2.out" 2>&1
	rc=$?
	echo "old context vs new certificate: rc=$rc $(head -1 "$WORK/v2.out")"
	[ "$rc" = 1 ] || fail "old context vs new certificate: exit $rc, not 1: $(cat "$WORK/v2.out")"
	grep -q "^line 2: invalid: anchor_unknown" "$WORK/v2.out" ||
		fail "old context vs new certificate: not anchor_unknown: $(cat "$WORK/v2.out")"
	# and the new context against the new certificate: valid
	cat "$WORK/cert2.jsonl" "$WORK/new_ctx.jsonl" >"$WORK/v_new_new.jsonl"
	"$TETHER" verify-context --pubkey "$PUB" "$WORK/v_new_new.jsonl" >"$WORK/v3.out" 2>&1 ||
		fail "new context does not verify against the new certificate: $(cat "$WORK/v3.out")"
	check_all_audits
	;;
cert_renewal)
	start_netsup "$WORK/keys/provisioning.pub"
	PS_EXTRA="--cert-validity 10s" start_procsup "$WORK/keys/provisioning.key" 1
	wait_readyz 10 || fail "net-supervisor never ready"
	[ "$(req 1)" = 200 ] || fail "request 1 not allowed: $(cat "$WORK/rw/curl.1")"
	NA=$(json_field "$WORK/proc1.jsonl" anchor_established not_after)
	[ -n "$NA" ] || fail "anchor_established has no not_after"
	# past the first certificate's end and the verifier's 1 s of skew
	for _ in $(seq 300); do [ "$(date +%s)" -gt $((NA + 1)) ] && break; sleep 0.1; done
	[ "$(date +%s)" -gt $((NA + 1)) ] || fail "the clock did not pass $NA"
	grep -q '"event":"anchor_renewed"' "$WORK/proc1.jsonl" || fail "the proc side audited no anchor_renewed"
	L=$(audit_lines)
	[ "$(req 2)" = 200 ] || fail "request 2, after the first certificate ran out, not allowed: $(cat "$WORK/rw/curl.2")"
	wait_for 5 sh -c "tail -n +$((L + 1)) $AUDIT | grep -q '\"decision\":\"allow\"'" || fail "no allow audited for request 2"
	grep -q '"event":"anchor_renewed"' "$AUDIT" || fail "the net side audited no anchor_renewed"
	grep -q "lost" "$WORK/out" && fail "the control channel was lost: $(grep lost "$WORK/out")"
	[ "$(grep -c '"event":"anchor_established"' "$AUDIT")" = 1 ] || fail "the net side anchored more than once"
	wait_for 5 sig_lines 0 "$WORK/ctx" >/dev/null || fail "a delegated allow without a signed context"
	[ "$(sig_lines 0 "$WORK/ctx")" = 2 ] || fail "not two delegated allows with a signed context"
	grep '"event":"anchor_established"' "$WORK/proc1.jsonl" >"$WORK/cert1.jsonl"
	grep '"event":"anchor_renewed"' "$WORK/proc1.jsonl" | head -1 >"$WORK/certr.jsonl"
	PUB="$WORK/keys/provisioning.pub"
	cat "$WORK/cert1.jsonl" "$WORK/ctx1.jsonl" >"$WORK/v1.jsonl"
	"$TETHER" verify-context --pubkey "$PUB" "$WORK/v1.jsonl" >"$WORK/v1.out" 2>&1 ||
		fail "context 1 does not verify with the first certificate: $(cat "$WORK/v1.out")"
	cat "$WORK/cert1.jsonl" "$WORK/ctx2.jsonl" >"$WORK/v2.jsonl"
	"$TETHER" verify-context --pubkey "$PUB" "$WORK/v2.jsonl" >"$WORK/v2.out" 2>&1
	rc=$?
	[ "$rc" = 1 ] && grep -q "^line 2: invalid: anchor_certificate_invalid" "$WORK/v2.out" ||
		fail "context 2 with only the first certificate: rc $rc: $(cat "$WORK/v2.out")"
	cat "$WORK/cert1.jsonl" "$WORK/certr.jsonl" "$WORK/ctx1.jsonl" "$WORK/ctx2.jsonl" >"$WORK/v3.jsonl"
	"$TETHER" verify-context --pubkey "$PUB" "$WORK/v3.jsonl" >"$WORK/v3.out" 2>&1 ||
		fail "the two contexts with both certificates: $(cat "$WORK/v3.out")"
	[ "$(grep -c ': valid' "$WORK/v3.out")" = 2 ] || fail "verify-context: $(cat "$WORK/v3.out")"
	stop_workload
	check_all_audits
	;;
cert_renewal_fails)
	start_netsup "$WORK/keys/provisioning.pub"
	PS_EXTRA="--cert-validity 10s" start_procsup "$WORK/keys/provisioning.key" 1
	wait_readyz 10 || fail "net-supervisor never ready"
	[ "$(req 1)" = 200 ] || fail "request 1 not allowed: $(cat "$WORK/rw/curl.1")"
	chmod 0644 "$WORK/keys/provisioning.key"
	NA=$(json_field "$WORK/proc1.jsonl" anchor_established not_after)
	for _ in $(seq 300); do [ "$(date +%s)" -gt $((NA + 1)) ] && break; sleep 0.1; done
	grep -q "renewing the anchor certificate" "$WORK/proc1.log" || fail "no failed renewal logged: $(cat "$WORK/proc1.log")"
	grep -q '"event":"anchor_renewed"' "$WORK/proc1.jsonl" && fail "renewed with an unreadable key file"
	L=$(audit_lines)
	code=$(req 2)
	[ "$code" = 403 ] || fail "request 2, after the certificate ran out: HTTP $code"
	wait_for 5 sh -c "[ -n \"\$(tail -n +$((L + 1)) $AUDIT | grep egress_decision)\" ]" || fail "request 2 not audited"
	got=$(decisions_after "$L")
	echo "after the end of the certificate: $got"
	# no binary: a context the net side could not verify names nobody
	[ "$got" = "deny:anchor_certificate_invalid:None" ] || fail "request 2: $got"
	chmod 0600 "$WORK/keys/provisioning.key"
	wait_for 5 grep -qs '"event":"anchor_renewed"' "$WORK/proc1.jsonl" || fail "no renewal after the key file was fixed"
	wait_for 5 grep -qs '"event":"anchor_renewed"' "$AUDIT" || fail "the net side audited no anchor_renewed"
	[ "$(req 3)" = 200 ] || fail "request 3, after the renewal, not allowed: $(cat "$WORK/rw/curl.3")"
	stop_workload
	check_all_audits
	;;
mac_audit|no_mac)
	# protocol 1.2: the allow was let through by the channel's MAC; its
	# decision line names context_request_id and the context_signed event
	# of that request carries the signature, which verifies offline.
	# no_mac: --no-identity-mac, the decision line carries the signature.
	[ "$CASE" = no_mac ] && NS_EXTRA="--no-identity-mac"
	start_netsup "$WORK/keys/provisioning.pub"
	start_procsup "$WORK/keys/provisioning.key" 1
	wait_readyz 10 || fail "net-supervisor never ready"
	three_signed_allows
	nmac=$(grep '"decision":"allow"' "$AUDIT" | grep -c '"context_request_id"')
	nsig=$(grep '"event":"context_signed"' "$AUDIT" | grep -c '"reason":"ok"')
	echo "$CASE: allows by MAC $nmac, context_signed ok $nsig"
	if [ "$CASE" = mac_audit ]; then
		[ "$nmac" = 3 ] && [ "$nsig" = 3 ] || fail "the allows were not MAC'd with signatures after them"
		grep '"decision":"allow"' "$AUDIT" | grep -q '"signed_context"' && fail "a MAC'd allow carries a signature"
	else
		[ "$nmac" = 0 ] && [ "$nsig" = 0 ] || fail "--no-identity-mac: MAC'd allows"
	fi
	# the proc side's identity_issued lines carry the signature too
	[ "$(grep '"event":"identity_issued"' "$WORK/proc1.jsonl" | grep -c '"signed_context"')" -ge 3 ] ||
		fail "the proc side's identity_issued lines lack signed_context"
	grep '"event":"anchor_established"' "$WORK/proc1.jsonl" >"$WORK/v.jsonl"
	cat "$WORK/ctx1.jsonl" "$WORK/ctx2.jsonl" "$WORK/ctx3.jsonl" >>"$WORK/v.jsonl"
	"$TETHER" verify-context --pubkey "$WORK/keys/provisioning.pub" "$WORK/v.jsonl" >"$WORK/v.out" 2>&1 ||
		fail "the signed contexts do not verify: $(cat "$WORK/v.out")"
	[ "$(grep -c ': valid' "$WORK/v.out")" = 3 ] || fail "verify-context: $(cat "$WORK/v.out")"
	cat "$WORK/v.out"
	stop_workload
	check_all_audits
	;;
push|push_off)
	[ "$CASE" = push_off ] && PS_EXTRA="--no-identity-push"
	# every flow waits for its push, however loaded the machine (a push
	# that never comes, push_off, is not waited for: none is offered)
	NS_ENV="TETHER_PUSH_WAIT_MS=20000" start_netsup "$WORK/keys/provisioning.pub"
	start_procsup "$WORK/keys/provisioning.key" 1
	wait_readyz 10 || fail "net-supervisor never ready"
	three_signed_allows
	# push ids have bit 62 set (>= 4611686018427387904); request ids count from 1
	npush=$(python3 - "$AUDIT" <<'PY'
import json, sys
n = 0
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("event") == "egress_decision" and e.get("decision") == "allow":
        n += int(e.get("context_request_id", 0) >= 1 << 62)
print(n)
PY
)
	nissued=$(grep '"event":"identity_issued"' "$WORK/proc1.jsonl" | grep -c '"push_id"')
	echo "$CASE: allows from pushes $npush, proc side pushes audited $nissued"
	hits=$(( $(metric 'tether_identity_push_total{result="hit"}') + $(metric 'tether_identity_push_total{result="waited_hit"}') ))
	kept=$(metric 'tether_identity_push_total{result="kept"}')
	echo "$CASE: /metrics push hits $hits, kept $kept"
	if [ "$CASE" = push ]; then
		[ "$npush" = 3 ] || fail "not every flow was answered from a push ($npush of 3)"
		[ "$nissued" -ge 3 ] || fail "the proc side audited $nissued pushes"
		[ "$hits" -ge 3 ] && [ "$kept" -ge "$hits" ] || fail "/metrics: push hits $hits (want 3 or more), kept $kept"
	else
		[ "$npush" = 0 ] && [ "$nissued" = 0 ] || fail "--no-identity-push: pushes used ($npush) or made ($nissued)"
		[ "$hits" = 0 ] && [ "$kept" = 0 ] || fail "/metrics with pushes off: hits $hits, kept $kept"
	fi
	grep '"event":"anchor_established"' "$WORK/proc1.jsonl" >"$WORK/v.jsonl"
	cat "$WORK/ctx1.jsonl" "$WORK/ctx2.jsonl" "$WORK/ctx3.jsonl" >>"$WORK/v.jsonl"
	"$TETHER" verify-context --pubkey "$WORK/keys/provisioning.pub" "$WORK/v.jsonl" >"$WORK/v.out" 2>&1 ||
		fail "the signed contexts do not verify: $(cat "$WORK/v.out")"
	[ "$(grep -c ': valid' "$WORK/v.out")" = 3 ] || fail "verify-context: $(cat "$WORK/v.out")"
	cat "$WORK/v.out"
	stop_workload
	check_all_audits
	;;
push_exec)
	PY=$(readlink -f /usr/bin/python3)
	cat >"$WORK/w.sh" <<EOF
#!/bin/sh
read -r n <$FIFO || exit 3
exec $PY -c "
import os, urllib.request, urllib.error
o = urllib.request.build_opener(urllib.request.ProxyHandler({'http': 'http://$PROXY'}))
for i in range(2):
    try:
        o.open('$URL', timeout=10)
        print('py:200', flush=True)
    except urllib.error.HTTPError as e:
        print('py:%d' % e.code, flush=True)
os.execv('/usr/bin/curl', ['curl', '-sS', '-o', '/dev/null', '-w', 'curl:%{http_code}', '--max-time', '10', '$URL'])
" >$WORK/rw/py.out 2>&1
EOF
	NS_ENV="TETHER_PUSH_WAIT_MS=20000" start_netsup "$WORK/keys/provisioning.pub"
	PS_EXTRA=-v start_procsup "$WORK/keys/provisioning.key" 1 # -v: its push counts at exit
	wait_readyz 10 || fail "net-supervisor never ready"
	echo go >"$FIFO"
	wait_for 15 grep -q "curl:" "$WORK/rw/py.out" || fail "the workload did not finish: $(cat "$WORK/rw/py.out")"
	cat "$WORK/rw/py.out"; echo
	[ "$(grep -c '^py:403$' "$WORK/rw/py.out")" = 2 ] || fail "python's flows were not denied"
	grep -q 'curl:200' "$WORK/rw/py.out" || fail "the exec'd curl was not allowed"
	wait_for 5 sh -c "[ \$(grep -c '\"event\":\"egress_decision\"' $AUDIT) -ge 3 ]" || fail "three decisions not audited"
	got=$(decisions_after 0)
	echo "$got"
	[ "$(echo "$got" | grep -c "^deny:.*:$PY\$")" = 2 ] || fail "not two denials naming $PY"
	[ "$(echo "$got" | grep -c '^allow:allowed:/usr/bin/curl$')" = 1 ] || fail "the exec'd curl's flow not allowed as curl"
	# the workload has ended: the proc-supervisor exits and logs its counts
	wait_for 5 gone "$PS_TO" || fail "proc-supervisor did not exit after its workload"
	wait "$PS_TO" 2>/dev/null
	PS_PID="" PS_TO=""
	line=$(grep -o 'pushed ([0-9]* from the per-process cache)' "$WORK/proc1.log")
	echo "proc side: $line"
	[ "$line" = "pushed (1 from the per-process cache)" ] || fail "python's second flow was not pushed from the cache: $line"
	npush=$(grep '"event":"egress_decision"' "$AUDIT" | python3 -c 'import json,sys; print(sum(json.loads(l).get("context_request_id",0) >= 1<<62 for l in sys.stdin))')
	[ "$npush" = 3 ] || fail "not every decision from a push ($npush)"
	check_all_audits
	;;
impostor)
	"$TETHER" keygen --out "$WORK/impostor" >/dev/null || fail "keygen (impostor)"
	start_netsup "$WORK/keys/provisioning.pub"
	start_procsup "$WORK/impostor/provisioning.key" 1
	# the impostor's certificate reaches the net side and is refused
	wait_for 10 grep -q "anchor certificate refused" "$WORK/out" || fail "the impostor was not refused"
	word=$(sed -n 's/.*anchor certificate refused: \([a-z_]*\).*/\1/p' "$WORK/out" | head -1)
	echo "impostor refused: $word"
	[ "$word" = anchor_certificate_invalid ] || fail "impostor refused with '$word', not anchor_certificate_invalid"
	# the net side audits the refusal with the same word, once (every
	# reconnect is refused alike; the audit does not repeat it)
	wait_for 5 grep -q '"event":"anchor_refused"' "$AUDIT" || fail "the refusal was not audited"
	grep '"event":"anchor_refused"' "$AUDIT" | grep -q '"strategy":"delegated".*"reason":"anchor_certificate_invalid"' ||
		fail "anchor_refused audited otherwise: $(grep anchor_refused "$AUDIT")"
	sleep 1 # a few reconnects with backoff: still refused
	[ "$(grep -c '"event":"anchor_refused"' "$AUDIT")" = 1 ] || fail "anchor_refused repeated per reconnect"
	[ "$(readyz)" != 200 ] || fail "/readyz 200 with an impostor proc-supervisor"
	code=$(req 1)
	[ "$code" = 503 ] || [ "$code" = 403 ] || fail "impostor's workload flow: HTTP $code"
	wait_for 5 sh -c "grep -q egress_decision $AUDIT" || fail "the impostor's flow was not audited"
	got=$(decisions_after 0)
	echo "impostor's flows: $(echo $got)"
	echo "$got" | grep -q '^allow' && fail "a flow was allowed under the impostor: $got"
	echo "$got" | grep -q '^deny:not_ready:' || fail "the impostor's flow was not denied not_ready: $got"
	grep -q '"event":"anchor_established"' "$AUDIT" && fail "the net-supervisor established the impostor's anchor"
	grep -q '"event":"anchor_established"' "$WORK/proc1.jsonl" || fail "the impostor never offered a certificate"
	kill_procsup

	# the genuine proc-supervisor is accepted
	start_procsup "$WORK/keys/provisioning.key" 2
	wait_readyz 10 || fail "net-supervisor never ready with the genuine proc-supervisor"
	[ "$(req 2)" = 200 ] || fail "genuine proc-supervisor's flow not allowed: $(cat "$WORK/rw/curl.2")"
	wait_for 5 sh -c "grep -q '\"decision\":\"allow\"' $AUDIT" || fail "no allow audited"
	expect_decision /usr/bin/curl allow:allowed
	KID=$(json_field "$WORK/proc2.jsonl" anchor_established instance_key_id)
	grep '"event":"anchor_established"' "$AUDIT" | tail -1 | grep -q "instance $KID" ||
		fail "the net-supervisor's anchor is not the genuine instance $KID"
	stop_workload
	check_all_audits
	;;
clock_behind|clock_ahead)
	if [ "$CASE" = clock_behind ]; then off=-5 want=5; else off=+6 want=-6; fi
	faketime_env "$off"
	start_netsup "$WORK/keys/provisioning.pub"
	start_procsup "$WORK/keys/provisioning.key" 1
	wait_readyz 10 || fail "not ready with the net side's clock $off s off: $(readyz_body)"
	[ "$(req 1)" = 200 ] || fail "request 1 not allowed with the net side's clock $off s off: $(cat "$WORK/rw/curl.1")"
	wait_for 5 sh -c "grep -q '\"decision\":\"allow\"' $AUDIT" || fail "no allow in the audit"
	expect_decision /usr/bin/curl allow:allowed
	skew=$(metric tether_clock_skew_seconds)
	echo "net clock $off s: tether_clock_skew_seconds $skew, max $(metric tether_clock_skew_max_seconds)"
	near "$want" 0.5 "$skew" || fail "tether_clock_skew_seconds '$skew', want about $want"
	[ "$(metric tether_clock_skew_max_seconds)" = 60 ] || fail "tether_clock_skew_max_seconds is not 60"
	grep -q "clock_skew" "$AUDIT" && fail "clock_skew audited within the bound"
	# the allowed context verifies offline (tether verify-context)
	grep '"event":"anchor_established"' "$WORK/proc1.jsonl" >"$WORK/v.jsonl"
	wait_for 5 sig_lines 0 "$WORK/vctx" >/dev/null || fail "the allow has no signed context"
	cat "$WORK/vctx1.jsonl" >>"$WORK/v.jsonl"
	"$TETHER" verify-context --pubkey "$WORK/keys/provisioning.pub" "$WORK/v.jsonl" >"$WORK/v.out" 2>&1 ||
		fail "the allowed context does not verify: $(cat "$WORK/v.out")"
	stop_workload
	check_all_audits
	;;
clock_past_bound)
	faketime_env +30
	NS_EXTRA="--max-clock-skew 10" start_netsup "$WORK/keys/provisioning.pub"
	start_procsup "$WORK/keys/provisioning.key" 1
	wait_for 10 sh -c "nsenter --net=/run/netns/$OUTER curl -s --noproxy '*' --max-time 1 http://$ADMIN/readyz | grep -q clock_skew" ||
		fail "/readyz does not say clock_skew: $(readyz_body)"
	echo "readyz: $(readyz_body)"
	[ "$(readyz)" = 503 ] || fail "/readyz not 503 with the skew past the bound"
	skew=$(metric tether_clock_skew_seconds)
	near -30 0.5 "$skew" || fail "tether_clock_skew_seconds '$skew', want about -30"
	[ "$(metric tether_ready)" = 0 ] || fail "tether_ready is not 0"
	wait_for 5 grep -q '"event":"anchor_refused"' "$AUDIT" || fail "the refusal was not audited"
	grep '"event":"anchor_refused"' "$AUDIT" | grep -q '"reason":"clock_skew"' ||
		fail "anchor_refused audited otherwise: $(grep anchor_refused "$AUDIT")"
	grep '"event":"anchor_refused"' "$AUDIT" | grep -q 'past --max-clock-skew 10 s' ||
		fail "anchor_refused does not name the bound: $(grep anchor_refused "$AUDIT")"
	grep -q "clock is -[23][0-9]\.[0-9]* s from ours, past the bound of 10 s: clock_skew" "$WORK/out" ||
		fail "no warning naming the skew: $(cat "$WORK/out")"
	code=$(req 1)
	[ "$code" = 503 ] || fail "a flow with the skew past the bound: HTTP $code"
	wait_for 5 sh -c "grep -q egress_decision $AUDIT" || fail "the flow was not audited"
	got=$(decisions_after 0)
	echo "past the bound: $got"
	[ "$got" = "deny:clock_skew:None" ] || fail "the flow was not denied clock_skew: $got"
	grep -q '"event":"anchor_established"' "$AUDIT" && fail "anchored with the skew past the bound"
	# the clock put right: the next reconnect measures again
	set_clock +0
	wait_readyz 10 || fail "not ready after the clock was put right: $(readyz_body)"
	near 0 0.5 "$(metric tether_clock_skew_seconds)" || fail "skew not back to 0: $(metric tether_clock_skew_seconds)"
	[ "$(req 2)" = 200 ] || fail "request 2 not allowed after the clock was put right: $(cat "$WORK/rw/curl.2")"
	stop_workload
	check_all_audits
	;;
clock_step)
	faketime_env +0
	NS_EXTRA="--max-clock-skew 10" start_netsup "$WORK/keys/provisioning.pub"
	start_procsup "$WORK/keys/provisioning.key" 1
	wait_readyz 10 || fail "never ready: $(readyz_body)"
	[ "$(req 1)" = 200 ] || fail "request 1 not allowed: $(cat "$WORK/rw/curl.1")"
	# the net side's clock steps 30 s ahead on the live channel
	set_clock +30
	L=$(audit_lines)
	code=$(req 2)
	echo "the flow after the step: HTTP $code"
	[ "$code" = 403 ] || [ "$code" = 503 ] || fail "a flow after the step: HTTP $code"
	wait_for 5 sh -c "nsenter --net=/run/netns/$OUTER curl -s --noproxy '*' --max-time 1 http://$ADMIN/readyz | grep -q clock_skew" ||
		fail "/readyz does not say clock_skew after the step: $(readyz_body)"
	near -30 0.5 "$(metric tether_clock_skew_seconds)" || fail "skew after the step: $(metric tether_clock_skew_seconds)"
	# Each worker's channel (--workers) meets the step on a flow of its
	# own: until it has, a flow there is denied by its time check (403);
	# every flow is refused, and once no channel is left, 503 clock_skew.
	n=3 code=
	while [ $n -le 10 ]; do
		L2=$(audit_lines)
		code=$(req $n)
		[ "$code" = 503 ] && break
		[ "$code" = 403 ] || fail "request $n after the step: HTTP $code"
		n=$((n + 1))
	done
	[ "$code" = 503 ] || fail "no request after the step refused 503 (requests 3-10)"
	wait_for 5 sh -c "[ -n \"\$(tail -n +$((L2 + 1)) $AUDIT | grep egress_decision)\" ]" || fail "request $n not audited"
	got=$(decisions_after "$L2")
	[ "$got" = "deny:clock_skew:None" ] || fail "request $n not denied clock_skew: $got"
	grep '"event":"anchor_refused"' "$AUDIT" | grep -q '"reason":"clock_skew"' || fail "no anchor_refused clock_skew audited"
	set_clock +0
	wait_readyz 10 || fail "not ready after the clock stepped back: $(readyz_body)"
	n=$((n + 1))
	[ "$(req $n)" = 200 ] || fail "request $n not allowed after the clock stepped back: $(cat "$WORK/rw/curl.$n")"
	stop_workload
	check_all_audits
	;;
*) fail "unknown case" ;;
esac
stop_netsup
grep -q "AddressSanitizer\|LeakSanitizer\|runtime error:" "$WORK/out" "$WORK"/proc*.log 2>/dev/null &&
	fail "sanitizer report in a daemon's output"
echo "PASS [$CASE $TOPO]"
exit 0
