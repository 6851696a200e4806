#!/bin/sh
# tests/test_pack.sh: pinpipe-pack from the outside: exit codes and messages
# of bad usage and bad input, the README's command on the real Fashion-MNIST
# into a temporary directory, --verify on a good and a damaged shard, and
# the size both report for a shard; --shard-version=2 packs the samples of
# version 1 as records (tests/shard_digest compares the two sets).
# Each check fails the script (exit 1) with what went wrong; exit 77 (skip)
# only when the tool was not built.
set -u

pack=${PINPIPE_PACK:-./pinpipe-pack}
[ -x "$pack" ] || { echo "test_pack: $pack not built, skipped"; exit 77; }
fm=${PP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-pack-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

. "${srcdir:-.}/tests/testlib.sh"

# Usage errors: one line on stderr, exit 2.
expect 0 '--verify' "$pack" --help
expect 2 "unknown option '--bogus'" "$pack" --bogus
expect 2 "no output prefix" "$pack" "$fm"
expect 2 "--level: expected 0..9, got '12'" "$pack" -l 12 -o "$tmp/x" "$fm"
expect 2 "--size: expected bytes" "$pack" -s 12Q -o "$tmp/x" "$fm"
expect 2 "--shards: expected" "$pack" -n 0 -o "$tmp/x" "$fm"
expect 2 "exclude each other" "$pack" -n 2 -s 1M -o "$tmp/x" "$fm"
expect 2 "--threads: expected 1..64, got '0'" "$pack" -j 0 -o "$tmp/x" "$fm"
expect 2 "missing value" "$pack" -o
expect 2 "no shard file given" "$pack" --verify
expect 2 "--shard-version: expected 1 or 2, got '3'" "$pack" --shard-version=3 -o "$tmp/x" "$fm"
expect 2 "--verify takes only files" "$pack" --verify --shard-version=2 "$tmp/x.pps"
# The options of packing, given to --verify, were taken and ignored.
for o in "-j 2" "-c 10" "-l 1" "--image-size=32" "--shard-version=1"; do
	expect 2 "--verify takes only files \(and -q\): the options of packing are not its" \
		"$pack" --verify $o "$tmp/x.pps"
done
# --image-size for input that holds no JPEG was taken and ignored.
expect 2 "--image-size is for a folder of JPEGs; got '$fm'" "$pack" --image-size=32 -o "$tmp/x" "$fm"
[ "$("$pack" --bogus 2>&1 | wc -l)" -eq 1 ] || { echo "FAIL: usage error is not one line"; fail=1; }

# Bad input: exit 1, the message names the file and where to get the data.
expect 1 "nowhere: No such file.*dataset-fashion-mnist" "$pack" -o "$tmp/x" "$tmp/nowhere"
mkdir "$tmp/emptydir"
expect 1 "emptydir: no train split found: looked for" "$pack" -o "$tmp/x" "$tmp/emptydir"
printf 'not an idx file at all' >"$tmp/junk-images"
expect 1 "junk-images: offset 0: magic" "$pack" -o "$tmp/x" "$tmp/junk-images"
[ -z "$(ls "$tmp" | grep '^x')" ] || { echo "FAIL: a failed pack left files: $(ls "$tmp")"; fail=1; }
# A raw IDX file's header is checked before the file is read: a sparse
# 4 GiB file with a bad magic is refused having read a few bytes (its
# memory a fraction of the file; reading it whole took 4 GiB).
truncate -s 4G "$tmp/huge-images" && printf 'XXXX' | dd of="$tmp/huge-images" conv=notrunc 2>/dev/null
python3 - "$pack" "$tmp" <<'EOPY' || fail=1
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "-o", sys.argv[2] + "/x", sys.argv[2] + "/huge-images"],
                   capture_output=True, text=True)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
if r.returncode != 1 or "huge-images: offset 0: magic 0x58585858" not in r.stderr or rss > 1 << 30:
    sys.exit("FAIL: a 4 GiB raw IDX file with a bad header: exit %d, %d bytes of memory, %r"
             % (r.returncode, rss, r.stderr))
