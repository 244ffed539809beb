#!/bin/bash
# The notifier under a hostile workload's storm (probe_storm): connects from
# many threads while fds are closed and swapped under them, threads that
# exit mid-notification, exec while threads are blocked in connect, bad fds
# and pointers. The supervisor must survive (and, in the sanitizer build,
# stay clean), never drop the listener (no connect ever gets ENOSYS),
# answer every notification (no respond error, next to no failure), and still
# attribute an ordinary connect afterwards. Fast path and all fallbacks.
. "$(dirname "$0")/lib.sh"

for fb in "" all; do
	tag="[${fb:-fast}]"
	out=$(TETHER_FORCE_FALLBACK=$fb timeout 60 "$PS" --debug-registry "$D/reg.json" -- "$T/probe_storm" 3 \
		</dev/null 2>"$D/err")
	rc=$?
	expect_eq "$tag storm rc (0: no ENOSYS, supervisor alive)" "$rc" 0
	if grep -q -E "ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:" "$D/err"; then
		fail "$tag sanitizer report: $(grep -m3 -E 'Sanitizer|runtime error' "$D/err")"
	fi
	[ -s "$D/reg.json" ] || { fail "$tag no registry dump: $(tail -3 "$D/err")"; continue; }
	cookie=$(printf '%s' "$out" | sed -n 's/.* cookie=\([0-9]*\) pid=.*/\1/p')
	pid=$(printf '%s' "$out" | sed -n 's/.* pid=\([0-9]*\)$/\1/p')
	got=$(jq -r --arg c "$cookie" '.attributions[] | select(.cookie == $c) | "\(.found) \(.pid)"' "$D/reg.json")
	expect_eq "$tag the connect after the storm is attributed" "$got" "true $pid"
	stats=$(jq -c '.stats' "$D/reg.json")
	expect_eq "$tag respond_errors" "$(jq '.stats.respond_errors' "$D/reg.json")" 0
	n=$(jq '.stats.notifications' "$D/reg.json")
	# A process dying while it is read may count one; a systematic
	# failure would count thousands (0 in every run here).
	f=$(jq '.stats.failures' "$D/reg.json")
	[ $((f * 100)) -le "$n" ] && ok "$tag failures=$f" || fail "$tag failures=$f of $n"
	rec=$(jq '.stats.recorded' "$D/reg.json")
	[ "$n" -ge 1000 ] && [ "$rec" -ge 500 ] && ok "$tag $stats" || fail "$tag too little happened: $stats $out"
done
finish
