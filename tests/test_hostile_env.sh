#!/bin/sh
# tests/test_hostile_env.sh: pinpipe-train and pinpipe-pack in a hostile
# environment rather than on hostile files: limits of the process
# (RLIMIT_FSIZE, RLIMIT_MEMLOCK, RLIMIT_NPROC, RLIMIT_AS).  Each must end with a
# message naming what failed and where and a non-zero exit, or do the job
# another way; never be killed by a signal, hang, or leave a half-written
# file where a good one was.
# Each check fails the script (exit 1) with what went wrong; a check the
# environment cannot provide says why on stderr and is left out; exit 77
# (skip) only when the tools were not built.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
pack=${PINPIPE_PACK:-./pinpipe-pack}
[ -x "$train" ] && [ -x "$pack" ] || { echo "test_hostile_env: the tools are not built, skipped"; exit 77; }
fm=${PP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-env-test-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

. "${srcdir:-.}/tests/testlib.sh"

# no_leftovers DIR: fails where DIR holds a writer's temporary file.
no_leftovers() {
	left=$(find "$1" -name '*.tmp-*' 2>/dev/null)
	[ -z "$left" ] || { echo "FAIL: temporary files left: $left"; fail=1; }
}

# same FILE COPY: fails where FILE is no longer COPY's bytes.
same() {
	cmp -s "$1" "$2" || { echo "FAIL: $1 is not the earlier good file any more"; fail=1; }
}

# --- RLIMIT_FSIZE: a write past it raises SIGXFSZ, which kills by default.
# The writers must fail with EFBIG instead, say so, and keep the earlier
# file: a checkpoint and TensorBoard's events (pinpipe-train), shards
# (pinpipe-pack).
small="--data=synthetic:1200 -d cpu -m mlp -e 1 --max-steps=2 --no-eval -q --no-progress -w 0"
# shellcheck disable=SC2086
"$train" $small --checkpoint="$tmp/ck" >"$tmp/out" 2>&1 ||
	{ echo "FAIL: the good checkpoint was not written:"; cat "$tmp/out"; fail=1; }
cp "$tmp/ck" "$tmp/ck.good"
# shellcheck disable=SC2086
expect 1 "ck\.tmp-.*File too large \(the process's file size limit, RLIMIT_FSIZE" \
	sh -c 'ulimit -f 64 && exec "$@"' sh "$train" $small --checkpoint="$tmp/ck" --logdir="$tmp/logs"
same "$tmp/ck" "$tmp/ck.good"
no_leftovers "$tmp"

if [ -d "$fm" ]; then
	mkdir "$tmp/shards"
	expect 0 "2 shards" "$pack" -j 1 -n 2 -o "$tmp/shards/fm" "$fm"
	mkdir "$tmp/good"
	cp "$tmp"/shards/*.pps "$tmp/good/"
	expect 1 "failed: File too large \(the process's file size limit, RLIMIT_FSIZE" \
		sh -c 'ulimit -f 1000 && exec "$@"' sh "$pack" -j 1 -n 2 -l 1 -o "$tmp/shards/fm" "$fm"
	grep -q "left as they were" "$tmp/out" || { echo "FAIL: no word of the earlier shards:"; cat "$tmp/out"; fail=1; }
	for f in "$tmp"/good/*.pps; do
		same "$tmp/shards/${f##*/}" "$f"
	done
	[ "$(ls "$tmp/shards" | wc -l)" -eq 4 ] || { echo "FAIL: shards:"; ls "$tmp/shards"; fail=1; }
	no_leftovers "$tmp/shards"

	# --- RLIMIT_MEMLOCK of 64 KiB (many containers' default): the kernel
	# charges each io_uring's rings to it, so that the rings of 4 workers
	# of each loader (train and test) do not fit; the readers whose ring
	# is refused read through pread, and the run succeeds.  Root is not
	# held to the limit (CAP_IPC_LOCK): its runs drop the capability.
	drop=
	if [ "$(id -u)" -eq 0 ]; then
		if command -v setpriv >/dev/null 2>&1; then
			drop="setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock"
		else
			drop=none
		fi
	fi
	if [ "$drop" = none ] || ! command -v prlimit >/dev/null 2>&1; then
		echo "test_hostile_env: no setpriv (root) or prlimit: RLIMIT_MEMLOCK not checked" >&2
	else
		# shellcheck disable=SC2086
		expect 0 "status=ok" prlimit --memlock=65536: $drop "$train" --data="$tmp/shards" --stream \
			-d cpu -m mlp -e 1 --max-steps=3 -w 4 --no-progress
	fi
else
	echo "test_hostile_env: no Fashion-MNIST at $fm: pinpipe-pack under RLIMIT_FSIZE not checked" >&2
fi

# pinpipe-train's rows past the limit: said, exit 1 (SIGXFSZ killed it, exit
# 153, with no word).
# shellcheck disable=SC2086
expect 1 "r\.csv.*File too large" sh -c 'ulimit -f 1 && exec "$@" >/dev/null' sh \
	"$train" --data=synthetic:1200 -d cpu -m mlp -e 10 --no-eval --no-progress -w 0 --csv="$tmp/r.csv"

# Files of rows of an earlier run are kept until the new run's first row is
# written: where that row does not fit (a model spec of 145 bytes makes the
# rows long), the run fails and leaves them as they were (they were emptied
# at its start, the CSV left with its header alone).
spec="flatten$(for i in 1 2 3 4 5 6 7 8 9 10 11 12; do printf ',fc:16,relu'; done),fc:10"
# shellcheck disable=SC2086
"$train" --data=synthetic:1200 -d cpu -m "$spec" -e 2 --no-eval -q -w 0 --csv="$tmp/k.csv" \
	--jsonl="$tmp/k.jsonl" >/dev/null 2>&1 || { echo "FAIL: the good rows were not written"; fail=1; }
