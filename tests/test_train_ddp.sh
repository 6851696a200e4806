#!/bin/sh
# tests/test_train_ddp.sh: examples/train_ddp.c (built in the tree as
# tests/train_ddp) trains the MLP on Fashion-MNIST for an epoch through the
# grad sync: alone (a world of one: 600 steps of 100 samples, the whole
# training set), and, where mpirun and MPI are there, on 2 ranks (300 steps
# each, 60,000 samples in all), each rank's parameters bit for bit rank
# 0's, and learning (train accuracy above 70% after the epoch).  Skipped
# (77) without the dataset; the 2-rank run is left out without mpirun or
# MPI.  The environment of mpirun is test_train_mpi.sh's (tests/testlib.sh).
set -u

ddp=${TRAIN_DDP:-tests/train_ddp}
[ -x "$ddp" ] || { echo "test_train_ddp: $ddp not built, skipped"; exit 77; }
fm=${PP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -d "$fm" ] || { echo "test_train_ddp: no $fm, skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-ddp-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
. "$(dirname "$0")/testlib.sh"

# Alone: a world of one, every collective in place.
expect 0 "^epoch 1: 60000 samples on 1 ranks, train loss [0-9.]+ acc 0\.[789]" "$ddp" "$fm" cpu 1
grep -Eq "^rank 0 of 1: 600 steps, .* identical to rank 0's: yes$" "$tmp/out" ||
	{ echo "FAIL: train_ddp alone:"; cat "$tmp/out"; fail=1; }

# The build's MPI, as pinpipe-train finds it.
./pinpipe-train --comm=mpi --data=synthetic:60 --epochs=1 --max-steps=1 --no-eval -q >"$tmp/probe" 2>&1
if command -v mpirun >/dev/null && ! grep -q "this build has no MPI" "$tmp/probe"; then
	mpi_env
	for dev in cpu sim; do
		expect 0 "^epoch 1: 60000 samples on 2 ranks, train loss [0-9.]+ acc 0\.[789]" \
			timeout 300 $mpirun -np 2 "$ddp" "$fm" $dev 1
		n=$(grep -Ec "^rank [01] of 2: 300 steps, [0-9]+ allreduces; parameters identical to rank 0's: yes$" \
			"$tmp/out")
		[ "$n" -eq 2 ] || { echo "FAIL: train_ddp on 2 ranks ($dev): $n of 2 ranks hold rank 0's parameters:"; \
			cat "$tmp/out"; fail=1; }
	done
else
	echo "test_train_ddp: no mpirun or no MPI: the 2-rank run left out"
fi
exit $fail
