#!/bin/sh
# tests/test_train_images.sh: pinpipe-train on JPEGs from the outside.  A
# learnable set made with Pillow (three classes, each image's dominant
# colour its class, under random discs, of random sizes) must train to
# >= 95% test accuracy within 3 epochs from the folder itself and from the
# shards pinpipe-pack makes of it (--stream); a truncated file in the
# folder must fail the run naming it; shards packed for another
# --image-size are refused, as is --image-size for data without JPEGs; a
# folder named with glob characters is read as named; splits of other
# classes are refused, and test/ is packed; ranks given two --image-size
# are refused.
# Exit 77 only where libjpeg-turbo was not built in (the message naming
# libturbojpeg0-dev is checked then).
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
pack=${PINPIPE_PACK:-./pinpipe-pack}
[ -x "$train" ] && [ -x "$pack" ] || { echo "test_train_images: tools not built, skipped"; exit 77; }
/usr/bin/python3 -c 'import PIL' 2>/dev/null ||
	{ echo "test_train_images: Pillow missing (./bootstrap installs python3-pil)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-images-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

. "${srcdir:-.}/tests/testlib.sh"

/usr/bin/python3 - "$tmp/img" <<'EOPY' || { echo "FAIL: cannot make the JPEGs"; exit 1; }
import os, random, sys
from PIL import Image, ImageDraw
random.seed(3)
root = sys.argv[1]
for split, n in (("train", 60), ("val", 20)):
    for c, on in (("blue", (0, 0, 1)), ("green", (0, 1, 0)), ("red", (1, 0, 0))):
        os.makedirs(f"{root}/{split}/{c}", exist_ok=True)
        for i in range(n):
            w, h = random.randint(40, 80), random.randint(40, 80)
            im = Image.new("RGB", (w, h), tuple(random.randint(150, 230) if o else
                                                random.randint(20, 110) for o in on))
            d = ImageDraw.Draw(im)
            for k in range(3):
                x, y = random.randrange(w), random.randrange(h)
                d.ellipse([x, y, x + w // 5, y + h // 5],
                          fill=tuple(random.randint(0, 255) for _ in range(3)))
            im.save(f"{root}/{split}/{c}/{i:03d}.jpg", quality=90)
EOPY

if "$train" --data="$tmp/img" --image-size=16 --epochs=1 --device=cpu 2>&1 | grep -q libturbojpeg0-dev; then
	echo "test_train_images: built without libjpeg-turbo, and says so: skipped"
	exit 77
fi

run="--image-size=16 --epochs=3 --device=cpu -b 20 -w 2 --model=conv:8:3,relu,maxpool:2,flatten,fc:3 -q"
# the final test accuracy of a run's CSV, or nothing
final_acc() {
	/usr/bin/python3 -c 'import csv, sys; r = list(csv.DictReader(open(sys.argv[1]))); print(r[-1]["test_acc"] if r and r[-1]["test_acc"] else "")' "$1" 2>/dev/null
}
check_acc() {
	acc=$(final_acc "$1")
	/usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.95 else 1)' "${acc:-0}" ||
		{ echo "FAIL: $2: test accuracy '$acc' after 3 epochs, expected >= 0.95"; fail=1; }
}

# From the folder.
"$train" --data="$tmp/img" $run --csv="$tmp/folder.csv" >"$tmp/out" 2>&1 ||
	{ echo "FAIL: training on the folder:"; cat "$tmp/out"; fail=1; }
check_acc "$tmp/folder.csv" "the folder"

# From its shards, streamed.
mkdir "$tmp/shards"
expect 0 "img/val \(val\): 60 JPEGs in 3 classes" "$pack" -n 2 --image-size=16 -o "$tmp/shards/c" "$tmp/img"
"$train" --data="$tmp/shards" --stream $run --csv="$tmp/shards.csv" >"$tmp/out" 2>&1 ||
	{ echo "FAIL: training on the shards:"; cat "$tmp/out"; fail=1; }
check_acc "$tmp/shards.csv" "the shards"
expect 1 "JPEGs packed for --image-size=16, not 24" "$train" --data="$tmp/shards" --stream \
	--image-size=24 --epochs=1 --device=cpu -q

# A directory named with glob characters is taken as named: "set[1]" was
# probed as the pattern (no JPEGs found in set1, which is not there), and
# "sh[1]" streamed sh1's shards (packed here for another --image-size).
cp -r "$tmp/img" "$tmp/set[1]"
expect 0 "train_loss" "$train" --data="$tmp/set[1]" $run --epochs=1 -q
rm -rf "$tmp/set[1]"
cp -r "$tmp/shards" "$tmp/sh[1]"
mkdir "$tmp/sh1"
"$pack" -q --image-size=24 -o "$tmp/sh1/c" "$tmp/img" || { echo "FAIL: packing sh1"; fail=1; }
expect 0 "train_loss" "$train" --data="$tmp/sh[1]" --stream $run --epochs=1 -q
rm -rf "$tmp/sh[1]" "$tmp/sh1"

# val/ of other classes (red renamed rose: the same count): refused by
# pinpipe-train and pinpipe-pack, which compared the counts alone and
# labelled rose's images as another class's.  And test/ in val/'s place is
# packed too (pinpipe-train evaluates on it; pinpipe-pack left it out).
cp -r "$tmp/img" "$tmp/other"
mv "$tmp/other/val/red" "$tmp/other/val/rose"
expect 1 "other/val: its classes are not those of .*other/train.*class 2 is \"red\" there, \"rose\" here" \
	"$train" --data="$tmp/other" $run --epochs=1
mkdir "$tmp/other-shards"
expect 1 "class 2 is \"red\" there, \"rose\" here" "$pack" --image-size=16 -o "$tmp/other-shards/o" "$tmp/other"
[ -z "$(ls "$tmp/other-shards")" ] || { echo "FAIL: shards of splits of other classes written"; fail=1; }
mv "$tmp/other/val/rose" "$tmp/other/val/red"
mv "$tmp/other/val" "$tmp/other/test"
expect 0 "other/test \(test\): 60 JPEGs in 3 classes" "$pack" --image-size=16 -o "$tmp/other-shards/o" "$tmp/other"
expect 0 "train_loss" "$train" --data="$tmp/other-shards" --stream $run --epochs=1
rm -rf "$tmp/other" "$tmp/other-shards"

# Classes whose images are in folders under them (torchvision's
# ImageFolder walks them): trained and packed as a folder of JPEGs (the
# probe looked one level down only, and found none).
mkdir -p "$tmp/nest"
cp -r "$tmp/img/train" "$tmp/nest/"
for c in blue green red; do
	mkdir "$tmp/nest/train/$c/sub" && mv "$tmp/nest/train/$c"/*.jpg "$tmp/nest/train/$c/sub/"
done
expect 0 "train_loss" "$train" --data="$tmp/nest" $run --epochs=1 --no-eval
mkdir "$tmp/nest-shards"
expect 0 "nest/train \(train\): 180 JPEGs in 3 classes" "$pack" --image-size=16 -o "$tmp/nest-shards/n" \
	"$tmp/nest"
rm -rf "$tmp/nest" "$tmp/nest-shards"

# A file over a record's bound (64 MiB, a sparse file after a JPEG's
# first marker): named by pinpipe-pack, not only as the shard's record.
mkdir -p "$tmp/big/a" "$tmp/big-shards"
cp "$tmp/img/train/red/000.jpg" "$tmp/big/a/"
printf '\377\330\377' > "$tmp/big/a/huge.jpg" && truncate -s 67108865 "$tmp/big/a/huge.jpg"
expect 1 "^pinpipe-pack: $tmp/big/a/huge.jpg: .*67108865 bytes" "$pack" --image-size=16 \
	-o "$tmp/big-shards/b" "$tmp/big"
rm -rf "$tmp/big" "$tmp/big-shards"

expect 1 "--image-size is for JPEGs, and --data=synthetic:600 holds none" "$train" \
	--data=synthetic:600 --image-size=16 --epochs=1 --device=cpu -q

# pinpipe-bench's loader through the transfer stage on the folder: images/s.
if [ -x ./pinpipe-bench ]; then
	expect 0 "180 samples of 3x16x16 u8" ./pinpipe-bench overlap --device=cpu --data="$tmp/img" \
		--image-size=16 --batch-size=20 --batches=5 --dtype=u8
fi

# A truncated file fails the run, by name.
f="$tmp/img/train/red/017.jpg"
head -c 300 "$f" >"$tmp/cut" && mv "$tmp/cut" "$f"
expect 1 "train/red/017.jpg: a bad JPEG" "$train" --data="$tmp/img" $run

# Ranks given two --image-size: refused before training, exit 2, the rank
# saying both (the samples' sizes differed: MPI_ERR_TRUNCATE, no reason).
# In a subshell, so that MPI's environment stays there.
rm -f "$f"
if command -v mpirun >/dev/null &&
	! "$train" --comm=mpi --data=synthetic:60 --epochs=1 --max-steps=1 --no-eval -q 2>&1 |
		grep -q "this build has no MPI"; then
	(
		mpi_env
		expect 2 "rank 1 of 2: --image-size=24, but rank 0 has --image-size=16" \
			timeout 120 $mpirun -np 1 "$train" --data="$tmp/img" $run --epochs=1 \
			: -np 1 "$train" --data="$tmp/img" $run --epochs=1 --image-size=24
		# Streamed shards of 2 chunks a split to 3 ranks: refused before any
		# run, in the trainer's terms (it was the loader's, which named a
		# library setting: PP_LOADER_CACHE_MEMORY).
		expect 1 "the train shards of $tmp/shards hold 2 chunks, too few for 3 ranks.*train without --stream" \
			timeout 120 $mpirun -np 3 "$train" --data="$tmp/shards" --stream $run --epochs=1
		grep -q "PP_LOADER_CACHE" "$tmp/out" &&
			{ echo "FAIL: pinpipe-train named a library setting:"; cat "$tmp/out"; fail=1; }
		exit $fail
	) || fail=1
else
	echo "test_train_images: no mpirun, or a build without MPI: the ranks' --image-size left out"
fi
exit $fail
