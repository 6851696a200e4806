#!/bin/sh
# tests/test_interrupt.sh: Ctrl-C on pinpipe-train, from the outside, on sim
# with loader workers, copy engines and compute threads running.  Small
# enough to run under ThreadSanitizer too (.ci/run does), where a data race
# on the flag the handler sets fails the run (exit 66).
#
#  1. SIGINT, in bursts of 1 to 3, at random moments of a grid of runs or
#     of a run with a checkpoint (before the first step, in an epoch, in
#     an evaluation, between epochs and between runs): every one stops
#     with exit 130 (not killed by the signal), says so, writes no row of
#     NaNs, and writes the checkpoint exactly when it says it did.
#  2. SIGINT before the first step, made certain by a full stdout pipe that
#     holds the trainer at its first line until the test drains it: exit
#     130, "interrupted before the first step", no row and no checkpoint;
#     resumed, the checkpoint is left byte for byte as it was.
#  3. SIGINT in an epoch while stdout is a pipe that nobody reads: the row
#     on disk, the checkpoint and the line that says where it stopped are
#     written before the row on the terminal waits for the pipe; drained,
#     exit 130 and the row there too.
#  4. SIGINT after an epoch's last step (held writing its row to a FIFO
#     the test fills), stdout a pipe that nobody reads: the epoch's row on
#     the terminal waits until the next step has stopped the run and said
#     so; the rows end with that epoch's, "ok", and the checkpoint there.
#     In a grid whose first run ends there, its row waits for the line
#     that says which runs were not started.
#  5. SIGKILL before the first epoch row, over an earlier file of rows: the
#     earlier rows kept; the file the killed run staged beside them removed
#     by the next run of that file (pp_staged_create()).
# Each check fails the script with what went wrong; exit 77 only when the
# tool was not built.  The random moments come from a seed printed first.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
[ -x "$train" ] || { echo "test_interrupt: $train not built, skipped"; exit 77; }
command -v python3 >/dev/null || { echo "test_interrupt: python3 missing (./bootstrap installs it)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-interrupt-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

python3 - "$train" "$tmp" <<'EOPY'
import csv, json, os, random, re, signal, struct, subprocess, sys, time

train, tmp = sys.argv[1], sys.argv[2]
seed = int(os.environ.get("PP_TEST_SEED", str(int(time.time()))))
print("test_interrupt: seed %d (PP_TEST_SEED=%d repeats it)" % (seed, seed))
rng = random.Random(seed)
failed = False

def fail(msg, err_path=None):
    global failed
    failed = True
    print("FAIL: " + msg)
    if err_path:
        sys.stdout.write(open(err_path, errors="replace").read())

def rows(path):
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []

def fill(path):
    """Fills the pipe or FIFO at 'path' through a file of its own (its O_NONBLOCK its own)."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    for chunk in (4096, 1):
        try:
            while True:
                os.write(fd, b"\n" * chunk)
        except BlockingIOError:
            pass
    os.close(fd)

def wait_for(path, text, proc):
    """Waits until 'text' is in the file at 'path' (or the process ended)."""
    while proc.poll() is None:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return
        time.sleep(0.01)

# A copy costs 16 ms a batch at 5 MB/s: an epoch lasts long enough to be hit.
sim = ["--data=synthetic:1800", "--device=sim:bw=5MB/s", "--model=mlp", "--threads=2", "--seed=3",
       "--no-progress"]

# 1. Random moments.
interrupted = 0
for it in range(10):
    out, err = "%s/r%d.out" % (tmp, it), "%s/r%d.err" % (tmp, it)
    ckpt, table = "%s/r%d.ckpt" % (tmp, it), "%s/r%d.csv" % (tmp, it)
    # A grid of 4 runs, or one run with a checkpoint (which takes a single run).
    if it % 2:
        args = [train] + sim + ["--workers=2", "--epochs=6", "--no-eval", "--checkpoint=" + ckpt]
    else:
        args = [train] + sim + ["--workers=0,2", "--pin-memory=on,off", "--epochs=3"]
    args.append("--csv=" + table)
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(args, stdout=o, stderr=e)
    # The first line is printed once the handler is in place.
    wait_for(out, "run 1: device=", proc)
    time.sleep(rng.uniform(0, 0.8))
    for k in range(rng.randint(1, 3)):
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGINT)
        time.sleep(rng.uniform(0, 0.05))
    code = proc.wait()
    text = open(err, errors="replace").read()
    name = "run %d (%s)" % (it, " ".join(args[1:]))
    if code == 0:
        continue                       # the grid ended before the signal
    interrupted += 1
    if code != 130:
        fail("%s: exit %d after SIGINT, expected 130:" % (name, code), err)
        continue
    if "pinpipe-train: interrupted" not in text:
        fail("%s: exit 130 but no word of the interruption:" % name, err)
    for r in rows(table):
        if r["status"] in ("ok", "interrupted") and r["train_loss"] in ("", "nan"):
            fail("%s: a row of NaNs: %s" % (name, r), err)
    if "the checkpoint resumes from there" in text and not os.path.exists(ckpt):
        fail("%s: says the checkpoint resumes, but wrote none:" % name, err)
    if "no checkpoint written" in text and os.path.exists(ckpt):
        fail("%s: says no checkpoint was written, but wrote one:" % name, err)
if interrupted < 5:
    fail("only %d of 10 runs were still running at their SIGINT" % interrupted)

# 2. Before the first step, for certain.
def interrupt_before_first_step(args, err):
    """Runs args with stdout a full pipe, SIGINT, then drains it; returns the exit status."""
    for delay in (0.5, 1, 2, 4, 8):
        r, w = os.pipe()
        fill("/proc/self/fd/%d" % w)
        with open(err, "w") as e:
            proc = subprocess.Popen(args, stdout=w, stderr=e)
        os.close(w)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        while os.read(r, 65536):
            pass
        os.close(r)
        code = proc.wait()
        if code != -signal.SIGINT:
            return code
        # Killed before main() put its handler in place: wait longer.
    return code

ckpt, table, jsonl, err = tmp + "/f.ckpt", tmp + "/f.csv", tmp + "/f.jsonl", tmp + "/f.err"
code = interrupt_before_first_step([train] + sim + ["--epochs=2", "--checkpoint=" + ckpt,
                                   "--csv=" + table, "--jsonl=" + jsonl], err)
text = open(err, errors="replace").read()
if code != 130:
    fail("SIGINT before the first step: exit %d, expected 130:" % code, err)
elif "interrupted before the first step of run 1: nothing trained, no checkpoint written" not in text:
    fail("SIGINT before the first step: not said so:", err)
if os.path.exists(ckpt):
    fail("SIGINT before the first step: a checkpoint was written")
if rows(table) or open(jsonl).read():
    fail("SIGINT before the first step: rows were written: %s" % rows(table))

# Resumed: the checkpoint of one epoch stays as it was.
if subprocess.call([train] + sim + ["--epochs=1", "-q", "--checkpoint=" + ckpt],
                   stdout=subprocess.DEVNULL) != 0:
    fail("the run to resume failed")
before = open(ckpt, "rb").read()
code = interrupt_before_first_step([train] + sim + ["--epochs=3", "--resume",
                                   "--checkpoint=" + ckpt, "--csv=" + table], err)
text = open(err, errors="replace").read()
if code != 130 or "nothing trained, %s left as it was" % ckpt not in text:
    fail("resumed, SIGINT before the first step: exit %d:" % code, err)
if open(ckpt, "rb").read() != before or rows(table):
    fail("resumed, SIGINT before the first step: the checkpoint changed, or rows were written")

# 3. In an epoch, with stdout a pipe that nobody reads (a pager paused;
# mpirun, which stops reading its ranks after Ctrl-C): the row on disk, the
# checkpoint and the line that says where it stopped come before the row
# on the terminal, which waits for the pipe.  The run is held (SIGSTOP) at
# a moment its progress bar places among an epoch's steps, so that it stops
# in that epoch; the pipe is filled through an open file of its own (its
# O_NONBLOCK is not the trainer's); SIGINT, SIGCONT.  Before the fix, the
# row on the terminal came first and held everything else back.
def hold_in_epoch(proc, err):
    """SIGSTOPs proc where its last progress is an epoch's, short of 100%; False if never."""
    for attempt in range(100):
        time.sleep(rng.uniform(0.02, 0.1))
        proc.send_signal(signal.SIGSTOP)
        while proc.poll() is None and open("/proc/%d/stat" % proc.pid).read().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.001)
        # Each update starts with "\r" (which Python's text mode reads as "\n").
        last = re.split(r"[\r\n]", open(err, errors="replace").read())[-1]
        if last.startswith("  train") and "100%" not in last:
            return True
        proc.send_signal(signal.SIGCONT)
        if proc.poll() is not None:
            return False
    return False

