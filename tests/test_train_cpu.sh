#!/bin/sh
# tests/test_train_cpu.sh: the CPU path of pinpipe-train and pinpipe-bench
# from the outside.  Fails if a run started with OPENBLAS_CORETYPE=Prescott
# on a processor with AVX2 or AVX-512 does not warn exactly once (two runs
# on the CPU) with the OPENBLAS_CORETYPE that fixes it, or does not record
# "OpenBLAS Prescott" in its JSON lines; if pinpipe-bench does not warn
# once; if Haswell's kernels (the user's choice) warn; if --threads=1,2,3
# does not give three runs of those thread counts with bit-identical
# losses and accuracies; or if auto does not give the threads that pay for
# the batch on the cores this process may run on (pp_model_cpu_threads():
# chunks of 4 samples at least, 128 at most, in the fewest rounds), with
# OMP_NUM_THREADS=1 and OMP_THREAD_LIMIT=1 set, which the tool does not
# read (README.md; nproc(1) would count 1 core).  The checks of the
# warning are skipped, saying so, where the processor has neither AVX2 nor
# AVX-512 or OpenBLAS does not read OPENBLAS_CORETYPE; exit 77 only when
# the tools were not built.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
bench=./pinpipe-bench
[ -x "$train" ] && [ -x "$bench" ] || { echo "test_train_cpu: tools not built, skipped"; exit 77; }
command -v python3 >/dev/null || { echo "test_train_cpu: python3 missing (./bootstrap installs it)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-cpu-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
. "$(dirname "$0")/testlib.sh"
small="--data=synthetic:1200 --epochs=1 -q"

# 1. The warning: once for a grid of two CPU runs, with the fix; the core in the rows.
OPENBLAS_CORETYPE=Prescott "$train" $small --model=mlp --device=cpu,sim --jsonl="$tmp/p.jsonl" \
	>/dev/null 2>"$tmp/err" || { echo "FAIL: run with Prescott:"; cat "$tmp/err"; fail=1; }
if ! grep -q '"blas":"OpenBLAS Prescott"' "$tmp/p.jsonl"; then
	echo "test_train_cpu: OpenBLAS does not run Prescott's kernels when told to" \
		"($(grep -o '"blas":"[^"]*"' "$tmp/p.jsonl" | head -1)): warning not checked"
elif grep -Eq '^flags.* avx2( |$)' /proc/cpuinfo && grep -Eq '^flags.* fma( |$)' /proc/cpuinfo; then
	[ "$(grep -c 'warning: OpenBLAS runs its Prescott kernels' "$tmp/err")" -eq 1 ] &&
		grep -Eq 'OPENBLAS_CORETYPE=(SkylakeX|Haswell)' "$tmp/err" ||
		{ echo "FAIL: not one warning with the fix for Prescott:"; cat "$tmp/err"; fail=1; }
	OPENBLAS_CORETYPE=Prescott "$bench" bandwidth --device=sim --sizes=4K --total=64K \
		>/dev/null 2>"$tmp/err" || { echo "FAIL: pinpipe-bench with Prescott:"; cat "$tmp/err"; fail=1; }
	[ "$(grep -c '^pinpipe-bench: warning: OpenBLAS runs its Prescott kernels' "$tmp/err")" -eq 1 ] ||
		{ echo "FAIL: pinpipe-bench did not warn once:"; cat "$tmp/err"; fail=1; }
	OPENBLAS_CORETYPE=Haswell "$train" $small --model=mlp --device=cpu --jsonl="$tmp/h.jsonl" \
		>/dev/null 2>"$tmp/err" || { echo "FAIL: run with Haswell:"; cat "$tmp/err"; fail=1; }
	grep -q '"blas":"OpenBLAS Haswell"' "$tmp/h.jsonl" && ! grep -q 'warning: OpenBLAS' "$tmp/err" ||
		{ echo "FAIL: Haswell's kernels, chosen, warned or were not recorded:"; cat "$tmp/err"; fail=1; }
else
	echo "test_train_cpu: no AVX2 here: Prescott's kernels are right, no warning expected"
	grep -q 'warning: OpenBLAS' "$tmp/err" && { echo "FAIL: warned without AVX2:"; cat "$tmp/err"; fail=1; }
fi

# 2. --threads as an axis: the same results at every count; auto from the
# batch and the cores (testlib.sh), whatever OpenMP's variables say.
OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1 "$train" $small --device=cpu --model=cnn \
	--threads=1,2,3,auto --batch-size=100,37 --csv="$tmp/t.csv" >/dev/null 2>"$tmp/err" ||
	{ echo "FAIL: thread grid:"; cat "$tmp/err"; fail=1; }
if ! python3 - "$tmp/t.csv" "$(cores)" >"$tmp/py" 2>&1 <<'EOPY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cores = int(sys.argv[2])
assert len(rows) == 8, rows
def auto(batch):
    chunks = min(max(batch // 4, 1), 128)
    rounds = -(-chunks // cores)
    return -(-chunks // rounds)
for batch in ("100", "37"):
    r = [x for x in rows if x["batch_size"] == batch]
    assert sorted(int(x["threads"]) for x in r) == sorted([1, 2, 3, auto(int(batch))]), r
    for key in ("train_loss", "train_acc", "test_loss", "test_acc"):
        assert len(set(x[key] for x in r)) == 1, (key, r)
EOPY
then
	echo "FAIL: thread grid rows:"; cat "$tmp/py"; fail=1
fi

# 3. The default ring grows with the workers (2 x 8 + 2 slots for 8), where a fixed
# 4 left all but 4 workers waiting: a budget that holds a ring of 4 refuses it,
# and holds the default of one worker.
"$train" $small --model=mlp --device=cpu --workers=8 --memory-budget=1 >/dev/null 2>"$tmp/err" &&
	{ echo "FAIL: 8 workers' default ring fit a 1 MiB budget (a ring of 4?)"; fail=1; }
grep -q 'for the ring of slots' "$tmp/err" ||
	{ echo "FAIL: 8 workers in 1 MiB: not the ring refused:"; cat "$tmp/err"; fail=1; }
for more in "--workers=8 --prefetch=4" "--workers=1"; do
	# shellcheck disable=SC2086
	"$train" $small --model=mlp --device=cpu $more --memory-budget=1 >/dev/null 2>"$tmp/err" ||
		{ echo "FAIL: $more in 1 MiB:"; cat "$tmp/err"; fail=1; }
done
exit $fail
