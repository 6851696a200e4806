#!/bin/sh
# tests/test_train.sh: pinpipe-train end to end, from the outside: learning
# on synthetic data on cpu and sim (through the transfer stage), the real
# Fashion-MNIST, determinism across worker counts, resuming from a
# checkpoint (at an epoch's end and in the middle of one; refused when its
# step count was altered; nothing to do when it is complete), grids and
# their CSV, JSON lines and TensorBoard files (on standard output's own
# file, through links), Ctrl-C (more of it in
# tests/test_interrupt.sh), -q, bad usage, and streaming shards (--stream)
# against decoding them into memory.  Each check
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

. "${srcdir:-.}/tests/testlib.sh"

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
assert all(0 <= f(r, "exposed_s") <= f(r, "copy_s") and f(r, "copy_host_s") > 0 for r in sim), sim
cpu = [r for r in rows if r["device"] == "cpu"]
assert len(cpu) == 4 and all(f(r, "copy_s") == 0 and f(r, "copy_host_s") == 0 for r in cpu), cpu
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

# 3b. --keep-denormals (IEEE subnormals in place of flushed ones) is taken,
# and changes nothing of a short run's results (none of its values is that small).
for k in "" --keep-denormals; do
	"$train" --data=synthetic:1200 --device=cpu --model=cnn --epochs=1 -q $k \
		--csv="$tmp/den${k:+k}.csv" >/dev/null 2>"$tmp/err" || { echo "FAIL: run with '$k':"; cat "$tmp/err"; fail=1; }
done
CHECK='
other = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 1 and len(other) == 1, (rows, other)
for k in ("train_loss", "train_acc", "test_loss", "test_acc"):
    assert rows[0][k] == other[0][k], (k, rows, other)
'
check den "$tmp/denk.csv"

# 3d. Data from PINPIPE_DATA that is not there: said to be the variable's
# (the message named a path the command line does not hold); one too long
# for the path is refused (it was cut short and another path read); --data
# is taken over it.
expect 1 "the data was PINPIPE_DATA's \($tmp/none\)" env PINPIPE_DATA="$tmp/none" "$train" -e 1
expect 2 "PINPIPE_DATA: 5000 bytes, too long" env PINPIPE_DATA="$(printf '%5000s' x)" "$train" -e 1
expect 0 "train_loss" env PINPIPE_DATA="$(printf '%5000s' x)" "$train" --data=synthetic:300 -d cpu \
	-m mlp -e 1 --no-eval -q
expect 0 "train_loss" env PINPIPE_DATA="$tmp/none" "$train" --data=synthetic:300 -d cpu -m mlp -e 1 \
	--no-eval -q

# 3e. Files of rows of an earlier run are replaced once a run's row is in
# them: a run that fails before its first epoch (a model spec that does not
# fit the data) leaves them as they were; a grid whose next run trains
# replaces them with both runs' rows.
"$train" --data=synthetic:600 -d cpu -m mlp -e 1 -q --no-eval --csv="$tmp/e.csv" \
	--jsonl="$tmp/e.jsonl" >/dev/null 2>"$tmp/err" || { echo "FAIL: rows:"; cat "$tmp/err"; fail=1; }
cp "$tmp/e.csv" "$tmp/e0.csv"
cp "$tmp/e.jsonl" "$tmp/e0.jsonl"
expect 1 "kernel 40 does not fit" "$train" --data=synthetic:600 -d cpu -m conv:4:40,flatten,fc:10 -e 1 \
	-q --no-eval --csv="$tmp/e.csv" --jsonl="$tmp/e.jsonl"
cmp -s "$tmp/e.csv" "$tmp/e0.csv" && cmp -s "$tmp/e.jsonl" "$tmp/e0.jsonl" ||
	{ echo "FAIL: a run that trained no epoch replaced the earlier rows"; fail=1; }
[ -z "$(find "$tmp" -name 'e.*.tmp-*')" ] || { echo "FAIL: a staged file of rows left"; fail=1; }
expect 1 "kernel 40 does not fit" "$train" --data=synthetic:600 -d cpu -m conv:4:40,flatten,fc:10 -m mlp \
	-e 1 -q --no-eval --csv="$tmp/e.csv" --jsonl="$tmp/e.jsonl"
CHECK='
import json
assert sorted((r["run"], r["epoch"]) for r in rows) == [("1", "0"), ("2", "1")], rows
assert [(r["run"], r["epoch"]) for r in map(json.loads, open(sys.argv[2]))] == [(1, 0), (2, 1)]
'
check e "$tmp/e.jsonl"

# 3c. --graph=on (each step captured once, launched as one call; on cpu and
# sim the recorded step is a host function) gives the results of --graph=off,
# through the transfer stage, with evaluation and a partial last batch.
for g in off on; do
	"$train" --data=synthetic:1250 --device=cpu,sim --model=cnn --batch-size=100 --epochs=2 -q \
		--graph=$g --csv="$tmp/graph$g.csv" >/dev/null 2>"$tmp/err" ||
		{ echo "FAIL: run with --graph=$g:"; cat "$tmp/err"; fail=1; }
done
CHECK='
other = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 4 and len(other) == 4, (rows, other)
key = lambda r: (r["device"], int(r["epoch"]))
for a, b in zip(sorted(rows, key=key), sorted(other, key=key)):
    for k in ("device", "epoch", "train_loss", "train_acc", "test_loss", "test_acc"):
        assert a[k] == b[k], (k, a, b)
'
check graphoff "$tmp/graphon.csv"
if "$train" --graph=sometimes >/dev/null 2>"$tmp/err"; then
	echo "FAIL: --graph=sometimes accepted"; fail=1
elif ! grep -q "auto, on or off" "$tmp/err"; then
	echo "FAIL: --graph=sometimes: no reason given:"; cat "$tmp/err"; fail=1
fi

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
# One --csv and --jsonl over a run and its resumes: stopped after step 7
# (epoch 1's row, of 7 steps), resumed to 2 epochs (epoch 1's row is that
# of the resume, which finishes it, then epoch 2), then to 3: each file
# holds epochs 1, 2, 3 once, the CSV one header, and epochs 2 and 3 are
# the uninterrupted run's.  A resume that emptied the files, or appended
# a second epoch 1, fails this.
"$train" $common --epochs=3 --max-steps=7 --checkpoint="$tmp/f.ckpt" --csv="$tmp/rf.csv" \
	--jsonl="$tmp/rf.jsonl" >/dev/null 2>"$tmp/err" &&
"$train" $common --epochs=2 --checkpoint="$tmp/f.ckpt" --resume --csv="$tmp/rf.csv" \
	--jsonl="$tmp/rf.jsonl" >/dev/null 2>>"$tmp/err" &&
"$train" $common --epochs=3 --checkpoint="$tmp/f.ckpt" --resume --csv="$tmp/rf.csv" \
	--jsonl="$tmp/rf.jsonl" >/dev/null 2>>"$tmp/err" ||
	{ echo "FAIL: resumes into the same files:"; cat "$tmp/err"; fail=1; }
