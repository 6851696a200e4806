#!/bin/sh
# tests/test_pinpipe_bench.sh: pinpipe-bench's command line.  Fails if bad
# usage does not give one line on stderr and exit status 2, if --help does
# not exit 0, or if a short overlap run on sim does not write CSV and JSON
# with the expected columns, one pinned and one pageable row, with the
# pinned copies hidden behind compute more than the pageable ones and the
# host blocked in pageable copies more than in pinned ones.
set -u
bench=./pinpipe-bench
tmp=${TMPDIR:-/tmp}/pp-bench-test.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

expect_usage() {
	"$bench" "$@" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	[ $rc -eq 2 ] || fail "pinpipe-bench $*: exit $rc, expected 2"
	[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "pinpipe-bench $*: not one line on stderr: $(cat "$tmp/err")"
	grep -q '^pinpipe-bench: ' "$tmp/err" || fail "pinpipe-bench $*: message: $(cat "$tmp/err")"
}

expect_usage
expect_usage frobnicate
expect_usage --device=sim
expect_usage bandwidth --nope
expect_usage bandwidth --sizes=12Q
expect_usage bandwidth --sizes=
expect_usage overlap --batches=0
expect_usage overlap --dtype=f64
expect_usage overlap --compute-us=abc
expect_usage overlap --device=warp9
expect_usage overlap extra
expect_usage overlap --batch-size

"$bench" --help > "$tmp/out" || fail "--help: exit $?"
grep -q 'usage: pinpipe-bench bandwidth' "$tmp/out" || fail "--help: no usage"
"$bench" overlap --help > /dev/null || fail "overlap --help: exit $?"

"$bench" overlap --data=/nonexistent-dir > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "missing data directory: exit $rc, expected 1"
grep -q '/nonexistent-dir' "$tmp/err" || fail "missing data directory: message: $(cat "$tmp/err")"

"$bench" bandwidth --device=sim --sizes=4K,64K --total=1M --csv="$tmp/bw.csv" > "$tmp/out" ||
	fail "bandwidth run: exit $?"
[ "$(head -1 "$tmp/bw.csv")" = "device,direction,memory,pinned,size_bytes,copies,gb_per_s,host_blocked_share" ] ||
	fail "bandwidth CSV header: $(head -1 "$tmp/bw.csv")"
[ "$(wc -l < "$tmp/bw.csv")" -eq 9 ] || fail "bandwidth CSV: $(wc -l < "$tmp/bw.csv") lines, expected 9"

"$bench" overlap --device=sim:bw=1GB/s --batches=60 --batch-size=128 --compute-us=600 \
	--csv="$tmp/ov.csv" --json="$tmp/ov.json" > "$tmp/out" 2> "$tmp/err" ||
	fail "overlap run: exit $?: $(cat "$tmp/err")"
cols=device,memory,pinned,batch_size,dtype,batches,compute_us,step_us,copy_us,exposed_us,hidden_share,host_blocked_us,data_wait_us,samples_per_s
[ "$(head -1 "$tmp/ov.csv")" = "$cols" ] || fail "overlap CSV header: $(head -1 "$tmp/ov.csv")"
awk -F, 'NR == 2 { pin = $11; pinb = $12; m1 = $2 }
	 NR == 3 { page = $11; pageb = $12; m2 = $2 }
	 END {
		if (NR != 3 || m1 != "pinned" || m2 != "pageable") { print "rows: " NR ", " m1 ", " m2; exit 1 }
		if (!(pin > page)) { print "hidden share: pinned " pin " not above pageable " page; exit 1 }
		if (!(pageb > pinb)) { print "host blocked: pageable " pageb " not above pinned " pinb; exit 1 }
	 }' "$tmp/ov.csv" || fail "overlap CSV: $(cat "$tmp/ov.csv")"
grep -q '"memory": "pinned"' "$tmp/ov.json" || fail "overlap JSON: $(cat "$tmp/ov.json")"
grep -q '"hidden_share": [0-9.]*,' "$tmp/ov.json" || fail "overlap JSON hidden_share: $(cat "$tmp/ov.json")"
/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert len(r)==2 and r[0]["batch_size"]==128' \
	"$tmp/ov.json" 2> /dev/null || [ ! -x /usr/bin/python3 ] || fail "overlap JSON does not parse: $(cat "$tmp/ov.json")"
echo "pinpipe-bench: command line, CSV and JSON as expected"
