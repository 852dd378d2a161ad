# Sourced by route_bench.sh and http_callgrind.sh: a `kvrouter serve` with
# NWORKERS workers whose caches come from a peer /dump (gen_route_bench.py:
# 16 prompt families of 2,000 tokens, each worker holding its family whole
# and 40 % of the next), 2 HTTP threads, bookings living 2 s. The workers'
# engines are silent ports that fixture_peer.py holds (it also serves the
# dump, and writes the config that registers them with kv_events "on"), so
# nothing else on a shared machine publishes into the benchmark.
#   fixture_start BUILD NWORKERS [command prefix...]   sets HERE DIR PORT SRV
# PORT: the server's port (PORT + 1 the peer's) when set; unset, each binds
# a free port (port 0) and the fixture reads which: no collision with
# another server on a shared machine. (A port picked from the shell's pid
# met another engineer's server.)
# ROUTE_BENCH_SERVE_ARGS: more serve options (word-split).
fixture_start() {
    _build=$1; _nworkers=$2; shift 2
    HERE=${HERE:-$(cd "$(dirname "$0")" && pwd)}
    DIR=$(mktemp -d)
    export ROUTE_BENCH_DIR=$DIR
    _listen_port=${PORT:-0}
    _peer_port=$([ -n "${PORT:-}" ] && echo $((PORT + 1)) || echo 0)
    trap 'fixture_stop' EXIT
    python3 "$HERE/gen_route_bench.py" "$_build/kvrouter" "$DIR" --workers "$_nworkers"
    python3 "$HERE/fixture_peer.py" "$DIR" "$_peer_port" "$_nworkers" &
    _peer=$!
    for _i in $(seq 100); do
        [ -f "$DIR/config.json" ] && [ -f "$DIR/peer_port" ] && _peer_port=$(cat "$DIR/peer_port") &&
            curl -sf "http://127.0.0.1:$_peer_port/dump" >/dev/null && break
        sleep 0.1
    done
    "$@" "$_build/kvrouter" serve --listen "127.0.0.1:$_listen_port" --config "$DIR/config.json" \
        --peers "http://127.0.0.1:$_peer_port" \
        --http-threads 2 --router-opt booking_ttl_s=2 ${ROUTE_BENCH_SERVE_ARGS:-} >"$DIR/serve.log" 2>&1 &
    SRV=$!
    PORT=$_listen_port
    for _i in $(seq 600); do # serve prints the port it bound
        [ "$PORT" != 0 ] && break
        PORT=$(sed -n 's|^kvrouter: listening on http://[^ ]*:\([0-9]*\) .*|\1|p' "$DIR/serve.log")
        PORT=${PORT:-0}
        kill -0 "$SRV" 2>/dev/null || break
        sleep 0.1
    done
    for _i in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
    grep -i "peer http" "$DIR/serve.log" || true
}

fixture_stop() {
    [ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
    [ -n "${_peer:-}" ] && kill "$_peer" 2>/dev/null && wait "$_peer" 2>/dev/null
    [ -n "${DIR:-}" ] && rm -rf "$DIR"
    SRV=; _peer=; DIR=
}
