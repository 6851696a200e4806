#!/bin/sh
# tests/test_skip_reason.sh: make check's driver (tests/test_driver.sh)
# puts a skipped test's reason on its summary line.  Fails if a test that
# exits 77 after saying why does not get "SKIP: NAME (its reason)", one
# without a SKIP line its last line, or if a passing or failing test's line,
# exit status, .log or .trs differ from automake's test-driver's.
set -u
src=${srcdir:-.}
driver="$src/build-aux/test-driver"
[ -f "$driver" ] || { echo "test_skip_reason: no $driver, skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-driver-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

printf '#!/bin/sh\necho starting\necho "SKIP: cuda: no GPU here"\necho done\nexit 77\n' >"$tmp/skips"
printf '#!/bin/sh\necho checking\necho "python3 cannot import tensorboard"\nexit 77\n' >"$tmp/quiet"
printf '#!/bin/sh\necho fine\nexit 0\n' >"$tmp/passes"
printf '#!/bin/sh\necho "skipped nothing, broke"\nexit 1\n' >"$tmp/fails"
chmod +x "$tmp/skips" "$tmp/quiet" "$tmp/passes" "$tmp/fails"

# run NAME EXPECTED-LINE EXPECTED-STATUS
run() {
	out=$(sh "$src/tests/test_driver.sh" sh "$driver" --test-name "$1" --log-file "$tmp/$1.log" \
		--trs-file "$tmp/$1.trs" --color-tests no --expect-failure no --enable-hard-errors yes \
		-- "$tmp/$1")
	rc=$?
	if [ "$out" != "$2" ] || [ $rc -ne "$3" ]; then
		echo "FAIL: $1: printed '$out' (exit $rc), expected '$2' (exit $3)"; fail=1
	fi
	sh "$driver" --test-name "$1" --log-file "$tmp/$1.ref.log" --trs-file "$tmp/$1.ref.trs" \
		--color-tests no --expect-failure no --enable-hard-errors yes -- "$tmp/$1" >/dev/null
	cmp -s "$tmp/$1.log" "$tmp/$1.ref.log" && cmp -s "$tmp/$1.trs" "$tmp/$1.ref.trs" ||
		{ echo "FAIL: $1: .log or .trs not test-driver's"; fail=1; }
}
run skips "SKIP: skips (cuda: no GPU here)" 0
run quiet "SKIP: quiet (python3 cannot import tensorboard)" 0
run passes "PASS: passes" 0
run fails "FAIL: fails" 0
[ $fail -eq 0 ] && echo "test_skip_reason: skipped tests' reasons on their summary lines"
exit $fail
