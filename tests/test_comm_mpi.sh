#!/bin/sh
# tests/test_comm_mpi.sh: the communicator's non-blocking allreduce on 2
# and 3 ranks (mpirun -np N tests/comm_ranks, which says what it checks):
#
#  1. Several allreduces in flight at once, on the host and on a sim
#     device, waited for in reverse order: each rank's results equal the
#     sums and means computed in the program, exactly.
#  2. A rank that never starts the second allreduce: the others' wait for
#     it fails with -ETIMEDOUT after the timeout of 1 s, naming the rank,
#     the call and the timeout, and they end the job with exit 3
#     (pp_comm_abort); the job is bounded by timeout(1) at 60 s, 60 times
#     the communicator's timeout, so a hang fails the test (status 124).
#     The communicator of 1 s is made once a collective of one of 120 s
#     has lined the ranks up, so that ranks started seconds apart on a
#     loaded host do not time out before the wait measured.
#  3. The grad sync (pinpipe/grad_sync.h): a gradient handed over in
#     ranges, averaged in buckets, each float the ranks' exact mean; the
#     deterministic reduction of 6 micro-batches bit for bit that of one
#     process.  On 2 ranks, rank 1's collectives failing (an injected EIO):
#     its hook's error named and the job ended with exit 5.
#
# Skipped (77) where mpirun is absent or the build has no MPI.  The
# environment is test_train_mpi.sh's: root allowed, oversubscribed, no
# cross-memory attach, no leak check under AddressSanitizer, Open MPI's
# stacks left out of ThreadSanitizer's reports.
set -u

ranks=${COMM_RANKS:-tests/comm_ranks}
[ -x "$ranks" ] || { echo "test_comm_mpi: $ranks not built, skipped"; exit 77; }
command -v mpirun >/dev/null || { echo "test_comm_mpi: no mpirun (./bootstrap installs Open MPI), skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-comm-mpi-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
. "$(dirname "$0")/testlib.sh"

mpi_env

"$ranks" reduce >"$tmp/probe" 2>&1
if grep -q "this build has no MPI" "$tmp/probe"; then
	echo "test_comm_mpi: the build has no MPI (configure --with-mpi), skipped"
	exit 77
fi

for n in 2 3; do
	# 1. Every rank says ok (and the job exits 0).
	expect 0 "" timeout 300 $mpirun -np $n "$ranks" reduce
	oks=$(grep -c "comm_ranks: rank [0-9] of $n: ok" "$tmp/out")
	[ "$oks" -eq $n ] || { echo "FAIL: -np $n reduce: $oks ranks said ok, expected $n:"; cat "$tmp/out"; fail=1; }

	# 2. Rank 1 skips the second allreduce: exit 3 from the others' abort, the reason said.
	expect 3 "comm mpi: rank [02] of $n: iallreduce: 4000 bytes not done within the timeout of 1 s" \
		timeout 60 $mpirun -np $n "$ranks" skip
	grep -q "no abort came" "$tmp/out" &&
		{ echo "FAIL: -np $n skip: rank 1 outlived the abort:"; cat "$tmp/out"; fail=1; }

	# 3. The grad sync: every rank says "grad ok".
	expect 0 "" timeout 300 $mpirun -np $n "$ranks" grad
	oks=$(grep -c "comm_ranks: rank [0-9] of $n: grad ok" "$tmp/out")
	[ "$oks" -eq $n ] || { echo "FAIL: -np $n grad: $oks ranks said ok, expected $n:"; cat "$tmp/out"; fail=1; }
done
expect 5 "comm_ranks: rank 1: the gradient: comm mpi: rank 1 of 2: iallreduce: Input/output error \(injected fault\)" \
	timeout 60 $mpirun -np 2 "$ranks" gradfail
exit $fail
