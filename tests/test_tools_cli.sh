#!/bin/sh
# tests/test_tools_cli.sh: the three tools' one convention.  Fails if one of
# pinpipe-train, pinpipe-bench and pinpipe-pack does not print
# "NAME VERSION" for --version (the version configure gave pinpipe.pc),
# if its --help does not start "usage: NAME " or has a line wider than 80
# columns, if an unknown option is not one line ending "(try --help)" with
# exit 2 naming the option as given (an unknown letter in a cluster, "-Zq",
# as "-Z"), or if an abbreviation of a long option ("--ep=1" for --epochs,
# "--out x") is taken instead of refused the same way, naming the whole
# option, while the whole name with its value as the next argument still
# reaches the value's own check.
set -u
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-cli-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

. "${srcdir:-.}/tests/testlib.sh"

version=$(sed -n 's/^Version: //p' pinpipe.pc)
[ -n "$version" ] || { echo "FAIL: no Version: in pinpipe.pc"; exit 1; }

# one_line CODE PATTERN CMD...: as expect, and stderr is that one line.
one_line() {
	code=$1 pattern=$2
	shift 2
	"$@" >"$tmp/so" 2>"$tmp/se"
	got=$?
	if [ "$got" -ne "$code" ] || [ "$(wc -l <"$tmp/se")" -ne 1 ] ||
	   ! grep -Eq -- "$pattern" "$tmp/se"; then
		echo "FAIL: '$*' exited $got (expected $code), stderr:"; cat "$tmp/se"
		echo "  expected one line matching '$pattern'"; fail=1
	fi
}

for tool in train bench pack; do
	bin=./pinpipe-$tool
	[ -x "$bin" ] || { echo "test_tools_cli: $bin not built, skipped"; exit 77; }
	"$bin" --version >"$tmp/so" 2>"$tmp/se"
	rc=$?
	if [ $rc -ne 0 ] || [ "$(cat "$tmp/so")" != "pinpipe-$tool $version" ] || [ -s "$tmp/se" ]; then
		echo "FAIL: pinpipe-$tool --version: exit $rc, printed '$(cat "$tmp/so" "$tmp/se")'," \
		     "expected 'pinpipe-$tool $version'"; fail=1
	fi
	"$bin" --help >"$tmp/help" 2>"$tmp/se" || { echo "FAIL: pinpipe-$tool --help: exit $?"; fail=1; }
	case $(head -1 "$tmp/help") in
	"usage: pinpipe-$tool "*) ;;
	*) echo "FAIL: pinpipe-$tool --help starts '$(head -1 "$tmp/help")'"; fail=1 ;;
	esac
	# Display columns, not bytes: the help has a few UTF-8 characters (µs).
	width=$(LC_ALL=C.UTF-8 wc -L <"$tmp/help")
	if [ "$width" -gt 80 ]; then
		echo "FAIL: pinpipe-$tool --help is $width columns wide:"
		LC_ALL=C.UTF-8 awk 'length($0) > 80' "$tmp/help"; fail=1
	fi
done

# Unknown options and abbreviations: one line, the same wording, exit 2.
one_line 2 "^pinpipe-train: unknown option '--bogus' \(try --help\)$" ./pinpipe-train --bogus
one_line 2 "^pinpipe-bench: unknown option '--bogus' \(try --help\)$" ./pinpipe-bench overlap --bogus
one_line 2 "^pinpipe-pack: unknown option '--bogus' \(try --help\)$" ./pinpipe-pack --bogus
# An unknown letter at the head of a cluster is named, not the argument before it.
one_line 2 "^pinpipe-train: unknown option '-Z' \(try --help\)$" ./pinpipe-train --epochs=1 -Zq
one_line 2 "^pinpipe-bench: unknown option '-Z' \(try --help\)$" ./pinpipe-bench overlap -Zh
one_line 2 "^pinpipe-pack: unknown option '-Z' \(try --help\)$" ./pinpipe-pack -Zh
# A long option given a value it does not take is named as given.
one_line 2 "^pinpipe-train: unknown option '--no-eval=1' \(try --help\)$" ./pinpipe-train --no-eval=1
whole="options are taken by their whole name"
one_line 2 "^pinpipe-train: '--ep=1': $whole: --epochs \(try --help\)$" ./pinpipe-train --ep=1
one_line 2 "^pinpipe-train: '--max-st': $whole: --max-steps \(try --help\)$" ./pinpipe-train --max-st 5
one_line 2 "^pinpipe-train: '--no-sh': $whole: --no-shuffle \(try --help\)$" ./pinpipe-train --no-sh
one_line 2 "^pinpipe-bench: '--dev=sim': $whole: --device \(try --help\)$" ./pinpipe-bench overlap --dev=sim
one_line 2 "^pinpipe-bench: '--work': $whole: --workers \(try --help\)$" \
	./pinpipe-bench overlap --work 4
one_line 2 "^pinpipe-pack: '--out': $whole: --output \(try --help\)$" ./pinpipe-pack --out "$tmp/x" in
one_line 2 "^pinpipe-pack: '--verif': $whole: --verify \(try --help\)$" ./pinpipe-pack --verif x.pps
# The whole name, its value the next argument: the value's own check answers.
one_line 2 "^pinpipe-train: --epochs=x: " ./pinpipe-train --epochs x
one_line 2 "^pinpipe-bench: --batches: not a number" ./pinpipe-bench overlap --batches 0
one_line 2 "^pinpipe-pack: --level: expected 0..9, got '12'" ./pinpipe-pack --level 12 -o "$tmp/x" in
# pinpipe-bench takes --version and --help before a command, and after one.
expect 0 "^pinpipe-bench $version\$" ./pinpipe-bench overlap --version
expect 0 "^usage: pinpipe-bench " ./pinpipe-bench -h
[ $fail -eq 0 ] && echo "test_tools_cli: --version, --help and the options' spelling as one convention"
exit $fail