def drain(fd, into):
    """Reads what fd holds into the list 'into'; False at its end."""
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return False
            into.append(chunk)
    except BlockingIOError:
        return True

def wait_said(proc, err, said_re, meanwhile=lambda: None):
    """The stop's line on stderr, waited for up to a minute (None if it never came)."""
    for i in range(6000):
        meanwhile()
        said = re.search(said_re, open(err, errors="replace").read())
        if said or proc.poll() is not None:
            return said
        time.sleep(0.01)
    return None

def finish(proc, r, err, ckpt, what, said, rows_, status):
    """Drains stdout (r) to its end, then checks the exit, the rows, checkpoint and stdout."""
    out = []
    if said is None:
        proc.kill()                    # a trainer that never stopped: no endless wait on it
    os.set_blocking(r, True)
    while drain(r, out):
        pass
    os.close(r)
    code = proc.wait()
    out = b"".join(out)
    rows_ = rows_()
    if said is None:
        fail("%s: nothing said on stderr before stdout was read (exit %d):" % (what, code), err)
    elif code != 130:
        fail("%s: exit %d after SIGINT, expected 130:" % (what, code), err)
    elif not rows_ or not status(rows_[-1], said):
        fail("%s: stopped so: %r, the rows on disk end %r" %
             (what, said.group(0), [(x["run"], x["epoch"], x["status"]) for x in rows_[-2:]]), err)
    elif ckpt and struct.unpack_from("<Q", open(ckpt, "rb").read(), 40)[0] != int(said.group(1)):
        fail("%s: the checkpoint is not at step %s" % (what, said.group(1)), err)
    elif ("run %d epoch %d: " % (rows_[-1]["run"], rows_[-1]["epoch"])).encode() not in out:
        fail("%s: the last row never reached stdout: %r" % (what, out[-300:]), err)