EOPY
rm -f "$tmp/huge-images"
# A FIFO, as input or as a shard to verify, is refused at once, not
# waited on for ever (timeout's 124 is a hang).
mkfifo "$tmp/fifo-images" "$tmp/fifo-train-00000-of-00001.pps"
expect 1 "fifo-images: a FIFO, expected a regular file" timeout 60 "$pack" -o "$tmp/x" "$tmp/fifo-images"
expect 1 "fifo-train-00000-of-00001.pps: a FIFO, expected a regular file" \
	timeout 60 "$pack" --verify "$tmp/fifo-train-00000-of-00001.pps"
rm -f "$tmp/fifo-images" "$tmp/fifo-train-00000-of-00001.pps"

# CIFAR-10 batches (records of zeros: label 0, a black image): one split each.
dd if=/dev/zero of="$tmp/data_batch_1.bin" bs=3073 count=3 2>/dev/null
dd if=/dev/zero of="$tmp/test_batch.bin" bs=3073 count=2 2>/dev/null
expect 0 "cifar10:test_batch.bin \(test\): 2 samples of u8 3072 bytes" \
	"$pack" -o "$tmp/c10" "$tmp/data_batch_1.bin" "$tmp/test_batch.bin"
expect 0 "2 of 2 shards ok: 5 records" "$pack" --verify "$tmp"/c10-*.pps
printf 'x' >>"$tmp/test_batch.bin"
expect 1 "test_batch.bin: 6147 bytes, expected a whole" \
	"$pack" -o "$tmp/c11" "$tmp/data_batch_1.bin" "$tmp/test_batch.bin"
[ -z "$(ls "$tmp" | grep '^c11')" ] || { echo "FAIL: a failed pack left files: $(ls "$tmp")"; fail=1; }

# A full disk (ENOSPC injected through PP_FAULTS, a test hook read when a
# shard writer is created): exit 1, the message names the shard, and
# neither the shard nor its temporary file is left, whether the first write
# fails or the last one (the header, after the chunks, index and trailer).
expect 1 "c12-train-00000-of-00001.pps.new: write of 4096 bytes at offset 4096 \(into .*c12-train-00000-of-00001.pps.new.tmp-.*\) failed: No space left on device" \
	env PP_FAULTS=write:ENOSPC "$pack" -o "$tmp/c12" "$tmp/data_batch_1.bin"
expect 1 "c12-train-00000-of-00001.pps.new: write of 4096 bytes at offset 0 .*No space left on device" \
	env PP_FAULTS=write:ENOSPC:after=3 "$pack" -o "$tmp/c12" "$tmp/data_batch_1.bin"
[ -z "$(ls "$tmp" | grep '^c12')" ] || { echo "FAIL: ENOSPC left files: $(ls "$tmp")"; fail=1; }
# A run that fails leaves the shards of an earlier run of the prefix as
# they were: each shard is staged and all are renamed once all are
# written (the earlier ones were replaced, then the new ones removed).
# Here the train split is written, then the test split's batch is bad.
mkdir "$tmp/c19in"
cp "$tmp/data_batch_1.bin" "$tmp/c19in/"
dd if=/dev/zero of="$tmp/c19in/test_batch.bin" bs=3073 count=2 2>/dev/null
"$pack" -q -o "$tmp/c19" "$tmp/c19in/data_batch_1.bin" "$tmp/c19in/test_batch.bin" ||
	{ echo "FAIL: packing c19"; fail=1; }
cat "$tmp"/c19-*.pps > "$tmp/c19.before"
printf 'x' >>"$tmp/c19in/test_batch.bin"
expect 1 "test_batch.bin: 6147 bytes, expected a whole" \
	"$pack" -o "$tmp/c19" "$tmp/c19in/data_batch_1.bin" "$tmp/c19in/test_batch.bin"