CHECK='
import json
a = [r for r in csv.DictReader(open(sys.argv[2]))]
js = [json.loads(l) for l in open(sys.argv[3])]
assert [r["epoch"] for r in rows] == ["1", "2", "3"], rows
assert [r["epoch"] for r in js] == [1, 2, 3], js
assert open(sys.argv[1]).read().count("run,epoch,") == 1
key = lambda r: (r["epoch"], r["train_loss"], r["test_loss"], r["test_acc"])
assert [key(r) for r in rows[1:]] == [key(r) for r in a[1:]], (rows, a)
'
check rf "$tmp/ra.csv" "$tmp/rf.jsonl"
# Files of rows saved again by another program (JSON with a space after
# its colons, CSV with every cell quoted after a byte-order mark): their rows of the checkpoint's
# epochs are kept (they were all dropped); one whose epochs cannot be read
# at all is left as it was, and the resume refused.
"$train" $common --epochs=2 --checkpoint="$tmp/o.ckpt" --csv="$tmp/ro.csv" --jsonl="$tmp/ro.jsonl" \
	>/dev/null 2>"$tmp/err" || { echo "FAIL: a run to resume:"; cat "$tmp/err"; fail=1; }
python3 - "$tmp/ro.jsonl" "$tmp/ro.csv" <<'EOPY'
import csv, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
cells = list(csv.reader(open(sys.argv[2])))
# as a spreadsheet saves "CSV UTF-8": a byte-order mark first
csv.writer(open(sys.argv[2], "w", newline="", encoding="utf-8-sig"),
           quoting=csv.QUOTE_ALL).writerows(cells)
EOPY
"$train" $common --epochs=3 --checkpoint="$tmp/o.ckpt" --resume --csv="$tmp/ro.csv" \
	--jsonl="$tmp/ro.jsonl" >/dev/null 2>"$tmp/err" || { echo "FAIL: resume:"; cat "$tmp/err"; fail=1; }
CHECK='
import json
rows = list(csv.DictReader(open(sys.argv[1], encoding="utf-8-sig")))
assert [r["epoch"] for r in rows] == ["1", "2", "3"], rows
assert [json.loads(l)["epoch"] for l in open(sys.argv[2])] == [1, 2, 3]
'
check ro "$tmp/ro.jsonl"
# A quote inside a cell that does not start with one is a character (as
# Python's csv reads it): a CSV edited by hand with one in epoch 1's row
# keeps that row alone, not it and the next one read as one record.
"$train" $common --epochs=1 --checkpoint="$tmp/q.ckpt" --csv="$tmp/rq.csv" >/dev/null 2>"$tmp/err" &&
cp "$tmp/q.ckpt" "$tmp/q1.ckpt" &&
"$train" $common --epochs=2 --checkpoint="$tmp/q.ckpt" --resume --csv="$tmp/rq.csv" >/dev/null 2>>"$tmp/err" &&
sed -i '2s/,ok$/,o"k/' "$tmp/rq.csv" &&
"$train" $common --epochs=2 --checkpoint="$tmp/q1.ckpt" --resume --csv="$tmp/rq.csv" >/dev/null 2>>"$tmp/err" ||
	{ echo "FAIL: resumes over a hand-edited CSV:"; cat "$tmp/err"; fail=1; }
CHECK='
assert [r["epoch"] for r in rows] == ["1", "2"], rows
assert [r["status"] for r in rows] == ["o\"k", "ok"], rows
'
check rq
printf '{"run": 1, "Epoch": 1}\n{"run": 1, "Epoch": 2}\n' > "$tmp/ro.jsonl"
cp "$tmp/ro.jsonl" "$tmp/ro0.jsonl"
expect 1 "ro.jsonl: the epoch of none of its 2 rows can be read .*left as it was" \
	"$train" $common --epochs=4 --checkpoint="$tmp/o.ckpt" --resume --jsonl="$tmp/ro.jsonl"
cmp -s "$tmp/ro.jsonl" "$tmp/ro0.jsonl" || { echo "FAIL: unreadable rows rewritten"; fail=1; }
# A resume whose training data would come in another order (another batch
# size, no shuffling) is refused, at an epoch's end and in the middle of
# one, and leaves the checkpoint as it was.
"$train" $common --epochs=1 --checkpoint="$tmp/d.ckpt" >/dev/null 2>"$tmp/err" &&
"$train" $common --epochs=3 --max-steps=7 --checkpoint="$tmp/e.ckpt" >/dev/null 2>>"$tmp/err" ||
	{ echo "FAIL: runs to resume:"; cat "$tmp/err"; fail=1; }
cp "$tmp/d.ckpt" "$tmp/d0.ckpt"
cp "$tmp/e.ckpt" "$tmp/e0.ckpt"
other="was written by a run whose training data came in another order.*resume it with the options it was written with"
expect 1 "d.ckpt $other" "$train" $common --epochs=2 --batch-size=50 --checkpoint="$tmp/d.ckpt" --resume
# said once: one line on stderr, the run's own (not the loader's after it)
"$train" $common --epochs=2 --batch-size=50 --checkpoint="$tmp/d.ckpt" --resume >/dev/null 2>"$tmp/err"
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^pinpipe-train: run 1 (cpu): --resume: .*d.ckpt $other" "$tmp/err" ||
	{ echo "FAIL: a resume at another batch size is not one line:"; cat "$tmp/err"; fail=1; }
expect 1 "e.ckpt $other" "$train" $common --epochs=3 --no-shuffle --checkpoint="$tmp/e.ckpt" --resume \
	--logdir="$tmp/tb-refused"
# Refused before its first step (by the loader, in the middle of an epoch;
# no whole batch): no events file of no event (one was left each time).
expect 1 "nothing to train" "$train" --data=synthetic:60 --device=cpu --batch-size=64 --drop-last \
	--epochs=1 --logdir="$tmp/tb-refused"
if [ -n "$(find "$tmp/tb-refused" -type f 2>/dev/null)" ]; then
	echo "FAIL: a run refused before its first step left events:"; find "$tmp/tb-refused" -type f; fail=1
fi
cmp -s "$tmp/d.ckpt" "$tmp/d0.ckpt" && cmp -s "$tmp/e.ckpt" "$tmp/e0.ckpt" ||
	{ echo "FAIL: a refused resume changed its checkpoint"; fail=1; }
# A resume with another --model, --optimizer or --momentum is refused,
# naming both, and leaves the checkpoint as it was (the model and optimizer
# came from the file, and the rows named the options'); another --lr is
# said and used: the resumed epoch's results are not those of the
# checkpoint's rate, and its row says the rate it trained with.
base="--data=synthetic:1200 --device=cpu --seed=5 -q --epochs=2"
"$train" $base --epochs=1 --model=mlp --checkpoint="$tmp/g.ckpt" >/dev/null 2>"$tmp/err" ||
	{ echo "FAIL: a run to resume:"; cat "$tmp/err"; fail=1; }
cp "$tmp/g.ckpt" "$tmp/g0.ckpt"
expect 1 "g.ckpt holds the model 'flatten,fc:32,relu,fc:10', not --model=cnn \('conv:6:5" \
	"$train" $base --model=cnn --checkpoint="$tmp/g.ckpt" --resume
expect 1 "g.ckpt holds the optimizer adam, not --optimizer=sgd" \
	"$train" $base --model=mlp --optimizer=sgd --checkpoint="$tmp/g.ckpt" --resume
expect 1 "g.ckpt holds the optimizer's --momentum=0 .*not --momentum=0.5" \
	"$train" $base --model=mlp --momentum=0.5 --checkpoint="$tmp/g.ckpt" --resume
