#!/usr/bin/python3
"""bench/bench_decode.py: the decode of the Fashion-MNIST training images
(gzip IDX, 47 MB decoded) by pinpipe, next to `gzip -dc` and to torchvision's
path from the .gz file to a uint8 tensor, in one run, as ratios.  Runs
bench/bench_decode (build it first: make bench/bench_decode) for pinpipe's
figures, including pack and verify throughput.

Usage: /usr/bin/python3 bench/bench_decode.py [-r RUNS] [DIR]
"""
import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time


def median_time(fn, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-r", "--runs", type=int, default=5)
    ap.add_argument("dir", nargs="?", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    gz = os.path.join(args.dir, "train-images-idx3-ubyte.gz")
    if not os.access(gz, os.R_OK):
        sys.exit(f"bench_decode.py: {gz} not found (install dataset-fashion-mnist)")
    here = os.path.dirname(os.path.abspath(__file__))
    exe = os.path.join(here, "bench_decode")
    if not os.access(exe, os.X_OK):
        sys.exit(f"bench_decode.py: {exe} not built (make bench/bench_decode)")

    out = subprocess.run([exe, "-r", str(args.runs), args.dir], check=True,
                         capture_output=True, text=True).stdout
    print(out, end="")
    figures = {}
    for line in out.splitlines()[1:]:
        name, secs = line.split()[:2]
        figures[name] = float(secs)
    raw_mb = 47040000 / 1e6

    def gzip_dc():
        subprocess.run(["gzip", "-dc", gz], check=True, stdout=subprocess.DEVNULL)

    t_gzip = median_time(gzip_dc, args.runs)
    print(f"{'gzip -dc >/dev/null':<22} {t_gzip:.4f} s {raw_mb / t_gzip:7.0f} MB/s")

    import torch
    from torchvision.datasets.mnist import read_image_file
    from torchvision.datasets.utils import extract_archive

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        def torchvision_decode():
            # What torchvision's MNIST/FashionMNIST do with a downloaded .gz:
            # extract_archive() to the raw file, then read_image_file().
            raw = extract_archive(gz, tmp)
            x = read_image_file(raw)
            assert x.shape == (60000, 28, 28)
            os.unlink(raw)

        t_tv = median_time(torchvision_decode, args.runs)

    def python_gzip():
        with gzip.open(gz, "rb") as f:
            data = f.read()
        x = torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=16).view(60000, 28, 28)
        assert x.shape[0] == 60000

    t_py = median_time(python_gzip, args.runs)
    print(f"{'torchvision .gz->tensor':<22} {t_tv:.4f} s {raw_mb / t_tv:7.0f} MB/s")
    print(f"{'python gzip+frombuffer':<22} {t_py:.4f} s {raw_mb / t_py:7.0f} MB/s")
    ours = figures["pinpipe_idx_gz"]
    print(f"pinpipe is {t_gzip / ours:.1f}x gzip -dc, {t_tv / ours:.1f}x torchvision, "
          f"{t_py / ours:.1f}x python gzip, {figures['zlib_gzread'] / ours:.1f}x zlib gzread")


if __name__ == "__main__":
    main()
