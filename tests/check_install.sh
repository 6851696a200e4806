#!/bin/sh
# tests/check_install.sh: installs the built tree into a temporary DESTDIR,
# builds the examples against it with nothing but pkg-config, and runs them:
# examples/batches must see all 60,000 Fashion-MNIST samples once,
# examples/custom_source every token window with its targets shifted, and
# examples/train_by_hand must pass 75% test accuracy on cpu and on sim.  The
# cuBLAS variant is built when the CUDA toolkit is there, and run only on a
# GPU.  Run from a configured and built tree (the lead's CI runs it).
set -eu
top=$(pwd)
dest=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-install-XXXXXX")
trap 'rm -rf "$dest"' EXIT
fm=${PP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

make -s install DESTDIR="$dest" >"$dest.log" 2>&1 || { cat "$dest.log"; exit 1; }
rm -f "$dest.log"
prefix=$(sed -n 's/^prefix=//p' pinpipe.pc)
libdir=$(PKG_CONFIG_PATH= pkg-config --variable=libdir "$top/pinpipe.pc")
export PKG_CONFIG_SYSROOT_DIR="$dest"
export PKG_CONFIG_PATH="$dest$libdir/pkgconfig"
export LD_LIBRARY_PATH="$dest$libdir"
test -f "$dest$prefix/include/pinpipe/pinpipe.h"
test -x "$dest$prefix/bin/pinpipe-train"
echo "check_install: installed under $dest$prefix; cflags: $(pkg-config --cflags pinpipe)"

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
# On a GPU (batches opens "cuda" only where there is one), the cuBLAS variant too.
if [ -x "$dest/examples/train_by_hand_cuda" ] && "$dest/examples/batches" "$fm" cuda >/dev/null 2>&1; then
	"$dest/examples/train_by_hand_cuda" "$fm" cuda 1
fi
echo "check_install: examples built with pkg-config and ran correctly"
