#!/bin/sh
# What the broker costs /route in instructions (SPEC 10): bench/http_callgrind.sh
# on A without and with --nats, back to back. With --nats a second replica B
# of the same cluster runs beside A (as in cluster_bench.sh), so A's bookings
# are read by someone and B's membership and heartbeats reach A. Prints the
# two Ir/request lines.
# usage: bench/cluster_callgrind.sh BUILD_DIR [requests] [workers] [connections]
set -eu
BUILD=${1:?build dir}; N=${2:-2000}; NWORKERS=${3:-64}; CONN=${4:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
PORT=$((22000 + $$ % 10000)) # A on PORT, its dump peer PORT + 1, B PORT + 2, NATS PORT + 3
BPORT=$((PORT + 2)); NPORT=$((PORT + 3))
nats-server -js -a 127.0.0.1 -p $NPORT -sd "$DIR/js" >"$DIR/nats.log" 2>&1 &
NATS=$!
"$BUILD/kvrouter" serve --listen 127.0.0.1:$BPORT --nats nats://127.0.0.1:$NPORT --cluster bench \
    --cluster-url http://127.0.0.1:1 --router-opt booking_ttl_s=2 >"$DIR/b.log" 2>&1 &
B=$!
trap 'kill $B 2>/dev/null; sleep 0.3; kill $NATS 2>/dev/null; rm -rf "$DIR"' EXIT
for i in $(seq 50); do curl -sf http://127.0.0.1:$BPORT/health >/dev/null && break; sleep 0.1; done
echo "== without NATS"
PORT=$PORT "$HERE/http_callgrind.sh" "$BUILD" "$N" "$NWORKERS" route "$CONN" | grep "Ir/request"
echo "== with --nats (replica B beside)"
PORT=$PORT ROUTE_BENCH_SERVE_ARGS="--nats nats://127.0.0.1:$NPORT --cluster bench --cluster-url http://127.0.0.1:$PORT" \
    "$HERE/http_callgrind.sh" "$BUILD" "$N" "$NWORKERS" route "$CONN" | grep "Ir/request"
