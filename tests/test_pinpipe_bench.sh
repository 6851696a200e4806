#!/bin/sh
# tests/test_pinpipe_bench.sh: pinpipe-bench's command line.  Fails if bad
# usage does not give one line on stderr and exit status 2, if --help does
# not exit 0, if a --csv or --jsonl that cannot be written is not refused
# before anything is measured, if a benchmark failing half-way does not
# keep the rows it made, if a standard output that cannot be written is not
# a failure, if rows at a mounted file are not written over it in place,
# if --csv and --jsonl on one file are not refused,
# if rows given standard output's own file do not follow its table there,
# or if a short overlap run on sim does not write CSV and JSON
# lines with the expected columns and header, one pinned and one pageable
# row, with the figures below; if the line of what pinning bought does not
# give the rows' own figures; if the warning that the host was too loaded
# is not printed exactly when a row's cpu_wait says so, and is not printed
# while busy loops take every core.
set -u
bench=./pinpipe-bench
tmp=${TMPDIR:-/tmp}/pp-bench-test.$$
mkdir -p "$tmp"
. "$(dirname "$0")/testlib.sh"
pids=
# The busy loops below end with the test, whatever ends it.
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
fail() { echo "FAIL: $*"; exit 1; }
# A CSV's rows for awk -F,: the first cell, quoted where a sim's settings
# hold commas ("sim:bw=1GB/s,call_us=200"), made plain, its commas ';'.
plain() { sed -E ':a
s/^("[^",]*),/\1;/
ta
s/^"([^"]*)"/\1/' "$1"; }

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
# an option of the other command: refused, not taken and ignored
expect_usage bandwidth --workers=4
expect_usage bandwidth --data=/nonexistent
expect_usage overlap --sizes=4K
expect_usage overlap --total=1M

"$bench" --help > "$tmp/out" || fail "--help: exit $?"
grep -q 'usage: pinpipe-bench bandwidth' "$tmp/out" || fail "--help: no usage"
"$bench" overlap --help > /dev/null || fail "overlap --help: exit $?"

"$bench" overlap --data=/nonexistent-dir > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "missing data directory: exit $rc, expected 1"
grep -q '/nonexistent-dir' "$tmp/err" || fail "missing data directory: message: $(cat "$tmp/err")"

# A --csv or --jsonl that cannot be written: refused before anything is
# measured (nothing on stdout), naming the option and the path; the other
# option's file, already there, stays as it was (so does one given with
# a bad device).
for opt in csv jsonl; do
	other=jsonl
	[ $opt = jsonl ] && other=csv
	echo "rows of before" > "$tmp/kept"
	"$bench" overlap --device=sim --batches=10 --compute-us=0 --$opt="$tmp/none/rows" \
		--$other="$tmp/kept" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	[ $rc -eq 2 ] || fail "--$opt in a missing directory: exit $rc, expected 2 (as pinpipe-train's)"
	grep -q "^pinpipe-bench: --$opt=$tmp/none/rows: cannot open for writing" "$tmp/err" ||
		fail "--$opt in a missing directory: message: $(cat "$tmp/err")"
	[ ! -s "$tmp/out" ] || fail "--$opt in a missing directory: measured first: $(cat "$tmp/out")"
	[ "$(cat "$tmp/kept")" = "rows of before" ] || fail "--$other's file changed: $(cat "$tmp/kept")"
	"$bench" overlap --device=cuda:999 --$opt="$tmp/kept" > /dev/null 2>&1
	[ "$(cat "$tmp/kept")" = "rows of before" ] ||
		fail "--$opt's file changed by a run with a bad device: $(cat "$tmp/kept")"
done
# A benchmark that fails half-way (the 4 MiB copies on a device of 1 MiB):
# exit 1, its reason, and the rows it made (the 4 KiB copies') kept.
"$bench" bandwidth --device=sim:mem=1MiB --sizes=4K,4M --total=64K --csv="$tmp/half.csv" \
	--jsonl="$tmp/half.json" > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "a benchmark failing half-way: exit $rc, expected 1"