steps_re = r"interrupted after (\d+) steps"
ckpt, jsonl, err = tmp + "/p.ckpt", tmp + "/p.jsonl", tmp + "/p.err"
r, w = os.pipe()
with open(err, "w") as e:
    proc = subprocess.Popen([train] + sim[:-1] + ["--progress", "--epochs=1000", "--no-eval",
                            "--checkpoint=" + ckpt, "--jsonl=" + jsonl], stdout=w, stderr=e)
os.close(w)
if not hold_in_epoch(proc, err):
    fail("a full stdout: the run was never held in an epoch's steps:", err)
    proc.kill()
    proc.wait()
    os.close(r)
else:
    fill("/proc/self/fd/%d" % r)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGCONT)
    said = wait_said(proc, err, steps_re)
    # Stopped in that epoch; or, should the hold have come between its last
    # step and the progress line after it, at the next epoch's start
    # (18 batches an epoch).
    finish(proc, r, err, ckpt, "SIGINT in an epoch, stdout full", said,
           lambda: [json.loads(l) for l in open(jsonl)] if os.path.exists(jsonl) else [],
           lambda row, said: row["status"] == "interrupted" or
           (row["status"] == "ok" and int(said.group(1)) == 18 * row["epoch"]))

# 4. SIGINT after an epoch's last step, stdout a pipe nobody reads: the
# epoch ends "ok" and the stop waits for the next step, before which its
# row on the terminal would block; it waits until after the line that says
# where the run stopped.  The moment is made certain with --jsonl a FIFO
# that the test fills: the trainer is held writing the first epoch's row
# there.
# Then a grid whose first run ends whole there (one epoch): the grid's
# line that says where it stopped comes first, then the row.
def held_at_epoch_end(name, args, said_re, ckpt, status):
    fifo, err = "%s/%s.jsonl" % (tmp, name), "%s/%s.err" % (tmp, name)
    os.mkfifo(fifo)
    rows_e = []
    rf = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    r, w = os.pipe()
    with open(err, "w") as e:
        proc = subprocess.Popen([train] + sim + args + ["--no-eval", "--jsonl=" + fifo],
                                stdout=w, stderr=e)
    os.close(w)
    # Full before the first row: the trainer is held writing its first epoch's.
    fill(fifo)
    # Held there: its main thread waits in the kernel's pipe_write (anon_pipe_write on newer kernels).
    for i in range(6000):
        try:
            if "pipe_write" in open("/proc/%d/wchan" % proc.pid).read():
                break
        except OSError:                # it ended meanwhile
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    fill("/proc/self/fd/%d" % r)
    said = wait_said(proc, err, said_re, lambda: drain(rf, rows_e))

    def rows_of_fifo():
        while drain(rf, rows_e):
            time.sleep(0.01)
        os.close(rf)
        return [json.loads(l) for l in b"".join(rows_e).decode().splitlines() if l.strip()]

    finish(proc, r, err, ckpt, "SIGINT after an epoch's last step, stdout full (%s)" % name, said,
           rows_of_fifo, status)