cmp -s "$tmp/g.ckpt" "$tmp/g0.ckpt" || { echo "FAIL: a refused resume changed its checkpoint"; fail=1; }
expect 0 "g.ckpt was trained at the learning rate 0.01: it goes on at --lr=0.5" \
	"$train" $base --model=flatten,fc:32,relu,fc:10 --lr=0.5 --checkpoint="$tmp/g.ckpt" --resume \
	--csv="$tmp/glr.csv"
cp "$tmp/g0.ckpt" "$tmp/g.ckpt"
"$train" $base --model=mlp --checkpoint="$tmp/g.ckpt" --resume --csv="$tmp/g.csv" >/dev/null 2>"$tmp/err" ||
	{ echo "FAIL: a resume:"; cat "$tmp/err"; fail=1; }
CHECK='
same = list(csv.DictReader(open(sys.argv[2])))
assert [r["lr"] for r in rows] == ["0.5"] and [r["lr"] for r in same] == ["0.01"], (rows, same)
assert rows[0]["train_loss"] != same[0]["train_loss"], (rows, same)
'
check glr "$tmp/g.csv"
# A checkpoint whose step count was altered (and its CRC made right again)
# is refused, naming the file, and kept as it was: 12 * 2^32 + 5 steps of
# 12 batches is epoch 2^32 (which an unsigned epoch took for epoch 0, batch
# 5), and 2^64 - 1 lies as far past the end of any run.
python3 - "$tmp/d.ckpt" "$tmp/big.ckpt" "$tmp/max.ckpt" <<'EOPY' || { echo "FAIL: could not alter a checkpoint"; fail=1; }
import struct, sys, zlib
d = bytearray(open(sys.argv[1], "rb").read())
for path, steps in ((sys.argv[2], 12 * 2**32 + 5), (sys.argv[3], 2**64 - 1)):
    struct.pack_into("<Q", d, 40, steps)
    struct.pack_into("<I", d, len(d) - 4, zlib.crc32(bytes(d[:-4])))
    open(path, "wb").write(d)
EOPY
cp "$tmp/big.ckpt" "$tmp/big0.ckpt"
past="lies past the end of any run of its training data \(12 batches an epoch, 100000 epochs at most\)"
expect 1 "big.ckpt: its step count 51539607557 $past" \
	"$train" $common --epochs=3 --checkpoint="$tmp/big.ckpt" --resume
expect 1 "max.ckpt: its step count 18446744073709551615 $past" \
	"$train" $common --epochs=3 --checkpoint="$tmp/max.ckpt" --resume
cmp -s "$tmp/big.ckpt" "$tmp/big0.ckpt" || { echo "FAIL: a refused checkpoint was changed"; fail=1; }
# A checkpoint at or past --epochs or --max-steps: nothing to train, and
# said so; exit 0, no row, the checkpoint as it was.
expect 0 "d.ckpt is at step 12, the end of epoch 1 \(of 12 batches\), at or past --epochs=1: the run is already complete" \
	"$train" $common --epochs=1 --checkpoint="$tmp/d.ckpt" --resume --csv="$tmp/done.csv"
expect 0 "e.ckpt is at step 7, batch 7 of epoch 1 \(of 12 batches\), at or past --max-steps=5: the run is already complete" \
	"$train" $common --epochs=3 --max-steps=5 --checkpoint="$tmp/e.ckpt" --resume --csv="$tmp/done2.csv" \
	--logdir="$tmp/tb-none"
# Of another order (another --batch-size): refused, not "complete" (its
# steps are no place in this plan).
expect 1 "e.ckpt was written by a run whose training data came in another order" \
	"$train" $common --epochs=3 --max-steps=5 --batch-size=50 --checkpoint="$tmp/e.ckpt" --resume \
	--logdir="$tmp/tb-none"
# Neither trained a step: no events file of no event (one was left each time).
if [ -n "$(find "$tmp/tb-none" -type f 2>/dev/null)" ]; then
	echo "FAIL: a run that trained nothing left events:"; find "$tmp/tb-none" -type f; fail=1
fi
# and no table of no rows: stdout holds the run's line alone, no header
"$train" $common --epochs=1 --checkpoint="$tmp/d.ckpt" --resume --no-progress >"$tmp/out" 2>/dev/null
if grep -q "epoch.*train_loss\|^sorted by" "$tmp/out"; then
	echo "FAIL: a run already complete printed a table header:"; cat "$tmp/out"; fail=1
fi
CHECK='
assert rows == [] and list(csv.DictReader(open(sys.argv[2]))) == [], rows
'
check done "$tmp/done2.csv"
cmp -s "$tmp/d.ckpt" "$tmp/d0.ckpt" && cmp -s "$tmp/e.ckpt" "$tmp/e0.ckpt" ||
	{ echo "FAIL: a complete run changed its checkpoint"; fail=1; }

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

# 5b. What TensorBoard shows beyond the scalars, on a small IDX dataset of
# known pixels, unshuffled: the image grid is the first batch's samples as
# the model gets them, 8 a row with 2 black pixels around each, and each
# epoch has a histogram of every parameter tensor and of its gradient, at
# the global step of the epoch's end, as the epoch's scalars (time/* too).
# Fails if the grid shows other samples or another layout, or a histogram
# is missing, has another count, or a gradient is all zeros.
mkdir -p "$tmp/tiny"
python3 - "$tmp/tiny" <<'EOPY' || { echo "FAIL: could not write the tiny dataset"; fail=1; }
import struct, sys
for name, n in (("train", 30), ("t10k", 10)):
    pix = bytes((i * 37 + y * 5 + x * 3) % 256 for i in range(n) for y in range(4) for x in range(5))
    open(sys.argv[1] + "/%s-images-idx3-ubyte" % name, "wb").write(struct.pack(">4I", 0x803, n, 4, 5) + pix)
    open(sys.argv[1] + "/%s-labels-idx1-ubyte" % name, "wb").write(struct.pack(">2I", 0x801, n) + bytes(i % 10 for i in range(n)))
EOPY
"$train" --data="$tmp/tiny" --device=cpu,sim --model=mlp --batch-size=10 --no-shuffle --epochs=2 -q \
	--logdir="$tmp/tbimg" >/dev/null 2>"$tmp/err" || { echo "FAIL: tiny run:"; cat "$tmp/err"; fail=1; }
if ! python3 - "$tmp/tbimg" >"$tmp/py" 2>&1 <<'EOPY'
import glob, struct, sys, zlib
def varint(b, p):
    v = s = 0
    while True:
        v |= (b[p] & 0x7f) << s; s += 7; p += 1
        if b[p - 1] < 0x80:
            return v, p
def fields(b):
    p, out = 0, []
    while p < len(b):
        k, p = varint(b, p)
        f, w = k >> 3, k & 7
        if w == 0:
            v, p = varint(b, p)
        elif w == 1:
            v = b[p:p + 8]; p += 8
        elif w == 5:
            v = b[p:p + 4]; p += 4
        else:
            n, p = varint(b, p); v = b[p:p + n]; p += n
        out.append((f, v))
    return out
