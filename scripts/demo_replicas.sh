#!/usr/bin/env bash
# `make demo-replicas`: two kvrouter replicas sharing one simulated fleet
# through NATS JetStream (SPEC §10).
#
# Starts nats-server (JetStream, a temporary store), replica A of cluster
# "demo", and `kvrouter sim` with 8 mock SGLang engines routing through A.
# Once A routes, replica B joins as a replica started later would: it reads
# the fleet from the registrations bucket, loads A's /dump (A is the ready
# peer in the membership bucket), replays the bookings stream, subscribes
# to every engine itself (replaying what it missed from each), and from
# then on counts A's bookings. Once a second the script prints both
# replicas side by side; midway it routes one request through B, whose view
# of the workers' load holds A's bookings, and frees it through A.
#
# Environment: KVROUTER (binary, default build/kvrouter), DEMO_LIMIT
# (requests, default 600), DEMO_PORT_A / DEMO_PORT_B (default 8091 / 8092),
# DEMO_NATS_PORT (default 14222). Everything it starts is stopped on exit.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${KVROUTER:-$root/${BUILD:-build}/kvrouter}"
trace="$root/data/conversation_trace.jsonl"
limit="${DEMO_LIMIT:-600}"
if [[ ! -x "$bin" ]]; then
    echo "demo-replicas: $bin not built (run: make build)" >&2
    exit 1
fi
if ! command -v nats-server >/dev/null; then
    echo "demo-replicas: nats-server is not installed (make deps installs it)" >&2
    exit 1
fi

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p=$1
    while port_busy "$p"; do p=$((p + 1)); done
    echo "$p"
}
np="$(free_port "${DEMO_NATS_PORT:-14222}")"
pa="$(free_port "${DEMO_PORT_A:-8091}")"
pb="$(free_port "$(( ${DEMO_PORT_B:-8092} > pa ? ${DEMO_PORT_B:-8092} : pa + 1 ))")"
work="$(mktemp -d /tmp/kvr-demo-replicas-XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    [[ -n "${DEMO_KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT INT TERM

nats-server -js -a 127.0.0.1 -p "$np" -sd "$work/js" >"$work/nats.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do port_busy "$np" && break; sleep 0.1; done
nats="nats://127.0.0.1:$np"
A="http://127.0.0.1:$pa"
B="http://127.0.0.1:$pb"
replica() { # name port
    "$bin" serve --listen "127.0.0.1:$2" --nats "$nats" --cluster demo --router-opt rng_seed=1 \
        >"$work/$1.log" 2>&1 &
    pids+=($!)
    local url="http://127.0.0.1:$2"
    for _ in $(seq 1 150); do curl -sf "$url/health" >/dev/null 2>&1 && return; sleep 0.1; done
    echo "demo-replicas: $url did not start" >&2
    cat "$work/$1.log" >&2
    exit 1
}
replica A "$pa"

metric() {
    local v
    v="$(curl -s "$1/metrics" | awk -v k="$2" 'index($0, k) == 1 { print $NF; exit }')"
    echo "${v:--}"
}
row() {
    local url=$1
    printf '%-24s %7s %9s %10s %11s %12s %10s\n' "$url" \
        "$(metric "$url" 'kvr_workers{')" \
        "$(metric "$url" 'kvr_index_blocks{')" \
        "$(metric "$url" 'kvr_router_bookings_active ')" \
        "$(metric "$url" 'kvr_cluster_peer_bookings_active ')" \
        "$(metric "$url" 'kvr_cluster_peer_events_applied_total ')" \
        "$(metric "$url" 'kvr_cluster_registrations_applied_total ')"
}

cat <<EOF
== kvrouter: two replicas, one fleet ==
NATS:      $nats (JetStream; buckets KVR_demo_WORKERS, KVR_demo_REPLICAS; stream KVR_demo_BOOKINGS)
replica A: $A   replica B: $B   (logs in $work)
fleet:     8 mock SGLang engines, registered on A only; requests routed through A
workload:  first $limit requests of data/conversation_trace.jsonl

replica                  workers    blocks  own books  peer books  peer events  regs from NATS
EOF

"$bin" sim --router "$A" --trace "$trace" --limit "$limit" --engines 8 --policies kvrouter \
    --quiet --json >"$work/sim.json" 2>"$work/sim.log" &
sim_pid=$!
pids+=($sim_pid)
for _ in $(seq 1 300); do
    [[ "$(metric "$A" 'kvr_router_routes_total ')" =~ ^[1-9] ]] && break
    kill -0 "$sim_pid" 2>/dev/null || break
    sleep 0.1
done
t0=$(date +%s.%N)
replica B "$pb"
for _ in $(seq 1 300); do curl -sf "$B/ready" >/dev/null && break; sleep 0.1; done
echo "-- B joined: /ready after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s; $(grep -o 'recovered [0-9]* store records from peer [^ ]*' "$work/B.log" || echo 'no peer dump')"
shown=0
while kill -0 "$sim_pid" 2>/dev/null; do
    sleep 1
    row "$A"
    row "$B"
    if [[ $shown == 0 && "$(metric "$B" 'kvr_cluster_peer_bookings_active ')" =~ ^[1-9] ]]; then
        shown=1
        model="$(curl -s "$B/workers" | grep -o '"model_name":"[^"]*"' | head -n1 | cut -d'"' -f4)"
        reply="$(curl -s -XPOST "$B/route" -d "{\"model_name\":\"$model\",\"token_ids\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],\"request_id\":\"via-B\",\"debug\":true}")"
        echo "-- a request through B; its view of each worker's load includes A's bookings:"
        echo "$reply" | sed 's/.*"costs":\[//' |
            grep -o '"worker_id":[0-9]*\|"active_prefill_tokens":[0-9]*' | cut -d: -f2 | paste -d' ' - - |
            awk '{ printf "   worker %s: %s uncached prefill tokens booked\n", $1, $2 }' | head -n 8
        echo "-- B chose $(echo "$reply" | grep -o '^{"worker_id":[0-9]*' | cut -d: -f2); freed through A: $(curl -s -XPOST "$A/free" -d '{"request_id":"via-B"}')"
    fi
done
wait "$sim_pid" || { echo "demo-replicas: sim failed:" >&2; cat "$work/sim.log" >&2; exit 1; }
echo
echo "sim (through A): $(grep -o '"hit_rate":[0-9.]*' "$work/sim.json" | head -n1)"
echo "A wrote $(metric "$A" 'kvr_cluster_registrations_written_total ') registrations and published $(metric "$A" 'kvr_cluster_bookings_published_total ') booking events; B applied $(metric "$B" 'kvr_cluster_peer_events_applied_total ') of them."
left="$(metric "$B" 'kvr_workers{')"
echo "The sim unregistered its engines at the end, on A; B removed them too: ${left/-/0} workers left."
