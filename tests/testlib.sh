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
