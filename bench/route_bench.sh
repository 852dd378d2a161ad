#!/bin/sh
# /route (or /query) throughput and latency: wrk on loopback with 2,000-token
# prompts against `kvrouter serve` with 64 workers (or [workers]); the
# fixture is http_fixture.sh's. Also prints the server's CPU time per request
# (utime + stime from /proc, and each apart), steadier than req/s when the
# machine is shared, and wrk's own CPU per request (with /usr/bin/time): on
# 2 shared cores, requests/s <= 2 cores / (server + client CPU per request).
# PERF_OUT=FILE records the server with perf (task-clock, call graphs)
# during the run.
# usage: bench/route_bench.sh BUILD_DIR [seconds] [connections] [workers] [route|query]
# ROUTE_BENCH_SERVE_ARGS: more `kvrouter serve` options (bench/cluster_bench.sh
# passes --nats ... there); ROUTE_BENCH_METRICS: a regex of /metrics lines to
# print after the run; ROUTE_BENCH_THREADS=1: each thread's context switches
# per request. ROUTE_BENCH_SERVE_PREFIX: a command the server runs under
# (e.g. "taskset -c 0", to keep it on a core of its own).
# ROUTE_BENCH_DELAY_MS=N: a fixed request rate (route.lua: every connection
# pauses N ms between requests), to compare CPU per request at equal rates.
set -eu
BUILD=${1:?build dir}; SECS=${2:-10}; CONN=${3:-16}; NWORKERS=${4:-64}; EP=${5:-route}
. "$(cd "$(dirname "$0")" && pwd)/http_fixture.sh"
fixture_start "$BUILD" "$NWORKERS" ${ROUTE_BENCH_SERVE_PREFIX:-}
export ROUTE_BENCH_PATH="/$EP"
cpu() { awk '{print $14 + $15}' /proc/$SRV/stat; }
ucpu() { awk '{print $14}' /proc/$SRV/stat; }
# context switches of every thread of the server (voluntary + not)
csw() { cat /proc/$SRV/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
# time on CPU of every thread in ns (schedstat: the scheduler's exact sum, where
# utime + stime are samples of a 250 Hz tick)
rt() { cat /proc/$SRV/task/*/schedstat | awk '{n += $1} END {printf "%.0f", n}'; }
# per thread: tid name switches (ROUTE_BENCH_THREADS=1 prints the differences)
tsw() { for t in /proc/$SRV/task/*; do
    printf '%s %s %s\n' "${t##*/}" "$(tr ' ' _ <"$t/comm")" \
        "$(awk '/ctxt_switches/ {n += $2} END {print n}' "$t/status")"; done; }
C0=$(cpu); U0=$(ucpu); S0=$(csw); R0=$(rt); tsw >"$DIR/tsw0"
if [ -n "${PERF_OUT:-}" ]; then
    perf record -q -e task-clock -g -p "$SRV" -o "$PERF_OUT" -- sleep "$SECS" 2>/dev/null &
    PERF_PID=$!
fi
TIMER=
[ -x /usr/bin/time ] && TIMER="/usr/bin/time -f %U:%S -o $DIR/wrk.cpu"
$TIMER wrk -t2 -c"$CONN" -d"${SECS}s" --latency -s "$HERE/route.lua" "http://127.0.0.1:$PORT/$EP" \
    | tee "$DIR/wrk.out"
C1=$(cpu); U1=$(ucpu); S1=$(csw); R1=$(rt); tsw >"$DIR/tsw1"
[ -n "${ROUTE_BENCH_METRICS:-}" ] && curl -s "http://127.0.0.1:$PORT/metrics" | grep -E "$ROUTE_BENCH_METRICS"
[ -n "${PERF_OUT:-}" ] && wait "$PERF_PID"
N=$(awk '/requests in/ {print $1}' "$DIR/wrk.out")
awk -v c="$((C1 - C0))" -v u="$((U1 - U0))" -v n="$N" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "server CPU: %.1f us/request (user %.1f, system %.1f; %d requests)\n",
             c / hz / n * 1e6, u / hz / n * 1e6, (c - u) / hz / n * 1e6, n }'
awk -v r="$((R1 - R0))" -v n="$N" 'BEGIN { printf "server CPU (schedstat): %.1f us/request\n", r / n / 1e3 }'
awk -v s="$((S1 - S0))" -v n="$N" 'BEGIN { printf "server context switches: %.2f per request\n", s / n }'
[ -n "${ROUTE_BENCH_THREADS:-}" ] && awk -v n="$N" 'NR == FNR { s[$1] = $3; next }
    { d = $3 - s[$1]; if (d > n / 1000) printf "  thread %s %s: %.3f switches per request\n", $1, $2, d / n }' \
    "$DIR/tsw0" "$DIR/tsw1"
[ -s "$DIR/wrk.cpu" ] && awk -F: -v n="$N" 'NF == 2 { printf "wrk CPU: %.1f us/request (user %.1f, system %.1f)\n", ($1 + $2) / n * 1e6, $1 / n * 1e6, $2 / n * 1e6 }' "$DIR/wrk.cpu"
uptime