grep -q "^pinpipe-bench: device memory: .*out of device memory" "$tmp/err" ||
	fail "a benchmark failing half-way: message: $(cat "$tmp/err")"
[ "$(grep -c ',4096,' "$tmp/half.csv")" -eq 4 ] && [ "$(wc -l < "$tmp/half.csv")" -eq 5 ] &&
	[ "$(wc -l < "$tmp/half.json")" -eq 4 ] ||
	fail "a benchmark failing half-way: the rows it made not kept: $(cat "$tmp/half.csv" "$tmp/half.json")"
# A file mounted at --csv and --jsonl (a container's volume of one file):
# no rename can replace it (EBUSY), so the rows are written over it in
# place, said; they were lost with exit 1.  Where the volume is full, the
# file is left as it was and the rows are kept beside it, named (an
# in-place write cut the earlier rows).  Needs a mount namespace of one's
# own where files and a tmpfs may be mounted.
mkdir "$tmp/mnt"
if command -v unshare >/dev/null &&
	unshare -rm sh -c 'mount --bind "$1" "$1" && mount -t tmpfs -o size=64k t "$1"' sh "$tmp/mnt" 2>/dev/null; then
	for f in at.csv at.json vol.csv vol.json; do echo "rows of before" > "$tmp/mnt/$f"; done
	unshare -rm sh -c 'mount --bind "$1/vol.csv" "$1/at.csv" && mount --bind "$1/vol.json" "$1/at.json" &&
		shift && exec "$@"' sh "$tmp/mnt" "$bench" bandwidth --device=sim --sizes=4K --total=64K \
		--csv="$tmp/mnt/at.csv" --jsonl="$tmp/mnt/at.json" > "$tmp/out" 2> "$tmp/err" ||
		fail "rows at a mounted file: exit $?: $(cat "$tmp/err")"
	[ "$(grep -c 'cannot be renamed over it (Device or resource busy): its rows are written in place' \
		"$tmp/err")" -eq 2 ] && [ "$(grep -c ',4096,' "$tmp/mnt/vol.csv")" -eq 4 ] &&
		[ "$(wc -l < "$tmp/mnt/vol.csv")" -eq 5 ] && [ "$(wc -l < "$tmp/mnt/vol.json")" -eq 4 ] &&
		[ "$(ls "$tmp/mnt" | tr '\n' ' ')" = "at.csv at.json vol.csv vol.json " ] ||
		fail "rows at a mounted file: $(cat "$tmp/err" "$tmp/mnt/vol.csv"; ls "$tmp/mnt")"
	# The volume full: 4 KiB left, where 11 KB of rows need 8 more (pages of 4 KiB).
	if [ "$(getconf PAGESIZE)" != 4096 ]; then
		echo "test_pinpipe_bench: pages of $(getconf PAGESIZE) bytes: rows at a full mounted file not checked"
	else
		mkdir "$tmp/mnt/small"
		unshare -rm sh -c 'mount -t tmpfs -o size=64k t "$1/small" && echo "rows of before" > "$1/small/vol.json" &&
			{ dd if=/dev/zero of="$1/small/fill" bs=4k 2>/dev/null; truncate -s -4K "$1/small/fill"; } &&
			mount --bind "$1/small/vol.json" "$1/at.json" && shift && exec "$@"; exit 99' sh "$tmp/mnt" \
			"$bench" bandwidth --device=sim --sizes=4K,8K,12K,16K,20K,24K,28K,32K,36K,40K,44K,48K,52K,56K,60K,64K \
			--total=64K --jsonl="$tmp/mnt/at.json" > "$tmp/out" 2> "$tmp/err"
		rc=$?
		kept=$(ls "$tmp/mnt" | grep '^at\.json\.kept-')
		[ $rc -eq 1 ] && grep -q "at.json: write failed: .* cannot be renamed over it (Device or resource busy), nor its rows written over it: No space left on device; they are in $tmp/mnt/at.json.kept-" "$tmp/err" &&
			[ -n "$kept" ] && [ "$(wc -l < "$tmp/mnt/$kept")" -eq 64 ] && ! ls "$tmp/mnt" | grep -q '\.tmp-' ||
			fail "rows at a full mounted file: exit $rc: $(cat "$tmp/err"; ls "$tmp/mnt")"
	fi
