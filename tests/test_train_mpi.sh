#!/bin/sh
# tests/test_train_mpi.sh: pinpipe-train on several ranks (mpirun -np N)
# against one process with the same global batch, on synthetic data on the
# cpu (1200 training samples, 200 test samples; 20 steps of 60 samples are
# one whole epoch):
#
#  1. SGD, 20 steps: the parameters of 2 and 3 ranks within 1e-5 of one
#     process's, relative to each parameter (or to 1e-3 for smaller ones);
#     the gradient averaged in buckets of a layer each (the default), in
#     two and in one bucket: on 2 ranks the same bits.
#  2. --deterministic, 20 steps: the checkpoints of 1, 2 and 3 ranks equal
#     byte for byte (parameters, optimizer state, step count, plan key):
#     every sample of the epoch trained on once, in the same micro-batch;
#     a grid of batch sizes takes each run's own default micro-batches.
# Also: --comm=local under mpirun with several ranks is refused.
#  3. The test split, 200 samples over 3 ranks (padded to 201): the same
#     accuracy as one process, which counts each sample once.
#  4. Resume at another N: 10 steps on 2 ranks, then to 20 on 3 ranks,
#     equals 20 steps of one process byte for byte; a checkpoint of
#     another global batch is refused, and with --drop-last one of another
#     number of ranks that do not divide the samples.
#  5. A failing rank ends the job with exit 1 and its reason: a collective
#     failing on rank 1 (PP_FAULTS=comm:EIO), a rank that stalls (rank 0
#     times out after --comm-timeout=10 and says so), bad data on rank 1,
#     the final barrier failing on rank 1; ranks whose data or checkpoint
#     differ from rank 0's; the agreement before a grid's
#     second run failing on rank 0 after Ctrl-C came while its first run
#     ended (that run's row still on the terminal).
#  6. Ctrl-C on mpirun: every rank stops at the same step, rank 0 alone
#     says which, and writes the rows so far (the last one "interrupted"
#     when the stop fell inside an epoch) and the checkpoint of that step.
# Skipped (77) where mpirun is absent or the build has no MPI.  Under
# AddressSanitizer the ranks run without the leak check: Open MPI's
# components, unloaded at exit, leave allocations that LeakSanitizer can no
# longer name, so no suppression reaches them (test_train.sh checks
# pinpipe-train's own leaks in one process).  Under ThreadSanitizer, reports
# whose stacks run through Open MPI are left out (tests/tsan_mpi.supp).
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
[ -x "$train" ] || { echo "test_train_mpi: $train not built, skipped"; exit 77; }
command -v mpirun >/dev/null || { echo "test_train_mpi: no mpirun (./bootstrap installs Open MPI), skipped"; exit 77; }
command -v python3 >/dev/null || { echo "test_train_mpi: python3 missing (./bootstrap installs it)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-mpi-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
. "$(dirname "$0")/testlib.sh"

mpi_env
# A hang fails the test (timeout's status 124) instead of stalling it.
mpi="timeout 300 $mpirun"

"$train" --comm=mpi --data=synthetic:60 --epochs=1 --max-steps=1 --no-eval -q >"$tmp/probe" 2>&1
if grep -q "this build has no MPI" "$tmp/probe"; then
	echo "test_train_mpi: the build has no MPI (configure --with-mpi), skipped"
	exit 77
fi

# --comm=local under mpirun with several ranks: refused (each would train alone).
expect 1 "comm=local: started by an MPI launcher with several ranks" \
	$mpi -np 2 "$train" --comm=local --data=synthetic:60 --epochs=1 --no-eval -q

# --comm=nccl needs a GPU: a run on the cpu fails, saying so.
expect 1 "comm nccl: needs a cuda device \(got cpu\)" \
	"$train" --comm=nccl --device=cpu --data=synthetic:60 --epochs=1 --no-eval -q

common="--data=synthetic:1200 --device=cpu --epochs=1 --max-steps=20 -t 1 -w 0 --no-progress"

# params A B: checks that checkpoints A and B hold 20 steps' parameters within 1e-5.
params() {
	python3 - "$1" "$2" <<'EOPY' || fail=1
import struct, sys
def load(path):
    b = open(path, "rb").read()
    s = struct.unpack_from("<I", b, 12)[0]
    n, steps = struct.unpack_from("<QQ", b, 32)
    return struct.unpack_from("<%df" % n, b, 92 + s), steps
(a, sa), (b, sb) = load(sys.argv[1]), load(sys.argv[2])
if sa != 20 or sb != 20:
    sys.exit("FAIL: %s: %d steps, %s: %d, expected 20" % (sys.argv[1], sa, sys.argv[2], sb))
worst = max(abs(x - y) / max(abs(x), 1e-3) for x, y in zip(a, b))
if worst > 1e-5:
    sys.exit("FAIL: %s and %s differ by %g relative (at most 1e-5)" % (sys.argv[1], sys.argv[2], worst))
print("test_train_mpi: %s against %s: %.3g relative" % (sys.argv[2], sys.argv[1], worst))
EOPY
}

# 1. Averaged gradients: N ranks as one process, to float tolerance, bucket by bucket.
sgd="$common --optimizer=sgd --lr=0.05 --no-eval -q"
expect 0 "" "$train" $sgd --batch-size=60 --checkpoint="$tmp/s1.ckpt"
expect 0 "" $mpi -np 2 "$train" $sgd --batch-size=30 --checkpoint="$tmp/s2.ckpt"
expect 0 "" $mpi -np 3 "$train" $sgd --batch-size=20 --checkpoint="$tmp/s3.ckpt"
params "$tmp/s1.ckpt" "$tmp/s2.ckpt"
params "$tmp/s1.ckpt" "$tmp/s3.ckpt"
# Buckets: a layer each (the default: 5 allreduces in flight a step), two
# (64 KiB: the linear layers, then the convolutions) and all in one give
# the same bits on 2 ranks (the mean of two is the same in either order),
# so a bucket reduced at the wrong place or not waited for would show.
expect 0 "" $mpi -np 2 "$train" $sgd --batch-size=30 --bucket-kb=64 --checkpoint="$tmp/b64.ckpt"
expect 0 "" $mpi -np 2 "$train" $sgd --batch-size=30 --bucket-kb=1000000 --checkpoint="$tmp/b1000000.ckpt"
for b in 64 1000000; do
	cmp -s "$tmp/s2.ckpt" "$tmp/b$b.ckpt" ||
		{ echo "FAIL: 2 ranks with --bucket-kb=$b: the parameters differ from a bucket a layer's"; fail=1; }
done
expect 0 "" $mpi -np 3 "$train" $(echo "$sgd" | sed 's/-t 1/-t 2/') --batch-size=20 --bucket-kb=0 \
	--checkpoint="$tmp/b3.ckpt"
params "$tmp/s1.ckpt" "$tmp/b3.ckpt"

# 2, 3. --deterministic: bit for bit, and the test split counted once.
det="$common --deterministic"
for n in 1 2 3; do
	expect 0 "" $mpi -np $n "$train" $det --batch-size=$((60 / n)) --checkpoint="$tmp/d$n.ckpt" \
		--jsonl="$tmp/d$n.jsonl"
done
for n in 2 3; do
	cmp -s "$tmp/d1.ckpt" "$tmp/d$n.ckpt" ||
		{ echo "FAIL: --deterministic: $n ranks' checkpoint differs from one process's"; fail=1; }
	python3 - "$tmp/d1.jsonl" "$tmp/d$n.jsonl" <<'EOPY' || fail=1
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
if a["test_acc"] != b["test_acc"]:
    sys.exit("FAIL: test accuracy %r on one process, %r on the ranks of %s" %
             (a["test_acc"], b["test_acc"], sys.argv[2]))
# The loss too: a padded sample counted twice would move it far more than the sum's order.
if abs(a["test_loss"] - b["test_loss"]) > 1e-6 * abs(a["test_loss"]):
    sys.exit("FAIL: test loss %r on one process, %r on the ranks of %s (1e-6 relative)" %
             (a["test_loss"], b["test_loss"], sys.argv[2]))
EOPY
done

# A grid of batch sizes: each run's default micro-batch count is its own
# (gcd(global batch, 12): 12 for 120 samples, 4 for 100), so the second
# run neither fails nor differs from a single run of its batch size.
grid="$common --deterministic --max-steps=4 -q"
expect 0 "" $mpi -np 2 "$train" $grid --batch-size=60,50 --jsonl="$tmp/g2.jsonl"
expect 0 "" "$train" $grid --batch-size=100 --jsonl="$tmp/g1.jsonl"
python3 - "$tmp/g2.jsonl" "$tmp/g1.jsonl" <<'EOPY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one = json.loads(open(sys.argv[2]).readline())
keys = ("train_loss", "train_acc", "test_loss", "test_acc")
if len(rows) != 2 or [rows[1][k] for k in keys] != [one[k] for k in keys]:
    sys.exit("FAIL: --deterministic grid --batch-size=60,50 on 2 ranks: run 2 %r, one process "
             "of 100 samples %r" % ([r[k] for r in rows[1:] for k in keys], [one[k] for k in keys]))
EOPY

# Micro-batches that do not divide the global batch: refused, saying why.
expect 1 "global batch of 60 samples in 7 micro-batches: the micro-batches must divide" \
	"$train" $common --deterministic --micro-batches=7 --batch-size=60 --no-eval -q

# 4. Resume at another N with the same global batch; another global batch refused.
det="$common --deterministic --no-eval -q"
expect 0 "" $mpi -np 2 "$train" $det --batch-size=30 --max-steps=10 --checkpoint="$tmp/r.ckpt"
expect 0 "" $mpi -np 3 "$train" $det --batch-size=20 --checkpoint="$tmp/r.ckpt" --resume
cmp -s "$tmp/d1.ckpt" "$tmp/r.ckpt" ||
	{ echo "FAIL: 10 steps on 2 ranks resumed to 20 on 3 differ from 20 on one process"; fail=1; }
expect 1 "was written by a run whose training data came in another order" \
	$mpi -np 2 "$train" $det --batch-size=20 --checkpoint="$tmp/r.ckpt" --resume --max-steps=30

# --drop-last with ranks that do not divide the 1201 training samples: the
# plan depends on their number, so a resume at another number is refused,
# and one at the same number accepted.
dl="--data=synthetic:1201 --device=cpu --epochs=1 -t 1 -w 0 --no-progress --no-eval -q --drop-last"
expect 0 "" $mpi -np 2 "$train" $dl --batch-size=30 --max-steps=10 --checkpoint="$tmp/dl.ckpt"
cp "$tmp/dl.ckpt" "$tmp/dl2.ckpt"
expect 1 "came in another order .*the number of ranks" \
	$mpi -np 3 "$train" $dl --batch-size=20 --checkpoint="$tmp/dl.ckpt" --resume
expect 0 "" $mpi -np 2 "$train" $dl --batch-size=30 --checkpoint="$tmp/dl2.ckpt" --resume

# 5. A failing rank: exit 1 and its reason, never a hang (timeout(1) guards the test).
# --comm-timeout bounds every collective of a job (making the
# communicator, the check of the options, each step).  Where the failing
# rank ends the job itself: the default (300 s), which no rank waits out.
# For the stall: 10 s, far more than the ranks of a loaded host fall behind
# one another before the fault (at 1 s, a rank a second behind ended the
# job first), and the stall's twice that well within timeout(1).
job="$common --batch-size=30 --no-eval -q"
expect 1 "comm mpi: rank 1 of 2: i?allreduce: Input/output error \(injected fault\)" \
	timeout 120 $mpirun -np 1 "$train" $job : -np 1 env PP_FAULTS=comm:EIO:after=7 "$train" $job
expect 1 "comm mpi: rank 0 of 2: i?allreduce: .*not done within the timeout of 10 s" \
	timeout 120 $mpirun -np 1 "$train" $job --comm-timeout=10 \
	: -np 1 env PP_FAULTS=comm:stall:after=7 "$train" $job --comm-timeout=10
expect 1 "$tmp/none: no such directory" \
	timeout 120 $mpirun -np 1 "$train" $job : -np 1 "$train" $job --data="$tmp/none"
# Ranks that do not hold the same: data of another size (MPI_ERR_TRUNCATE,
# no reason), a stale copy of the checkpoint (the ranks' optimizer states
# drifted apart, exit 0): refused before training, the rank saying what.
expect 1 "rank 1 of 2: its training samples are 2400, but rank 0's is 1200" \
	timeout 120 $mpirun -np 1 "$train" $job : -np 1 "$train" $job --data=synthetic:2400
expect 0 "" $mpi -np 2 "$train" $job --max-steps=4 --checkpoint="$tmp/s1.ckpt"
expect 0 "" $mpi -np 2 "$train" $job --max-steps=4 --lr=0.02 --checkpoint="$tmp/s2.ckpt"
cp "$tmp/s1.ckpt" "$tmp/s1-copy.ckpt"
expect 1 "rank 1 of 2: its checkpoint's CRC-32 is [0-9]+, but rank 0's is [0-9]+" \
	timeout 120 $mpirun -np 1 "$train" $job --checkpoint="$tmp/s1.ckpt" --resume \
	: -np 1 "$train" $job --checkpoint="$tmp/s2.ckpt" --resume
expect 0 "" timeout 120 $mpirun -np 1 "$train" $job --checkpoint="$tmp/s1.ckpt" --resume \
	: -np 1 "$train" $job --checkpoint="$tmp/s1-copy.ckpt" --resume
# A checkpoint at its run's end (the resume above took it to step 20),
# resumed with another --seed: refused as of
# another order (it was "already complete", exit 0); with its own, complete.
expect 1 "s1.ckpt was written by a run whose training data came in another order" \
	$mpi -np 2 "$train" $job --max-steps=4 --seed=7 --checkpoint="$tmp/s1.ckpt" --resume
expect 0 "s1.ckpt is at step 20, .*the run is already complete" \
	$mpi -np 2 "$train" $job --max-steps=4 --checkpoint="$tmp/s1.ckpt" --resume

# Ranks given other options: the job ends before training with exit 2,
# each differing rank saying its value and rank 0's, rank 0 naming the
# options and the ranks, in its JSON lines too (a failed row).  Without the
# check, another --seed trained on silently and another --batch-size ended
# in MPI_ERR_TRUNCATE.
opts="--data=synthetic:1200 --device=cpu --epochs=1 --max-steps=20 --no-eval -q"
expect 2 "rank 1 of 3: --seed=2, but rank 0 has --seed=1" \
	timeout 120 $mpirun -np 1 "$train" $opts --batch-size=30 --jsonl="$tmp/opts.jsonl" \
	: -np 1 "$train" $opts --batch-size=30 --seed=2 : -np 1 "$train" $opts --batch-size=60 --lr=0.5
grep -q "rank 2 of 3: --batch-size=60, but rank 0 has --batch-size=30" "$tmp/out" ||
	{ echo "FAIL: rank 2's other --batch-size not said:"; cat "$tmp/out"; fail=1; }
python3 - "$tmp/opts.jsonl" <<'EOPY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = "failed: the ranks of the job were given other options"
if len(rows) != 1 or not rows[0]["status"].startswith(want) or "--seed on rank 1" not in rows[0]["status"] \
   or "--batch-size on rank 2" not in rows[0]["status"]:
    sys.exit("FAIL: the JSON lines of ranks given other options: %r" % rows)
EOPY
# What may differ does: the workers, threads and output of a rank.
expect 0 "train_loss" \
	timeout 120 $mpirun -np 1 "$train" $opts --batch-size=30 -w 0 -t 1 \
	: -np 1 "$train" $opts --batch-size=30 -w 1 -t 2 --no-progress --csv="$tmp/r1.csv"

# The final barrier failing on rank 1 (its 9th collective, after the
# check of the options (a broadcast and an allreduce), the broadcast, the
# check of the ranks' checkpoint and data (a broadcast and an allreduce),
# the step's stop agreement, gradient in one bucket, and metrics): the job
# ends failed, never exit 0 nor a hang in MPI_Finalize.
one="$common --batch-size=30 --max-steps=1 --no-eval -q --bucket-kb=1000000"
expect 1 "rank 1 of 2: barrier: Input/output error \(injected fault\)" \
	timeout 120 $mpirun -np 1 "$train" $one : -np 1 env PP_FAULTS=comm:EIO:after=9 "$train" $one

# Ctrl-C on rank 0 while its first run ends whole (held writing that run's
# row to a --jsonl FIFO the test filled), then the agreement before run 2
# failing on rank 0 (its 10th collective: the check of the options, the
# agreement before run 1, the broadcast, the check of the ranks' state,
# the step's stop agreement, the gradient in one bucket, the metrics; then
# this one): the job ends failed
# with the reason, and the run's row, held for the line on where Ctrl-C
# stopped, is on the terminal all the same (it was lost there).
late="--data=synthetic:1200 --device=cpu -t 1 -w 0 --no-progress --no-eval --epochs=1 --max-steps=1
      --batch-size=30,60 --bucket-kb=1000000"
python3 - "$tmp" "$train" $mpirun -- $late <<'EOPY' || fail=1
import os, signal, subprocess, sys, time
tmp, train = sys.argv[1], sys.argv[2]
cut = sys.argv.index("--")
mpirun, args = sys.argv[3:cut], sys.argv[cut + 1:]
fifo, pidf = tmp + "/late.jsonl", tmp + "/late.pid"
os.mkfifo(fifo)
rf = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
# Full before the first row: rank 0 is held writing it.
wf = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
try:
    while True:
        os.write(wf, b"\n" * 4096)
except BlockingIOError:
    pass
try:
    while True:
        os.write(wf, b"\n")
except BlockingIOError:
    pass
os.close(wf)
rank0 = ["sh", "-c", 'echo $$ > "$0"; exec "$@"', pidf, "env", "PP_FAULTS=comm:EIO:after=9", train] + \
        args + ["--jsonl=" + fifo]
with open(tmp + "/late.out", "w") as out, open(tmp + "/late.err", "w") as err:
    job = subprocess.Popen(mpirun + ["-np", "1"] + rank0 + [":", "-np", "1", train] + args,
                           stdout=out, stderr=err, start_new_session=True)
def held_on_fifo(pid):
    """Rank 0 waits in a write to the FIFO (not to its stdout, a pipe to mpirun too)."""
    if "pipe_write" not in open("/proc/%d/wchan" % pid).read():
        return False
    try:
        call = open("/proc/%d/syscall" % pid).read().split()
    except OSError:                    # not ours to read: the wait is enough
        return True
    if len(call) < 2 or not call[1].startswith("0x"):
        return False
    return os.path.realpath("/proc/%d/fd/%d" % (pid, int(call[1], 16))) == os.path.realpath(fifo)

held = False
for i in range(6000):
    if job.poll() is not None:
        break
    try:
        pid = int(open(pidf).read())
        held = held_on_fifo(pid)
    except (OSError, ValueError):
        pass
    if held:
        break
    time.sleep(0.01)
if held:
    os.kill(pid, signal.SIGINT)
deadline = time.time() + 120
while job.poll() is None and time.time() < deadline:
    try:
        os.read(rf, 65536)
    except BlockingIOError:
        pass
    time.sleep(0.01)
if job.poll() is None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    sys.exit("FAIL: Ctrl-C then a failed agreement before run 2: mpirun still runs after 120 s")
out, err = open(tmp + "/late.out").read(), open(tmp + "/late.err").read()
why = "pinpipe-train: before run 2: comm mpi: rank 0 of 2: allreduce: Input/output error (injected fault)"
if not held or job.returncode == 0 or why not in err or "run 1 epoch 1: train loss" not in out:
    sys.exit("FAIL: Ctrl-C then a failed agreement before run 2 (held: %s, exit %d): the reason or "
             "run 1's row missing:\n%s%s" % (held, job.returncode, out, err))
EOPY

# 6. Ctrl-C on mpirun, once rank 0 has written a row.  mpirun passes it on
# as SIGTERM odls_base_sigkill_timeout seconds later (default 1), and kills
# a rank still running the same time after that: 5 s here, for a loaded
# machine (measured: a second without it, too short under a sanitizer).
# In a session of its own, so that mpirun and its ranks can be killed as
# a group should they outlive the wait.
setsid $mpirun --mca odls_base_sigkill_timeout 5 -np 2 "$train" --data=synthetic:1200 --device=cpu \
	--epochs=100000 -t 1 -w 0 --no-progress \
	--no-eval --batch-size=30 --jsonl="$tmp/i.jsonl" --checkpoint="$tmp/i.ckpt" >"$tmp/i.out" 2>&1 &
job=$!
i=0
while [ ! -s "$tmp/i.jsonl" ] && [ $i -lt 1200 ] && kill -0 $job 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
kill -INT $job
i=0
while kill -0 $job 2>/dev/null && [ $i -lt 600 ]; do
	sleep 0.1
	i=$((i + 1))
done
if kill -0 $job 2>/dev/null; then
	echo "FAIL: mpirun still runs 60 s after Ctrl-C"; kill -9 -- -$job; fail=1
fi
wait $job
python3 - "$tmp/i.jsonl" "$tmp/i.ckpt" "$tmp/i.out" <<'EOPY' || { cat "$tmp/i.out"; fail=1; }
import json, re, struct, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
said = re.findall(r"interrupted after (\d+) steps", open(sys.argv[3]).read())
if len(said) != 1:
    sys.exit("FAIL: after Ctrl-C on mpirun, %d ranks said where it stopped (rank 0 alone should)" % len(said))
steps = int(said[0])
ckpt = struct.unpack_from("<Q", open(sys.argv[2], "rb").read(), 40)[0]
# 20 steps an epoch (600 samples a rank, 30 a batch); a stop at an epoch's start writes no row for it.
want = ["ok"] * (steps // 20) + (["interrupted"] if steps % 20 else [])
# A stop agreed after an epoch's last step, before its end was seen, ends that epoch "interrupted".
also = ["ok"] * (steps // 20 - 1) + ["interrupted"] if steps % 20 == 0 and steps else want
if [r["status"] for r in rows] not in (want, also) or ckpt != steps:
    sys.exit("FAIL: after Ctrl-C on mpirun at step %d: rows ending %r, checkpoint at step %d" %
             (steps, [r["status"] for r in rows][-3:], ckpt))
EOPY

exit $fail
