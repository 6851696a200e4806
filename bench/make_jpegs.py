#!/usr/bin/python3
"""bench/make_jpegs.py: JPEGs for bench/bench_jpeg: photo-like images (a
gradient, shapes, noise) of about 500 x 375 at quality 90, as ImageNet's
validation set is, in a folder per class (torchvision's ImageFolder).

    /usr/bin/python3 bench/make_jpegs.py OUT [COUNT] [CLASSES]   (2000, 10)
"""
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


def main():
    out = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    classes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    rng = random.Random(1)
    for i in range(count):
        c = f"{out}/c{i % classes:02d}"
        os.makedirs(c, exist_ok=True)
        w, h = (500, 375) if rng.random() < 0.7 else (375, 500)
        w += rng.randrange(-40, 41)
        h += rng.randrange(-30, 31)
        image(rng, w, h).save(f"{c}/{i:06d}.jpg", quality=90)


if __name__ == "__main__":
    main()
