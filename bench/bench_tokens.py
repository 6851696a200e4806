#!/usr/bin/python3
"""bench/bench_tokens.py: nanoGPT's get_batch (train.py) on one token shard,
for bench_tokens: a np.memmap made every batch (as nanoGPT does, against a
memory leak), B random offsets, inputs and targets of T tokens each as
int64 through torch.from_numpy and torch.stack, then pin_memory() and
.to(device, non_blocking=True) where a GPU is present.  The shard's
1024-byte header is skipped (nanoGPT's train.bin has none).

  bench_tokens.py SHARD B T SECONDS   -> prints tokens per second of inputs
"""
import sys
import time

import numpy as np
import torch


def main():
    path, B, T, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    cuda = torch.cuda.is_available()
    device = 'cuda' if cuda else 'cpu'

    def get_batch():
        data = np.memmap(path, dtype=np.uint16, mode='r', offset=1024)
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([torch.from_numpy((data[i:i + T]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + T]).astype(np.int64)) for i in ix])
        if cuda:
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        else:
            x, y = x.to(device), y.to(device)
        return x, y

    get_batch()
    n, t0 = 0, time.perf_counter()
    while True:
        get_batch()
        n += 1
        t = time.perf_counter() - t0
        if t >= secs:
            break
    if cuda:
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
    print(n * B * T / t)


if __name__ == '__main__':
    main()
