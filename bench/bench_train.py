#!/usr/bin/python3
"""bench/bench_train.py: the seeds' experiment, pinpipe-train and PyTorch 1.13
side by side in one run: Fashion-MNIST, the CNN (conv 6@5, pool, conv 12@5,
pool, 120, 60, 10), Adam lr 0.01, for each batch size, worker count and
pin_memory value, EPOCHS epochs; PyTorch through torchvision's FashionMNIST
with ToTensor + Normalize and a DataLoader, as the seeds wrote it.  Prints,
per configuration, the mean epoch time, the test accuracy after the last
epoch (mean over the seeds), the share of the epoch spent waiting for data,
the peak RSS, and the ratio of PyTorch's epoch time to pinpipe's.

  /usr/bin/python3 bench/bench_train.py [--epochs 3] [--seeds 1,2,3]
        [--batch-size 100,1000] [--workers 0,1,2] [--pin on,off] [--threads 1]
        [--openblas-coretype CORE] [--pinpipe-keep-denormals] [--torch-flush-denormal]

Both sides get the same number of compute threads (--threads; PyTorch's
torch.set_num_threads, pinpipe-train --threads), OPENBLAS_NUM_THREADS=1,
and the same OpenBLAS kernels: OPENBLAS_CORETYPE as found in the
environment, or as --openblas-coretype sets it (an empty value unsets it,
leaving OpenBLAS to pick the kernels for the processor).  Subnormal floats:
each side as it computes by default (pinpipe flushes them to zero, PyTorch
keeps them), or the other way round with --pinpipe-keep-denormals
(pinpipe-train --keep-denormals) and --torch-flush-denormal
(torch.set_flush_denormal(True)).  Run from the top of a built tree.
"""
import argparse
import csv
import gzip
import os
import resource
import subprocess
import sys
import tempfile
import time

DATA = "/usr/share/datasets/fashion-mnist"


def torch_run(bs, workers, pin, epochs, seed, threads, flush_denormal=False):
    """One PyTorch run in a child process (fresh RSS); returns (epoch times, acc, wait share, rss MB)."""
    code = r'''
import sys, time, gzip, resource, numpy as np, torch, torchvision
from torchvision import transforms
bs, workers, pin, epochs, seed, threads, data, flush = sys.argv[1:]
bs, workers, epochs, seed, threads = int(bs), int(workers), int(epochs), int(seed), int(threads)
torch.set_num_threads(threads); torch.manual_seed(seed)
if flush == "1" and not torch.set_flush_denormal(True):
    sys.exit("torch.set_flush_denormal: not supported on this CPU")
import os, shutil, tempfile
root = tempfile.mkdtemp()
raw = os.path.join(root, "FashionMNIST", "raw"); os.makedirs(raw)
for f in os.listdir(data):
    if f.endswith(".gz"):  # torchvision 0.14 looks for the decompressed files
        open(os.path.join(raw, f[:-3]), "wb").write(gzip.open(os.path.join(data, f)).read())
tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))])
train = torchvision.datasets.FashionMNIST(root, train=True, download=False, transform=tf)
test = torchvision.datasets.FashionMNIST(root, train=False, download=False, transform=tf)
nn = torch.nn
model = nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 12, 5), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(192, 120), nn.ReLU(), nn.Linear(120, 60),
                      nn.ReLU(), nn.Linear(60, 10))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
loader = torch.utils.data.DataLoader(train, batch_size=bs, shuffle=True, num_workers=workers,
                                     pin_memory=(pin == "on"))
times, waits = [], []
for e in range(epochs):
    t0 = time.perf_counter(); wait = 0.0; it = iter(loader)
    while True:
        w0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        wait += time.perf_counter() - w0
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
    times.append(time.perf_counter() - t0); waits.append(wait)
correct = 0
with torch.no_grad():
    for x, y in torch.utils.data.DataLoader(test, batch_size=1000):
        correct += (model(x).argmax(1) == y).sum().item()
shutil.rmtree(root)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(",".join(map(str, times)), correct / len(test), sum(waits) / sum(times), rss)
'''
    out = subprocess.run([sys.executable, "-c", code, str(bs), str(workers), pin, str(epochs), str(seed),
                          str(threads), DATA, "1" if flush_denormal else "0"],
                         check=True, capture_output=True, text=True).stdout.split()
    return [float(t) for t in out[0].split(",")], float(out[1]), float(out[2]), float(out[3])