dirs = sorted(glob.glob(sys.argv[1] + "/*"))
assert len(dirs) == 2, dirs
for d in dirs:
    data = open(glob.glob(d + "/events.out.tfevents.*")[0], "rb").read()
    pos, images, histos, scalars = 0, [], {}, {}
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        ev = dict(fields(data[pos + 12:pos + 12 + n]))
        pos += 16 + n
        if 5 not in ev:
            continue
        value = dict(fields(dict(fields(ev[5]))[1]))
        tag = value[1].decode()
        if 2 in value:
            scalars.setdefault(tag, []).append(ev[2])
        if 4 in value:
            images.append((tag, dict(fields(value[4]))))
        if 5 in value:
            h = dict(fields(value[5]))
            num = struct.unpack("<d", h[3])[0]
            lo, hi = struct.unpack("<d", h[1])[0], struct.unpack("<d", h[2])[0]
            histos.setdefault(tag, []).append((ev[2], num, lo, hi))
    assert [t for t, _ in images] == ["images/first_batch"], images
    im = images[0][1]
    assert (im[1], im[2], im[3]) == (2 + 2 * 6, 2 + 8 * 7, 1), im      # 10 samples of 4 x 5: 2 rows of 8
    png = im[4]
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:8]
    p, idat = 8, b""
    while p < len(png):
        (n,) = struct.unpack_from(">I", png, p)
        if png[p + 4:p + 8] == b"IDAT":
            idat += png[p + 8:p + 8 + n]
        assert struct.unpack_from(">I", png, p + 8 + n)[0] == zlib.crc32(png[p + 4:p + 8 + n])
        p += 12 + n
    raw = zlib.decompress(idat)
    rows = [raw[y * 59 + 1:(y + 1) * 59] for y in range(14)]
    for j in range(16):
        top, left = (j // 8) * 6 + 2, (j % 8) * 7 + 2
        for y in range(4):
            for x in range(5):
                want = (j * 37 + y * 5 + x * 3) % 256 if j < 10 else 0
                assert rows[top + y][left + x] == want, (d, j, y, x, rows[top + y][left + x], want)
    assert all(v == 0 for v in rows[0] + rows[1] + rows[6] + rows[7]), "the padding is not black"
    want = {"1.fc.weight": 640, "1.fc.bias": 32, "3.fc.weight": 320, "3.fc.bias": 10}
    assert sorted(histos) == sorted(k + n for k in ("params/", "grads/") for n in want), sorted(histos)
    # one axis: the epochs' points at the global step (30 samples, 3 batches an epoch), as loss's
    for tag in ("loss/train", "accuracy/test", "time/epoch_s", "time/samples_per_s", "time/wait_s"):
        assert scalars.get(tag) == [3, 6], (tag, scalars.get(tag))
    for tag, points in histos.items():
        assert [(s, n) for s, n, _, _ in points] == [(3, want[tag.split("/")[1]]), (6, want[tag.split("/")[1]])], (tag, points)
        if tag.endswith("weight"):
            assert all(hi > lo for _, _, lo, hi in points), (tag, points)
EOPY
then
	echo "FAIL: TensorBoard image grid and histograms:"; cat "$tmp/py"; fail=1
fi

# 6. Ctrl-C: stops after the step in progress, still prints the table, writes
# the rows so far (the interrupted epoch's too) and the checkpoint, exit 130;
# SIGTERM (timeout's, a batch system's at the end of a job's time) the same,
# exit 143 (it killed the run, the epoch's rows and checkpoint lost).
# The signal comes once the progress bar has shown the first 8 steps done
# (waited for, bounded), not after a fixed sleep: under a sanitizer on a
# loaded machine the first step came later than 3 s.
for sig in INT TERM; do
	want=130
	[ $sig = TERM ] && want=143
	# the last run's output gone first: its progress would send the signal at once
	rm -f "$tmp/int.csv" "$tmp/int.ckpt" "$tmp/int.out"
	"$train" --data=synthetic:60000 --device=cpu --model=cnn --epochs=50 --progress --no-eval \
		--csv="$tmp/int.csv" --checkpoint="$tmp/int.ckpt" >"$tmp/int.out" 2>&1 &
	pid=$!
	i=0
	while ! grep -q 'samples/s' "$tmp/int.out" 2>/dev/null && [ $i -lt 3000 ] &&
		kill -0 $pid 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -$sig $pid
	wait $pid
	code=$?
	if [ $code -ne $want ]; then
		echo "FAIL: after SIG$sig, exit $code, expected $want:"; cat "$tmp/int.out"; fail=1
	elif ! grep -q "interrupted after" "$tmp/int.out" || ! grep -q ',interrupted$' "$tmp/int.csv" ||
		[ ! -s "$tmp/int.ckpt" ]; then
		echo "FAIL: after SIG$sig, no message, no interrupted row or no checkpoint:"
		cat "$tmp/int.out"; fail=1
	fi
done

# 6a. A SIGKILL leaves the CSV and JSON lines of the epochs so far: each
# row is on disk as it is made.  Waits for the second row of the JSON
# lines (bounded), then kills; the CSV must hold the same whole rows.
"$train" --data=synthetic:2000 --device=cpu --model=flatten,fc:10 --epochs=100000 -q \
	--csv="$tmp/kill.csv" --jsonl="$tmp/kill.jsonl" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do
	[ "$(cat "$tmp/kill.jsonl" 2>/dev/null | wc -l)" -ge 2 ] && break
	sleep 0.1
done
kill -KILL $pid
wait $pid 2>/dev/null
CHECK='
import json
js = [json.loads(l) for l in open(sys.argv[2])]
assert len(js) >= 2 and len(rows) >= 2, (rows, js)
assert [r["epoch"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)], rows
'
check kill "$tmp/kill.jsonl"

# 6b. -q is only the final table (its order line, the parameters its rows
# share, then its header and rows),
# also with --no-progress or --progress after it: no run header, no rows as
# they come, nothing on stderr.
for q in "-q --no-progress" "--progress -q" "-q --progress"; do
	"$train" --data=synthetic:600 --device=cpu --model=mlp --epochs=1 $q >"$tmp/q.out" 2>"$tmp/q.err"
	if [ $? -ne 0 ] || grep -q '^run [0-9]' "$tmp/q.out" || [ -s "$tmp/q.err" ] ||
		! head -n 1 "$tmp/q.out" | grep -q '^sorted by ' ||
		! grep -Eq '^(run  +)?(epoch  +)?train_loss  +train_acc' "$tmp/q.out"; then
		echo "FAIL: '$q' is not only the final table:"; cat "$tmp/q.out" "$tmp/q.err"; fail=1
	fi
done

# 7. Bad usage: one line, exit 2; a run that cannot start: its row says why, exit 1.
expect 0 'Exit status' "$train" --help
expect 2 "unknown option '--bogus'" "$train" --bogus
expect 2 "--batch-size=0: not a batch size" "$train" --batch-size=0
expect 2 "--device=tpu: not a device" "$train" --device=tpu
# A rate a float does not hold is bad usage, not a failed run.
expect 2 "--lr=1e39: not a positive learning rate a float holds" "$train" --lr=1e39
expect 2 "--lr=1e-50: not a positive learning rate a float holds" "$train" --lr=1e-50
# A link loop as --data is said as one, not as a missing directory.
ln -s "$tmp/loop-b" "$tmp/loop-a" && ln -s "$tmp/loop-a" "$tmp/loop-b"
expect 1 "loop-a: cannot read the directory: Too many levels of symbolic links" "$train" --data="$tmp/loop-a"
expect 1 "loop-a: cannot read the directory: Too many levels of symbolic links" \
	"$train" --data="$tmp/loop-a" --stream
expect 2 "--sort=speed: not a column \(run,.*\) \(try --help\)$" "$train" --sort=speed
expect 2 "--resume needs --checkpoint" "$train" --resume
expect 2 "not synthetic:COUNT" "$train" --data=synthetic:x
# A --val-split of all the training samples or more: said by the option
# (it named the data "synthetic:seed=7[rest]").
expect 1 "^pinpipe-train: --val-split=2000: synthetic:2000 has 2000 training samples: at most 1999" \
	"$train" --data=synthetic:2000 --val-split=2000 -q
# An epoch of no whole batch trained nothing and said "ok" with a NaN loss.
expect 1 "run 1 \(cpu\): --drop-last: 50 training samples make no whole batch of 100: nothing to train" \
	"$train" --data=synthetic:50 --model=mlp --epochs=1 --drop-last -q
expect 1 "$tmp/none" "$train" --data="$tmp/none"
expect 1 "failed: .*(cuda|CUDA)" "$train" --data=synthetic:600 --device=cuda:999,cpu --model=mlp --epochs=1 -q

# 7a. A full disk.  A row that cannot be written to --jsonl or --csv ends
# the run with exit 1 and the file named (/dev/full: every write is
# ENOSPC); on a real full file system (a tmpfs of 12 KiB, as root) the
# rows written before are whole lines, TensorBoard's failure is one warning
# and the run goes on, and a checkpoint that does not fit fails the run.
full="--data=synthetic:500 --model=flatten,fc:10 -q"
expect 1 "--jsonl=/dev/full: cannot write: No space left on device" \
	"$train" $full --epochs=3 --jsonl=/dev/full
expect 1 "/dev/full: cannot write: No space left on device" "$train" $full --epochs=3 --csv=/dev/full
[ "$(grep -c 'cannot write' "$tmp/out")" -eq 1 ] ||
	{ echo "FAIL: --csv=/dev/full: not said once:"; cat "$tmp/out"; fail=1; }
# The epoch whose row could not be written still has it on the terminal,
# after the reason, said once (the failed row is not tried there again).
expect 1 "--jsonl=/dev/full: cannot write" \
	"$train" --data=synthetic:500 --model=flatten,fc:10 --no-progress --epochs=3 --jsonl=/dev/full
awk '/--jsonl=\/dev\/full: cannot write/ { n++; if (!why) why = NR } /^run 1 epoch 1: train loss/ { row = NR }
     END { exit !(n == 1 && row > why) }' "$tmp/out" ||
	{ echo "FAIL: the row --jsonl could not take: not on the terminal after the reason, or the reason not said once:"
	  cat "$tmp/out"; fail=1; }
# A file no write reaches, though access() lets root write it: said before training, exit 2.
expect 2 "--csv=/proc/version: cannot write: " "$train" $full --epochs=3 --csv=/proc/version
mkdir "$tmp/full"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=12k tmpfs "$tmp/full" 2>/dev/null; then
	expect 1 "--jsonl=$tmp/full/r.jsonl: cannot write: No space left on device" \
		"$train" $full --epochs=40 --jsonl="$tmp/full/r.jsonl"
	python3 - "$tmp/full/r.jsonl" <<'EOPY' || { echo "FAIL: the rows before a full disk are not whole"; fail=1; }
import json, sys
text = open(sys.argv[1]).read()
assert text == "" or text.endswith("\n"), "cut mid-line: %r" % text[-80:]
rows = [json.loads(l) for l in text.splitlines()]
assert [r["epoch"] for r in rows] == list(range(1, len(rows) + 1)), rows
EOPY
	rm -f "$tmp/full/r.jsonl"
	expect 0 "train_loss" "$train" $full --epochs=40 --logdir="$tmp/full/tb"
	[ "$(grep -c 'warning: --logdir: .*No space left on device; the run goes on' "$tmp/out")" -eq 1 ] ||
		{ echo "FAIL: TensorBoard on a full disk is not one warning:"; cat "$tmp/out"; fail=1; }
	rm -rf "$tmp/full/tb"
	expect 1 "c.ckpt.tmp.*: write: No space left on device" \
		"$train" $full --epochs=2 --checkpoint="$tmp/full/c.ckpt"
	umount "$tmp/full"
else
	echo "test_train: not root, or no tmpfs: the full file system's cases left out (the /dev/full ones ran)"
fi

# 7b. The final table (--columns=all; test_train_table.sh checks the default
# one): one run reads in epoch order under a line naming the
# order; a failed run's long reason (stderr has it whole) is cut to the
# terminal's width ($COLUMNS here) and widens no other row; no line ends in
# spaces.  Fails if the table sorts one run's epochs by time, or if the
# reason sets the width of the status column.
COLUMNS=330 "$train" --data=synthetic:600 --device=cpu,cuda:999 --model=mlp --epochs=3 -q --columns=all \
	>"$tmp/table.out" 2>"$tmp/table.err"
if ! python3 - "$tmp/table.out" "$tmp/table.err" >"$tmp/py" 2>&1 <<'EOPY'
import sys
lines = open(sys.argv[1]).read().split("\n")[:-1]
assert lines[0].startswith("sorted by the runs' mean epoch_s"), lines[0]
head = lines[1].split()
rows = [dict(zip(head, l.split())) for l in lines[2:]]
assert [(r["run"], r["epoch"]) for r in rows] == [("1", "1"), ("1", "2"), ("1", "3"), ("2", "0")], rows
assert all(not l.endswith(" ") for l in lines), "a line ends in spaces"
ok = [len(l) for l in lines[2:5]]
assert len(set(ok)) == 1 and ok[0] < 330, ok
reason = open(sys.argv[2]).read()
assert "run 2 (cuda:999): " in reason and len(reason) > 60, reason
base = ok[0] - len("ok")
status = "failed: " + reason.split("): ", 1)[1].strip()
assert len(lines[5]) == min(max(330, base + 40), base + len(status)) < base + len(status), lines[5]
assert lines[5].endswith("..."), lines[5]
EOPY
then
	echo "FAIL: the final table:"; cat "$tmp/py" "$tmp/table.out" "$tmp/table.err"; fail=1
fi
expect 1 "layer|spec" "$train" --data=synthetic:600 --device=cpu --model=fc:7,bogus --epochs=1 -q

# 7c. --device=auto where a GPU driver is there and CUDA fails to start
# (injected): the runs go on the cpu, and stderr says why, once for two runs.
PP_FAULTS=cuda_start:EIO "$train" --data=synthetic:600 --device=auto --model=mlp,mlp --epochs=1 -q --columns=all \
	>"$tmp/auto.out" 2>"$tmp/auto.err"
code=$?
if [ $code -ne 0 ] || [ "$(grep -c 'CUDA failed to start' "$tmp/auto.err")" -ne 1 ] ||
	[ "$(grep -c ' cpu ' "$tmp/auto.out")" -ne 2 ]; then
	echo "FAIL: auto with CUDA failing to start: exit $code, stderr:"; cat "$tmp/auto.err" "$tmp/auto.out"; fail=1
fi

# 7d. Outputs named otherwise than by the file's own path.  --csv and
# --jsonl on standard output's own file (/dev/fd/1, stdout redirected to a
# file) add their rows to what stdout writes there, in order: two opens
# wrote over each other from their own offsets, and the final sort renamed
# a file over the name /dev/fd/1.  A link given as --csv or --checkpoint
# stays a link to the file written, a resume through them included (the
# rename replaced the link), and the CSV keeps its mode.  A FIFO given as --checkpoint is refused
# before training (the rename replaced it with a file; as root, a device
# such as /dev/null too).
syn="--data=synthetic:500 --model=flatten,fc:10 --epochs=2"
"$train" $syn --no-progress --csv=/dev/fd/1 --jsonl=/dev/fd/1 >"$tmp/shared.out" 2>"$tmp/err" ||
	{ echo "FAIL: --csv=/dev/fd/1 --jsonl=/dev/fd/1 with stdout a file:"; cat "$tmp/err"; fail=1; }
python3 - "$tmp/shared.out" <<'EOPY' || { echo "FAIL: the rows on standard output's file:"; cat "$tmp/shared.out"; fail=1; }
import json, sys
lines = open(sys.argv[1]).read().splitlines()
at = lambda pred: [i for i, l in enumerate(lines) if pred(l)]
header = at(lambda l: l.startswith("run,epoch,"))
csv_rows = at(lambda l: l.startswith("1,"))
json_rows = at(lambda l: l.startswith("{"))
said = at(lambda l: l.startswith("run 1 epoch "))
assert header == [0], header
assert [lines[i].split(",")[1] for i in csv_rows] == ["1", "2"], lines
assert [json.loads(lines[i])["epoch"] for i in json_rows] == [1, 2], lines
# Each epoch: its rows in the files first, then the line on the terminal.
assert len(said) == 2 and csv_rows[0] < said[0] < csv_rows[1] < said[1], lines
assert json_rows[0] < said[0] < json_rows[1] < said[1], lines
table = at(lambda l: l.startswith("sorted by"))      # the final table, after every row
assert len(table) == 1 and max(csv_rows + json_rows + said) < table[0], lines
EOPY
mkdir "$tmp/links"
ln -s real.csv "$tmp/links/rows.csv"
ln -s real.ckpt "$tmp/links/latest.ckpt"
for epochs in 2 3; do
	resume=
	[ "$epochs" -eq 3 ] && resume=--resume
	"$train" $syn --epochs=$epochs $resume -q --csv="$tmp/links/rows.csv" \
		--checkpoint="$tmp/links/latest.ckpt" >/dev/null 2>"$tmp/err" ||
		{ echo "FAIL: --csv and --checkpoint through links ($epochs epochs):"; cat "$tmp/err"; fail=1; }
	[ -L "$tmp/links/rows.csv" ] && [ -L "$tmp/links/latest.ckpt" ] && [ -f "$tmp/links/real.ckpt" ] &&
		[ "$(grep -c '^1,' "$tmp/links/real.csv")" -eq "$epochs" ] ||
		{ echo "FAIL: after $epochs epochs, a link replaced, or not $epochs rows in the file it names:"
		  ls -l "$tmp/links"; cat "$tmp/links/real.csv"; fail=1; }
	# The CSV sorted and renamed into place keeps its mode (not mkstemp's 0600).
	[ "$epochs" -eq 3 ] && [ "$(stat -c %a "$tmp/links/real.csv")" != 640 ] &&
		{ echo "FAIL: the CSV's mode 640 not kept:"; ls -l "$tmp/links"; fail=1; }
	chmod 640 "$tmp/links/real.csv"
done
# A CSV of two names (a hard link): its rows, sorted at the end, in the one
# file both name (the sorted CSV was renamed over one of them, and the
# other kept the rows unsorted).
printf 'old\n' >"$tmp/links/two.csv"
ln "$tmp/links/two.csv" "$tmp/links/other-name.csv"
# --sort=-lr puts run 2 (the larger rate) first: the sort is seen.
"$train" $syn --lr=0.001,0.01 --sort=-lr -q --csv="$tmp/links/two.csv" \
	>/dev/null 2>"$tmp/err" || { echo "FAIL: a CSV of two names:"; cat "$tmp/err"; fail=1; }
[ "$(stat -c %h:%i "$tmp/links/two.csv")" = "$(stat -c %h:%i "$tmp/links/other-name.csv")" ] &&
	[ "$(stat -c %h "$tmp/links/two.csv")" -eq 2 ] &&
	[ "$(grep '^[12],' "$tmp/links/two.csv" | cut -d, -f1,2 | tr '\n' ' ')" = "2,1 2,2 1,1 1,2 " ] &&
	! grep -q '^old' "$tmp/links/two.csv" ||
	{ echo "FAIL: a CSV of two names: the link broken, or not its 4 rows:"; ls -li "$tmp/links";
	  cat "$tmp/links/two.csv"; fail=1; }
# A file mounted at --csv and --jsonl (a container's volume of one file):
# no rename can replace it (EBUSY), so the staged rows and the sorted CSV
# are written over it in place, said, and no staged file is left; they
# were lost, the run failed.  Needs a mount namespace of one's own where
# a file may be mounted.
mkdir "$tmp/mnt"
if command -v unshare >/dev/null && unshare -rm sh -c 'mount --bind "$1" "$1"' sh "$tmp/mnt" 2>/dev/null; then
	for f in at.csv at.jsonl vol.csv vol.jsonl; do printf 'old\n' >"$tmp/mnt/$f"; done
	unshare -rm sh -c 'mount --bind "$1/vol.csv" "$1/at.csv" && mount --bind "$1/vol.jsonl" "$1/at.jsonl" &&
		shift && exec "$@"' sh "$tmp/mnt" "$train" $syn --lr=0.001,0.01 \
		--sort=-lr -q --csv="$tmp/mnt/at.csv" --jsonl="$tmp/mnt/at.jsonl" >/dev/null 2>"$tmp/err" ||
		{ echo "FAIL: rows at a mounted file:"; cat "$tmp/err"; fail=1; }
	[ "$(grep -c 'cannot be renamed over it (Device or resource busy): its rows are written in place' \
		"$tmp/err")" -eq 2 ] &&
		[ "$(grep -c 'cannot be renamed over it (Device or resource busy): the sorted rows are written in place' \
		"$tmp/err")" -eq 1 ] &&
		[ "$(grep '^[12],' "$tmp/mnt/vol.csv" | cut -d, -f1,2 | tr '\n' ' ')" = "2,1 2,2 1,1 1,2 " ] &&
		[ "$(grep -c '"run"' "$tmp/mnt/vol.jsonl")" -eq 4 ] && ! grep -q '^old' "$tmp/mnt/vol.csv" &&
		[ "$(ls "$tmp/mnt")" = "$(printf 'at.csv\nat.jsonl\nvol.csv\nvol.jsonl')" ] ||
		{ echo "FAIL: rows at a mounted file: not said, not in it, or a staged file left:"
		  cat "$tmp/err"; ls -l "$tmp/mnt"; cat "$tmp/mnt/vol.csv"; fail=1; }
else
	echo "test_train: no mount namespace of our own (unshare -rm): rows at a mounted file not checked"
fi
# The CSV removed while the run goes on: the sorted rows make it again at
# the end (they were lost: the link's target was looked for and not found).
"$train" --data=synthetic:1800 --device=sim:bw=5MB/s --model=mlp --epochs=20 -q \
	--csv="$tmp/links/gone.csv" >/dev/null 2>"$tmp/err" &
job=$!
i=0
while ! grep -q '^1,1,' "$tmp/links/gone.csv" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
# Held while the file goes, so that it goes during the run (20 epochs
# last 6 s at least on this sim: its copies are paced).
kill -STOP $job
[ "$(cat "$tmp/links/gone.csv" 2>/dev/null | grep -c '^1,')" -lt 20 ] ||
	{ echo "FAIL: the CSV-removed case: the run ended before the file was removed"; fail=1; }
rm -f "$tmp/links/gone.csv"
kill -CONT $job
wait $job || { echo "FAIL: the CSV removed during the run:"; cat "$tmp/err"; fail=1; }
[ "$(cat "$tmp/links/gone.csv" 2>/dev/null | grep -c '^1,')" -eq 20 ] ||
	{ echo "FAIL: the CSV removed during the run: not made again with its 20 rows"; fail=1; }
# A link that leads nowhere yet: the folder checked is its target's.
ln -s nowhere/x.ckpt "$tmp/links/dangling.ckpt"
expect 2 "--checkpoint=$tmp/links/dangling.ckpt: .*directory $tmp/links/nowhere: No such file" \
	"$train" $syn --checkpoint="$tmp/links/dangling.ckpt"
mkfifo "$tmp/links/fifo"
expect 2 "--checkpoint=$tmp/links/fifo: not a regular file" "$train" $syn --checkpoint="$tmp/links/fifo"
[ -p "$tmp/links/fifo" ] || { echo "FAIL: --checkpoint=FIFO: the FIFO replaced"; fail=1; }
# Two outputs that are one file are refused before training (the sorted
# CSV was renamed over the checkpoint, rows written over rows), by any
# name, through a link too; so is a checkpoint on standard output's file
# (expect's stdout is a file), which its rename would take away.
cp "$tmp/links/real.ckpt" "$tmp/links/kept.ckpt"
expect 2 "--csv=$tmp/links/kept.ckpt and --checkpoint=$tmp/links/./kept.ckpt are one file" \
	"$train" $syn --csv="$tmp/links/kept.ckpt" --checkpoint="$tmp/links/./kept.ckpt"
cmp -s "$tmp/links/real.ckpt" "$tmp/links/kept.ckpt" || { echo "FAIL: the checkpoint changed"; fail=1; }
expect 2 "--csv=$tmp/links/rows.csv and --jsonl=$tmp/links/real.csv are one file" \
	"$train" $syn --csv="$tmp/links/rows.csv" --jsonl="$tmp/links/real.csv"
expect 2 "--jsonl=$tmp/links/new and --checkpoint=$tmp/links/../links/new are one file" \
	"$train" $syn --jsonl="$tmp/links/new" --checkpoint="$tmp/links/../links/new"
ln -s new "$tmp/links/to-new"
expect 2 "--jsonl=$tmp/links/to-new and --checkpoint=$tmp/links/new are one file" \
	"$train" $syn --jsonl="$tmp/links/to-new" --checkpoint="$tmp/links/new"
expect 2 "--checkpoint=/dev/fd/1: the file standard output or error writes" \
	"$train" $syn --checkpoint=/dev/fd/1
# Standard output that does not take what is printed (a full disk, a closed
# descriptor): said with its reason, exit 1 (it was 0 with the table lost);
# --help too.
for out in full closed help; do
	case $out in
	full) "$train" $syn -q >/dev/full 2>"$tmp/err"; rc=$? why="No space left on device" ;;
	closed) "$train" $syn -q >&- 2>"$tmp/err"; rc=$? why="Bad file descriptor" ;;
	help) "$train" --help >/dev/full 2>"$tmp/err"; rc=$? why= ;;     # its reason gone with stdio's buffer
	esac
	[ $rc -eq 1 ] && [ "$(grep -c "^pinpipe-train: standard output: cannot write: $why" "$tmp/err")" -eq 1 ] ||
		{ echo "FAIL: stdout $out: exit $rc, or the reason not said once:"; cat "$tmp/err"; fail=1; }