else
	echo "test_pinpipe_bench: no mount namespace of our own (unshare -rm): rows at a mounted file not checked"
fi
# A standard output that does not take the table: said, exit 1 (it was 0).
"$bench" bandwidth --device=sim --sizes=4K --total=64K > /dev/full 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "^pinpipe-bench: standard output: cannot write: No space left on device" "$tmp/err" ||
	fail "stdout /dev/full: exit $rc: $(cat "$tmp/err")"
# Both on one regular file: refused (exit 2), the file left as it was (the
# second's truncation took the first's rows).
echo "rows of before" > "$tmp/one"
"$bench" bandwidth --device=sim --sizes=4K --total=64K --csv="$tmp/one" --jsonl="$tmp/../${tmp##*/}/one" \
	> "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "^pinpipe-bench: --csv=$tmp/one and --jsonl=.* are one file" "$tmp/err" &&
	[ "$(cat "$tmp/one")" = "rows of before" ] && [ ! -s "$tmp/out" ] ||
	fail "--csv and --jsonl on one file: exit $rc: $(cat "$tmp/err" "$tmp/one")"
# Both on standard output's own file (/dev/fd/1, stdout redirected to a
# file): the table first, then the rows; truncating it for the rows cut
# the table, and stdout, flushed last from its own offset, wrote over them.
"$bench" bandwidth --device=sim --sizes=4K --total=64K --csv=/dev/fd/1 --jsonl=/dev/fd/1 \
	> "$tmp/shared" 2> "$tmp/err" || fail "--csv=/dev/fd/1 --jsonl=/dev/fd/1: exit $?: $(cat "$tmp/err")"
