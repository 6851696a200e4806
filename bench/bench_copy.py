#!/usr/bin/python3
"""bench/bench_copy.py: PyTorch's side of bench_copy.c.

Copies --total MiB in --chunk MiB pieces from a 64 MiB ring of host tensors
into another, with Tensor.copy_(non_blocking=True), the call behind
.to(device, non_blocking=True), and reports GB/s and the share of the wall
time the calling thread was blocked in it.  On a machine without CUDA the
destination can only be host memory and pin_memory is refused, so this is
what PyTorch does here; the script says whether pinning worked.

    /usr/bin/python3 bench/bench_copy.py [--chunk MiB] [--total MiB] [--reps N]
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk", type=float, default=1.0)
    ap.add_argument("--total", type=float, default=512.0)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    chunk = int(a.chunk * 1048576)
    ring = max(1, (64 << 20) // chunk)
    n = int(a.total * 1048576) // chunk
    try:
        src = torch.empty(ring * chunk, dtype=torch.uint8, pin_memory=True)
        pinned = "pinned"
    except RuntimeError:
        src = torch.empty(ring * chunk, dtype=torch.uint8)
        pinned = "pageable (pin_memory refused: no CUDA)"
    src.fill_(0x5A)
    dst = torch.empty(ring * chunk, dtype=torch.uint8).fill_(1)
    src_chunks = [src[i * chunk:(i + 1) * chunk] for i in range(ring)]
    dst_chunks = [dst[i * chunk:(i + 1) * chunk] for i in range(ring)]
    gbps, share, per_copy_us = [], [], []
    for rep in range(a.reps + 1):
        blocked = 0.0
        t0 = time.perf_counter()
        for i in range(n):
            c0 = time.perf_counter()
            dst_chunks[i % ring].copy_(src_chunks[i % ring], non_blocking=True)
            blocked += time.perf_counter() - c0
        wall = time.perf_counter() - t0
        if rep > 0:
            gbps.append(n * chunk / wall / 1e9)
            share.append(blocked / wall)
            per_copy_us.append(blocked / n * 1e6)
    print(f"torch {torch.__version__} copy_(non_blocking=True), host memory {pinned}: "
          f"{n} copies of {a.chunk:.2f} MiB, median of {a.reps}")
    print(f"{'torch copy_':22} {'-':9} {statistics.median(gbps):10.2f} "
          f"{statistics.median(per_copy_us):16.1f} {statistics.median(share) * 100:14.0f}%")


if __name__ == "__main__":
    main()