done

# 8. --stream, on shards packed here from the first 600 training and 200
# test samples of Fashion-MNIST, in chunks of 50 records, 3 shards a split.
pack=${PINPIPE_PACK:-./pinpipe-pack}
if [ -r "$fm/train-images-idx3-ubyte.gz" ] && [ -x "$pack" ]; then
	mkdir -p "$tmp/small" "$tmp/sh" "$tmp/noeval" "$tmp/part" "$tmp/bad" "$tmp/shape"
	# (and, in $tmp/small/odd-*, 200 test samples cut to 14 x 14)
	python3 - "$fm" "$tmp/small" <<'EOPY' || { echo "FAIL: could not cut the small dataset"; fail=1; }
import gzip, struct, sys
for name, src, n, side in (("train", "train", 600, 28), ("t10k", "t10k", 200, 28), ("odd-t10k", "t10k", 200, 14)):
    img = gzip.open(sys.argv[1] + "/%s-images-idx3-ubyte.gz" % src).read()
    lab = gzip.open(sys.argv[1] + "/%s-labels-idx1-ubyte.gz" % src).read()
    pix = b"".join(img[16 + i * 784 + r * 28:16 + i * 784 + r * 28 + side] for i in range(n) for r in range(side))
    open(sys.argv[2] + "/%s-images-idx3-ubyte" % name, "wb").write(struct.pack(">4I", 0x803, n, side, side) + pix)
    open(sys.argv[2] + "/%s-labels-idx1-ubyte" % name, "wb").write(struct.pack(">2I", 0x801, n) + lab[8:8 + n])
