#!/bin/sh
# /route throughput and latency: kvrouter serve with 64 workers (or [workers]) whose caches
# come from a peer /dump, wrk on loopback with 2,000-token prompts.
# Also prints the server's CPU time per request (utime + stime from /proc),
# steadier than req/s when the machine is shared.
# usage: bench/route_bench.sh BUILD_DIR [seconds] [connections] [workers]
set -eu
BUILD=${1:?build dir}; SECS=${2:-10}; CONN=${3:-16}; NWORKERS=${4:-64}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
export ROUTE_BENCH_DIR=$DIR
WORKERS=$(python3 "$HERE/gen_route_bench.py" "$BUILD/kvrouter" "$DIR" --workers "$NWORKERS")
(cd "$DIR" && exec python3 -m http.server 18191 --bind 127.0.0.1 >/dev/null 2>&1) &
PEER=$!
for i in $(seq 50); do curl -sf http://127.0.0.1:18191/dump >/dev/null && break; sleep 0.1; done
"$BUILD/kvrouter" serve --listen 127.0.0.1:18190 --model-name m --block-size 16 \
    --workers "$WORKERS" --peers http://127.0.0.1:18191 --http-threads 2 \
    --router-opt booking_ttl_s=2 >"$DIR/serve.log" 2>&1 &
SRV=$!
trap 'kill $SRV $PEER 2>/dev/null; rm -rf "$DIR"' EXIT
for i in $(seq 50); do curl -sf http://127.0.0.1:18190/health >/dev/null && break; sleep 0.1; done
grep -i peer "$DIR/serve.log" || true
cpu() { awk '{print $14 + $15}' /proc/$SRV/stat; }
C0=$(cpu)
wrk -t2 -c"$CONN" -d"${SECS}s" --latency -s "$HERE/route.lua" http://127.0.0.1:18190/route \
    | tee "$DIR/wrk.out"
C1=$(cpu)
N=$(awk '/requests in/ {print $1}' "$DIR/wrk.out")
awk -v c="$((C1 - C0))" -v n="$N" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "server CPU: %.1f us/request (%d requests)\n", c / hz / n * 1e6, n }'
