#!/bin/sh
# tests/test_readme_mpirun.sh: README.md's mpirun lines (those that run
# "mpirun ... -np 2 ./pinpipe-train") run as README prints them, in the
# environment a user has: none of Open MPI's variables that allow root or
# more ranks than slots (tests/testlib.sh's mpi_env sets them for the other
# tests; not here), PINPIPE_DATA naming small synthetic data so that the
# default dataset and epochs train in seconds.  Fails if README has no
# such line, if a line fails (as root, without --allow-run-as-root, Open
# MPI refuses to start), or if its table does not show the 2 ranks and the
# global batch of 100.  Skipped (77) where mpirun is absent, the build has
# no MPI, or Open MPI finds fewer than 2 slots (one core) for -np 2.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
readme=${srcdir:-.}/README.md
[ -x "$train" ] || { echo "test_readme_mpirun: $train not built, skipped"; exit 77; }
[ -f "$readme" ] || { echo "FAIL: no $readme"; exit 1; }
command -v mpirun >/dev/null || { echo "test_readme_mpirun: no mpirun, skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-readme-mpi-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
# Only where a container forbids its cross-memory attach (as for the other MPI tests).
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export PINPIPE_DATA=synthetic:1200
# As tests/testlib.sh's mpi_env: no leak check of Open MPI's components, no reports of its races.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")" && pwd)/tsan_mpi.supp"

"$train" --comm=mpi --data=synthetic:60 --epochs=1 --max-steps=1 --no-eval -q >"$tmp/probe" 2>&1
if grep -q "this build has no MPI" "$tmp/probe"; then
	echo "test_readme_mpirun: the build has no MPI, skipped"
	exit 77
fi

# The lines, their comments cut off.
grep -E '^mpirun( [^ ]+)* -np 2 \./pinpipe-train' "$readme" | sed 's/ *#.*//' >"$tmp/lines"
[ "$(wc -l <"$tmp/lines")" -ge 2 ] || { echo "FAIL: README.md has not 2 mpirun -np 2 lines"; exit 1; }
# -np 2 needs two slots (cores, to Open MPI): said, and skipped, on a machine of one.
first=$(head -1 "$tmp/lines" | sed 's| \./pinpipe-train.*| true|')
if ! timeout 120 sh -c "$first" </dev/null >"$tmp/slots" 2>&1 && grep -q "not enough slots" "$tmp/slots"; then
	echo "test_readme_mpirun: Open MPI has fewer than 2 slots here, skipped"
	exit 77
fi
while read -r line; do
	echo "test_readme_mpirun: $line"
	if ! timeout 300 sh -c "$line" </dev/null >"$tmp/out" 2>&1; then
		echo "FAIL: '$line' failed:"; cat "$tmp/out"; fail=1; continue
	fi
	grep -Eq '(^|  )ranks=2(  |$)' "$tmp/out" && grep -Eq '(^|  )global_batch=100(  |$)' "$tmp/out" ||
		{ echo "FAIL: '$line': its table does not say ranks=2 and global_batch=100:"; cat "$tmp/out"; fail=1; }
done <"$tmp/lines"
exit $fail
