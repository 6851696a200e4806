# tests/testlib.sh: what the shell tests share; sourced after they set $tmp
# (a scratch directory) and fail=0.

# expect CODE PATTERN CMD...: runs CMD, checks its exit code and that its
# stdout+stderr match the extended regular expression PATTERN; on a
# mismatch, says what ran and what it printed, and sets fail=1.
expect() {
	code=$1 pattern=$2
	shift 2
	"$@" >"$tmp/out" 2>&1
	got=$?
	if [ "$got" -ne "$code" ]; then
		echo "FAIL: '$*' exited $got, expected $code:"; cat "$tmp/out"; fail=1
	elif ! grep -Eq -- "$pattern" "$tmp/out"; then
		echo "FAIL: '$*' printed nothing matching '$pattern':"; cat "$tmp/out"; fail=1
	fi
}

# mpi_env: the environment of the tests that run mpirun.  As root, Open
# MPI's mpirun needs both ALLOW variables; oversubscribe: more ranks than
# cores.  Containers often forbid the cross-memory attach of its
# shared-memory transport (ptrace rules): copy through the shared segment
# instead.  Under AddressSanitizer the ranks run without the leak check
# (Open MPI's components, unloaded at exit, leave allocations LeakSanitizer
# can no longer name); under ThreadSanitizer, reports whose stacks run
# through Open MPI are left out (tests/tsan_mpi.supp).  Sets $mpirun.
mpi_env() {
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	export OMPI_MCA_rmaps_base_oversubscribe=1
	export OMPI_MCA_btl_vader_single_copy_mechanism=none
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$(cd "$(dirname "$0")" && pwd)/tsan_mpi.supp"
	mpirun="mpirun --oversubscribe"
}

# cores: prints how many cores this process may run on, counted as the
# tools count them (pp_cpu_usable_cores(), common/cpu.h): the affinity
# mask (Cpus_allowed_list, which taskset sets), else the processors
# online.  Not nproc(1): coreutils' gives OMP_NUM_THREADS or
# OMP_THREAD_LIMIT where either is set, which the tools do not read.
cores() {
	n=$(awk -F'[ \t]+' '$1 == "Cpus_allowed_list:" {
		k = split($2, part, ",")
		for (i = 1; i <= k; i++)
			n += split(part[i], r, "-") == 2 ? r[2] - r[1] + 1 : 1
		print n }' /proc/self/status 2>/dev/null)
	[ "${n:-0}" -gt 0 ] 2>/dev/null || n=$(getconf _NPROCESSORS_ONLN 2>/dev/null)
	[ "${n:-0}" -gt 0 ] 2>/dev/null || n=1
	echo "$n"
}
