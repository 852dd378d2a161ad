#!/bin/sh
# debian/ repeats what CMake decides: the version (debian/changelog) and the
# runtime library package named after the SONAME (debian/control, its
# .install file, libkvrouter-dev's dependency). A version bump or a new
# SONAME that forgets debian/ fails here rather than in a package build.
# usage: test_debian_metadata.sh SOURCE_DIR PROJECT_VERSION LIBKVROUTER_SO
set -eu
SRC=$1; VERSION=$2; LIB=$3
fail() { echo "FAIL: $*"; exit 1; }
changelog=$(sed -n '1s/^kvrouter (\([^)]*\)).*/\1/p' "$SRC/debian/changelog")
[ "$changelog" = "$VERSION" ] ||
    fail "debian/changelog is at $changelog, project(VERSION) at $VERSION: add a changelog entry"
soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[libkvrouter\.so\.\(.*\)\]/\1/p')
pkg=libkvrouter$soname
grep -qx "Package: $pkg" "$SRC/debian/control" ||
    fail "SONAME libkvrouter.so.$soname needs a package $pkg in debian/control (Debian policy 8.1)"
[ -f "$SRC/debian/$pkg.install" ] || fail "no debian/$pkg.install"
grep -q "^Depends: $pkg (= \${binary:Version})" "$SRC/debian/control" ||
    fail "libkvrouter-dev must depend on $pkg (= \${binary:Version})"
echo "ok: debian/ at $VERSION, runtime package $pkg"