grep -q "^pinpipe-pack: the shards of this run removed; any of an earlier run of $tmp/c19 left as they were" \
	"$tmp/out" || { echo "FAIL: the failed run's last line:"; cat "$tmp/out"; fail=1; }
[ "$(ls "$tmp" | grep -c '^c19-')" -eq 2 ] && cat "$tmp"/c19-*.pps | cmp -s - "$tmp/c19.before" ||
	{ echo "FAIL: a failed run changed the earlier shards: $(ls "$tmp")"; fail=1; }
rm -rf "$tmp"/c19*
# A link at a shard's path stays a link, to the new shard (staged beside
# the file it names); a FIFO there is refused before anything is written
# (the rename replaced both).
mkdir "$tmp/c20real"
ln -s c20real/x.pps "$tmp/c20-train-00000-of-00001.pps"
expect 0 "3 records" "$pack" -o "$tmp/c20" "$tmp/data_batch_1.bin"
[ -L "$tmp/c20-train-00000-of-00001.pps" ] && [ -f "$tmp/c20real/x.pps" ] ||
	{ echo "FAIL: the link at a shard's path replaced: $(ls -l "$tmp" "$tmp/c20real")"; fail=1; }
expect 0 "1 of 1 shards ok: 3 records" "$pack" --verify "$tmp/c20-train-00000-of-00001.pps"
rm -rf "$tmp"/c20*
mkfifo "$tmp/c21-train-00000-of-00001.pps"
expect 1 "c21-train-00000-of-00001.pps: not a regular file: a shard would replace it" \
	"$pack" -o "$tmp/c21" "$tmp/data_batch_1.bin"
[ -p "$tmp/c21-train-00000-of-00001.pps" ] && [ "$(ls "$tmp" | grep -c '^c21')" -eq 1 ] ||
	{ echo "FAIL: a FIFO at a shard's path: $(ls -l "$tmp")"; fail=1; }
rm -f "$tmp"/c21*
# Two runs of one prefix at once: the second is refused while the first
# holds PREFIX.lock (held here by flock(1)), and the shards of before stay
# as they were; the lock file is gone once a run ends, and a killed run's
# (there, unlocked) is taken over by the next run.
if command -v flock >/dev/null; then
	"$pack" -q -o "$tmp/c22" "$tmp/data_batch_1.bin" || { echo "FAIL: packing c22"; fail=1; }
	[ ! -e "$tmp/c22.lock" ] || { echo "FAIL: a run left its lock file"; fail=1; }
	cat "$tmp"/c22-*.pps > "$tmp/c22.before"
	expect 1 "-o $tmp/c22: another pinpipe-pack is packing this prefix \(it holds $tmp/c22.lock\)" \
		flock "$tmp/c22.lock" "$pack" -o "$tmp/c22" "$tmp/data_batch_1.bin"
	cat "$tmp"/c22-*.pps | cmp -s - "$tmp/c22.before" && [ "$(ls "$tmp" | grep -c '^c22-')" -eq 1 ] ||
		{ echo "FAIL: a refused run changed the shards: $(ls "$tmp")"; fail=1; }
	touch "$tmp/c22.lock"
	chmod 444 "$tmp/c22.lock"
	expect 0 "3 records" "$pack" -o "$tmp/c22" "$tmp/data_batch_1.bin"
	[ ! -e "$tmp/c22.lock" ] || { echo "FAIL: a killed run's lock file left"; fail=1; }
	# A FIFO or a link at PREFIX.lock is refused and left (the FIFO was removed).
	mkfifo "$tmp/c22.lock"
	expect 1 "its lock $tmp/c22.lock is not a regular file: remove it" \
		"$pack" -o "$tmp/c22" "$tmp/data_batch_1.bin"
	[ -p "$tmp/c22.lock" ] || { echo "FAIL: a FIFO at PREFIX.lock removed"; fail=1; }
	rm -f "$tmp/c22.lock"
	ln -s nowhere "$tmp/c22.lock"
	expect 1 "its lock $tmp/c22.lock is a symbolic link: remove it" \
		"$pack" -o "$tmp/c22" "$tmp/data_batch_1.bin"
	[ -L "$tmp/c22.lock" ] || { echo "FAIL: a link at PREFIX.lock removed"; fail=1; }
	# Bad usage is said as such (2) while another run holds the lock.
	rm -f "$tmp/c22.lock"
	expect 2 "expected a directory, IMAGES \[LABELS\], or CIFAR-10 .bin files" \
		flock "$tmp/c22.lock" "$pack" -o "$tmp/c22" a b c
	rm -f "$tmp"/c22*
