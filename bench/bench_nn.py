#!/usr/bin/python3
"""bench/bench_nn.py: the PyTorch side of bench/bench_nn.c: a training step
(forward, cross-entropy, backward, Adam lr 0.01) on a float32 batch held in
memory, for the presets cnn and mlp at a batch size and thread count;
samples/s of wall-clock time and per second of the process's CPU time.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/bench_nn.py SPEC BATCH THREADS [SECONDS]
"""
import sys
import time

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


def main():
    spec, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 3.0
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = make(spec)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.rand(batch, 1, 28, 28) * 2 - 1
    y = torch.arange(batch) % 10

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
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
    print("pytorch %s batch=%d threads=%d: %.0f samples/s, %.3f ms/step, %.0f samples/cpu-s"
          % (spec, batch, threads, steps * batch / s, 1e3 * s / steps,
             steps * batch / (c1 - c0)))


if __name__ == "__main__":
    main()
