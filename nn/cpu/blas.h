/*
 * nn/cpu/blas.h: the BLAS under the CPU models (nn/cpu/blas.c): OpenBLAS, opened
 * at run time with the kernels chosen for the processor, its SGEMM, and
 * the judgements behind the choice and behind pp_blas_get_info(), apart
 * from the processor and the library that are there, so that the tests
 * can put every case to them.
 */
#ifndef PP_NN_BLAS_H
#define PP_NN_BLAS_H

#include <cblas.h>
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

/*
 * The core OpenBLAS 0.3.21 (Debian 12's, built for every x86-64
 * processor) chooses by itself on processor 'cpu', as its
 * driver/others/dynamic.c does: "Prescott" (generic) for an Intel family
 * 6 model it has no row for from 0xb0 up (Raptor Lake, Emerald Rapids,
 * Arrow Lake...) and for Intel's families from 0xf up (Diamond Rapids), by
 * the instruction sets for the others it does not know.
 * NULL where the choice is not modelled: vendors other than Intel, AMD
 * and Hygon, and AMD's families before 0x15 (none has AVX2).
 */
const char *pp_blas_openblas_core(const struct pp_cpu_id *cpu);

/*
 * The core to name in OPENBLAS_CORETYPE, when the user does not, before
 * OpenBLAS is loaded on processor 'cpu': pp_blas_better_core() of the
 * core it would choose by itself (pp_blas_openblas_core()), or NULL where
 * that choice is right or not known.
 */
const char *pp_blas_arrangement(const struct pp_cpu_id *cpu);

/*
 * Loads OpenBLAS once a process (later calls return the first call's
 * result): by its soname, then from the directory configure found it in,
 * naming in OPENBLAS_CORETYPE for the moment of the load the core of
 * pp_blas_arrangement() when the user's environment names none and
 * OpenBLAS is not in the process already (a program that links it chose
 * its kernels before any of ours ran).  The environment is left as it
 * was.  Threads OpenBLAS starts block the asynchronous signals, as the
 * library's own.  pp_blas_open_cpu() does the same for processor 'cpu'
 * (a test's) in place of this one, when it is the first call.  Returns 0,
 * or -ENOENT with a message naming the library when it cannot be loaded
 * or lacks a function.
 */
int pp_blas_open(void);
int pp_blas_open_cpu(const struct pp_cpu_id *cpu);

/* Runs the loaded OpenBLAS on one thread (openblas_set_num_threads(1)); after pp_blas_open(). */
void pp_blas_single_thread(void);

/*
 * cblas_sgemm() of the loaded OpenBLAS, loaded by the first call when no
 * pp_blas_open() came before.  The CPU models open it when they are
 * created (and fail there when it cannot be): a kernel called before,
 * where it cannot be loaded, says why on stderr and aborts.
 */
void pp_blas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
		   int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
		   float beta, float *c, int ldc);

#endif
