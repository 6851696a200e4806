#!/bin/sh
# tests/test_refused.sh: what the programs refuse before they work, from
# the outside.  Fails if an output path that cannot be written (--csv,
# --jsonl, --checkpoint, --logdir of pinpipe-train; -o PREFIX of
# pinpipe-pack) is not refused with exit status 2 and a message naming it,
# or if pinpipe-train prints a row or pinpipe-pack writes a shard first;
# if a sim's options, comma-separated as pinpipe-bench takes them
# ("sim:bw=25GB/s,call_us=20"), do not make one device of pinpipe-train's
# grid whose rows keep them; or if a sim option either program does not
# know is not a usage error (exit 2) naming it.  Exit 77 only when the
# tools were not built.
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

small="--data=synthetic:1200 --epochs=1 --model=mlp --device=cpu --no-progress"
: >"$tmp/file"

# refused PATTERN ARGS...: pinpipe-train ARGS exits 2 saying PATTERN, before any row.
refused() {
	pattern=$1
	shift
	expect 2 "$pattern" "$train" $small "$@"
	if grep -Eq '^run 1' "$tmp/out"; then
		echo "FAIL: '$*' started the run before refusing it:"; cat "$tmp/out"; fail=1
	fi
}

# 1. Outputs that cannot be written: refused before the first step, named.
refused "--csv=$tmp/none/x.csv: the directory $tmp/none: No such file" --csv="$tmp/none/x.csv"
refused "--jsonl=$tmp/none/x.jsonl: the directory $tmp/none: No such file" --jsonl="$tmp/none/x.jsonl"
refused "--csv=$tmp: a directory, not a file" --csv="$tmp"
refused "--checkpoint=$tmp/none/c.ckpt: the directory $tmp/none: No such file" \
	--checkpoint="$tmp/none/c.ckpt"
refused "--checkpoint=$tmp/file/c.ckpt: the directory $tmp/file is not a directory" \
	--checkpoint="$tmp/file/c.ckpt"
refused "--logdir=$tmp/file/runs: the directory $tmp/file is not a directory" \
	--logdir="$tmp/file/runs"
refused "--logdir=$tmp/file: not a directory" --logdir="$tmp/file"
[ "$(ls "$tmp" | tr '\n' ' ')" = "file out " ] || { echo "FAIL: a refused run left files:"; ls "$tmp"; fail=1; }
# A read-only directory refuses root too (EROFS) only on a read-only mount: as another
# user a directory without write permission is enough.
if [ "$(id -u)" -ne 0 ]; then
	mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
	refused "--checkpoint=$tmp/ro/c.ckpt: cannot make files in the directory $tmp/ro" \
		--checkpoint="$tmp/ro/c.ckpt"
	chmod 755 "$tmp/ro"
fi
# What can be written still is: new files, a folder made with its parents.
expect 0 "" "$train" $small -q --csv="$tmp/ok.csv" --jsonl="$tmp/ok.jsonl" \
	--checkpoint="$tmp/ok.ckpt" --logdir="$tmp/runs/a/b"
[ -s "$tmp/ok.csv" ] && [ -s "$tmp/ok.jsonl" ] && [ -s "$tmp/ok.ckpt" ] && [ -d "$tmp/runs/a/b" ] ||
	{ echo "FAIL: the outputs of a good run are missing:"; ls -R "$tmp"; fail=1; }

# pinpipe-pack -o PREFIX in a missing directory: refused before any input is read.
printf 'not an idx file at all' >"$tmp/junk-images"
expect 2 "-o $tmp/none/x: the directory $tmp/none: No such file" "$pack" -o "$tmp/none/x" "$tmp/junk-images"
expect 2 "-o $tmp/file/x: the directory $tmp/file is not a directory" "$pack" -o "$tmp/file/x" "$tmp/junk-images"
# A folder given as the prefix (the shards would be named "-train-..." in it).
mkdir -p "$tmp/outdir"
expect 2 "-o $tmp/outdir/: a folder, not a prefix" "$pack" -o "$tmp/outdir/" "$tmp/junk-images"
expect 2 "-o $tmp/outdir: a folder, not a prefix" "$pack" -o "$tmp/outdir" "$tmp/junk-images"
# The same prefix in a directory that is there: the input is read (and is bad).
expect 1 "junk-images: offset 0: magic" "$pack" -o "$tmp/x" "$tmp/junk-images"

# 2. A sim's options after commas: one device in pinpipe-train's grid, as in pinpipe-bench.
expect 0 "" "$train" --data=synthetic:1200 --epochs=1 --model=mlp -q \
	--device=sim:bw=25GB/s,call_us=20,cpu --jsonl="$tmp/sim.jsonl"
python3 - "$tmp/sim.jsonl" >"$tmp/py" 2>&1 <<'EOPY' || { echo "FAIL: the sim's rows:"; cat "$tmp/py"; fail=1; }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["device"] for r in rows] == ["sim:bw=25GB/s,call_us=20", "cpu"], rows
assert all(r["status"] == "ok" for r in rows), rows
assert rows[0]["copy_s"] > 0 and rows[1]["copy_s"] == 0, rows
EOPY
expect 0 "device.*direction" "$bench" bandwidth --device=sim:bw=25GB/s,call_us=20 --sizes=4K --total=64K
# A sim option that is not one: a usage error in both, naming it.
for bad in "sim:bw=fast bandwidth 'fast'" "sim:bw=25GB/s,call_us=x call cost 'x'" \
	"sim:bw=25GB/s,frob=1 unknown option 'frob=1'"; do
	dev=${bad%% *} why=${bad#* }
	expect 2 "--device=$dev: .*$why" "$train" $small --device="$dev"
	expect 2 "--device=$dev: .*$why" "$bench" bandwidth --device="$dev"
done
expect 2 "--device=call_us=20: not a device" "$train" $small --device=cpu,call_us=20
exit $fail