else
	echo "test_pack: no flock(1): two runs of one prefix at once left out"
fi
# The temporary files a SIGKILLed run left (the shard writer's names) are
# removed by the next run of the same prefix, which says so; another
# prefix's are left alone, one that begins with this prefix too.
touch "$tmp/c14-train-00000-of-00001.pps.tmp-AbC123" "$tmp/c15-train-00000-of-00001.pps.tmp-AbC123" \
	"$tmp/c14-aug-train-00000-of-00001.pps.tmp-AbC123" "$tmp/c14-test-00000-of-00002.pps.new" \
	"$tmp/c14-test-00001-of-00002.pps.new.tmp-XyZ789"
expect 0 "removed $tmp/c14-train-00000-of-00001.pps.tmp-AbC123, a temporary file of an interrupted run" \
	"$pack" -o "$tmp/c14" "$tmp/data_batch_1.bin"
[ ! -e "$tmp/c14-train-00000-of-00001.pps.tmp-AbC123" ] && [ -e "$tmp/c15-train-00000-of-00001.pps.tmp-AbC123" ] &&
	[ -e "$tmp/c14-aug-train-00000-of-00001.pps.tmp-AbC123" ] && [ ! -e "$tmp/c14-test-00000-of-00002.pps.new" ] &&
	[ ! -e "$tmp/c14-test-00001-of-00002.pps.new.tmp-XyZ789" ] ||
	{ echo "FAIL: stale temporary files: $(ls "$tmp")"; fail=1; }
rm -f "$tmp"/c14-* "$tmp"/c15-*
# The shards of another set are removed only where they are this prefix's
# (PREFIX-SPLIT-NNNNN-of-MMMMM.pps): those of the prefix c16-train-1k,
# which the glob PREFIX-SPLIT-[0-9]*-of-[0-9]*.pps of the prefix c16 took
# for an earlier set of its own, stay.
expect 0 "3 records" "$pack" -o "$tmp/c16-train-1k" "$tmp/data_batch_1.bin"
expect 0 "3 records" "$pack" -o "$tmp/c16" "$tmp/data_batch_1.bin"
[ -e "$tmp/c16-train-1k-train-00000-of-00001.pps" ] && ! grep -q "removed" "$tmp/out" ||
	{ echo "FAIL: another prefix's shard removed: $(cat "$tmp/out")"; fail=1; }
rm -f "$tmp"/c16-*
# A prefix with glob characters is taken as named: "-o 'c1?'" removed the
# shards of c18 (another set of the prefix's split) and "c1[8]" too.
"$pack" -q -o "$tmp/c18" "$tmp/data_batch_1.bin" || { echo "FAIL: packing c18"; fail=1; }
for prefix in 'c1?' 'c1[8]' 'c*'; do
	expect 0 "3 records" "$pack" -n 1 -o "$tmp/$prefix" "$tmp/data_batch_1.bin"
	[ -e "$tmp/c18-train-00000-of-00001.pps" ] && ! grep -q "removed" "$tmp/out" ||
		{ echo "FAIL: -o '$prefix' removed another prefix's shard: $(cat "$tmp/out")"; fail=1; }
done
rm -f "$tmp"/c18-* "$tmp"/c1\?-* "$tmp"/c1\[8\]-* "$tmp"/c\*-*
# A standard output that does not take the report (a full disk): said,
# exit 1 (it was 0); the shards themselves are whole.
"$pack" -o "$tmp/c17" "$tmp/data_batch_1.bin" >/dev/full 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "^pinpipe-pack: standard output: cannot write: No space left on device" "$tmp/err" ||
	{ echo "FAIL: stdout /dev/full: exit $rc:"; cat "$tmp/err"; fail=1; }
