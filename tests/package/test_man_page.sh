#!/bin/sh
# kvrouter(1) stays true: it renders without a warning, names every command
# of `kvrouter --help`, every option of `kvrouter serve --help` and every router
# key it lists, and names
# no option that no command has any more.
# usage: test_man_page.sh KVROUTER_BINARY SOURCE_DIR
set -eu
BIN=$1; MAN=$2/dist/kvrouter.1
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
status=0

LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$MAN" 2>"$T/warnings" || true
if [ -s "$T/warnings" ]; then echo "FAIL: groff warnings:"; cat "$T/warnings"; status=1; fi

# roff writes each - of an option as \-
sed 's/\\-/-/g' "$MAN" >"$T/man"
commands=$("$BIN" --help | awk '/^commands:/ {on = 1; next} on && NF {print $1}')
test -n "$commands" || { echo "FAIL: no commands in kvrouter --help"; exit 1; }
for c in $commands; do
    grep -q "^\.SS \"$c " "$T/man" || { echo "FAIL: kvrouter(1) has no section for '$c'"; status=1; }
    "$BIN" "$c" --help >>"$T/help" 2>&1 || true
done
"$BIN" --help >>"$T/help"
for o in $("$BIN" serve --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    grep -qE -- "$o([^a-z0-9-]|\$)" "$T/man" || {
        echo "FAIL: 'kvrouter serve --help' has $o but dist/kvrouter.1 does not; document it"
        status=1
    }
done
# every router key (--router-opt KEY=VALUE, the config's "router" object)
keys=$("$BIN" serve --help | awk '/^Router keys/ {on = 1; next} on && /^  [a-z_]+ / {print $1}')
test -n "$keys" || { echo "FAIL: no router keys in kvrouter serve --help"; exit 1; }
for k in $keys; do
    grep -qE "(^|[^a-z_])$k([^a-z_]|\$)" "$T/man" || {
        echo "FAIL: router key '$k' of 'kvrouter serve --help' is not in dist/kvrouter.1"
        status=1
    }
done
# options as the page marks them up (macro lines), not in example commands
for o in $(grep '^\.' "$T/man" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    grep -qE -- "$o([^a-z0-9-]|\$)" "$T/help" || {
        echo "FAIL: dist/kvrouter.1 names $o, which no command's --help has"
        status=1
    }
done
[ $status = 0 ] && echo "ok: kvrouter(1) renders and matches the commands ($(echo $commands))"
exit $status
