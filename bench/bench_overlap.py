#!/usr/bin/python3
"""bench/bench_overlap.py: PyTorch's side of `pinpipe-bench overlap`.

The same loop in PyTorch: Fashion-MNIST training images (the IDX files,
decoded once into a uint8 tensor), a Dataset that returns
ToTensor + Normalize of one image and its label, a shuffled
DataLoader(batch_size, num_workers, pin_memory), then per batch
.to(device, non_blocking=True) and a synthetic compute step of --compute-us
(torch.cuda._sleep on a GPU; time.sleep on the CPU, which is where PyTorch
computes without CUDA).  Prints step time and samples/s with pin_memory on
and off, after a warm-up of a tenth of the batches (at most 20), the median
of --reps runs.  Without CUDA, pin_memory is ignored and .to() copies
nothing, so this measures the data pipeline feeding the step.

    /usr/bin/python3 bench/bench_overlap.py [--data DIR] [--batch-size N]
        [--batches N] [--workers N] [--compute-us N] [--reps N]
"""
import argparse
import gzip
import os
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def find(data, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data, name)
        if os.path.exists(p):
            return p
    raise SystemExit(f"bench_overlap.py: {data}: no {stem}[.gz]")


class Images(Dataset):
    """ToTensor + Normalize of one image, as torchvision does it."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].unsqueeze(0).float().div_(255.0)
        return (x - 0.2860) / 0.3530, int(self.labels[i])


def run(ds, a, pin, device, cycles_per_us):
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                        pin_memory=pin, drop_last=True, persistent_workers=a.workers > 0)
    warmup = min(a.batches // 10, 20)
    done, t0 = 0, None
    while done < warmup + a.batches:
        for x, y in loader:
            if done == warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            if device.type == "cuda":
                torch.cuda._sleep(int(a.compute_us * cycles_per_us))
            else:
                time.sleep(a.compute_us * 1e-6)
            done += 1
            if done == warmup + a.batches:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / a.batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--compute-us", type=float, default=60.0)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    images = read_idx(find(a.data, "train-images-idx3-ubyte"))
    labels = read_idx(find(a.data, "train-labels-idx1-ubyte"))
    ds = Images(images, labels)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cycles_per_us = 0.0
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        cycles_per_us = getattr(props, "clock_rate", 1500000) / 1000.0
    print(f"torch {torch.__version__} on {device}: DataLoader(batch_size={a.batch_size}, "
          f"num_workers={a.workers}), compute {a.compute_us:.1f} us per batch, "
          f"median of {a.reps}")
    print(f"{'memory':10} {'step_us':>10} {'samples_per_s':>14}")
    for pin in (True, False):
        steps = [run(ds, a, pin, device, cycles_per_us) for _ in range(a.reps)]
        step = statistics.median(steps)
        print(f"{'pinned' if pin else 'pageable':10} {step * 1e6:10.1f} {a.batch_size / step:14.0f}")


if __name__ == "__main__":
    main()
