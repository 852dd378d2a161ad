#!/usr/bin/env bash
# CPU a router spends at rest (issue 14): `kvrouter serve --workers` with N
# registered engines that are unreachable (closed ports) or connected but
# silent, utime + stime from /proc/PID/stat over 10 s, starting WARM seconds
# (default 5) after start.
#   tests/source/perf/at_rest.sh build/kvrouter closed|silent [N]
set -euo pipefail
BIN=$1 MODE=$2 N=${3:-1000}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'kill $srv ${pubs:-} 2>/dev/null || true; rm -rf "$tmp"' EXIT
ulimit -n "$(ulimit -Hn)"
if [ "$MODE" = silent ]; then
  cc -O2 -o "$tmp/silent_pubs" "$here/silent_pubs.c" -lzmq
  "$tmp/silent_pubs" "$N" > "$tmp/spec" & pubs=$!
  while [ ! -s "$tmp/spec" ]; do sleep 0.2; done
  spec=$(cat "$tmp/spec")
else
  # ports below the ephemeral range, nothing listening there
  spec=""; for i in $(seq 1 "$N"); do spec="$spec${spec:+,}$i=tcp://127.0.0.1:$((20000 + i))"; done
fi
"$BIN" serve --listen 127.0.0.1:0 --model-name m --block-size 16 --workers "$spec" \
  >/dev/null 2>"$tmp/err" & srv=$!
sleep "${WARM:-5}"
tk=$(getconf CLK_TCK)
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$srv/stat)
sleep 10
read -r u2 s2 < <(awk '{print $14, $15}' /proc/$srv/stat)
awk -v m="$MODE" -v n="$N" -v t=$((u2 + s2 - u1 - s1)) -v tk="$tk" \
  'BEGIN { printf "{\"mode\":\"%s\",\"engines\":%d,\"cpu_seconds_per_10s\":%.3f}\n", m, n, t / tk }'