awk '/^# pinpipe-bench bandwidth/ { t = NR } /^sim +h2d +pinned/ { row = NR }
     /^device,direction,/ { head = NR } /^sim,/ { c++; last_c = NR } /^\{"device": "sim"/ { j++; first_j = j == 1 ? NR : first_j }
     END { exit !(t == 1 && row > t && head > row && c == 4 && j == 4 && first_j > last_c) }' "$tmp/shared" ||
	fail "--csv and --jsonl on standard output's file: $(cat "$tmp/shared")"

"$bench" bandwidth --device=sim --sizes=4K,64K --total=1M --csv="$tmp/bw.csv" > "$tmp/out" ||
	fail "bandwidth run: exit $?"
[ "$(head -1 "$tmp/bw.csv")" = "device,direction,memory,pinned,size_bytes,copies,gb_per_s,host_blocked_share,cpu_wait" ] ||
	fail "bandwidth CSV header: $(head -1 "$tmp/bw.csv")"
[ "$(wc -l < "$tmp/bw.csv")" -eq 9 ] || fail "bandwidth CSV: $(wc -l < "$tmp/bw.csv") lines, expected 9"
# What pinning bought, per size: pinned GB/s over pageable, from the rows (h2d: rows 2 and 4, 6 and 8).
want=$(plain "$tmp/bw.csv" | awk -F, 'NR > 1 { g[NR] = $7; s[NR] = $5 }
	END { printf "# pinning bought, h2d (pinned against pageable GB/s): %s B %.2fx, %s B %.2fx",
	      s[2], g[2] / g[4], s[6], g[6] / g[8] }')
grep -qxF "$want" "$tmp/out" || fail "bandwidth: expected '$want' in: $(cat "$tmp/out")"

# The host too loaded: printed exactly when a row's cpu_wait is 0.25 or more.
# $1: the CSV, $2: the output.
check_load_line() {
	loaded=$(plain "$1" | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "cpu_wait") c = i }
		NR > 1 && $c != "-" && $c >= 0.25 { n++ } END { print n + 0 }')
	if [ "$loaded" -gt 0 ]; then
		grep -q '^# host too loaded for these figures: ' "$2" ||
			fail "cpu_wait of 0.25 or more in $loaded rows, and no warning: $(cat "$1" "$2")"
	elif grep -q '^# host too loaded' "$2"; then
		fail "a warning with every cpu_wait under 0.25: $(cat "$1" "$2")"
	fi
}
check_load_line "$tmp/bw.csv" "$tmp/out"

# Runs a check of the figures up to 5 times: a run where other processes took
# the cores from the loader or the simulated engines is measured again; one
# must meet every bound.  A miss where a row's cpu_wait was 0.25 or more (the
# bench's own line: the host too loaded for these figures; sim's copy engine
# and kernels are host threads) is a host that could not run the check, not
# a failure: when every miss was such a one, the check is said not judged.
# $1: a name; $2: the CSV the command writes; the rest: the command.
with_retries() {
	what=$1
	csv=$2
	shift 2
	judged=0
	for attempt in 1 2 3 4 5; do
		"$@" && return 0
		waits=$(plain "$csv" | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "cpu_wait") c = i }
			NR > 1 && c { w = w " " $c; if ($c != "-" && $c >= 0.25) l = 1 } END { print (l ? "loaded" : "idle") w }')
		echo "$what: attempt $attempt missed ($waits): $(cat "$tmp/why")"
		case $waits in loaded*) ;; *) judged=$((judged + 1)) ;; esac
		[ $judged -lt 3 ] || break
	done
	[ $judged -gt 0 ] || { echo "$what: not judged: the host was too loaded in every attempt"; return 0; }
	fail "$what: $(cat "$tmp/why")"
}

# The rule of the exposed figure, with every device call costing the host
# 20 us (as on an H100 host): compute long enough for the step to be the
# compute and for nothing to wait for data hides pinned copies (3.2 MB,
# 320 us at 10 GB/s; at least 95%), and a pageable copy blocks the host
# about as long as it lasts (at least half of its time as timed, which
# includes issuing it).  The compute is sized from what a first run without
# compute measures: four times its step (the loader and the copy), and at
# least 2 ms, so that a slow build (the sanitizers) keeps the rule's terms.
"$bench" overlap --device=sim:bw=10GB/s,call_us=20 --batches=30 --batch-size=1024 \
	--compute-us=0 --csv="$tmp/bare.csv" > /dev/null 2> "$tmp/err" ||
	fail "overlap run without compute: exit $?: $(cat "$tmp/err")"
compute_us=$(plain "$tmp/bare.csv" | awk -F, 'NR == 2 { c = int($8 * 4); print (c > 2000 ? c : 2000) }')
rule() {
	"$bench" overlap --device=sim:bw=10GB/s,call_us=20 --batches=60 --batch-size=1024 \
		--compute-us="$compute_us" --time-every=1 --csv="$tmp/ov.csv" --jsonl="$tmp/ov.json" \
		> "$tmp/out" 2> "$tmp/err" || fail "overlap run: exit $?: $(cat "$tmp/err")"
	plain "$tmp/ov.csv" | awk -F, 'NR == 2 { pin = $11; m1 = $2 }
		 NR == 3 { pagec = $9; pageb = $12; m2 = $2 }
		 END {
			if (NR != 3 || m1 != "pinned" || m2 != "pageable") { print "rows: " NR ", " m1 ", " m2; exit 1 }
			if (!(pin >= 0.95)) { print "pinned: hidden share " pin " under 0.95"; exit 1 }
			if (!(pageb >= pagec / 2)) { print "pageable: host blocked " pageb " us of a " pagec " us copy"; exit 1 }
		 }' > "$tmp/why" || { cat "$tmp/ov.csv" >> "$tmp/why"; return 1; }
}
with_retries "overlap, compute-bound" "$tmp/ov.csv" rule
# The device with its settings, quoted in CSV (it holds a comma) and a JSON string.
sed -n 2p "$tmp/ov.csv" | grep -q '^"sim:bw=10GB/s,call_us=20",pinned,1024,' ||
	fail "overlap CSV: the device's cell: $(sed -n 2p "$tmp/ov.csv")"
