#!/bin/sh
# tests/test_train_table.sh: pinpipe-train's final table and the names of
# its devices, from the outside.  Fails if the table of a run on the cpu,
# or of README's grid on the cpu, is wider than 100 columns ($COLUMNS, and
# the width when stdout is no terminal and $COLUMNS is unset); if it shows
# a column that no row has a figure in (the copies, the validation, the
# allreduce of one process) or not the grid's axes; if it does not say the
# parameters every row shares on the line above it; if --columns=all is
# not every column or --columns=LIST not those; if the CSV loses a column;
# if a run of --device=auto is named "auto" anywhere (rows, errors,
# --logdir folders) rather than the device it opened; or if a sim's
# options are dropped from its rows or make a --logdir folder of several
# levels.  Exit 77 only when pinpipe-train was not built.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
[ -x "$train" ] || { echo "test_train_table: $train not built, skipped"; exit 77; }
command -v python3 >/dev/null || { echo "test_train_table: python3 missing (./bootstrap installs it)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-table-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
. "$(dirname "$0")/testlib.sh"

small="--data=synthetic:1200 --epochs=2 -q"
all="run epoch train_loss train_acc val_loss val_acc test_loss test_acc epoch_s run_s samples_per_s
wait_s copy_s exposed_s copy_host_s hidden_pct allreduce_s device batch_size ranks global_batch
workers pin_memory lr model optimizer threads blas status"

# check_table FILE WIDTH [AXIS...]: the table in FILE fits WIDTH, shows no empty
# column, has each AXIS as a column and the shared parameters above it.
check_table() {
	python3 - "$@" >"$tmp/py" 2>&1 <<'EOPY' || { echo "FAIL: the table in $1:"; cat "$tmp/py" "$1"; fail=1; }
import sys
path, width, axes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lines = open(path).read().split("\n")[:-1]
assert lines[0].startswith("sorted by"), lines
wide = [l for l in lines if len(l) > width]
assert not wide, "wider than %d: %r" % (width, wide)
assert all(not l.endswith(" ") for l in lines), "a line ends in spaces"
head = next(i for i, l in enumerate(lines) if l.startswith(("run  ", "epoch  ")))
above = " ".join(lines[1:head])
cols = lines[head].split()
for empty in ("copy_s", "exposed_s", "copy_host_s", "hidden_pct", "allreduce_s", "val_loss",
              "val_acc", "ranks", "global_batch"):
    assert empty not in cols and empty not in above, (empty, lines)
for axis in axes:
    assert axis in cols and axis + "=" not in above, (axis, lines)
assert "device=cpu" in above and "status=ok" in above, above
assert "test_acc" in cols and "epoch_s" in cols, cols
EOPY
}

# 1. A run on the cpu: within 100 columns whether $COLUMNS says so or stdout is no terminal.
COLUMNS=100 "$train" $small --device=cpu >"$tmp/one" 2>"$tmp/err" ||
	{ echo "FAIL: a run on the cpu:"; cat "$tmp/err"; fail=1; }
check_table "$tmp/one" 100 epoch
(unset COLUMNS; "$train" $small --device=cpu --model=mlp >"$tmp/plain" 2>"$tmp/err") ||
	{ echo "FAIL: a run on the cpu, COLUMNS unset:"; cat "$tmp/err"; fail=1; }
check_table "$tmp/plain" 100 epoch
# README's grid, on the cpu: its three axes are columns, and it fits.
COLUMNS=100 "$train" --data=synthetic:1200 --epochs=1 -q --device=cpu --model=mlp,cnn \
	--batch-size=100,1000 --pin-memory=on,off --csv="$tmp/grid.csv" >"$tmp/grid" 2>"$tmp/err" ||
	{ echo "FAIL: README's grid:"; cat "$tmp/err"; fail=1; }
check_table "$tmp/grid" 100 run model batch_size pin_memory
# The CSV keeps every column.
[ "$(head -1 "$tmp/grid.csv")" = "$(echo $all | tr ' ' ',')" ] ||
	{ echo "FAIL: the CSV's columns: $(head -1 "$tmp/grid.csv")"; fail=1; }

# 2. --columns=all: every column, as before; --columns=LIST: those, in its order.
COLUMNS=100 "$train" $small --device=cpu --model=mlp --columns=all >"$tmp/all" 2>&1
[ "$(sed -n 2p "$tmp/all" | tr -s ' ')" = "$(echo $all)" ] ||
	{ echo "FAIL: --columns=all:"; cat "$tmp/all"; fail=1; }
"$train" $small --device=cpu --model=mlp --columns=test_acc,epoch >"$tmp/list" 2>&1
[ "$(sed -n 2p "$tmp/list")" = "test_acc  epoch" ] && [ "$(wc -l <"$tmp/list")" -eq 4 ] ||
	{ echo "FAIL: --columns=test_acc,epoch:"; cat "$tmp/list"; fail=1; }
expect 2 "--columns=epoch,speed: 'speed' is not a column" "$train" $small --columns=epoch,speed

# 3. The device a run opened names it everywhere: rows, errors, --logdir folders.
"$train" --data=synthetic:1200 --epochs=1 -q --model=mlp --device=auto --jsonl="$tmp/auto.jsonl" \
	--logdir="$tmp/runs" >"$tmp/out" 2>"$tmp/err" || { echo "FAIL: --device=auto:"; cat "$tmp/err"; fail=1; }
dev=$(sed -n 's/.*"device":"\([^"]*\)".*/\1/p' "$tmp/auto.jsonl")
case $dev in
cpu|cuda:*) ;;
*) echo "FAIL: --device=auto's row says device '$dev'"; fail=1 ;;
esac
ls "$tmp/runs" | grep -q "^run1-device=$(echo "$dev" | tr : _)-bs=100-" ||
	{ echo "FAIL: the --logdir folder of $dev:"; ls "$tmp/runs"; fail=1; }
grep -q "device=$dev " "$tmp/out" || { echo "FAIL: the table does not say device=$dev:"; cat "$tmp/out"; fail=1; }
# A run that fails once its device is open: the error and the row name it too.
expect 1 "run 1 \($dev\): loader: memory budget" "$train" --data=synthetic:1200 --epochs=1 -q \
	--model=mlp --device=auto --memory-budget=1 --batch-size=100000 --jsonl="$tmp/fail.jsonl"
grep -q "\"device\":\"$dev\"" "$tmp/fail.jsonl" ||
	{ echo "FAIL: the failed row's device:"; cat "$tmp/fail.jsonl"; fail=1; }
# A sim keeps its options: in the table, and in one --logdir folder of its own.
"$train" --data=synthetic:1200 --epochs=1 -q --model=mlp --device=sim:bw=25GB/s,call_us=20 \
	--logdir="$tmp/simruns" >"$tmp/sim" 2>"$tmp/err" || { echo "FAIL: the sim:"; cat "$tmp/err"; fail=1; }
grep -q "device=sim:bw=25GB/s,call_us=20 " "$tmp/sim" ||
	{ echo "FAIL: the sim's options are not in its table:"; cat "$tmp/sim"; fail=1; }
[ -d "$tmp/simruns/run1-device=sim_bw=25GB_s_call_us=20-bs=100-workers=1-pin=on-lr=0.01-model=mlp-opt=adam" ] ||
	{ echo "FAIL: the sim's --logdir folder:"; find "$tmp/simruns"; fail=1; }
exit $fail