expect 0 "1 of 1 shards ok: 3 records" "$pack" --verify "$tmp"/c17-*.pps
rm -f "$tmp"/c17-*
# Short writes are continued: the shards verify.
expect 0 "3 records, 1 chunks" env PP_FAULTS=write:short "$pack" -o "$tmp/c13" "$tmp/data_batch_1.bin"
expect 0 "1 of 1 shards ok: 3 records" "$pack" --verify "$tmp"/c13-*.pps
expect 1 "PP_FAULTS: unknown site in 'disk:EIO'" env PP_FAULTS=disk:EIO "$pack" -o "$tmp/c14" \
	"$tmp/data_batch_1.bin"

# Version 2: CIFAR-10 records of random bytes (labels 0..9), 2 a chunk, as
# records for the "raw" decoder; they verify, say their layout, and hold the
# samples and labels of a version 1 set of the same input.
digest=${SHARD_DIGEST:-./tests/shard_digest}
: >"$tmp/rand_batch_1.bin"
for r in 0 1 2 3 4 5 6; do
	printf "\\$(printf %o $((r * 3 % 10)))" >>"$tmp/rand_batch_1.bin"
	head -c 3072 /dev/urandom >>"$tmp/rand_batch_1.bin"
done
expect 0 "7 records, 4 chunks" "$pack" --shard-version=2 -c 2 -o "$tmp/v2" "$tmp/rand_batch_1.bin"
expect 0 "v2-train-00000-of-00001.pps: ok, version 2, decoder raw, layout samples: u8\[3,32,32\] normalize, labels: i32, records of at most 3072 bytes, 7 records, 4 chunks" \
	"$pack" --verify "$tmp"/v2-*.pps
expect 0 "7 records, 2 chunks" "$pack" -l 0 -c 5 -o "$tmp/v1" "$tmp/rand_batch_1.bin"
if [ -x "$digest" ]; then
	d1=$("$digest" "$tmp"/v1-*.pps) d2=$("$digest" "$tmp"/v2-*.pps)
	[ -n "$d1" ] && [ "$d1" = "$d2" ] && case $d1 in "7 records, "*) ;; *) false ;; esac ||
		{ echo "FAIL: version 1 and 2 sets differ: '$d1' against '$d2'"; fail=1; }
else
	echo "FAIL: $digest not built"; fail=1
fi
# A changed byte in a version 2 chunk: --verify names the shard and the chunk.
cp "$tmp/v2-train-00000-of-00001.pps" "$tmp/v2bad.pps"
printf '\377' | dd of="$tmp/v2bad.pps" bs=1 seek=4200 conv=notrunc 2>/dev/null
expect 1 "BAD: .*v2bad.pps: chunk 0 at offset 4096: CRC-32 mismatch" "$pack" --verify "$tmp/v2bad.pps"