grep -q '^# data: synthetic, 60000 samples of 1x28x28 u8 as f32; batches of 1024' "$tmp/out" ||
	fail "overlap: the header does not say which data: $(cat "$tmp/out")"
grep -q "^# compute: $compute_us.0 us a batch (--compute-us) as 1 kernel; one batch in 1 timed" "$tmp/out" ||
	fail "overlap: the header does not say the compute: $(cat "$tmp/out")"
cols=device,memory,batch_size,dtype,batches,kernels,compute_us,step_us,copy_us,exposed_us,hidden_share,host_blocked_us,stage_us,calls_per_batch,data_wait_us,samples_per_s,cpu_wait
[ "$(head -1 "$tmp/ov.csv")" = "$cols" ] || fail "overlap CSV header: $(head -1 "$tmp/ov.csv")"
grep -q '"memory": "pinned"' "$tmp/ov.json" || fail "overlap JSON: $(cat "$tmp/ov.json")"
grep -q '"hidden_share": [0-9.]*,' "$tmp/ov.json" || fail "overlap JSON hidden_share: $(cat "$tmp/ov.json")"
[ "$(wc -l < "$tmp/ov.json")" -eq 2 ] || fail "overlap JSON lines: not a line a row: $(cat "$tmp/ov.json")"
/usr/bin/python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert len(r)==2 and r[0]["batch_size"]==1024 and r[1]["device"]=="sim:bw=10GB/s,call_us=20"' \
	"$tmp/ov.json" 2> /dev/null || [ ! -x /usr/bin/python3 ] || fail "overlap JSON lines do not parse: $(cat "$tmp/ov.json")"
