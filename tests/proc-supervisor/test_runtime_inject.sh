#!/bin/bash
# Environment variables that make a runtime load code its exe hash never saw
# (BUN_OPTIONS="--preload ./evil.js" claude: /proc/PID/exe still reads
# claude). For every such variable of a runtime installed here, this asserts
#   1. the injection works: the variable set directly, the real interpreter
#      runs the attacker's code and it writes a marker file;
#   2. the env boundary stops it: the same parent environment through
#      envb_exec (envb_build(), as a spawn does), with a command layer whose
#      pass_through names every variable, leaves no marker and reports the
#      variable "dropped NAME hard_deny".
# A runtime that is not installed is skipped and counted. Runtimes not in
# Debian (bun, deno, dotnet) and R are covered by the table test in
# test_envb_build.c; bun also here when one is on PATH.
set -euo pipefail
H="$TETHER_TESTS/envb_exec"
tmp=$(mktemp -d /tmp/tether-inject-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/home" "$tmp/work" "$tmp/lib"
M="$tmp/MARK"
W="$tmp/work"
L="$tmp/lib"
passed=0 failed=0 skipped=0
BASE=(PATH=/usr/bin:/bin "HOME=$tmp/home" LANG=C.UTF-8)
names=()

fail() {
	echo "FAIL $1: $2" >&2
	for f in direct boundary; do
		[ -f "$tmp/out.$f" ] && { echo "--- $f run:" >&2; head -20 "$tmp/out.$f" >&2; }
	done
	failed=$((failed + 1))
}

# check LABEL NAME=VALUE [NAME=VALUE]... -- /ABS/CMD [ARG]...
# The first NAME is the variable under test; later ones are accomplices the
# policy lets through (so only the first one's deny can stop the injection).
check() {
	local label=$1 vars=()
	shift
	while [ "$1" != "--" ]; do
		vars+=("$1")
		shift
	done
	shift
	local name=${vars[0]%%=*}
	rm -f "$M" "$tmp/out.direct" "$tmp/out.boundary"
	(cd "$W" && timeout 60 env -i "${BASE[@]}" "${vars[@]}" "$@" </dev/null >"$tmp/out.direct" 2>&1) || true
	if [ ! -e "$M" ]; then
		fail "$label" "$name: the injection wrote no marker without the boundary (the test's own setup is wrong)"
		return 0
	fi
	rm -f "$M"
	(cd "$W" && timeout 60 env -i "${BASE[@]}" "${vars[@]}" "$H" "$tmp/policy.yaml" "$@" </dev/null \
		>"$tmp/out.boundary" 2>&1) || true
	if [ -e "$M" ]; then
		fail "$label" "$name reached the interpreter through the env boundary and its code ran"
		return 0
	fi
	if ! grep -qx "dropped $name hard_deny" "$tmp/out.boundary"; then
		fail "$label" "$name: no 'dropped $name hard_deny' from the boundary"
		return 0
	fi
	echo "ok   $label"
	passed=$((passed + 1))
}

skip() {
	echo "skip $1: $2"
	skipped=$((skipped + 1))
}

# ── fixtures ───────────────────────────────────────────────────────────────
mkdir -p "$L/py" "$L/pl" "$L/rb" "$L/rbpath" "$L/lua" "$L/phprc" "$L/phpscan" "$L/java"
printf 'open("%s", "w").close()\n' "$M" >"$L/evil.py"
cp "$L/evil.py" "$L/py/sitecustomize.py"
printf 'open("%s", "w").close()\ndef f(*a):\n    pass\n' "$M" >"$W/evilmod.py"
printf 'require("fs").writeFileSync(%s, "")\n' "'$M'" >"$L/evil.js"
printf 'package evil; open(my $f, ">", "%s"); close $f; 1;\n' "$M" >"$L/pl/evil.pm"
printf 'package strict; open(my $f, ">", "%s"); close $f; sub import {} sub unimport {} 1;\n' "$M" >"$L/pl/strict.pm"
printf 'File.write(%s, "")\n' "'$M'" >"$L/evil.rb"
cp "$L/evil.rb" "$L/rb/json.rb"
cp "$L/evil.rb" "$L/rbpath/evilscript"
printf 'io.open("%s", "w"):close()\nreturn {}\n' "$M" >"$L/lua/evil.lua"
printf '<?php touch("%s");\n' "$M" >"$L/evil.php"
printf '<?php echo "app\\n";\n' >"$W/app.php"
printf 'auto_prepend_file=%s\n' "$L/evil.php" >"$L/phprc/php.ini"
cp "$L/phprc/php.ini" "$L/phpscan/evil.ini"
printf '{"name":"app","version":"1.0.0","scripts":{"x":"node -e 0"}}\n' >"$W/package.json"

cat >"$tmp/policy.yaml" <<'EOF'
version: 1
environment:
  pass_through: [BROWSER, npm_config_update_notifier, NODE_OPTIONS, NODE_REPL_EXTERNAL_MODULE,
    npm_config_node_options, PYTHONPATH, PYTHONSTARTUP, PYTHONUSERBASE, PYTHONWARNINGS,
    PYTHONBREAKPOINT, PYTHONPYCACHEPREFIX, PERL5OPT, PERL5LIB, PERLLIB, PERL5DB, RUBYOPT,
    RUBYLIB, RUBYPATH, LUA_INIT, LUA_INIT_5_4, LUA_PATH, LUA_PATH_5_4, PHPRC, PHP_INI_SCAN_DIR,
    JAVA_TOOL_OPTIONS, _JAVA_OPTIONS, JDK_JAVA_OPTIONS, BUN_OPTIONS, BUN_BE_BUN, PYTHONHOME, LUA_CPATH]
EOF

bin() { command -v "$1" 2>/dev/null || true; }

# ── node ───────────────────────────────────────────────────────────────────
NODE=$(bin node)
if [ -n "$NODE" ]; then
	check "node NODE_OPTIONS --require" "NODE_OPTIONS=--require $L/evil.js" -- "$NODE" -e 0
	check "node NODE_REPL_EXTERNAL_MODULE" "NODE_REPL_EXTERNAL_MODULE=$L/evil.js" -- "$NODE" -i
	NPM=$(bin npm)
	if [ -n "$NPM" ]; then
		# npm hands its node-options setting to every node a script starts
		check "npm npm_config_node_options" "npm_config_node_options=--require $L/evil.js" \
			npm_config_update_notifier=false -- "$NPM" run -s x
	else
		skip "npm npm_config_node_options" "npm not installed"
	fi
else
	skip node "node not installed"
fi

# ── python ─────────────────────────────────────────────────────────────────
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(bin python3)
if [ -n "$PY" ]; then
	check "python PYTHONPATH sitecustomize" "PYTHONPATH=$L/py" -- "$PY" -c pass
	check "python PYTHONSTARTUP" "PYTHONSTARTUP=$L/evil.py" -- "$PY" -i
	ver=$("$PY" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
	# a home with the os.py landmark: the first import (encodings) is ours
	mkdir -p "$L/pyhome/lib/$ver/encodings"
	: >"$L/pyhome/lib/$ver/os.py"
	# (that early, open() does not exist yet: posix does)
	printf 'import posix\nposix.close(posix.open("%s", posix.O_WRONLY | posix.O_CREAT))\n' "$M" \
		>"$L/pyhome/lib/$ver/encodings/__init__.py"
	check "python PYTHONHOME encodings" "PYTHONHOME=$L/pyhome" -- "$PY" -c pass
	mkdir -p "$L/userbase/lib/$ver/site-packages"
	printf 'import runpy; runpy.run_path("%s")\n' "$L/evil.py" >"$L/userbase/lib/$ver/site-packages/evil.pth"
	check "python PYTHONUSERBASE .pth" "PYTHONUSERBASE=$L/userbase" -- "$PY" -c pass
	# -W's category is imported at start: antigravity opens $BROWSER
	check "python PYTHONWARNINGS import" "PYTHONWARNINGS=ignore::antigravity.X" "BROWSER=touch $M %s" -- \
		"$PY" -c pass
	check "python PYTHONBREAKPOINT" "PYTHONBREAKPOINT=evilmod.f" -- "$PY" -c 'breakpoint()'
	# a forged .pyc under the cache prefix, stamped with app/helper.py's mtime and size
	mkdir -p "$W/app" "$L/pycache"
	printf 'import helper\n' >"$W/app/main.py"
	printf 'x = 1\n' >"$W/app/helper.py"
	PYTHONPYCACHEPREFIX="$L/pycache" "$PY" - "$W/app/helper.py" "$M" <<'PY'
import importlib.util, importlib._bootstrap_external as be, os, sys
src, mark = sys.argv[1], sys.argv[2]
st = os.stat(src)
code = compile("open(%r, 'w').close()\nx = 1\n" % mark, src, "exec")
out = importlib.util.cache_from_source(src)
os.makedirs(os.path.dirname(out), exist_ok=True)
open(out, "wb").write(be._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
PY
	check "python PYTHONPYCACHEPREFIX forged pyc" "PYTHONPYCACHEPREFIX=$L/pycache" PYTHONDONTWRITEBYTECODE=1 -- \
		"$PY" "$W/app/main.py"
else
	skip python "python3 not installed"
fi

# ── perl ───────────────────────────────────────────────────────────────────
PERL=$(bin perl)
if [ -n "$PERL" ]; then
	check "perl PERL5OPT -M" "PERL5OPT=-I$L/pl -Mevil" -- "$PERL" -e 1
	check "perl PERL5LIB shadows strict" "PERL5LIB=$L/pl" -- "$PERL" -e 'use strict; 1'
	check "perl PERLLIB shadows strict" "PERLLIB=$L/pl" -- "$PERL" -e 'use strict; 1'
	check "perl PERL5DB" "PERL5DB=BEGIN { open(my \$f, '>', '$M'); close \$f } sub DB::DB {}" -- "$PERL" -d -e 1
else
	skip perl "perl not installed"
fi

# ── ruby ───────────────────────────────────────────────────────────────────
RUBY=$(bin ruby)
if [ -n "$RUBY" ]; then
	check "ruby RUBYOPT -r" "RUBYOPT=-r$L/evil.rb" -- "$RUBY" -e 0
	check "ruby RUBYLIB shadows json" "RUBYLIB=$L/rb" -- "$RUBY" -e 'require "json"'
	check "ruby RUBYPATH with -S" "RUBYPATH=$L/rbpath" -- "$RUBY" -S evilscript
else
	skip ruby "ruby not installed (ci/install-deps.sh installs it)"
fi

# ── lua ────────────────────────────────────────────────────────────────────
LUA=$(bin lua5.4)
if [ -n "$LUA" ]; then
	check "lua LUA_INIT" "LUA_INIT=io.open('$M', 'w'):close()" -- "$LUA" -e ''
	check "lua LUA_INIT_5_4 @file" "LUA_INIT_5_4=@$L/lua/evil.lua" -- "$LUA" -e ''
	check "lua LUA_PATH" "LUA_PATH=$L/lua/?.lua" -- "$LUA" -e 'require "evil"'
	check "lua LUA_PATH_5_4" "LUA_PATH_5_4=$L/lua/?.lua" -- "$LUA" -e 'require "evil"'
	CC=$(bin cc)
	if [ -n "$CC" ]; then
		printf '#include <stdio.h>\nint luaopen_evilc(void *L) { (void)L; FILE *f = fopen("%s", "w"); if (f) fclose(f); return 0; }\n' \
			"$M" >"$L/lua/evilc.c"
		"$CC" -shared -fPIC -o "$L/lua/evilc.so" "$L/lua/evilc.c"
		check "lua LUA_CPATH C module" "LUA_CPATH=$L/lua/?.so" -- "$LUA" -e 'require "evilc"'
	else
		skip "lua LUA_CPATH" "no C compiler"
	fi
else
	skip lua "lua5.4 not installed (ci/install-deps.sh installs it)"
fi

# ── php ────────────────────────────────────────────────────────────────────
PHP=$(bin php)
if [ -n "$PHP" ]; then
	check "php PHPRC auto_prepend_file" "PHPRC=$L/phprc" -- "$PHP" "$W/app.php"
	check "php PHP_INI_SCAN_DIR auto_prepend_file" "PHP_INI_SCAN_DIR=$L/phpscan" -- "$PHP" "$W/app.php"
else
	skip php "php not installed (ci/install-deps.sh installs php-cli)"
fi

# ── java ───────────────────────────────────────────────────────────────────
JAVA=$(bin java)
JAVAC=$(bin javac)
JAR=$(bin jar)
if [ -n "$JAVA" ] && [ -n "$JAVAC" ] && [ -n "$JAR" ]; then
	printf 'public class Agent { public static void premain(String a) throws Exception {\n new java.io.FileOutputStream("%s").close(); } }\n' \
		"$M" >"$L/java/Agent.java"
	printf 'Premain-Class: Agent\n' >"$L/java/manifest.txt"
	(cd "$L/java" && "$JAVAC" Agent.java && "$JAR" cfm agent.jar manifest.txt Agent.class)
	for v in JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS; do
		check "java $v -javaagent" "$v=-javaagent:$L/java/agent.jar" -- "$JAVA" -version
	done
else
	skip java "java, javac or jar not installed"
fi

# ── bun (not in Debian: runs only where a bun is on PATH) ──────────────────
BUN=$(bin bun)
if [ -n "$BUN" ]; then
	# the OpenShell #1496 shape: a compiled app (as Claude Code's native build)
	printf 'console.log("app")\n' >"$L/app.js"
	(cd "$L" && "$BUN" build app.js --compile --outfile "$L/bunapp" >/dev/null)
	check "bun BUN_OPTIONS --preload (compiled app)" "BUN_OPTIONS=--preload $L/evil.js" -- "$L/bunapp"
	check "bun BUN_BE_BUN (compiled app runs as bun)" BUN_BE_BUN=1 -- "$L/bunapp" -e "require('fs').writeFileSync('$M', '')"
else
	skip bun "bun not installed (not in Debian; the table test covers BUN_OPTIONS, BUN_BE_BUN)"
fi

echo "test_runtime_inject: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
