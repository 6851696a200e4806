#!/bin/sh
# tests/test_driver.sh: make check's test driver.  It is automake's
# test-driver (the shell and script given first), whose result line of a
# skipped test also says why, so that the summary carries the reasons:
#   SKIP: tests/test_nn_cuda (cuda: no NVIDIA driver (libcuda.so.1 not found ...))
# The reason is the last line of the test's log that says SKIP or skipped,
# else its last line.  The .log, the .trs and the exit status are
# test-driver's own.
sh=$1 driver=$2
shift 2
log= trs= prev=
for a in "$@"; do
	case $prev in
	--log-file) log=$a ;;
	--trs-file) trs=$a ;;
	esac
	prev=$a
done
line=$("$sh" "$driver" "$@")
rc=$?
if [ -n "$trs" ] && [ -n "$log" ] && grep -qx ':test-result: SKIP' "$trs" 2>/dev/null; then
	# test-driver's own last line ("SKIP NAME (exit status: 77)") is not a reason.
	body=$(sed '$d' "$log")
	reason=$(printf '%s\n' "$body" | grep -i 'skip' | tail -n 1)
	[ -n "$reason" ] || reason=$(printf '%s\n' "$body" | grep -v '^[[:space:]]*$' | tail -n 1)
	reason=$(printf '%s' "$reason" | sed 's/^SKIP: *//' | cut -c 1-160)
	[ -n "$reason" ] && line="$line ($reason)"
fi
printf '%s\n' "$line"
exit $rc