EOPY
	"$pack" -q -c 50 -n 3 -o "$tmp/sh/small" "$tmp/small" 2>"$tmp/err" &&
	"$pack" -q -c 50 -o "$tmp/shape/odd" "$tmp/small/odd-t10k-images-idx3-ubyte" \
		"$tmp/small/odd-t10k-labels-idx1-ubyte" 2>>"$tmp/err" || { echo "FAIL: pinpipe-pack:"; cat "$tmp/err"; fail=1; }
	small="--data=$tmp/sh --model=mlp --batch-size=50 --epochs=2 --seed=3 -q"

	# Unshuffled, a streamed run sees the samples in the same order as an
	# in-memory run of the same shards: the same losses and accuracies.
	# Shuffled, the same seed gives the same results for 0, 1 and 3
	# workers, on cpu and on sim (through the transfer stage), and twice;
	# and not those of the unshuffled run, or shuffling did nothing.
	"$train" $small --device=cpu --no-shuffle --csv="$tmp/mem.csv" >/dev/null 2>"$tmp/err" &&
	"$train" $small --device=cpu,sim --no-shuffle --stream=2 --memory-budget=64 \
		--csv="$tmp/str.csv" >/dev/null 2>>"$tmp/err" &&
	"$train" $small --device=cpu,sim --workers=0,1,3 --stream=2 --csv="$tmp/shuf.csv" >/dev/null 2>>"$tmp/err" &&
	"$train" $small --device=cpu --workers=1 --stream=2 --csv="$tmp/shuf2.csv" >/dev/null 2>>"$tmp/err" ||
		{ echo "FAIL: streamed runs:"; cat "$tmp/err"; fail=1; }
	CHECK='
