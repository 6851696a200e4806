#!/usr/bin/python3
"""bench/bench_jpeg.py: torchvision's side of bench/bench_jpeg: images/s of
ImageFolder + DataLoader(num_workers=N, batch_size=64, shuffle) with the
same transforms as pinpipe's JPEG decoder, uint8 out (PILToTensor, no
normalisation, as pinpipe hands out), and Pillow's decode alone on one
thread.  Each figure is the best of ROUNDS, in images per second of the
wall clock and per second of CPU time (the main process's and its
workers', which end with each epoch).  Debian's python3-torchvision and
python3-pil.

    /usr/bin/python3 bench/bench_jpeg.py DIR [SIZE] [ROUNDS] [WORKERS,...]   (224, 3, 1,2)
"""
import resource
import sys
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T


def cpu_s():
    """CPU seconds of this process and of its children that have ended."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def epoch(ds, workers):
    """(images/s, images per CPU second) of one epoch; its workers end with it."""
    dl = DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                    persistent_workers=False)
    t0, c0 = time.perf_counter(), cpu_s()
    n = 0
    it = iter(dl)
    for x, y in it:
        n += x.shape[0]
    del it
    t1, c1 = time.perf_counter(), cpu_s()
    return n / (t1 - t0), n / (c1 - c0)


def main():
    root = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 224
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    workers = [int(w) for w in (sys.argv[4] if len(sys.argv) > 4 else "1,2").split(",")]
    torch.set_num_threads(1)
    plain = datasets.ImageFolder(root)
    best, bestc = 0, 0
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.thread_time()
        for path, _ in plain.samples:
            with open(path, "rb") as f:
                Image.open(f).convert("RGB")
        best = max(best, len(plain.samples) / (time.perf_counter() - t0))
        bestc = max(bestc, len(plain.samples) / (time.thread_time() - c0))
    print(f"Pillow {Image.__version__}, open + convert('RGB'), one thread: {best:.0f} images/s, "
          f"{bestc:.0f} per CPU second (best of {rounds})")
    modes = (("Resize(S*8/7) + CenterCrop(S)",
              T.Compose([T.Resize(size * 8 // 7), T.CenterCrop(size), T.PILToTensor()])),
             ("RandomResizedCrop(S) + flip",
              T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])))
    for name, tf in modes:
        ds = datasets.ImageFolder(root, transform=tf)
        for w in workers:
            runs = [epoch(ds, w) for _ in range(rounds)]
            r, rc = max(x[0] for x in runs), max(x[1] for x in runs)
            print(f"torchvision {__import__('torchvision').__version__} ImageFolder + DataLoader, "
                  f"{name}, {w} workers: {r:.0f} images/s, {rc:.0f} per CPU second")


if __name__ == "__main__":
    main()
