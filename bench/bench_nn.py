#!/usr/bin/python3
"""bench/bench_nn.py: the PyTorch side of bench/bench_nn.c: a training step
(forward, cross-entropy, backward, Adam lr 0.01) on a float32 batch held in
memory, for the presets cnn and mlp at a batch size and thread count;
samples/s of wall-clock time and per second of the process's CPU time.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/bench_nn.py SPEC BATCH THREADS [SECONDS]

With --fmnist SPEC BATCH THREADS [SECONDS [DIR]]: the same steps on
Fashion-MNIST's training images held in memory as a uint8 tensor,
consecutive batches in turn, each normalised as in --epochs, as
bench/bench_nn --fmnist.

With --epochs SPEC THREADS EPOCHS [DIR]: Fashion-MNIST held in memory as a
uint8 tensor (PyTorch's fastest path: a permutation per epoch, index,
float, normalise per batch of 100), Adam lr 0.01, each epoch timed, then
the accuracy on the test set, as bench/bench_nn --epochs.
"""
import gzip
import sys
import time

import numpy as np
import torch


def make(spec):
    nn = torch.nn
    if spec == "cnn":
        return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 12, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(192, 120), nn.ReLU(),
                             nn.Linear(120, 60), nn.ReLU(), nn.Linear(60, 10))
    if spec == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    raise SystemExit("bench_nn.py: spec must be cnn or mlp")


def load(d, split):
    raw = gzip.open("%s/%s-images-idx3-ubyte.gz" % (d, split)).read()
    x = torch.tensor(np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28).copy())
    raw = gzip.open("%s/%s-labels-idx1-ubyte.gz" % (d, split)).read()
    return x, torch.tensor(np.frombuffer(raw, np.uint8, offset=8).astype(np.int64))


def normalise(u8):
    return u8.float().div_(255).sub_(0.2860).div_(0.3530)


def epochs(spec, threads, count, d):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x, y = load(d, "train")
    xt, yt = load(d, "t10k")
    model = make(spec)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for e in range(1, count + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        perm = torch.randperm(len(x))
        for b in range(0, len(x) - 99, 100):
            i = perm[b:b + 100]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(normalise(x[i])), y[i]).backward()
            opt.step()
        t1, c1 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            z = torch.cat([model(normalise(xt[b:b + 100])) for b in range(0, len(xt), 100)])
            acc = (z.argmax(1) == yt).float().mean().item()
            loss = torch.nn.functional.cross_entropy(z, yt).item()
        print("pytorch %s threads=%d epoch %d: %.2f s (%.2f s of CPU), test accuracy %.4f, loss %.4f"
              % (spec, threads, e, t1 - t0, c1 - c0, acc, loss))


def main():
    if sys.argv[1] == "--epochs":
        d = sys.argv[5] if len(sys.argv) > 5 else "/usr/share/datasets/fashion-mnist"
        epochs(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), d)
        return
    fmnist = sys.argv[1] == "--fmnist"
    args = sys.argv[2:] if fmnist else sys.argv[1:]
    spec, batch, threads = args[0], int(args[1]), int(args[2])
    seconds = float(args[3]) if len(args) > 3 else 3.0
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = make(spec)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if fmnist:
        u8, labels = load(args[4] if len(args) > 4 else "/usr/share/datasets/fashion-mnist", "train")
        count = len(u8) // batch
        batches = [(u8[b * batch:(b + 1) * batch], labels[b * batch:(b + 1) * batch])
                   for b in range(count)]
    else:
        batches = [(torch.rand(batch, 1, 28, 28) * 2 - 1, torch.arange(batch) % 10)]
    taken = [0]

    def step():
        x, y = batches[taken[0] % len(batches)]
        taken[0] += 1
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(normalise(x) if fmnist else x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    steps = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    while True:
        step()
        steps += 1
        t1 = time.perf_counter()
        if t1 - t0 >= seconds:
            break
    c1 = time.process_time()
    s = t1 - t0
    print("pytorch %s%s batch=%d threads=%d: %.0f samples/s, %.3f ms/step, %.0f samples/cpu-s"
          % (spec, " fmnist" if fmnist else "", batch, threads, steps * batch / s, 1e3 * s / steps,
             steps * batch / (c1 - c0)))


if __name__ == "__main__":
    main()
