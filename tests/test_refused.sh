#!/bin/sh
# tests/test_refused.sh: what the programs refuse before they work, from
# the outside.  Fails if -o PREFIX of pinpipe-pack in a directory that is
# not there is not refused with exit status 2 and a message naming it,
# before any input is read.  Exit 77 only when the tools were not built.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
pack=${PINPIPE_PACK:-./pinpipe-pack}
bench=${PINPIPE_BENCH:-./pinpipe-bench}
for t in "$train" "$pack" "$bench"; do
	[ -x "$t" ] || { echo "test_refused: $t not built, skipped"; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-refused-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
. "$(dirname "$0")/testlib.sh"

: >"$tmp/file"

# pinpipe-pack -o PREFIX in a missing directory: refused before any input is read.
printf 'not an idx file at all' >"$tmp/junk-images"
expect 2 "-o $tmp/none/x: the directory $tmp/none: No such file" "$pack" -o "$tmp/none/x" "$tmp/junk-images"
expect 2 "-o $tmp/file/x: $tmp/file is not a directory" "$pack" -o "$tmp/file/x" "$tmp/junk-images"
# The same prefix in a directory that is there: the input is read (and is bad).
expect 1 "junk-images: offset 0: magic" "$pack" -o "$tmp/x" "$tmp/junk-images"

exit $fail
