#!/bin/sh
# tests/check_install.sh: installs the built tree into a temporary DESTDIR,
# builds the examples against it with nothing but pkg-config, and runs them:
# examples/batches must see all 60,000 Fashion-MNIST samples once,
# examples/custom_source every token window with its targets shifted,
# examples/images every JPEG of a folder once,
# examples/train_by_hand must pass 75% test accuracy on cpu and on sim, and
# examples/train_ddp must learn (70% train accuracy in an epoch), alone and,
# where mpirun is, on 2 ranks that end with rank 0's parameters.  The
# cuBLAS variant is built when the CUDA toolkit is there, and run only on a
# GPU.  A program linked with the static library and `pkg-config --static`
# (no OpenBLAS among its libraries: the library opens it at run time) must
# create a model on the CPU and name the OpenBLAS kernels it runs.  Run from
# a configured and built tree (the lead's CI runs it).  pkg-config is asked
# as README.md says for a staged install: --define-prefix.
set -eu
top=$(pwd)
dest=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-install-XXXXXX")
trap 'rm -rf "$dest"' EXIT
fm=${PP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

make -s install DESTDIR="$dest" >"$dest.log" 2>&1 || { cat "$dest.log"; exit 1; }
rm -f "$dest.log"
prefix=$(sed -n 's/^prefix=//p' pinpipe.pc)
libdir=$(PKG_CONFIG_PATH= pkg-config --variable=libdir "$top/pinpipe.pc")
# As README says: the stage's pinpipe.pc, its prefix taken from where it lies.
export PKG_CONFIG="pkg-config --define-prefix"
export PKG_CONFIG_PATH="$dest$libdir/pkgconfig"
export LD_LIBRARY_PATH="$dest$libdir"
test -f "$dest$prefix/include/pinpipe/pinpipe.h"
test -x "$dest$prefix/bin/pinpipe-train"
# The docs beside the README, the map of the code among them; pinpipe.pc names the project's home.
for doc in README.md API.md ARCHITECTURE.md SHARDS.md; do
	[ -n "$(find "$dest$prefix/share/doc" -name "$doc")" ] ||
		{ echo "check_install: $doc not installed under $dest$prefix/share/doc"; exit 1; }
done
grep -q '^URL: https://[a-z]' "$dest$libdir/pkgconfig/pinpipe.pc" ||
	{ echo "check_install: pinpipe.pc has no URL:"; cat "$dest$libdir/pkgconfig/pinpipe.pc"; exit 1; }
cflags=$($PKG_CONFIG --cflags pinpipe | sed "s/ *$//")
[ "$cflags" = "-I$dest$prefix/include" ] ||
	{ echo "check_install: $PKG_CONFIG --cflags pinpipe gave '$cflags', not -I$dest$prefix/include"; exit 1; }
echo "check_install: installed under $dest$prefix; cflags: $cflags"

cp -r "$top/examples" "$dest/examples"
make -s -C "$dest/examples" >/dev/null
if [ -d /usr/local/cuda/include ]; then
	make -s -C "$dest/examples" cuda >/dev/null
fi

"$dest/examples/batches" "$fm" sim >"$dest/out"
grep -q '^60000 samples on sim; per class: 6000 6000 6000 6000 6000 6000 6000 6000 6000 6000$' "$dest/out" ||
	{ echo "check_install: batches printed:"; cat "$dest/out"; exit 1; }
for dev in cpu sim; do
	"$dest/examples/custom_source" $dev >"$dest/out" ||
		{ echo "check_install: custom_source on $dev failed:"; cat "$dest/out"; exit 1; }
	grep -q "^1562 windows of 64 tokens on $dev; targets = inputs shifted: yes$" "$dest/out" ||
		{ echo "check_install: custom_source printed:"; cat "$dest/out"; exit 1; }
	"$dest/examples/train_by_hand" "$fm" $dev 1 >"$dest/out" ||
		{ echo "check_install: train_by_hand on $dev failed:"; cat "$dest/out"; exit 1; }
	grep -q "test loss .* acc 0\.[789]" "$dest/out" || { cat "$dest/out"; exit 1; }
done
# examples/images: an ImageFolder of JPEGs (made by Pillow) decoded on the
# workers, each image of train/ and val/ once, counted per class; where the
# build has libjpeg-turbo and Pillow is there.
if grep -q "define PP_HAVE_TURBOJPEG 1" "$top/config.h" && /usr/bin/python3 -c 'import PIL' 2>/dev/null; then
	/usr/bin/python3 - "$dest/img" <<'PY'
import os, sys
from PIL import Image
for split, n in (("train", 12), ("val", 4)):
    for c, col in (("blue", (30, 30, 200)), ("red", (200, 30, 30))):
        os.makedirs(f"{sys.argv[1]}/{split}/{c}")
        for i in range(n):
            Image.new("RGB", (40 + i, 30), col).save(f"{sys.argv[1]}/{split}/{c}/{i}.jpg")
PY
	for dev in cpu sim; do
		"$dest/examples/images" "$dest/img" $dev 16 >"$dest/out" ||
			{ echo "check_install: images on $dev failed:"; cat "$dest/out"; exit 1; }
		grep -q "^train: 24 of 24 images, 2 classes: blue 12 red 12$" "$dest/out" &&
			grep -q "^val: 8 of 8 images, 2 classes: blue 4 red 4$" "$dest/out" ||
			{ echo "check_install: images on $dev printed:"; cat "$dest/out"; exit 1; }
	done
else
	echo "check_install: no libjpeg-turbo in the build, or no Pillow: examples/images not run"
fi
"$dest/examples/train_ddp" "$fm" cpu 1 >"$dest/out" ||
	{ echo "check_install: train_ddp failed:"; cat "$dest/out"; exit 1; }
grep -Eq "^epoch 1: 60000 samples on 1 ranks, train loss [0-9.]+ acc 0\.[789]" "$dest/out" ||
	{ echo "check_install: train_ddp printed:"; cat "$dest/out"; exit 1; }
if command -v mpirun >/dev/null && grep -q "define PP_HAVE_MPI 1" "$top/config.h"; then
	(. "$top/tests/testlib.sh" && mpi_env &&
	 timeout 300 $mpirun -np 2 "$dest/examples/train_ddp" "$fm" cpu 1) >"$dest/out" 2>&1 ||
		{ echo "check_install: mpirun -np 2 train_ddp failed:"; cat "$dest/out"; exit 1; }
	[ "$(grep -c "^rank [01] of 2: .*identical to rank 0's: yes$" "$dest/out")" -eq 2 ] ||
		{ echo "check_install: mpirun -np 2 train_ddp printed:"; cat "$dest/out"; exit 1; }
fi
# On a GPU (batches opens "cuda" only where there is one), the cuBLAS variant too.
if [ -x "$dest/examples/train_by_hand_cuda" ] && "$dest/examples/batches" "$fm" cuda >/dev/null 2>&1; then
	"$dest/examples/train_by_hand_cuda" "$fm" cuda 1
fi
# The static library: what Libs.private names must be enough, and OpenBLAS is found at run time.
if [ -f "$dest$libdir/libpinpipe.a" ]; then
	cat >"$dest/static.c" <<'EOF'
#include <stdio.h>
#include <pinpipe/pinpipe.h>

int main(void)
{
	struct pp_model_config cfg;
	struct pp_blas_info info;
	struct pp_device *dev;
	struct pp_model *m;

	pp_model_config_init(&cfg);
	if (pp_device_open("cpu", &dev) || pp_model_create("mlp", dev, &cfg, &m)) {
		fprintf(stderr, "static: %s\n", pp_last_error());
		return 1;
	}
	pp_blas_get_info(&info);
	printf("blas: %s %s, chosen by %s\n", info.library, info.core, info.chosen_by);
	pp_model_destroy(m);
	pp_device_close(dev);
	return 0;
}
EOF
	${CC:-cc} "$dest/static.c" $($PKG_CONFIG --cflags pinpipe) "$dest$libdir/libpinpipe.a" \
		$($PKG_CONFIG --static --libs pinpipe | sed 's/-lpinpipe//') -o "$dest/static"
	if ldd "$dest/static" | grep -q 'libpinpipe\|libopenblas'; then
		echo "check_install: the static program links libpinpipe or OpenBLAS:"; ldd "$dest/static"; exit 1
	fi
	"$dest/static" >"$dest/out" || { cat "$dest/out"; exit 1; }
	grep -q '^blas: OpenBLAS [A-Za-z0-9_]*, chosen by [A-Za-z_]*$' "$dest/out" ||
		{ echo "check_install: the static program printed:"; cat "$dest/out"; exit 1; }
	echo "check_install: static library: $(cat "$dest/out")"
fi
echo "check_install: examples built with pkg-config and ran correctly"