if [ -r "$fm/train-images-idx3-ubyte.gz" ]; then
	# The README's command, into the temporary directory, with 3 shards.
	expect 0 "60000 records" "$pack" -n 3 -o "$tmp/fmnist" "$fm"
	[ "$(ls "$tmp"/fmnist-train-*-of-00003.pps | wc -l)" -eq 3 ] ||
		{ echo "FAIL: expected 3 train shards"; ls "$tmp"; fail=1; }
	[ -f "$tmp/fmnist-test-00000-of-00003.pps" ] || { echo "FAIL: no test shard"; fail=1; }
	expect 0 "6 of 6 shards ok: 70000 records" "$pack" --verify "$tmp"/fmnist-*.pps
	# One name and one figure for a shard's size: pinpipe-pack and --verify
	# both say "MB on disk", the file's size; neither says "stored".
	"$pack" -n 3 -o "$tmp/size" "$fm" >"$tmp/size.pack" 2>&1
	"$pack" --verify "$tmp"/size-*.pps >"$tmp/size.verify" 2>&1
	for f in "$tmp"/size-*.pps; do
		want=$(stat -c %s "$f" | awk '{ printf "%.1f MB on disk", $1 / 1e6 }')
		packed=$(sed -n "s|^  $f: .* chunks, \([0-9.]* MB on disk\)\$|\1|p" "$tmp/size.pack")
		verified=$(sed -n "s|^$f: ok, .* chunks, \([0-9.]* MB on disk\), .*|\1|p" "$tmp/size.verify")
		if [ "$packed" != "$want" ] || [ "$verified" != "$want" ]; then
			echo "FAIL: $f is $want; pinpipe-pack said '$packed', --verify '$verified'"
			fail=1
		fi
	done
	mb_of() { cat "$@" | wc -c | awk '{ printf "%.1f MB on disk", $1 / 1e6 }'; }
	total=$(mb_of "$tmp"/size-*.pps) train=$(mb_of "$tmp"/size-train-*.pps)
	grep -q "records in $train (" "$tmp/size.pack" && grep -q "chunks, $total, " "$tmp/size.verify" ||
		{ echo "FAIL: the totals are not $train (train), $total (all):"; cat "$tmp/size.pack" "$tmp/size.verify"; fail=1; }
	! grep -q stored "$tmp/size.pack" "$tmp/size.verify" ||
		{ echo "FAIL: a size called 'stored':"; cat "$tmp/size.pack" "$tmp/size.verify"; fail=1; }
	# Packing again with another -n removes the earlier set of the same
	# prefix and split, which would otherwise be loaded as extra data.
	expect 0 "removed .*re-train-00001-of-00002.pps, a shard of an earlier set" \
		sh -c "'$pack' -q -l 1 -n 2 -o '$tmp/re' '$fm' && '$pack' -l 1 -n 1 -o '$tmp/re' '$fm'"
	[ "$(ls "$tmp"/re-*.pps | tr '\n' ' ')" = "$tmp/re-test-00000-of-00001.pps $tmp/re-train-00000-of-00001.pps " ] ||
		{ echo "FAIL: stale shards left: $(ls "$tmp"/re-*)"; fail=1; }
	rm -f "$tmp"/re-*.pps
	# Test images without their labels: an error naming the labels file, not a skipped split.
	mkdir "$tmp/nolabels"
	ln -s "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" \
		"$fm/t10k-images-idx3-ubyte.gz" "$tmp/nolabels/"
	expect 1 "t10k-labels-idx1-ubyte.gz: cannot open" "$pack" -q -l 1 -o "$tmp/nl" "$tmp/nolabels"
	[ -z "$(ls "$tmp" | grep '^nl')" ] || { echo "FAIL: a failed pack left files: $(ls "$tmp")"; fail=1; }
	# Shards by size: 47.3 MB of train records in 10 MB shards make 5.
	expect 0 "5 shards: 60000 records" "$pack" -s 10M -o "$tmp/sized" "$fm"
	expect 0 "5 of 5 shards ok: 60000 records" "$pack" --verify "$tmp"/sized-train-*.pps
	# Stored chunks and small ones, from an IDX pair given as files.
	expect 0 "10000 records, 10 chunks" "$pack" -l 0 -c 1000 -o "$tmp/raw" \
		"$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz"
	expect 0 "1 of 1 shards ok: 10000 records, 10 chunks" "$pack" --verify "$tmp"/raw-test-*.pps
	# One byte changed in the middle of a chunk: --verify says which and exits 1.
	shard="$tmp/raw-test-00000-of-00001.pps"
	printf '\377' | dd of="$shard" bs=1 seek=10000 conv=notrunc 2>/dev/null
	expect 1 "BAD: .*raw-test-00000-of-00001.pps: chunk 0 at offset 4096: CRC-32 mismatch" \
		"$pack" --verify "$shard" "$tmp/fmnist-test-00000-of-00003.pps"
	expect 1 "1 of 2 shards ok" "$pack" --verify "$shard" "$tmp/fmnist-test-00000-of-00003.pps"
	# A shard cut short.
	head -c 100000 "$tmp/fmnist-test-00000-of-00003.pps" >"$tmp/cut.pps"
	expect 1 "BAD: .*cut.pps: offset .*trailer" "$pack" --verify "$tmp/cut.pps"
	# Version 2 of the whole set, in 2 shards: it verifies and holds the
	# samples and labels of the version 1 set above, in order.
	expect 0 "2 shards: 60000 records" "$pack" --shard-version=2 -n 2 -o "$tmp/fm2" "$fm"
	expect 0 "4 of 4 shards ok: 70000 records" "$pack" --verify "$tmp"/fm2-*.pps
	expect 0 "version 2, decoder raw, layout samples: u8\[1,28,28\] normalize, labels: i32" \
		"$pack" --verify "$tmp"/fm2-test-00000-of-00002.pps
	d1=$("$digest" "$tmp"/fmnist-*.pps) d2=$("$digest" "$tmp"/fm2-*.pps)
	[ -n "$d1" ] && [ "$d1" = "$d2" ] && case $d1 in "70000 records, "*) ;; *) false ;; esac ||
		{ echo "FAIL: Fashion-MNIST in version 1 and 2 differs: '$d1' against '$d2'"; fail=1; }
