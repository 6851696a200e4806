#!/usr/bin/python3
"""bench/bench_loader.py: the loader against PyTorch on Fashion-MNIST, in one run.

For each worker count and pin_memory setting it times, on the 60,000
training images, batch 100, shuffled, float32 normalised output:
  - torch.utils.data.DataLoader over torchvision's FashionMNIST with
    ToTensor + Normalize (workers and pin_memory as given);
  - PyTorch's fastest in-memory path: the decoded uint8 tensor, indexed by a
    permutation, converted and normalised per batch (single process);
  - bench/bench_loader (the C loader, same settings),
and prints samples/s and the ratios.  Run from the build tree:

  /usr/bin/python3 bench/bench_loader.py [--data DIR] [--workers 0,1,2] [--epochs N]
"""
import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms

MEAN, STD = 0.2860, 0.3530
BATCH = 100


def torchvision_root(data_dir, tmp):
    """torchvision wants FashionMNIST/raw/ with the files uncompressed."""
    raw = os.path.join(tmp, "FashionMNIST", "raw")
    os.makedirs(raw)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        src = os.path.join(data_dir, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(raw, name))
        else:
            with gzip.open(src + ".gz", "rb") as f, open(os.path.join(raw, name), "wb") as g:
                shutil.copyfileobj(f, g)
    return tmp


def time_dataloader(root, workers, pin, epochs):
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
    ds = torchvision.datasets.FashionMNIST(root, train=True, download=False, transform=tf)
    dl = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                    pin_memory=pin, persistent_workers=workers > 0)
    n = 0
    t0 = 0.0
    for e in range(epochs + 1):
        if e == 1:
            t0 = time.perf_counter()
        for x, y in dl:
            if e > 0:
                n += x.shape[0]
    return n / (time.perf_counter() - t0)


def time_tensor_path(root, epochs):
    ds = torchvision.datasets.FashionMNIST(root, train=True, download=False)
    data = ds.data  # uint8 [60000, 28, 28]
    labels = ds.targets
    n = 0
    t0 = 0.0
    for e in range(epochs + 1):
        if e == 1:
            t0 = time.perf_counter()
        perm = torch.randperm(data.shape[0])
        for i in range(0, data.shape[0], BATCH):
            idx = perm[i:i + BATCH]
            x = data[idx].unsqueeze(1).float().div_(255).sub_(MEAN).div_(STD)
            y = labels[idx]
            if e > 0:
                n += x.shape[0]
    return n / (time.perf_counter() - t0)


def time_pinpipe(binary, data_dir, workers, pin, epochs):
    cmd = [binary, "-w", str(workers), "-e", str(epochs)] + (["-p"] if pin else []) + [data_dir]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split())
    return float(fields["samples_per_s"]), fields


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("PP_FASHION_MNIST_DIR",
                                                     "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs of PyTorch's DataLoader")
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "bench_loader"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = torchvision_root(args.data, tmp)
        tensor = time_tensor_path(root, 3)
        print(f"torch in-memory tensor path: {tensor:,.0f} samples/s")
        print(f"{'workers':>7} {'pin':>3} {'DataLoader/s':>13} {'pinpipe/s':>12} "
              f"{'x DataLoader':>12} {'x tensor':>9} {'peak RSS MB':>11}")
        for w in (int(x) for x in args.workers.split(",")):
            for pin in (False, True):
                dl = time_dataloader(root, w, pin, args.epochs)
                pp, f = time_pinpipe(args.binary, args.data, w, pin, 10)
                print(f"{w:>7} {int(pin):>3} {dl:>13,.0f} {pp:>12,.0f} {pp / dl:>12.0f} "
                      f"{pp / tensor:>9.2f} {float(f['peak_rss_MB']):>11.1f}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
