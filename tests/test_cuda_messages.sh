#!/bin/sh
# tests/test_cuda_messages.sh: where the CUDA runtime has no GPU to offer,
# the GPU test programs' SKIP line and pinpipe-train's reason are the same
# words, and they say which case it is: with the CUDA toolkit's stub
# libcuda.so.1 put in the driver's place, "no NVIDIA driver: ... stub"; on a
# machine with no libcuda.so.1 at all, "no NVIDIA driver (libcuda.so.1 not
# found", never the runtime's "driver version is insufficient".  Built only
# with CUDA; on a machine with a GPU only the stub case runs.
set -u

train=${PINPIPE_TRAIN:-./pinpipe-train}
gputest=./tests/test_device_cuda
[ -x "$train" ] && [ -x "$gputest" ] || { echo "test_cuda_messages: not built, skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pinpipe-cuda-msg-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# same LABEL [ENV...]: the GPU test skips, and says what pinpipe-train says.
# Sets $reason to the words both used.
same() {
	label=$1
	shift
	env "$@" "$gputest" >"$tmp/skip" 2>&1
	code=$?
	env "$@" "$train" --device=cuda --data=synthetic:600 --model=mlp --epochs=1 -q \
		>/dev/null 2>"$tmp/train"
	reason=$(sed -n 's/^SKIP: //p' "$tmp/skip")
	said=$(sed -n 's/^pinpipe-train: run 1 (cuda): //p' "$tmp/train")
	if [ "$code" -ne 77 ] || [ -z "$reason" ] || [ "$reason" != "$said" ]; then
		echo "FAIL: $label: the GPU test (exit $code) and pinpipe-train disagree:"
		cat "$tmp/skip" "$tmp/train"
		fail=1
	fi
	echo "test_cuda_messages: $label: $reason"
}

# The toolkit's stub in the driver's place, found through LD_LIBRARY_PATH.
cudart=$(ldd "$gputest" | sed -n 's/.*libcudart\.so[.0-9]* => \(.*\) (.*/\1/p')
stub=${cudart%/*}/stubs/libcuda.so
if [ -n "$cudart" ] && [ -f "$stub" ]; then
	mkdir "$tmp/stub" && ln -s "$stub" "$tmp/stub/libcuda.so.1"
	same "stub libcuda" LD_LIBRARY_PATH="$tmp/stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	case $reason in
	*"no NVIDIA driver: the libcuda.so.1 found is the CUDA toolkit's stub"*) ;;
	*) echo "FAIL: stub libcuda: '$reason'"; fail=1 ;;
	esac
else
	echo "test_cuda_messages: no stubs/libcuda.so beside $cudart: stub case not run"
fi

# No driver at all: what this machine has when the loader finds no libcuda.so.1.
if ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
	same "no driver"
	case $reason in
	"cuda: no NVIDIA driver (libcuda.so.1 not found; cudaGetDeviceCount: cudaErrorInsufficientDriver)") ;;
	*) echo "FAIL: no driver: '$reason'"; fail=1 ;;
	esac
fi
exit $fail