def pinpipe_run(bs, workers, pin, epochs, seed, threads, keep_denormals=False):
    """One pinpipe-train run; returns (epoch times, acc, wait share, rss MB)."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        cmd = ["./pinpipe-train", "--data=" + DATA, "--device=cpu", "--model=cnn", "--optimizer=adam",
               "--lr=0.01", "--batch-size=%d" % bs, "--workers=%d" % workers, "--pin-memory=" + pin,
               "--epochs=%d" % epochs, "--seed=%d" % seed, "--threads=%d" % threads, "-q",
               "--csv=" + f.name] + (["--keep-denormals"] if keep_denormals else [])
        # A fresh Python parent, whose only child is pinpipe-train, reports its peak RSS.
        rss = float(subprocess.run(
            [sys.executable, "-c", "import resource, subprocess, sys; "
             "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"] + cmd,
            check=True, capture_output=True, text=True).stdout)
        rows = sorted(csv.DictReader(open(f.name)), key=lambda r: int(r["epoch"]))
    times = [float(r["epoch_s"]) for r in rows]
    waits = sum(float(r["wait_s"]) for r in rows)
    return times, float(rows[-1]["test_acc"]), waits / sum(times), rss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--batch-size", default="100,1000")
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--pin", default="on,off")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--openblas-coretype", default=None,
                    help="OPENBLAS_CORETYPE for both sides (empty: OpenBLAS's own choice) [environment]")
    ap.add_argument("--pinpipe-keep-denormals", action="store_true",
                    help="pinpipe-train --keep-denormals (IEEE subnormals, as PyTorch's default)")
    ap.add_argument("--torch-flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True) (subnormals flushed, as pinpipe's default)")
    a = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if a.openblas_coretype is not None:
        os.environ["OPENBLAS_CORETYPE"] = a.openblas_coretype
    if not os.environ.get("OPENBLAS_CORETYPE"):
        os.environ.pop("OPENBLAS_CORETYPE", None)
    print("both sides: OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=%s, %d compute thread(s)"
          % (os.environ.get("OPENBLAS_CORETYPE", "(unset: OpenBLAS's choice)"), a.threads))
    print("subnormals: pinpipe %s, PyTorch %s" % ("kept" if a.pinpipe_keep_denormals else "flushed",
                                                  "flushed" if a.torch_flush_denormal else "kept"))
    sides = (("pinpipe", lambda *r: pinpipe_run(*r, keep_denormals=a.pinpipe_keep_denormals)),
             ("torch", lambda *r: torch_run(*r, flush_denormal=a.torch_flush_denormal)))
    seeds = [int(s) for s in a.seeds.split(",")]
    print("bs    workers pin  | pinpipe s/epoch acc    wait% | PyTorch s/epoch acc    wait%  RSS MB | ratio")
    for bs in [int(b) for b in a.batch_size.split(",")]:
        for w in [int(x) for x in a.workers.split(",")]:
            for pin in a.pin.split(","):
                res = {}
                for side, fn in sides:
                    runs = [fn(bs, w, pin, a.epochs, s, a.threads) for s in seeds]
                    # Mean epoch time of epochs after the first (warm), over the seeds.
                    warm = [t for r in runs for t in (r[0][1:] or r[0])]
                    res[side] = (sum(warm) / len(warm), sum(r[1] for r in runs) / len(runs),
                                 100 * sum(r[2] for r in runs) / len(runs), max(r[3] for r in runs))
                p, t = res["pinpipe"], res["torch"]
                print("%-5d %-7d %-4s | %7.2f        %.4f %5.1f | %7.2f        %.4f %5.1f  %4.0f/%4.0f | %5.1fx"
                      % (bs, w, pin, p[0], p[1], p[2], t[0], t[1], t[2], p[3], t[3], t[0] / p[0]))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
