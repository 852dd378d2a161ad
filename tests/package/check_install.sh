#!/bin/sh
# Checks an installed kvrouter as a user of it would: files in place, the
# shared library's SONAME, pkg-config, the example gateway built and run
# against the shared and the static library, `kvrouter --version`, the
# systemd unit, and the service started on its installed config.
# ROOT is a DESTDIR (test_install.sh) or / for a real installation (the
# Debian packages in CI); PREFIX the install prefix under it.
# usage: check_install.sh ROOT PREFIX SOURCE_DIR [EXTRA_CFLAGS]
set -eu
ROOT=${1%/}; PREFIX=$2; SRC=$3; XCFLAGS=${4:-}
T=$(mktemp -d)
SRV=
cleanup() { [ -z "$SRV" ] || kill "$SRV" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
CC=${CC:-cc}

pc=$(find "$ROOT$PREFIX/lib" -path '*/pkgconfig/kvrouter.pc' | head -1)
[ -n "$pc" ] || fail "no kvrouter.pc under $ROOT$PREFIX/lib"
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
export PKG_CONFIG_PATH="$pcdir"
if [ -n "$ROOT" ]; then
    # a DESTDIR: paths in kvrouter.pc are the final ones, found under ROOT
    export PKG_CONFIG_SYSROOT_DIR="$ROOT" PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 \
        PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 LD_LIBRARY_PATH="$libdir"
fi
# pkg-config puts the sysroot in front of path variables itself
pc_libdir=$(pkg-config --variable=libdir kvrouter)
pc_includedir=$(pkg-config --variable=includedir kvrouter)
[ "$pc_libdir" = "$libdir" ] || fail "kvrouter.pc libdir $pc_libdir, installed in $libdir"

# files
version=$(pkg-config --modversion kvrouter)
# SONAME version: MAJOR, or 0.MINOR before 1.0 (cmake/library.cmake)
sover=$(echo "$version" | awk -F. '{print ($1 == 0) ? $1 "." $2 : $1}')
for f in "$PREFIX/bin/kvrouter" "${libdir#"$ROOT"}/libkvrouter.so.$version" \
         "${libdir#"$ROOT"}/libkvrouter.so.$sover" "${libdir#"$ROOT"}/libkvrouter.so" \
         "${libdir#"$ROOT"}/libkvrouter.a"; do
    [ -e "$ROOT$f" ] || fail "missing $f"
done
[ "$(readlink "$libdir/libkvrouter.so.$sover")" = "libkvrouter.so.$version" ] ||
    fail "libkvrouter.so.$sover does not point to libkvrouter.so.$version"
ls "$ROOT$PREFIX"/share/man/man1/kvrouter.1* >/dev/null 2>&1 || fail "missing kvrouter(1)"
soname=$(readelf -d "$libdir/libkvrouter.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libkvrouter.so.$sover" ] || fail "SONAME '$soname', want libkvrouter.so.$sover"
for f in "$libdir/libkvrouter.so.$version" "$ROOT$PREFIX/bin/kvrouter"; do
    ! readelf -d "$f" | grep -q 'R.*PATH' || fail "$f carries an RPATH/RUNPATH"
done
for h in "$SRC"/include/kvrouter/*.h; do
    [ -e "$pc_includedir/kvrouter/$(basename "$h")" ] ||
        fail "header $(basename "$h") not installed"
done
[ "$("$ROOT$PREFIX/bin/kvrouter" --version)" = "kvrouter $version" ] ||
    fail "kvrouter --version says '$("$ROOT$PREFIX/bin/kvrouter" --version)', kvrouter.pc $version"

# every public header compiles alone, as strict C11
for h in "$SRC"/include/kvrouter/*.h; do
    printf '#include <kvrouter/%s>\nint main(void) { return 0; }\n' "$(basename "$h")" >"$T/h.c"
    $CC -std=c11 -Wall -Wextra -Wpedantic -Werror $XCFLAGS -c "$T/h.c" -o "$T/h.o" \
        $(pkg-config --cflags kvrouter) || fail "<kvrouter/$(basename "$h")> does not compile alone"
done

# the example gateway against the shared library, then the static one
want="routed req-1 to worker 2 rank 0: 48 of 64 prompt tokens cached (best_cost)"
$CC -std=c11 -Wall -Wextra -Werror $XCFLAGS "$SRC/examples/gateway.c" -o "$T/gateway" \
    $(pkg-config --cflags --libs kvrouter)
readelf -d "$T/gateway" | grep -q "NEEDED.*libkvrouter.so.$sover" ||
    fail "the gateway does not link libkvrouter.so.$sover"
out=$("$T/gateway") || fail "gateway (shared) failed: $out"
echo "$out" | grep -qxF "$want" || fail "gateway (shared) printed: $out"
echo "$out" | grep -qxF "kvrouter library $version (headers $version)" || fail "gateway: $out"
# libkvrouter.a with its dependencies shared: `pkg-config --static` cannot be
# used for them on Debian 12 (libzmq's norm.pc names a missing libprotokit.a)
deps=$(pkg-config --print-requires-private kvrouter | awk '{print $1}')
static_libs="-L$libdir -l:libkvrouter.a $(pkg-config --libs $deps) -lpthread -lm"
$CC -std=c11 -Wall -Wextra -Werror $XCFLAGS "$SRC/examples/gateway.c" -o "$T/gateway_static" \
    $(pkg-config --cflags kvrouter) $static_libs
! readelf -d "$T/gateway_static" | grep -q "NEEDED.*libkvrouter" ||
    fail "the static gateway still needs libkvrouter.so"
out=$(env -u LD_LIBRARY_PATH "$T/gateway_static") || fail "gateway (static) failed: $out"
echo "$out" | grep -qxF "$want" || fail "gateway (static) printed: $out"

# the systemd unit runs the installed binary on the installed config
unit=$(find "$ROOT$PREFIX/lib" "$ROOT/lib" "$ROOT/usr/lib" -path '*/systemd/system/kvrouter.service' \
       2>/dev/null | head -1)
[ -n "$unit" ] || fail "no kvrouter.service installed"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
set -- $exec_start
[ "$1" = "$PREFIX/bin/kvrouter" ] || fail "unit runs '$1', installed $PREFIX/bin/kvrouter"
config=$(echo "$exec_start" | sed -n 's/.*--config \([^ ]*\).*/\1/p')
[ -f "$ROOT$config" ] || fail "the unit's config $config is not installed"
if command -v systemd-analyze >/dev/null && [ -z "$ROOT" ]; then
    # (its Documentation= check runs man, which a minimal machine lacks)
    systemd-analyze verify "$unit" 2>&1 | grep -v "Command 'man " >"$T/verify" || true
    [ ! -s "$T/verify" ] || fail "systemd-analyze verify $unit: $(cat "$T/verify")"
fi

# the service starts on the installed config and answers. serve.out exists
# before the server does: the background job opens its own redirection, and a
# sed on a file not yet there ends this set -e script (seen under ASan load).
: >"$T/serve.out"
"$ROOT$PREFIX/bin/kvrouter" serve --config "$ROOT$config" --listen 127.0.0.1:0 \
    >"$T/serve.out" 2>&1 &
SRV=$!
port=
for i in $(seq 600); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$T/serve.out")
    [ -n "$port" ] && break
    kill -0 "$SRV" 2>/dev/null || fail "serve exited: $(cat "$T/serve.out")"
    sleep 0.1
done
[ -n "$port" ] || fail "serve did not start in 60 s: $(cat "$T/serve.out")"
health=$(curl -sf "http://127.0.0.1:$port/health") || fail "GET /health failed"
echo "$health" | grep -q '"status": *"ok"' || fail "/health: $health"
kill "$SRV"; wait "$SRV" || fail "serve did not stop cleanly on SIGTERM"
SRV=

echo "ok: kvrouter $version under $ROOT$PREFIX (library, headers, pkg-config, example, unit, service)"