res = lambda rs, e: set((r["train_loss"], r["train_acc"], r["test_loss"], r["test_acc"]) for r in rs if r["epoch"] == e)
mem = list(csv.DictReader(open(sys.argv[2])))
shuf = list(csv.DictReader(open(sys.argv[3])))
shuf2 = list(csv.DictReader(open(sys.argv[4])))
assert len(rows) == 4 and len(mem) == 2 and len(shuf) == 12 and len(shuf2) == 2, (rows, mem, shuf, shuf2)
assert all(r["status"] == "ok" for r in rows + mem + shuf + shuf2), rows + mem + shuf + shuf2
for e in ("1", "2"):
    assert len(res(mem, e)) == 1 and res(rows, e) == res(mem, e), (res(rows, e), res(mem, e))
    assert len(res(shuf, e)) == 1 and res(shuf2, e) == res(shuf, e), (res(shuf, e), res(shuf2, e))
    assert res(shuf, e) != res(mem, e), "shuffled like unshuffled"
assert f(shuf[0], "test_acc") > 0.5, shuf
sim = [r for r in rows + shuf if r["device"] == "sim"]
assert len(sim) == 8 and all(f(r, "copy_s") > 0 and r["hidden_pct"] != "" for r in sim), sim
'
	check str "$tmp/mem.csv" "$tmp/shuf.csv" "$tmp/shuf2.csv"

	# Version 2 shards of the same samples (records of the built-in "raw"
	# decoder) train to the same figures as version 1's, streamed through
	# the loader; without --stream they are refused, pointing at it.
	mkdir -p "$tmp/sh2"
	"$pack" -q -c 50 -n 3 --shard-version=2 -o "$tmp/sh2/small" "$tmp/small" 2>"$tmp/err" &&
	"$train" $small --data="$tmp/sh2" --device=cpu --workers=1 --stream=2 --csv="$tmp/v2.csv" \
		>/dev/null 2>>"$tmp/err" || { echo "FAIL: version 2 shards:"; cat "$tmp/err"; fail=1; }
	CHECK='