ckpt = tmp + "/e.ckpt"
# 18 batches an epoch: the run stopped where the epoch it was held in ended, "ok".
held_at_epoch_end("one run", ["--epochs=1000", "--checkpoint=" + ckpt], steps_re, ckpt,
                  lambda row, said: row["status"] == "ok" and int(said.group(1)) == 18 * row["epoch"])
held_at_epoch_end("a grid", ["--epochs=1", "--batch-size=100,50"],
                  r"interrupted after run 1: runs 2 to 2 not started", None,
                  lambda row, said: (row["run"], row["epoch"], row["status"]) == (1, 1, "ok"))

# 5. SIGKILL before the first epoch row, over an earlier file of rows: the
# earlier file kept, and the staged file that the killed run left (it can
# say nothing) removed by the next run of that file once it is stale.
table, err = tmp + "/k.csv", tmp + "/k.err"
if subprocess.call([train] + sim + ["--epochs=1", "-q", "--csv=" + table],
                   stdout=subprocess.DEVNULL) != 0:
    fail("the run that writes the earlier rows failed")
before = open(table, "rb").read()
r, w = os.pipe()
fill("/proc/self/fd/%d" % w)           # held at its first line, rows staged
with open(err, "w") as e:
    proc = subprocess.Popen([train] + sim + ["--epochs=1", "--csv=" + table], stdout=w, stderr=e)
os.close(w)
staged = []
for i in range(3000):
    staged = [f for f in os.listdir(tmp) if f.startswith("k.csv.tmp-")]
    if staged or proc.poll() is not None:
        break
    time.sleep(0.01)
proc.kill()
proc.wait()
os.close(r)
if not staged:
    fail("SIGKILL: the run staged no file of rows to leave behind:", err)
elif open(table, "rb").read() != before:
    fail("SIGKILL before the first row: the earlier rows were not kept")
time.sleep(3)                          # PP_STAGED_STALE_S (common/staged.h) and a second
if subprocess.call([train] + sim + ["--epochs=1", "-q", "--csv=" + table],
                   stdout=subprocess.DEVNULL) != 0:
    fail("the run after the SIGKILL failed")
left = [f for f in os.listdir(tmp) if f.startswith("k.csv.tmp-")]
if left:
    fail("SIGKILL: the killed run's staged rows %s were left by the next run" % left)
if len(rows(table)) != 1 or rows(table)[0]["status"] != "ok":
    fail("the run after the SIGKILL: rows %s" % rows(table))

sys.exit(1 if failed else 0)
EOPY
