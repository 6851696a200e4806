#!/bin/bash
# bench/gpu_pending.sh: on a GPU host, the figures bench/README.md lists as
# unmeasured, each run under a time limit of its own so that one stuck run
# costs its limit alone (about 3 minutes; under 10 were every run to reach
# its limit):
#   1. the first epoch against the later ones (pp_model_prepare()), each
#      model and batch in a process of its own;
#   2. the pipeline with no compute against the link: --depth=2 and 8, and
#      8 with a ring of 30 (--prefetch), at f32 and u8, beside `bandwidth`
#      at the copies' sizes;
#   3. JPEG decode and augmentation at 1, 2, 8 and 16 workers (the shared
#      fills), when bench_jpeg is there.
#
#   bench/gpu_pending.sh FASHION_MNIST_DIR [JPEG_DIR] [OUT_DIR]
#
# pinpipe-train, pinpipe-bench and, for 3, bench_jpeg come from PATH; a
# JPEG_DIR that does not exist is made with bench/make_jpegs.py (3000
# images, 10 classes; Pillow, under $PYTHON or python3).  Each run's output goes to OUT_DIR (default
# $OUT/gpu-pending where $OUT is set, else ./gpu-pending); the lines that
# matter are printed as they come.  Exit status 1 when a run failed.
# DEVICE=sim runs the same commands on the simulated device (a check of
# the script, not a figure).
set -u
device=${DEVICE:-cuda}
fm=${1:?usage: bench/gpu_pending.sh FASHION_MNIST_DIR [JPEG_DIR] [OUT_DIR]}
jpegs=${2:-/tmp/pending-jpegs}
out=${3:-${OUT:+$OUT/}gpu-pending}
failed=0
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" || exit 1

run() { # run NAME LIMIT COMMAND...: its output into OUT/NAME.log
	local name=$1 limit=$2
	shift 2
	echo "== $name"
	timeout "$limit" "$@" > "$out/$name.log" 2>&1
	local rc=$?
	echo "rc=$rc" >> "$out/$name.log"
	[ $rc -eq 0 ] || failed=$((failed + 1))
	grep -vE '^#' "$out/$name.log" | cut -c1-220
	return $rc
}

# 1. The first epoch: a process a run, three epochs, no evaluation.
for model in cnn mlp; do
	for batch in 1000 100; do
		run "first-epoch-$model-$batch" 40 pinpipe-train --device=$device --data="$fm" \
			--model=$model --batch-size=$batch --epochs=3 --no-eval -q --no-progress \
			--csv="$out/first-epoch-$model-$batch.csv"
	done
done

# 2. The pipeline with no compute, and the link at the copies' sizes.
run bandwidth 30 pinpipe-bench bandwidth --device=$device --sizes=196K,784K,3136K --total=1G
for dtype in f32 u8; do
	for ring in "--depth=2" "--depth=8" "--depth=8 --prefetch=30"; do
		# shellcheck disable=SC2086
		run "overlap-$dtype-$(echo "$ring" | tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$//')" 25 pinpipe-bench overlap --device=$device --data="$fm" \
			--workers=8 --batch-size=256 --dtype=$dtype --compute-us=0 --batches=2000 $ring
	done
done

# 3. JPEGs at 1, 2, 8 and 16 workers.
if command -v bench_jpeg > /dev/null; then
	# made aside and moved into place whole: a run cut short leaves no half folder
	if [ ! -d "$jpegs" ]; then
		rm -rf "$jpegs.part"
		run make-jpegs 120 "${PYTHON:-python3}" "$here/make_jpegs.py" "$jpegs.part" 3000 10 \
			"$(nproc)" && mv "$jpegs.part" "$jpegs"
	fi
	[ -d "$jpegs" ] && run jpeg 120 bench_jpeg "$jpegs" 224 3 1,2,8,16
else
	echo "== jpeg: no bench_jpeg on PATH, skipped"
fi
echo "== $failed run(s) failed"
[ $failed -eq 0 ]