res = lambda rs: [(r["train_loss"], r["train_acc"], r["test_loss"], r["test_acc"]) for r in rs]
v1 = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), rows
assert res(rows) == res(v1), (res(rows), res(v1))
'
	check v2 "$tmp/shuf2.csv"
	if "$train" $small --data="$tmp/sh2" --device=cpu >/dev/null 2>"$tmp/err" ||
	   ! grep -q -- "--stream" "$tmp/err"; then
		echo "FAIL: version 2 shards in memory were not refused with a pointer to --stream:"
		cat "$tmp/err"; fail=1
	fi

	# Resume, streamed and shuffled: 3 epochs straight against a run
	# stopped after step 17 (in epoch 2, of 12 steps each) and resumed from
	# its checkpoint; the loader's position must be the same, so the final
	# checkpoints are identical.
	"$train" $small --device=cpu --stream=2 --epochs=3 --checkpoint="$tmp/sa.ckpt" \
		--csv="$tmp/sa.csv" >/dev/null 2>"$tmp/err" &&
	"$train" $small --device=cpu --stream=2 --epochs=3 --max-steps=17 --checkpoint="$tmp/sb.ckpt" \
		>/dev/null 2>>"$tmp/err" &&
	"$train" $small --device=cpu --stream=2 --epochs=3 --checkpoint="$tmp/sb.ckpt" --resume \
		--csv="$tmp/sb.csv" >/dev/null 2>>"$tmp/err" ||
		{ echo "FAIL: streamed resume runs:"; cat "$tmp/err"; fail=1; }
	cmp -s "$tmp/sa.ckpt" "$tmp/sb.ckpt" || { echo "FAIL: the resumed streamed checkpoint differs"; fail=1; }
	CHECK='
a = list(csv.DictReader(open(sys.argv[2])))
last = lambda rs: [(r["train_loss"], r["test_loss"], r["test_acc"]) for r in rs if r["epoch"] == "3"]
assert sorted(r["epoch"] for r in rows) == ["2", "3"], rows
assert len(last(a)) == 1 and last(rows) == last(a), (last(rows), last(a))
'
	check sb "$tmp/sa.csv"

	# Errors: no shards (IDX files, synthetic), no test shards, part of a
	# set, a truncated shard, test samples of another shape (streamed and in
	# memory), --val-split, bad windows, a budget too small.
	cp "$tmp"/sh/*train* "$tmp/noeval/"
	cp "$tmp"/sh/*train* "$tmp/shape/"
	cp "$tmp"/sh/*train-00000* "$tmp"/sh/*train-00001* "$tmp"/sh/*test* "$tmp/part/"
	cp "$tmp"/sh/* "$tmp/bad/"
	bad=$(ls "$tmp"/bad/*train-00001*)
	head -c 5000 "$tmp"/sh/*train-00001* >"$bad"
	expect 1 "$fm has no train shards.*pinpipe-pack" "$train" --data="$fm" --stream
	expect 1 "no such directory" "$train" --data="$tmp/none" --stream
	# A shard given as the directory: said as a file, loaded or streamed.
	expect 1 "--stream: $bad: a file, not a directory: give the directory that holds the shards" \
		"$train" --data="$bad" --stream
	expect 1 "$bad: a file, not a directory: give the directory" "$train" --data="$bad"
	expect 2 "--stream reads pinpipe shards.*synthetic" "$train" --data=synthetic:600 --stream
	expect 1 "$tmp/noeval has no test shards.*--no-eval" "$train" --data="$tmp/noeval" --stream
	expect 0 "train_loss" "$train" --data="$tmp/noeval" --stream --no-eval --model=mlp --epochs=1 -q
	expect 1 "$tmp/part: 2 train shards of a set of 3 .*expected 3" "$train" --data="$tmp/part" --stream
	expect 1 "$bad" "$train" --data="$tmp/bad" --stream
	expect 1 "$tmp/shape: the test split's samples \(u8, 3 dimensions, 196 bytes.*not shaped as" \
		"$train" --data="$tmp/shape" --stream
	expect 1 "$tmp/shape: the test split's samples \(u8, 3 dimensions, 196 bytes.*not shaped as" \
		"$train" --data="$tmp/shape"
	expect 2 "--stream and --val-split" "$train" --data="$tmp/sh" --stream --val-split=100
	expect 2 "--stream=0: not a window" "$train" --data="$tmp/sh" --stream=0
	expect 2 "--memory-budget=0: not a size" "$train" --data="$tmp/sh" --memory-budget=0
	# Windows of 12 chunks (all of them) do not fit in 1 MiB, windows of 2
	# do: the window and the budget reach the loader, which streams.
	expect 1 "memory budget of 1048576 bytes exceeded.*chunk windows" \
		"$train" $small --device=cpu --stream=12 --memory-budget=1
	expect 0 "train_loss" "$train" $small --device=cpu --stream=2 --memory-budget=1
	# A FIFO in place of a shard (or of the checkpoint) is refused at once,
	# not waited on for ever: timeout's 124 is a hang.
	mkdir "$tmp/fifo"
	cp "$tmp"/sh/*test* "$tmp/fifo/"
	mkfifo "$tmp/fifo/x-train-00000-of-00001.pps" "$tmp/fifo.ckpt"
	expect 1 "x-train-00000-of-00001.pps: a FIFO, expected a regular file" \
		timeout 60 "$train" --data="$tmp/fifo" --epochs=1
	expect 1 "x-train-00000-of-00001.pps: a FIFO, expected a regular file" \
		timeout 60 "$train" --data="$tmp/fifo" --stream --epochs=1
	expect 2 "fifo.ckpt: not a regular file" \
		timeout 60 "$train" $small --checkpoint="$tmp/fifo.ckpt" --resume
else
	echo "FAIL: --stream not tested: Fashion-MNIST not installed in $fm, or $pack not built"
	fail=1
fi

exit $fail
