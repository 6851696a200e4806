# PP_CHECK_CUDA: the optional CUDA toolkit (nvcc, cudart, cuBLAS).
#
# --with-cuda[=DIR]  require CUDA (from DIR, default: nvcc on PATH or /usr/local/cuda)
# --without-cuda     build the CPU-only library
# (no option)        detect: use CUDA when the whole toolkit is found
#
# Fails only when CUDA was asked for; saves and restores CPPFLAGS, LDFLAGS and
# LIBS around its checks; evaluates AM_CONDITIONAL([HAVE_CUDA]) on every path.
# Sets CUDA_CPPFLAGS, CUDA_LIBS, NVCC, NVCCFLAGS and defines PP_HAVE_CUDA,
# PP_CUBLAS_SONAME and PP_CUBLAS_PATH (cuBLAS is opened at run time, not linked).
AC_DEFUN([PP_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
      [build the CUDA backend (default: detect nvcc on PATH or in /usr/local/cuda)])],
    [], [with_cuda=check])
  AC_ARG_VAR([NVCC], [the CUDA compiler])
  AC_ARG_VAR([NVCC_ARCH], [nvcc -gencode flags (default: sm_90 code plus compute_90 PTX)])
  have_cuda=no
  pp_cuda_summary="no (--without-cuda)"
  AS_IF([test "x$with_cuda" != xno], [
    pp_cuda_summary="no (toolkit not found)"
    AS_CASE([$with_cuda],
      [yes|check], [pp_cuda_dir=],
      [pp_cuda_dir=$with_cuda])
    AS_IF([test -z "$NVCC"], [
      AS_IF([test -n "$pp_cuda_dir"],
        [AC_PATH_PROG([NVCC], [nvcc], [], [$pp_cuda_dir/bin])],
        [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH$PATH_SEPARATOR/usr/local/cuda/bin])])])
    AS_IF([test -n "$NVCC" && test -z "$pp_cuda_dir"],
      [pp_cuda_dir=`AS_DIRNAME(["$NVCC"])`; pp_cuda_dir=`AS_DIRNAME(["$pp_cuda_dir"])`])
    AS_IF([test -n "$NVCC"], [
      pp_cuda_libdir=
      for d in "$pp_cuda_dir/lib64" "$pp_cuda_dir/lib" "$pp_cuda_dir/targets/x86_64-linux/lib"; do
        AS_IF([test -z "$pp_cuda_libdir" && test -d "$d"], [pp_cuda_libdir=$d])
      done
      pp_save_CPPFLAGS=$CPPFLAGS
      pp_save_LDFLAGS=$LDFLAGS
      pp_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS -I$pp_cuda_dir/include"
      LDFLAGS="$LDFLAGS -L$pp_cuda_libdir"
      pp_cuda_ok=yes
      AC_CHECK_HEADERS([cuda_runtime_api.h cublas_v2.h], [], [pp_cuda_ok=no])
      AS_IF([test $pp_cuda_ok = yes],
        [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [], [pp_cuda_ok=no])])
      dnl cublasCreate is a macro for cublasCreate_v2.
      AS_IF([test $pp_cuda_ok = yes],
        [AC_CHECK_LIB([cublas], [cublasCreate_v2], [], [pp_cuda_ok=no])])
      CPPFLAGS=$pp_save_CPPFLAGS
      LDFLAGS=$pp_save_LDFLAGS
      LIBS=$pp_save_LIBS
      AS_IF([test $pp_cuda_ok = yes], [
        have_cuda=yes
        CUDA_CPPFLAGS="-I$pp_cuda_dir/include"
        dnl cuBLAS is not linked but opened at run time (nn/cuda/ops.cu), by the
        dnl soname of the toolkit's library, then by its path here.
        pp_cublas_soname=`objdump -p "$pp_cuda_libdir/libcublas.so" 2>/dev/null | sed -n 's/^ *SONAME *//p'`
        AS_IF([test -z "$pp_cublas_soname"], [pp_cublas_soname=libcublas.so])
        AC_DEFINE_UNQUOTED([PP_CUBLAS_SONAME], ["$pp_cublas_soname"],
          [The soname of cuBLAS, opened at run time.])
        AC_DEFINE_UNQUOTED([PP_CUBLAS_PATH], ["$pp_cuda_libdir/$pp_cublas_soname"],
          [cuBLAS in the toolkit found by configure.])
        AC_SEARCH_LIBS([dlopen], [dl])
        CUDA_LIBS="-L$pp_cuda_libdir -Wl,-rpath,$pp_cuda_libdir -lcudart -lstdc++"
        AS_IF([test -z "$NVCC_ARCH"],
          [NVCC_ARCH="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"])
        pp_nvcc_version=`"$NVCC" --version 2>/dev/null | sed -n 's/.*release \(@<:@0-9.@:>@*\).*/\1/p'`
        pp_cuda_summary="yes ($NVCC, CUDA $pp_nvcc_version, $NVCC_ARCH)"
      ], [pp_cuda_summary="no (toolkit at $pp_cuda_dir is incomplete)"])
    ])
    AS_IF([test $have_cuda = no && test "x$with_cuda" != xcheck],
      [AC_MSG_ERROR([--with-cuda given but the CUDA toolkit (nvcc, cudart, cuBLAS) was not found; see config.log])])
  ])
  AS_IF([test $have_cuda = yes],
    [AC_DEFINE([PP_HAVE_CUDA], [1], [Define to 1 if the CUDA backend is built.])
     pp_cuda_backend=" cuda"],
    [pp_cuda_backend=""])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC_ARCH])
  AM_CONDITIONAL([HAVE_CUDA], [test $have_cuda = yes])
])
