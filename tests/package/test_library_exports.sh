#!/bin/sh
# libkvrouter.so exports exactly the functions declared in the public headers
# (cmake/library.cmake says how): no symbol without the kvr_ prefix, no
# internal kvr_ function, and every declared function present (a function a
# header declares but no library layer defines, or defines `static`, fails).
# Function declarations come from the compiler (gcc -aux-info), extern
# objects from the preprocessed headers.
# usage: test_library_exports.sh LIBKVROUTER_SO SOURCE_DIR GENERATED_INCLUDE_DIR
set -eu
LIB=$1; SRC=$2; GEN=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

# (an ASan build adds an __odr_asan.NAME indicator per exported object)
nm -D --defined-only "$LIB" | awk '{print $3}' | grep -v '^__odr_asan\.' | sort -u >"$T/exported"
test -s "$T/exported" || { echo "FAIL: $LIB exports nothing"; exit 1; }
if grep -v '^kvr_' "$T/exported" >"$T/foreign"; then
    echo "FAIL: $LIB exports symbols without the kvr_ prefix:"; cat "$T/foreign"; exit 1
fi

for h in "$SRC"/include/kvrouter/*.h "$GEN"/kvrouter/version.h; do
    echo "#include \"$h\""
done >"$T/all.c"
gcc -std=c11 -D_GNU_SOURCE -I"$SRC/include" -I"$GEN" -fsyntax-only -aux-info "$T/aux" "$T/all.c"
# lines: /* include/kvrouter/x.h:12:NC */ extern T kvr_name (args);
grep -E '/kvrouter/[a-z_]+\.h:[0-9]+:[A-Z]+ \*/ extern ' "$T/aux" |
    sed -E 's/^.*[ *]([A-Za-z_][A-Za-z0-9_]*) \(.*$/\1/' | sort -u >"$T/declared"
# extern variables (aux-info lists functions only): from the preprocessed
# headers, the lines of include/kvrouter/ that declare an extern object
gcc -std=c11 -D_GNU_SOURCE -I"$SRC/include" -I"$GEN" -E "$T/all.c" |
    awk '/^# [0-9]+ "/ { ours = ($3 ~ /\/kvrouter\/[a-z_]+\.h"$/); next }
         ours && /^[ \t]*extern[^(]*;/ { print }' |
    sed -E 's/^.*[ *]([A-Za-z_][A-Za-z0-9_]*)[ ]*(\[[^]]*\])?[ ]*;.*$/\1/' >>"$T/declared"
sort -u -o "$T/declared" "$T/declared"
test -s "$T/declared" || { echo "FAIL: found no declarations in the public headers"; exit 1; }

status=0
if comm -13 "$T/declared" "$T/exported" | grep . >"$T/extra"; then
    echo "FAIL: exported but not declared in include/kvrouter/ (internal function leaking):"
    cat "$T/extra"; status=1
fi
if comm -23 "$T/declared" "$T/exported" | grep . >"$T/missing"; then
    echo "FAIL: declared in include/kvrouter/ but not exported by $LIB"
    echo "      (not defined in a layer above kvr_library(), or defined static):"
    cat "$T/missing"; status=1
fi
[ $status = 0 ] && echo "ok: $(wc -l <"$T/exported") symbols exported, all kvr_, all declared in include/kvrouter/"
exit $status