else
	echo "test_pack: $fm not found (install dataset-fashion-mnist): real-data checks skipped"
fi
# An image folder (JPEGs made by Pillow): train/ and val/ become the splits,
# version 2 records of the files' bytes for the decoder "jpeg", labels by
# class name; a file that is not a JPEG fails the pack by name, leaving
# nothing.
if /usr/bin/python3 -c 'import PIL' 2>/dev/null; then
	/usr/bin/python3 - "$tmp/img" <<'PY' || { echo "FAIL: cannot make the JPEGs"; fail=1; }
import os, sys
from PIL import Image
for split, n in (("train", 6), ("val", 2)):
    for c, col in (("red", (200, 30, 30)), ("blue", (30, 30, 200)), ("green", (30, 200, 30))):
        os.makedirs(f"{sys.argv[1]}/{split}/{c}", exist_ok=True)
        for i in range(n):
            Image.new("RGB", (40 + i, 30), col).save(f"{sys.argv[1]}/{split}/{c}/{i}.jpg")
PY
	expect 0 "img/train \(train\): 18 JPEGs in 3 classes" "$pack" -n 2 --image-size=32 -o "$tmp/im" "$tmp/img"
	expect 0 "img/val \(val\): 6 JPEGs in 3 classes" "$pack" -n 2 --image-size=32 -o "$tmp/im" "$tmp/img"
	expect 0 "4 of 4 shards ok: 24 records" "$pack" --verify "$tmp"/im-*.pps
	expect 0 "version 2, decoder jpeg, layout image: u8\[3,32,32\] normalize, labels: i32" \
		"$pack" --verify "$tmp"/im-val-00001-of-00002.pps
	# a class folder alone is the train split
	expect 0 "1 shards: 18 records" "$pack" -o "$tmp/one" "$tmp/img/train"
	expect 2 "--image-size: expected 8..4096, got '4'" "$pack" --image-size=4 -o "$tmp/x" "$tmp/img"
	# Version 1 holds fixed-size samples: an image folder asked for it was packed as version 2.
	expect 2 "--shard-version=1: an image folder is packed as version 2 records" \
		"$pack" --shard-version=1 -o "$tmp/x" "$tmp/img"
	printf 'not a jpeg' >"$tmp/img/val/red/9.jpg"
	expect 1 "img/val/red/9.jpg: not a JPEG" "$pack" -o "$tmp/bad" "$tmp/img"
	[ -z "$(ls "$tmp" | grep '^bad')" ] || { echo "FAIL: a failed image pack left files"; fail=1; }
else
	echo "test_pack: no Pillow (python3-pil): the image folder checks skipped"
fi
exit $fail
