#!/bin/bash
# The Makefile's targets never remove a build tree, except `clean`.
#
# A recipe line left after a blank line belongs to the rule above it: when
# the `clean:` line was replaced by the test-deploy rule, its
# `rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ)` became the last step of
# `make test-deploy`, which removed the build trees after every passing
# run. Asserted here, without running anything (make -n, with the build
# dirs pointed at names that do not exist):
#   - no tab-indented (recipe) line follows a blank line;
#   - `make -n T` for every target T but clean removes none of BUILD,
#     BUILD_SAN, BUILD_FUZZ (nor their contents as a whole);
#   - `make -n clean` removes all three.
#   tests/deploy/test_makefile.sh   (TETHER_SRC: the source tree)
set -u
SRC=${TETHER_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
MK=$SRC/Makefile
S=/nonexistent/tether-makefile-check.$$
VARS=(BUILD="$S/build" BUILD_SAN="$S/san" BUILD_FUZZ="$S/fuzz")
fails=0
fail() { echo "FAIL - test_makefile: $*" >&2; fails=$((fails + 1)); }

orphans=$(awk 'prev_blank && /^\t/ { print FILENAME ":" NR ": " $0 } { prev_blank = ($0 ~ /^[ \t]*$/ && $0 !~ /^\t/) }' "$MK")
[ -z "$orphans" ] || fail "recipe line after a blank line (it belongs to the rule above): $orphans"

# removes_tree: stdin (make -n output) has an rm whose argument is one of
# the build dirs, with or without a trailing / or /*.
removes_tree() {
	grep -E '(^|[;&|[:space:]])rm[[:space:]]' | tr ' \t;' '\n\n\n' |
		grep -E -x "[\"']?$S/(build|san|fuzz)(/|/\\*)?[\"']?" | sort -u
}

targets=$(sed -n -E 's/^([A-Za-z0-9_-]+):([^=]|$).*/\1/p' "$MK" | sort -u)
[ -n "$targets" ] || fail "no targets found in $MK"
for t in $targets; do
	[ "$t" = clean ] && continue
	out=$(make -n -s -C "$SRC" "${VARS[@]}" "$t" 2>&1) || { fail "make -n $t failed: $out"; continue; }
	gone=$(removes_tree <<<"$out")
	[ -z "$gone" ] || fail "make $t removes $(echo $gone)"
done
gone=$(make -n -s -C "$SRC" "${VARS[@]}" clean 2>&1 | removes_tree | wc -l)
[ "$gone" = 3 ] || fail "make clean should remove BUILD, BUILD_SAN and BUILD_FUZZ (removes $gone of them)"

[ "$fails" = 0 ] && { echo "test_makefile: passed ($(echo $targets | wc -w) targets)"; exit 0; }
exit 1
