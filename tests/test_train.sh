#!/bin/sh
# tests/test_train.sh: pinpipe-train end to end, from the outside: learning
# on synthetic data on cpu and sim (through the transfer stage), the real
# Fashion-MNIST, determinism across worker counts, resuming from a
# checkpoint (at an epoch's end and in the middle of one), grids and their
# CSV, JSON lines and TensorBoard files, Ctrl-C, and bad usage.  Each check
# fails the script with what went wrong; exit 77 only when the tool was not
# built.  The CSV, JSON and TFRecord checks use python3's standard library.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
[ -x "$train" ] || { echo "test_train: $train not built, skipped"; exit 77; }
command -v python3 >/dev/null || { echo "test_train: python3 missing (./bootstrap installs it)"; exit 1; }
fm=${PP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-train-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# expect CODE PATTERN CMD...: runs CMD, checks its exit code and that its
# output matches the extended regular expression PATTERN.
expect() {
	code=$1 pattern=$2
	shift 2
	"$@" >"$tmp/out" 2>&1
	got=$?
	if [ "$got" -ne "$code" ]; then
		echo "FAIL: '$*' exited $got, expected $code:"; cat "$tmp/out"; fail=1
	elif ! grep -Eq -- "$pattern" "$tmp/out"; then
		echo "FAIL: '$*' printed nothing matching '$pattern':"; cat "$tmp/out"; fail=1
	fi
}

# check NAME PYTHON-CODE: runs the code with the CSV rows of $tmp/$NAME.csv
# as 'rows' (a list of dicts); an assertion error fails the script.
check() {
	name=$1
	shift
	if ! python3 - "$tmp/$name.csv" "$@" >"$tmp/py" 2>&1 <<EOPY
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
f = lambda r, k: float(r[k])
$CHECK
EOPY
	then
		echo "FAIL: check of $name:"; cat "$tmp/py"; fail=1
	fi
}

# 1. Synthetic data that is learnable: on cpu, and on sim through the
# transfer stage, the loss falls and accuracy beats chance (0.1) by far.
"$train" --data=synthetic:2400 --device=cpu,sim --model=mlp,cnn --epochs=2 -q \
	--csv="$tmp/syn.csv" >/dev/null 2>"$tmp/err" || { echo "FAIL: synthetic run:"; cat "$tmp/err"; fail=1; }
CHECK='
assert len(rows) == 8, rows
for run in set(r["run"] for r in rows):
    e = sorted((r for r in rows if r["run"] == run), key=lambda r: int(r["epoch"]))
    assert [r["status"] for r in e] == ["ok", "ok"], e
    assert f(e[1], "train_loss") < f(e[0], "train_loss"), e
    assert f(e[1], "test_acc") > 0.6, e
    assert f(e[1], "train_acc") > 0.6, e
sim = [r for r in rows if r["device"] == "sim"]
assert len(sim) == 4 and all(f(r, "copy_s") > 0 and r["hidden_pct"] != "" for r in sim), sim
cpu = [r for r in rows if r["device"] == "cpu"]
assert len(cpu) == 4 and all(f(r, "copy_s") == 0 for r in cpu), cpu
'
check syn

# 2. The real Fashion-MNIST: mlp reaches 80% test accuracy in one epoch.
if [ -r "$fm/train-images-idx3-ubyte.gz" ]; then
	"$train" --data="$fm" --model=mlp --epochs=1 --seed=1 --device=cpu -q \
		--csv="$tmp/fm.csv" >/dev/null 2>"$tmp/err" || { echo "FAIL: Fashion-MNIST run:"; cat "$tmp/err"; fail=1; }
	CHECK='
assert len(rows) == 1 and rows[0]["status"] == "ok", rows
assert f(rows[0], "test_acc") >= 0.80, rows
'
	check fm
else
	echo "FAIL: Fashion-MNIST not installed in $fm (./bootstrap installs dataset-fashion-mnist)"
	fail=1
fi

# 3. Same seed, same results, whatever the worker count (0, 1, 3) and pinning.
"$train" --data=synthetic:1200 --device=sim --model=mlp --workers=0,1,3 --pin-memory=on,off \
	--epochs=2 -q --csv="$tmp/det.csv" >/dev/null 2>"$tmp/err" || { echo "FAIL: determinism run:"; cat "$tmp/err"; fail=1; }
CHECK='
assert len(rows) == 12, rows
for e in ("1", "2"):
    got = set((r["train_loss"], r["train_acc"], r["test_loss"], r["test_acc"]) for r in rows if r["epoch"] == e)
    assert len(got) == 1, got
'
check det

# 4. Resume: 3 epochs straight against 1 epoch, then resumed to 3; and
# against a run stopped mid-epoch by --max-steps, then resumed.  The last
# epoch's results and the final checkpoints must be identical.
common="--data=synthetic:1200 --device=cpu --model=conv:4:5,relu,maxpool:2,flatten,fc:10 --seed=5 -q"
"$train" $common --epochs=3 --checkpoint="$tmp/a.ckpt" --csv="$tmp/ra.csv" >/dev/null 2>"$tmp/err" &&
"$train" $common --epochs=1 --checkpoint="$tmp/b.ckpt" >/dev/null 2>>"$tmp/err" &&
"$train" $common --epochs=3 --checkpoint="$tmp/b.ckpt" --resume --csv="$tmp/rb.csv" >/dev/null 2>>"$tmp/err" &&
"$train" $common --epochs=3 --max-steps=7 --checkpoint="$tmp/c.ckpt" >/dev/null 2>>"$tmp/err" &&
"$train" $common --epochs=3 --checkpoint="$tmp/c.ckpt" --resume --csv="$tmp/rc.csv" >/dev/null 2>>"$tmp/err" ||
	{ echo "FAIL: resume runs:"; cat "$tmp/err"; fail=1; }
for x in b c; do
	cmp -s "$tmp/a.ckpt" "$tmp/$x.ckpt" || { echo "FAIL: checkpoint $x.ckpt differs from the uninterrupted run's"; fail=1; }
done
CHECK='
a = [r for r in csv.DictReader(open(sys.argv[2]))]
last = lambda rs: [(r["train_loss"], r["train_acc"], r["test_loss"], r["test_acc"]) for r in rs if r["epoch"] == "3"]
assert len(last(a)) == 1 and last(rows) == last(a), (last(rows), last(a))
got = sorted(r["epoch"] for r in rows)
assert got == sys.argv[3].split(","), got
'
# Resumed at the end of epoch 1, it trains epochs 2 and 3; resumed after
# step 7 of 12, it finishes epoch 1 and trains 2 and 3.
check rb "$tmp/ra.csv" 2,3
check rc "$tmp/ra.csv" 1,2,3

# 5. A 2x2 grid: 4 runs with the right parameters in the CSV, JSON lines
# that parse, and TensorBoard event files with valid TFRecord framing and
# masked CRC-32C, one directory per run.
"$train" --data=synthetic:1200 --device=cpu --model=mlp --batch-size=50,100 --lr=0.01,0.001 \
	--epochs=1 -q --csv="$tmp/grid.csv" --jsonl="$tmp/grid.jsonl" --logdir="$tmp/tb" \
	--sort=-lr >/dev/null 2>"$tmp/err" || { echo "FAIL: grid run:"; cat "$tmp/err"; fail=1; }
CHECK='
import glob, json, os, struct
assert len(rows) == 4, rows
assert sorted((r["batch_size"], r["lr"]) for r in rows) == [("100", "0.001"), ("100", "0.01"), ("50", "0.001"), ("50", "0.01")]
assert [r["lr"] for r in rows] == ["0.01", "0.01", "0.001", "0.001"], "not sorted by -lr"
js = [json.loads(l) for l in open(sys.argv[2])]
assert len(js) == 4 and all(j["status"] == "ok" and j["val_acc"] is None for j in js), js
def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 & -(crc & 1))
    return crc ^ 0xffffffff
