#!/bin/sh
# tests/fuzz_replay.sh: replays every seed corpus (tests/corpus/TARGET/)
# through its fuzz target, built with tests/fuzz_replay.c as main.  Fails if
# any input crashes, trips a sanitizer or is missing.
set -e
srcdir=${srcdir:-.}
for t in datasets nn train bench pack shard tokens jpeg; do
	dir="$srcdir/tests/corpus/fuzz_$t"
	test -d "$dir" || { echo "fuzz_replay.sh: $dir: no corpus" >&2; exit 1; }
	echo "fuzz_$t:"
	./tests/replay_$t "$dir" >/dev/null 2>tests/replay_$t.err || {
		cat tests/replay_$t.err >&2
		echo "fuzz_replay.sh: fuzz_$t failed on its corpus" >&2
		exit 1
	}
	rm -f tests/replay_$t.err
	echo "  $(ls "$dir" | wc -l) inputs: ok"
done