# What pinning bought: the rows' step times, and the share of the pageable one saved.
want=$(plain "$tmp/ov.csv" | awk -F, 'NR == 2 { on = $8; eon = $10 } NR == 3 { off = $8; eoff = $10 }
	END { d = off - on; printf "# pinning bought: a step of %s us pinned against %s us pageable, %.1f%% %s (exposed copy %s against %s us a batch)",
	      on, off, (d < 0 ? -d : d) / off * 100, (d >= 0 ? "less" : "MORE"), eon, eoff }')
grep -qxF "$want" "$tmp/out" || fail "overlap: expected '$want' in: $(cat "$tmp/out")"
check_load_line "$tmp/ov.csv" "$tmp/out"
# --json is the same as --jsonl.
"$bench" overlap --device=sim --batches=10 --compute-us=0 --json="$tmp/alias.json" > /dev/null 2>&1 ||
	fail "overlap --json: exit $?"
[ "$(wc -l < "$tmp/alias.json")" -eq 2 ] && grep -q '^{"device": "sim", "memory": "pinned"' "$tmp/alias.json" ||
	fail "--json: not JSON lines: $(cat "$tmp/alias.json")"

# Busy loops on every core, twice over: this process's threads wait for a
# core most of the time (a loop per core would leave the scheduler's fair
# share; two leave each thread a third at most), and the figures are said
# to be the host's.
# The run delay comes from /proc/self/task/N/schedstat: a kernel (or a
# sandbox) without it says nothing, and the check is left out.  The cores
# are the tool's (testlib.sh), which its warning names.
cores=$(cores)
pids=
i=0
[ -r /proc/self/schedstat ] || { echo "test_pinpipe_bench: no schedstat here: the loaded host's warning not checked"; i=$((cores * 2)); }
while [ $i -lt $((cores * 2)) ]; do
	sh -c 'while :; do :; done' &
	pids="$pids $!"
	i=$((i + 1))
done
if [ -n "$pids" ]; then
"$bench" overlap --device=sim:call_us=20 --batches=60 --compute-us=200 --csv="$tmp/busy.csv" \
	> "$tmp/busy.out" 2> "$tmp/err"
rc=$?
for p in $pids; do kill "$p"; done
pids=
wait 2> /dev/null
[ $rc -eq 0 ] || fail "overlap beside busy loops: exit $rc: $(cat "$tmp/err")"
check_load_line "$tmp/busy.csv" "$tmp/busy.out"
grep -q "^# host too loaded for these figures: this process had [0-9.]* threads waiting for a core on average (cpu_wait, $cores cores); sim's copy engine and kernels are host threads" "$tmp/busy.out" ||
	fail "beside $((cores * 2)) busy loops on $cores cores, no warning: $(cat "$tmp/busy.csv" "$tmp/busy.out")"
fi

# Launch-bound steps (4 kernels of no length, 200 us a launch): a pageable
# copy blocks the launches, and the time it blocks the host is counted as
# exposed (at least half of it: the compute stream is idle all along); a
# pinned copy blocks nothing, so less of it is exposed (under half of the
# pageable one's exposed time) and more of it is hidden.  The bounds are of
# the run's own figures: the pageable copy's share hidden is not bounded
# alone, as its device time, on a loaded host, grows past the host's block.
launch_bound() {
	"$bench" overlap --device=sim:bw=1GB/s,call_us=200 --batches=40 --compute-us=0 \
		--kernels=4 --time-every=1 --csv="$tmp/lb.csv" > "$tmp/out" 2> "$tmp/err" ||
		fail "overlap --kernels=4: exit $?: $(cat "$tmp/err")"
	plain "$tmp/lb.csv" | awk -F, 'NR == 2 { pin = $11; k = $6; pine = $10 }
		 NR == 3 { page = $11; pagee = $10; pageb = $12 }
		 END {
			if (NR != 3 || k != 4) { print "rows: " NR ", kernels " k; exit 1 }
			if (!(pagee >= pageb / 2)) { print "pageable: " pagee " us exposed of " pageb " us blocking the host"; exit 1 }
			if (!(pine < pagee / 2)) { print "exposed: pinned " pine " us, pageable " pagee " us"; exit 1 }
			if (!(pin > page)) { print "hidden share: pinned " pin ", pageable " page; exit 1 }
		 }' > "$tmp/why" || { cat "$tmp/lb.csv" >> "$tmp/why"; return 1; }
}
with_retries "overlap --kernels=4" "$tmp/lb.csv" launch_bound
expect_usage overlap --kernels=0
expect_usage overlap --time-every=x
expect_usage overlap --prefetch=0
expect_usage bandwidth --prefetch=4
# A ring of one batch under a stage that copies four ahead: the stage gives
# the loader its batch back as its copy ends, and the run goes on.
timeout 120 "$bench" overlap --device=sim --batches=40 --compute-us=0 --workers=2 --depth=4 \
	--prefetch=1 > "$tmp/out" 2> "$tmp/err" || fail "overlap --prefetch=1: exit $?: $(cat "$tmp/err")"
grep -q "^# the loader's ring: 1 batch (--prefetch)" "$tmp/out" ||
	fail "overlap --prefetch=1: not the loader's ring: $(cat "$tmp/out")"
grep -Eq '^sim +pinned +256 +f32 +40 ' "$tmp/out" || fail "overlap --prefetch=1: no row: $(cat "$tmp/out")"
echo "pinpipe-bench: command line, CSV and JSON as expected"
