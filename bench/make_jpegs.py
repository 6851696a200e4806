#!/usr/bin/python3
"""bench/make_jpegs.py: JPEGs for bench/bench_jpeg: photo-like images (a
gradient, shapes, noise) of about 500 x 375 at quality 90, as ImageNet's
validation set is, in a folder per class (torchvision's ImageFolder).
Image i comes from its own seed (i), whatever JOBS (processes): its size,
colours and shapes from Python's generator, its noise from the C library's
rand(), which Pillow's effect_noise() draws from and which is seeded with
i before it (unseeded, rand() gives the same sequence in every process, so
forked JOBS would give their images each other's noise, and which image
got which would depend on the pool's scheduling).  The same files every run.

    /usr/bin/python3 bench/make_jpegs.py OUT [COUNT] [CLASSES] [JOBS]   (2000, 10, 1)
"""
import ctypes
import os
import random
import sys

from PIL import Image, ImageDraw, ImageFilter


def image(rng, w, h):
    # a two-colour gradient
    a = [rng.randrange(256) for _ in range(3)]
    b = [rng.randrange(256) for _ in range(3)]
    grad = Image.linear_gradient("L").resize((w, h))
    im = Image.composite(Image.new("RGB", (w, h), tuple(a)), Image.new("RGB", (w, h), tuple(b)), grad)
    d = ImageDraw.Draw(im)
    for _ in range(rng.randrange(5, 15)):
        x, y = rng.randrange(w), rng.randrange(h)
        s = rng.randrange(10, w // 2)
        fill = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            d.ellipse([x, y, x + s, y + s * 3 // 4], fill=fill)
        else:
            d.rectangle([x, y, x + s, y + s // 2], fill=fill)
    im = im.filter(ImageFilter.GaussianBlur(1.5))
    # sensor-like noise
    noise = Image.effect_noise((w, h), 24).convert("RGB")
    return Image.blend(im, noise, 0.12)


# the C library's rand(), which Pillow's effect_noise() calls
LIBC = ctypes.CDLL(None)


def make(args):
    out, i, classes = args
    rng = random.Random(i)
    c = f"{out}/c{i % classes:02d}"
    w, h = (500, 375) if rng.random() < 0.7 else (375, 500)
    w += rng.randrange(-40, 41)
    h += rng.randrange(-30, 31)
    LIBC.srand(i)
    image(rng, w, h).save(f"{c}/{i:06d}.jpg", quality=90)


def main():
    out = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    classes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    jobs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    for k in range(min(classes, count)):
        os.makedirs(f"{out}/c{k:02d}", exist_ok=True)
    work = [(out, i, classes) for i in range(count)]
    if jobs > 1:
        import multiprocessing
        with multiprocessing.Pool(jobs) as pool:
            pool.map(make, work, chunksize=16)
    else:
        for w in work:
            make(w)


if __name__ == "__main__":
    main()
