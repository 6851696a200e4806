/*
 * device/device_cuda_explain.c: why the CUDA runtime found no usable GPU,
 * in words a user can act on.  The runtime answers "CUDA driver version is
 * insufficient for CUDA runtime version" both where no NVIDIA driver is
 * installed at all and where the driver is older than the runtime; the
 * driver's version tells the two apart.  Pure (no CUDA call), so that it is
 * built and tested with and without the toolkit.
 */
#include "config.h"

#include <stdio.h>

#include "device/device_impl.h"

/* Writes a CUDA version (1000 * major + 10 * minor) as "major.minor". */
static void version_text(int v, char *buf, size_t len)
{
	snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
}

bool pp_device_cuda_explain(int err, const char *name, const char *text, int driver, int runtime,
			    char *msg, size_t len)
{
	char drv[16], rt[16];

	version_text(driver, drv, sizeof(drv));
	version_text(runtime, rt, sizeof(rt));
	switch (err) {
	case PP_CUDA_ERR_INSUFFICIENT_DRIVER:
		if (driver <= 0) {
			snprintf(msg, len, "cuda: no NVIDIA driver (libcuda.so.1 not found; "
				 "cudaGetDeviceCount: %s)", name);
			return false;
		}
		if (driver < runtime)
			snprintf(msg, len, "cuda: the NVIDIA driver is older than the CUDA runtime: it "
				 "supports CUDA %s, the runtime is CUDA %s; update the driver "
				 "(cudaGetDeviceCount: %s)", drv, rt, name);
		else
			snprintf(msg, len, "cuda: the NVIDIA driver (CUDA %s) was refused by the CUDA %s "
				 "runtime (cudaGetDeviceCount: %s, %s)", drv, rt, text, name);
		return true;
	case PP_CUDA_ERR_STUB_LIBRARY:
		snprintf(msg, len, "cuda: no NVIDIA driver: the libcuda.so.1 found is the "
			 "CUDA toolkit's stub (cudaGetDeviceCount: %s)", name);
		return false;
	case PP_CUDA_ERR_NO_DEVICE:
	case 0:
		if (driver > 0)
			snprintf(msg, len, "cuda: an NVIDIA driver (CUDA %s) and no GPU (cudaGetDeviceCount: "
				 "%s)", drv, err ? name : "none found");
		else
			snprintf(msg, len, "cuda: no GPU (cudaGetDeviceCount: %s)",
				 err ? name : "none found");
		return false;
	default:
		snprintf(msg, len, "cuda: the GPUs cannot be used (cudaGetDeviceCount: %s, %s; driver "
			 "CUDA %s, runtime CUDA %s)", text, name, drv, rt);
		return driver > 0;
	}
}
