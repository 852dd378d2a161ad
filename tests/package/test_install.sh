#!/bin/sh
# A real `cmake --install` of this build into a temporary DESTDIR with the
# Debian layout (prefix /usr: config in /etc), then check_install.sh on it;
# a second install keeps an edited config. The Debian packages are checked
# by the same script after they are installed (.ci/run).
# usage: test_install.sh BUILD_DIR SOURCE_DIR [EXTRA_CFLAGS]
set -eu
BUILD=$1; SRC=$2; XCFLAGS=${3:-}
DEST=$(mktemp -d); trap 'rm -rf "$DEST"' EXIT
DESTDIR=$DEST cmake --install "$BUILD" --prefix /usr >"$DEST.log" 2>&1 ||
    { cat "$DEST.log"; rm -f "$DEST.log"; exit 1; }
rm -f "$DEST.log"
[ -f "$DEST/etc/kvrouter/kvrouter.json" ] || { echo "FAIL: config not in /etc/kvrouter"; exit 1; }
sh "$SRC/tests/package/check_install.sh" "$DEST" /usr "$SRC" "$XCFLAGS"

echo '{"listen": "127.0.0.1:9999"}' >"$DEST/etc/kvrouter/kvrouter.json"
DESTDIR=$DEST cmake --install "$BUILD" --prefix /usr >/dev/null
grep -q 9999 "$DEST/etc/kvrouter/kvrouter.json" ||
    { echo "FAIL: a reinstall overwrote the edited config"; exit 1; }
echo "ok: reinstall kept the edited config"