mask = lambda c: (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
dirs = sorted(glob.glob(sys.argv[3] + "/*"))
assert len(dirs) == 4, dirs
assert any("bs=50-" in d and "lr=0.001-" in d for d in dirs), dirs
for d in dirs:
    files = glob.glob(d + "/events.out.tfevents.*")
    assert len(files) == 1, files
    data = open(files[0], "rb").read()
    pos = records = 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        assert struct.unpack_from("<I", data, pos + 8)[0] == mask(crc32c(data[pos:pos + 8]))
        body = data[pos + 12:pos + 12 + n]
        assert struct.unpack_from("<I", data, pos + 12 + n)[0] == mask(crc32c(body))
        pos += 16 + n
        records += 1
    assert pos == len(data) and records >= 8, (pos, len(data), records)
    assert b"brain.Event:2" in data and b"accuracy/test" in data and b"loss/train_step" in data
'
check grid "$tmp/grid.jsonl" "$tmp/tb"

# 6. Ctrl-C: stops after the step in progress, still prints the table, writes
# the rows so far (the interrupted epoch's too) and the checkpoint, exit 130.
"$train" --data=synthetic:60000 --device=cpu --model=cnn --epochs=50 -q --no-eval \
	--csv="$tmp/int.csv" --checkpoint="$tmp/int.ckpt" >"$tmp/int.out" 2>&1 &
pid=$!
sleep 3
kill -INT $pid
wait $pid
code=$?
if [ $code -ne 130 ]; then
	echo "FAIL: after SIGINT, exit $code, expected 130:"; cat "$tmp/int.out"; fail=1
elif ! grep -q "interrupted after" "$tmp/int.out" || ! grep -q ',interrupted$' "$tmp/int.csv" ||
	[ ! -s "$tmp/int.ckpt" ]; then
	echo "FAIL: after SIGINT, no message, no interrupted row or no checkpoint:"; cat "$tmp/int.out"; fail=1
fi

# 7. Bad usage: one line, exit 2; a run that cannot start: its row says why, exit 1.
expect 0 'Exit status' "$train" --help
expect 2 "unknown option '--bogus'" "$train" --bogus
expect 2 "--batch-size=0: not a batch size" "$train" --batch-size=0
expect 2 "--device=tpu: not a device" "$train" --device=tpu
expect 2 "--sort=speed: not a column" "$train" --sort=speed
expect 2 "--resume needs --checkpoint" "$train" --resume
expect 2 "not synthetic:COUNT" "$train" --data=synthetic:x
expect 1 "$tmp/none" "$train" --data="$tmp/none"
expect 1 "failed: .*(cuda|CUDA)" "$train" --data=synthetic:600 --device=cuda,cpu --model=mlp --epochs=1 -q
expect 1 "layer|spec" "$train" --data=synthetic:600 --device=cpu --model=fc:7,bogus --epochs=1 -q

exit $fail
