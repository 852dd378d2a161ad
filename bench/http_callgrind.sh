#!/bin/sh
# Instructions per request of `kvrouter serve` (valgrind --tool=callgrind:
# repeatable on a shared machine, where wall-clock figures are not), on the
# fixture of route_bench.sh. Collection starts once the server is up (the
# peer load is excluded) and covers every thread: HTTP, ingest, sweeper.
# Prints Ir per request and the top functions (inclusive and self); the
# profile stays in OUT (default /tmp) for callgrind_annotate.
# Endpoints metrics, workers and health are sent as GET, the others as POST
# with the fixture's bodies.
# usage: bench/http_callgrind.sh BUILD_DIR [requests] [workers] [route|query|metrics|...] [connections]
set -eu
BUILD=${1:?build dir}; N=${2:-2000}; NWORKERS=${3:-64}; EP=${4:-route}; CONN=${5:-2}
OUT=${OUT:-/tmp}
. "$(cd "$(dirname "$0")" && pwd)/http_fixture.sh"
PROF="$OUT/callgrind.http.$EP.$NWORKERS.$$"
fixture_start "$BUILD" "$NWORKERS" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$PROF"
callgrind_control -i on "$SRV" >/dev/null
case $EP in metrics|workers|health) METHOD=GET ;; *) METHOD=POST ;; esac
python3 "$HERE/http_client.py" "$PORT" "/$EP" "$DIR/bodies.txt" "$N" "$CONN" "$METHOD"
callgrind_control -i off "$SRV" >/dev/null
kill -INT "$SRV"; wait "$SRV" 2>/dev/null || true; SRV=
TOTAL=$(callgrind_annotate "$PROF" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
echo "$EP, $NWORKERS workers, $N requests over $CONN connections: $TOTAL Ir, $((TOTAL / N)) Ir/request"
echo "profile: $PROF"
callgrind_annotate --inclusive=yes "$PROF" 2>/dev/null | sed -n '/^Ir/,$p' | head -40
callgrind_annotate "$PROF" 2>/dev/null | sed -n '/^Ir/,$p' | head -30
