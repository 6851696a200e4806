#!/bin/sh
# tests/test_train_pinning.sh: pinpipe-train says what pinning bought and
# when the host was too loaded.  Fails if a grid of --pin-memory=on,off on
# sim does not end with a line giving the step time of each run, as its
# rows in --csv give it (batch_size / samples_per_s), and the share saved;
# if a grid without such a pair prints one; or if a run beside busy loops
# on every core, twice over, is not said to measure the host.  Both are
# said on stderr: the table stays the end of stdout; -q leaves them out.
set -u
train=${PINPIPE_TRAIN:-./pinpipe-train}
[ -x "$train" ] || { echo "test_train_pinning: $train not built, skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-pin-test-XXXXXX") || exit 1
pids=
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
fail=0
. "$(dirname "$0")/testlib.sh"
small="--data=synthetic:1400 --device=sim:call_us=5 --model=mlp --batch-size=50 --epochs=2 --no-eval --no-progress"

"$train" $small --pin-memory=on,off --csv="$tmp/p.csv" >"$tmp/out" 2>"$tmp/err" ||
	{ echo "FAIL: the grid: exit $?"; cat "$tmp/err"; exit 1; }
line=$(sed -n 's/^pinpipe-train: \(pinning bought\)/\1/p' "$tmp/err")
[ "$(printf '%s\n' "$line" | grep -c .)" -eq 1 ] || { echo "FAIL: not one line of what pinning bought:"; cat "$tmp/err"; fail=1; }
# The rows' own step times (ms), run 1 pinned and run 2 pageable, against the line's.
awk -F, -v line="$line" '
	NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	{ s[$c["run"]] += $c["batch_size"] / $c["samples_per_s"] * 1e3; n[$c["run"]]++; pin[$c["run"]] = $c["pin_memory"] }
	END {
		on = s[1] / n[1]; off = s[2] / n[2]
		if (n[1] != 2 || n[2] != 2 || pin[1] != "on" || pin[2] != "off") { print "rows: " n[1] ", " n[2]; exit 1 }
		if (!match(line, /^pinning bought \(run 1 against run 2, sim[^ )]*\): a step of [0-9.]+ ms pinned against [0-9.]+ ms pageable, [0-9.]+% (less|MORE)/)) {
			print "form: " line; exit 1 }
		split(line, w, " ")
		gon = w[12]; goff = w[16]; pct = w[19] + 0
		d = off - on; want = (d < 0 ? -d : d) / off * 100
		if (gon - on > 0.002 || on - gon > 0.002 || goff - off > 0.002 || off - goff > 0.002 ||
		    pct - want > 0.1 || want - pct > 0.1 || (d >= 0) != (index(line, "% less") > 0)) {
			printf "line %s; rows %.3f and %.3f ms, %.1f%%\n", line, on, off, want; exit 1 }
	}' "$tmp/p.csv" >"$tmp/why" || { echo "FAIL: what pinning bought: $(cat "$tmp/why")"; cat "$tmp/p.csv"; fail=1; }

# No pair that differs in --pin-memory alone: no such line.
"$train" $small --pin-memory=on --workers=0,1 >"$tmp/out" 2>&1 || { echo "FAIL: workers grid: exit $?"; fail=1; }
! grep -q 'pinning bought' "$tmp/out" || { echo "FAIL: a line without a pair:"; cat "$tmp/out"; fail=1; }

# Busy loops on every core, twice over: each of the run's threads gets a
# third of a core at most, and waits the rest of the time it is runnable.
# The run delay comes from /proc/self/task/N/schedstat: a kernel (or a
# sandbox) without it says nothing, and the check is left out.  The cores
# are the tool's (testlib.sh), which its warning names.
cores=$(cores)
i=0
[ -r /proc/self/schedstat ] || { echo "test_train_pinning: no schedstat here: the loaded host's warning not checked"; i=$((cores * 2)); }
while [ $i -lt $((cores * 2)) ]; do
	sh -c 'while :; do :; done' &
	pids="$pids $!"
	i=$((i + 1))
done
[ -z "$pids" ] || "$train" $small --epochs=1 --pin-memory=on,off >"$tmp/busy" 2>&1
rc=$?
for p in $pids; do kill "$p"; done
busy=$pids
pids=
[ $rc -eq 0 ] || { echo "FAIL: beside busy loops: exit $rc"; cat "$tmp/busy"; fail=1; }
[ -z "$busy" ] || grep -q "^pinpipe-train: warning: host too loaded for these timings: run [12] had [0-9.]* threads waiting for a core on average in an epoch ($cores cores); on sim" "$tmp/busy" ||
	{ echo "FAIL: beside $((cores * 2)) busy loops on $cores cores, no warning:"; cat "$tmp/busy"; fail=1; }
"$train" $small -q --pin-memory=on,off 2>"$tmp/err" >/dev/null
! grep -q 'pinning bought\|host too loaded' "$tmp/err" || { echo "FAIL: -q says more than the table:"; cat "$tmp/err"; fail=1; }
[ $fail -eq 0 ] && echo "test_train_pinning: what pinning bought, and a host too loaded, said"
exit $fail
