#!/bin/sh
# Run every benchmark program: bench/run.sh BUILD_DIR (default: build).
# One line per program; BENCH_ARGS is passed to each (e.g. --quick).
set -e
B=${1:-build}
"$B/bench/attribution" $BENCH_ARGS
"$B/bench/bench_identity_rtt" $BENCH_ARGS
"$B/bench/spawn_connect" $BENCH_ARGS
"$B/bench/bench_envb" $BENCH_ARGS
"$B/bench/idservice_bench" $BENCH_ARGS
"$B/bench/sockmap_relay" $BENCH_ARGS
case " ${BENCH_ARGS:-} " in *" --quick "*) "$(dirname "$0")/netsup_bench.sh" "$B" 1 268435456 500 ;; *) "$(dirname "$0")/netsup_bench.sh" "$B" ;; esac
