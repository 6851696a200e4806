#!/bin/sh
# tests/check_autoconf.sh: configure.ac expands with no autoconf warning
# (-Wall), so that ./bootstrap prints none.  Fails on any warning, such as a
# compile check placed before AC_USE_SYSTEM_EXTENSIONS; skipped where
# autoconf or the aclocal.m4 that ./bootstrap writes is absent.
set -eu
srcdir=${srcdir:-.}
src=$(cd "$srcdir" && pwd)
if ! command -v autoconf >/dev/null 2>&1 || [ ! -f "$src/aclocal.m4" ]; then
	echo "check_autoconf: no autoconf, or no aclocal.m4 in $src: skipped"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# From a scratch directory: autom4te's cache goes there, not into the sources.
if ! (cd "$tmp" && autoconf -Wall -I "$src" -o /dev/null "$src/configure.ac") >"$tmp/log" 2>&1 ||
   grep -qi 'warning' "$tmp/log"; then
	echo "check_autoconf: autoconf -Wall on configure.ac did not run cleanly:"
	cat "$tmp/log"
	exit 1
fi
echo "check_autoconf: configure.ac expands with no warning"
