#!/bin/sh
# tests/test_tensorboard.sh: TensorBoard's own reader (the event
# accumulators its server uses) reads what pinpipe-train --logdir writes:
# the scalars, the image grid of the first batch as a PNG of the grid's
# size, and a histogram of every parameter tensor and its gradient per
# epoch, each converted to the tensors its Histograms tab draws, all of
# them at the global step, as loss and accuracy are.  Skipped
# (exit 77) where the python in $PP_TENSORBOARD_PYTHON (default python3)
# cannot import tensorboard: `python3 -m venv /tmp/tb && /tmp/tb/bin/pip
# install tensorboard`, then PP_TENSORBOARD_PYTHON=/tmp/tb/bin/python.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
py=${PP_TENSORBOARD_PYTHON:-python3}
[ -x "$train" ] || { echo "test_tensorboard: $train not built, skipped"; exit 77; }
if ! "$py" -c 'import tensorboard' 2>/dev/null; then
	echo "test_tensorboard: $py cannot import tensorboard, skipped (see the top of $0)"
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-tb-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

"$train" --data=synthetic:600 --device=cpu --model=cnn --batch-size=50 --epochs=2 -q \
	--logdir="$tmp/tb" >/dev/null 2>"$tmp/err" || { echo "FAIL: run:"; cat "$tmp/err"; exit 1; }
"$py" - "$tmp/tb" >"$tmp/out" 2>&1 <<'EOPY'

import glob, sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.util import tensor_util

(d,) = glob.glob(sys.argv[1] + "/*")
acc = ea.EventAccumulator(d, size_guidance={ea.SCALARS: 0, ea.IMAGES: 0, ea.HISTOGRAMS: 0})
acc.Reload()
tags = acc.Tags()
assert {"loss/train", "accuracy/test", "time/epoch_s"} <= set(tags["scalars"]), tags
# One axis: every per-epoch point at the global step of the epoch's end, as
# loss/train's: N and 2N steps for two epochs of N batches (not 1 and 2).
epoch_steps = [x.step for x in acc.Scalars("loss/train")]
assert len(epoch_steps) == 2 and epoch_steps[0] > 2 and epoch_steps[1] == 2 * epoch_steps[0], epoch_steps
for tag in ("time/epoch_s", "time/samples_per_s", "time/wait_s", "accuracy/test"):
    assert [x.step for x in acc.Scalars(tag)] == epoch_steps, (tag, acc.Scalars(tag))
assert tags["images"] == ["images/first_batch"], tags
(im,) = acc.Images("images/first_batch")
# 50 samples of 1 x 28 x 28, 8 a row: 7 rows, 2 pixels between and around.
assert (im.width, im.height) == (8 * 30 + 2, 7 * 30 + 2), (im.width, im.height)
assert im.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
names = ["0.conv.weight", "0.conv.bias", "3.conv.weight", "3.conv.bias", "7.fc.weight",
         "7.fc.bias", "9.fc.weight", "9.fc.bias", "11.fc.weight", "11.fc.bias"]
assert sorted(tags["histograms"]) == sorted(p + n for p in ("params/", "grads/") for n in names), tags
for tag in tags["histograms"]:
    h = acc.Histograms(tag)
    assert [x.step for x in h] == epoch_steps, (tag, h, epoch_steps)
    assert all(x.histogram_value.num == sum(x.histogram_value.bucket) > 0 for x in h), tag
# What the server hands to the Histograms and Images tabs: tensors converted from the events.
acc = pea.EventAccumulator(d, size_guidance={"tensors": 0})
acc.Reload()
assert set(acc.PluginTagToContent("histograms")) == set(tags["histograms"])
assert set(acc.PluginTagToContent("images")) == {"images/first_batch"}
t = tensor_util.make_ndarray(acc.Tensors("params/0.conv.weight")[0].tensor_proto)
assert t.shape[1] == 3 and t[:, 2].sum() == 150, t
print("test_tensorboard: TensorBoard reads %d scalar, 1 image and %d histogram tags"
      % (len(tags["scalars"]), len(tags["histograms"])))
EOPY
code=$?
grep -v -i 'warning' "$tmp/out"
[ $code -eq 0 ] || echo "FAIL: TensorBoard's reader disagrees (above)"
exit $code