cp "$tmp/k.csv" "$tmp/k.csv.good"
cp "$tmp/k.jsonl" "$tmp/k.jsonl.good"
expect 1 "k\.jsonl.*File too large" sh -c 'ulimit -f 1 && exec "$@" >/dev/null' sh \
	"$train" --data=synthetic:1200 -d cpu -m "$spec" -e 2 --no-eval --no-progress -w 0 \
	--csv="$tmp/k.csv" --jsonl="$tmp/k.jsonl"
same "$tmp/k.csv" "$tmp/k.csv.good"
same "$tmp/k.jsonl" "$tmp/k.jsonl.good"
no_leftovers "$tmp"

# pinpipe-bench's rows past the limit: said, exit 1 (SIGXFSZ ignored).
bench=${PINPIPE_BENCH:-./pinpipe-bench}
if [ -x "$bench" ]; then
	# An earlier file's rows stay (they were truncated first): the rows are
	# written beside it and renamed over it.
	sizes=4K,8K,16K,32K,64K,128K,256K,512K,1M
	"$bench" bandwidth --device=sim --total=1M --sizes=4K --csv="$tmp/b.csv" >/dev/null 2>&1 ||
		{ echo "FAIL: the good bench rows were not written"; fail=1; }
	cp "$tmp/b.csv" "$tmp/b.csv.good"
	# standard output to /dev/null: the limit holds the file of what expect reads too
	expect 1 "b\.csv: write failed: File too large" sh -c 'ulimit -f 1 && exec "$@" >/dev/null' sh \
		"$bench" bandwidth --device=sim --total=1M --sizes=$sizes --csv="$tmp/b.csv"
	same "$tmp/b.csv" "$tmp/b.csv.good"
	no_leftovers "$tmp"
else
	echo "test_hostile_env: $bench not built: its rows under RLIMIT_FSIZE not checked" >&2
fi

# limited RUN...: runs a tool under a limit, RUN being the prlimit(1) call;
# fails where it hangs, is killed by a signal, or fails with no reason
# (exit 1 must come with the REASON, an extended regular expression, in
# its output).  Exit 0 is fine: the limit was enough.
limited() {
	reason=$1
	shift
	timeout 120 "$@" >"$tmp/out" 2>&1
	got=$?
	case $got in
	0) ;;
	*) grep -q "pinpipe-[a-z]*: fork: " "$tmp/out" && return ;; # the libtool wrapper's own fork
	esac
	case $got in
	0) ;;
	1) grep -Eq -- "$reason" "$tmp/out" ||
		{ echo "FAIL: '$*' failed without '$reason':"; cat "$tmp/out"; fail=1; } ;;
	124) echo "FAIL: '$*' hung"; fail=1 ;;
	*) echo "FAIL: '$*' exited $got:"; cat "$tmp/out"; fail=1 ;;
	esac
}

threaded="--data=synthetic:1200 -d sim -m mlp -e 1 --max-steps=3 --no-progress -q -w 4 -t 4"
if ! command -v prlimit >/dev/null 2>&1 || ! command -v timeout >/dev/null 2>&1; then
	echo "test_hostile_env: no prlimit or timeout: RLIMIT_NPROC and RLIMIT_AS not checked" >&2
else
	# --- RLIMIT_NPROC: a thread refused at any point (the loader's workers,
	# the sim's copy engines, the model's threads, OpenBLAS's): exit 1 with
	# the reason.  The limit counts the user's processes, so the runs are
	# of a user of their own (nobody, from root); a user could not know
	# how many of its own run beside.  From 4 up: with fewer, the libtool
	# wrapper of the build tree cannot fork (and retries for seconds).
	as_nobody="setpriv --reuid=$(id -u nobody 2>/dev/null) --regid=$(id -g nobody 2>/dev/null) --clear-groups"
	if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1 && id nobody >/dev/null 2>&1 &&
		! $as_nobody "$train" --version >/dev/null 2>&1; then
		# a build in a folder of mode 0700 (mktemp -d's): nobody cannot run it
		echo "test_hostile_env: user nobody cannot run $train here: RLIMIT_NPROC not checked" >&2
	elif [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
		u=4
		while [ $u -le 20 ]; do
			# shellcheck disable=SC2086
			limited "Resource temporarily unavailable" prlimit --nproc=$u \
				setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" --clear-groups \
				"$train" $threaded
			u=$((u + 1))
		done
	else
		echo "test_hostile_env: not root, or no setpriv or user nobody: RLIMIT_NPROC not checked" >&2
	fi

	# --- RLIMIT_AS: a mapping refused at any point (OpenBLAS's load, its
	# buffers, the ring, the threads' stacks).  Not in a sanitizer's build,
	# whose shadow memory alone is terabytes of address space.
	if [ -n "$(sed -n 's/^SANITIZER_FLAGS = //p' Makefile 2>/dev/null)" ]; then
		echo "test_hostile_env: a sanitizer's build: RLIMIT_AS not checked" >&2
	else
		v=60
		while [ $v -le 400 ]; do
			# shellcheck disable=SC2086
			limited "pinpipe-train: run 1 \(cpu\): " prlimit --as=$((v * 1024 * 1024)) \
				"$train" --data=synthetic:1200 -d cpu -m mlp -e 1 --max-steps=3 --no-progress -q -w 2
			if grep -q "OpenBLAS: cannot load.*failed to map" "$tmp/out" &&
			   ! grep -q "RLIMIT_AS: ulimit -v" "$tmp/out"; then
				echo "FAIL: OpenBLAS refused the address space, not said:"; cat "$tmp/out"; fail=1
			fi
			v=$((v + 20))
		done
	fi
fi

exit $fail
