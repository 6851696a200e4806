#!/bin/sh
# tests/check_symbols.sh: the shared library exports exactly the functions
# that the public headers declare with PP_API, no more and no fewer; and
# every global symbol of the static library carries the project's prefix
# (pp_: the public ones, and the internal ones, which are static elsewhere),
# so that a trainer linking libpinpipe.a may define its own conv2d_forward.
# Fails when an internal symbol leaks out, a documented one is missing, or
# the static library defines an unprefixed global.
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
a=.libs/libpinpipe.a
if [ -f "$a" ]; then
	# Strong definitions only: the C++ runtime's weak DW.ref.__gxx_personality_v0
	# (CUDA objects) is the compiler's, merged with the user's own; and names
	# reserved to the implementation (__odr_asan.* of AddressSanitizer).
	nm -g --defined-only "$a" | awk 'NF == 3 && $2 ~ /^[TDBRC]$/ { print $3 }' |
		grep -v '^pp_' | grep -v '^__' | sort -u > "$tmp.unprefixed" || true
	if [ -s "$tmp.unprefixed" ]; then
		echo "check_symbols: $a defines globals without the pp_ prefix:"
		sed 's/^/  /' "$tmp.unprefixed"
		exit 1
	fi
	echo "check_symbols: every global of $a starts with pp_"
fi
