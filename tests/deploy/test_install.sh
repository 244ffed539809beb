#!/bin/bash
# cmake --install into a DESTDIR puts every file in its FHS place, and the
# installed binaries work with the source and build trees hidden: --version,
# `policy check` of a file and of the embedded presets, and a real
# `tether run` (combined) where curl is allowed and wget denied.
#   tests/deploy/test_install.sh BUILD_DIR
. "$(dirname "$0")/lib.sh"

W=$(mktemp -d /tmp/tether-deploy-install.XXXXXX)
on_exit "rm -rf $W"
chmod 0755 "$W"
ROOT=$W/root
DESTDIR=$ROOT cmake --install "$BUILD" --prefix /usr >"$W/install.log" 2>&1 ||
	{ cat "$W/install.log" >&2; die "cmake --install failed"; }

for f in usr/bin/tether usr/bin/proc-supervisor usr/bin/net-supervisor usr/bin/tether-runtime-init \
	usr/share/tether/profiles/baseline.yaml usr/share/tether/profiles/agents/claude.yaml \
	usr/share/doc/tether/README.md usr/share/doc/tether/docs/deploy.md \
	usr/share/doc/tether/examples/policy.yaml \
	usr/share/tether/deploy/Containerfile usr/share/tether/deploy/ssh/tether-exec.conf \
	usr/lib/systemd/system/tether-proc-supervisor.service \
	usr/lib/systemd/system/tether-net-supervisor.service; do
	[ -e "$ROOT/$f" ] && pass "installed /$f" || fail "missing /$f"
done
stray=$(cd "$ROOT" && find . -type f | grep -v -E "^\./usr/(bin|share|libexec/tether|lib/systemd/system)/" || true)
[ -z "$stray" ] && pass "nothing outside usr/{bin,share,lib/systemd}" || fail "stray files: $stray"
# The test build (static identity: trusts every flow) is never installed.
[ ! -e "$ROOT/usr/bin/net-supervisor-testing" ] && pass "net-supervisor-testing not installed" ||
	fail "net-supervisor-testing was installed"

# What the sandbox runs, outside both trees.
cp "$SRC/examples/workload-demo.sh" "$W/workload.sh"
cat >"$W/policy.yaml" <<'POL'
version: 1
network:
  mode: enforce
  policies:
    - name: fake-internet
      binaries:
        - path: /usr/bin/curl
      endpoints:
        - cidr: 203.0.113.0/24
          ports: [8080]
POL
fake_internet tdi$$ 203.0.113.10 "$W/www" || die "fake internet did not start"

# A private mount namespace where the source tree and the build tree are
# empty tmpfs mounts: whatever the installed binaries would read from them
# is not there.
cat >"$W/inside.sh" <<IN
set -u
mount -t tmpfs -o ro,size=4k tmpfs "$BUILD" || exit 2
mount -t tmpfs -o ro,size=4k tmpfs "$SRC" || exit 2
[ -z "\$(ls -A "$SRC")" ] || exit 3
B=$ROOT/usr/bin
echo "--- version";      \$B/tether --version || exit 10
echo "--- policy check"; \$B/tether policy check $W/policy.yaml || exit 11
echo "--- preset";       \$B/tether run --dry-run --agent claude --policy $W/policy.yaml -- /bin/true >/dev/null || exit 12
echo "--- run"
timeout 60 \$B/tether run --topology combined --policy $W/policy.yaml --audit $W/audit.jsonl \
	-- /bin/sh $W/workload.sh http://203.0.113.10:8080/ || exit 13
IN
unshare -m --propagation private bash "$W/inside.sh" >"$W/inside.log" 2>&1
rc=$?
sed 's/^/    /' "$W/inside.log"
[ $rc = 0 ] && pass "installed tether: --version, policy check, preset, run (trees hidden)" ||
	fail "installed tether failed with the trees hidden (step exit $rc)"
grep -q '^tether ' "$W/inside.log" && pass "--version prints 'tether VERSION'" || fail "--version output"
python3 - "$W/audit.jsonl" <<'PY' && pass "audit: curl allowed, wget denied (no_matching_policy)" || fail "audit decisions"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
dec = [e for e in ev if e.get("event") == "egress_decision"]
path = lambda e: (e.get("binary") or {}).get("path")
ok = any(e["decision"] == "allow" and path(e) == "/usr/bin/curl" for e in dec) and \
     any(e["decision"] == "deny" and path(e) != "/usr/bin/curl" and e.get("reason") == "no_matching_policy" for e in dec)
for e in dec: print("   ", e["decision"], path(e), e.get("reason"), e.get("topology"))
sys.exit(0 if ok else 1)
PY
finish
