/*
 * nn/blas.h: the judgement behind pp_blas_get_info() (nn/blas.c), apart
 * from the BLAS that is loaded, so that the tests can put every case to it.
 */
#ifndef PP_NN_BLAS_H
#define PP_NN_BLAS_H

#include <stdbool.h>

#include "common/cpu.h"

/*
 * The OpenBLAS core whose kernels a processor of instruction sets 'isa'
 * should run ("SkylakeX", "Haswell"), when OpenBLAS's kernels for 'core'
 * (its name, as openblas_get_corename() returns it) are slower than that:
 * a core whose kernels use neither AVX2 nor AVX-512 on a processor with
 * either, or, when the core was not 'chosen' by the user
 * (OPENBLAS_CORETYPE), AVX2 kernels on a processor with AVX-512.  NULL
 * when the core is right, was chosen with AVX2 or better, or is a name
 * this table does not know (another architecture, a newer OpenBLAS).
 */
const char *pp_blas_better_core(const char *core, bool chosen, enum pp_isa isa);

#endif
