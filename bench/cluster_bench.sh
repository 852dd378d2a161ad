#!/bin/sh
# What the broker costs /route (SPEC 10): bench/route_bench.sh without and
# with --nats, back to back, ROUNDS times. With --nats a second replica B of
# the same cluster runs beside it, so the bookings A publishes are read by
# someone (as in a deployment); the figures are A's (wrk's requests/s and
# A's own CPU per request), plus nats-server's and B's CPU per request of A.
# usage: bench/cluster_bench.sh BUILD_DIR [seconds] [connections] [rounds]
set -eu
BUILD=${1:?build dir}; SECS=${2:-10}; CONN=${3:-4}; ROUNDS=${4:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
# ports from the pid: A (route_bench) on PORT, its dump peer PORT + 1, B PORT + 2, NATS PORT + 3
export PORT=$((22000 + $$ % 10000)) # below the ephemeral ports (http_fixture.sh takes PORT, PORT + 1)
BPORT=$((PORT + 2)); NPORT=$((PORT + 3))
nats-server -js -a 127.0.0.1 -p $NPORT -sd "$DIR/js" >"$DIR/nats.log" 2>&1 &
NATS=$!
# B's --cluster-url answers nothing, so A never takes B (which indexes nothing)
# as its ready peer: A recovers its caches from the fixture's peer either way.
"$BUILD/kvrouter" serve --listen 127.0.0.1:$BPORT --nats nats://127.0.0.1:$NPORT --cluster bench \
    --cluster-url http://127.0.0.1:1 \
    --router-opt booking_ttl_s=2 >"$DIR/b.log" 2>&1 &
B=$!
trap 'kill $B 2>/dev/null; sleep 0.3; kill $NATS 2>/dev/null; rm -rf "$DIR"' EXIT
for i in $(seq 50); do curl -sf http://127.0.0.1:$BPORT/health >/dev/null && break; sleep 0.1; done
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
HZ=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
    echo "== round $r: without NATS"
    "$HERE/route_bench.sh" "$BUILD" "$SECS" "$CONN" | grep -E "Requests/sec|server CPU|context switches|switches per request|Latency  "
    echo "== round $r: with --nats (replica B reading the bookings)"
    N0=$(ticks $NATS); B0=$(ticks $B)
    ROUTE_BENCH_SERVE_ARGS="--nats nats://127.0.0.1:$NPORT --cluster bench --cluster-url http://127.0.0.1:$PORT" \
        "$HERE/route_bench.sh" "$BUILD" "$SECS" "$CONN" | tee "$DIR/nats.out" |
        grep -E "Requests/sec|server CPU|context switches|switches per request|Latency  "
    N=$(awk '/requests in/ {print $1}' "$DIR/nats.out")
    awk -v n="$N" -v hz="$HZ" -v s="$(( $(ticks $NATS) - N0 ))" -v b="$(( $(ticks $B) - B0 ))" \
        'BEGIN { printf "nats-server CPU: %.1f us/request; replica B CPU: %.1f us/request\n", s / hz / n * 1e6, b / hz / n * 1e6 }'
done
