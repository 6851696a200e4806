#!/bin/sh
# tests/check_symbols.sh: the shared library exports exactly the functions
# that the public headers declare with PP_API, no more and no fewer.
# Fails when an internal symbol leaks out or a documented one is missing.
set -eu
srcdir=${srcdir:-.}
so=.libs/libpinpipe.so
if [ ! -f "$so" ]; then
	echo "check_symbols: $so not built (--disable-shared?): skipped"
	exit 77
fi
tmp=${TMPDIR:-/tmp}/pp-symbols.$$
trap 'rm -f "$tmp".*' EXIT
cat "$srcdir"/include/pinpipe/*.h |
	perl -0777 -ne 'while (/\bPP_API\b[^;(]*?\b(pp_\w+)\s*\(/g) { print "$1\n" }' |
	sort -u > "$tmp.declared"
nm -D --defined-only "$so" | awk '$2 == "T" || $2 == "D" || $2 == "B" || $2 == "R" { print $3 }' |
	sort -u > "$tmp.exported"
if ! cmp -s "$tmp.declared" "$tmp.exported"; then
	echo "check_symbols: exported symbols differ from the PP_API declarations"
	echo "  (< declared in include/pinpipe/*.h only, > exported by $so only)"
	diff "$tmp.declared" "$tmp.exported" | grep '^[<>]' || true
	exit 1
fi
echo "check_symbols: $(wc -l < "$tmp.exported") symbols, all declared"
