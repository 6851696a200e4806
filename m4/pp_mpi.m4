# PP_CHECK_MPI: the optional MPI library (Open MPI) of the mpi communicator.
#
# --with-mpi         require MPI
# --without-mpi      build without it (the local communicator only)
# (no option)        detect: use MPI when mpicc (or pkg-config's ompi-c) gives
#                    flags that compile and link MPI_Iallreduce
#
# Fails only when MPI was asked for; saves and restores CPPFLAGS and LIBS
# around its checks; evaluates AM_CONDITIONAL([HAVE_MPI]) on every path.
# Sets MPI_CFLAGS, MPI_LIBS and defines PP_HAVE_MPI.
AC_DEFUN([PP_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi],
      [build the mpi communicator (default: detect mpicc, or pkg-config's ompi-c)])],
    [], [with_mpi=check])
  AC_ARG_VAR([MPICC], [the MPI compiler wrapper whose --showme flags are used])
  have_mpi=no
  pp_mpi_summary="no (--without-mpi)"
  AS_IF([test "x$with_mpi" != xno], [
    pp_mpi_summary="no (not found: install Debian's openmpi-bin and libopenmpi-dev)"
    AS_IF([test -z "$MPI_CFLAGS$MPI_LIBS"], [
      AC_PATH_PROG([MPICC], [mpicc])
      AS_IF([test -n "$MPICC"], [
        MPI_CFLAGS=`"$MPICC" --showme:compile 2>/dev/null`
        MPI_LIBS=`"$MPICC" --showme:link 2>/dev/null`])
      AS_IF([test -z "$MPI_LIBS"],
        [PKG_CHECK_MODULES([MPI], [ompi-c], [], [MPI_CFLAGS=; MPI_LIBS=])])])
    AS_IF([test -n "$MPI_LIBS"], [
      pp_save_CPPFLAGS=$CPPFLAGS
      pp_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $MPI_CFLAGS"
      LIBS="$MPI_LIBS $LIBS"
      AC_MSG_CHECKING([whether MPI programs link with $MPI_LIBS])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
          [[MPI_Request r; float x = 0; return MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);]])],
        [have_mpi=yes], [have_mpi=no])
      AC_MSG_RESULT([$have_mpi])
      CPPFLAGS=$pp_save_CPPFLAGS
      LIBS=$pp_save_LIBS
      AS_IF([test $have_mpi = yes], [pp_mpi_summary="yes ($MPI_LIBS)"],
        [pp_mpi_summary="no ($MPI_LIBS does not link MPI_Iallreduce; see config.log)"])])
    AS_IF([test $have_mpi = no && test "x$with_mpi" != xcheck],
      [AC_MSG_ERROR([--with-mpi given but MPI was not found: install Debian's openmpi-bin and libopenmpi-dev, or set MPICC; see config.log])])
  ])
  AS_IF([test $have_mpi = yes],
    [AC_DEFINE([PP_HAVE_MPI], [1], [Define to 1 if the mpi communicator is built.])],
    [MPI_CFLAGS=; MPI_LIBS=])
  AC_SUBST([MPI_CFLAGS])
  AC_SUBST([MPI_LIBS])
  AM_CONDITIONAL([HAVE_MPI], [test $have_mpi = yes])
])

# PP_CHECK_NCCL: NCCL in the CUDA toolkit found by PP_CHECK_CUDA (run after it).
# Built when CUDA is, and nccl.h and libnccl are in the toolkit; never
# required.  NCCL is opened at run time (comm/comm_nccl.c), not linked:
# defines PP_HAVE_NCCL, PP_NCCL_SONAME and PP_NCCL_PATH, and evaluates
# AM_CONDITIONAL([HAVE_NCCL]) on every path.
AC_DEFUN([PP_CHECK_NCCL], [
  have_nccl=no
  pp_nccl_summary="no (needs CUDA)"
  AS_IF([test $have_cuda = yes], [
    pp_save_CPPFLAGS=$CPPFLAGS
    pp_save_LDFLAGS=$LDFLAGS
    pp_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    LDFLAGS="$LDFLAGS -L$pp_cuda_libdir"
    pp_nccl_ok=yes
    AC_CHECK_HEADER([nccl.h], [], [pp_nccl_ok=no])
    AS_IF([test $pp_nccl_ok = yes],
      [AC_CHECK_LIB([nccl], [ncclCommInitRankConfig], [:], [pp_nccl_ok=no], [$CUDA_LIBS])])
    CPPFLAGS=$pp_save_CPPFLAGS
    LDFLAGS=$pp_save_LDFLAGS
    LIBS=$pp_save_LIBS
    AS_IF([test $pp_nccl_ok = yes],
      [have_nccl=yes
       pp_nccl_soname=`objdump -p "$pp_cuda_libdir/libnccl.so" 2>/dev/null | sed -n 's/^ *SONAME *//p'`
       AS_IF([test -z "$pp_nccl_soname"], [pp_nccl_soname=libnccl.so])
       AC_DEFINE_UNQUOTED([PP_NCCL_SONAME], ["$pp_nccl_soname"], [The soname of NCCL, opened at run time.])
       AC_DEFINE_UNQUOTED([PP_NCCL_PATH], ["$pp_cuda_libdir/$pp_nccl_soname"], [NCCL in the toolkit found by configure.])
       pp_nccl_summary="yes ($pp_cuda_libdir/$pp_nccl_soname, opened at run time)"],
      [pp_nccl_summary="no (nccl.h or libnccl not found with CUDA)"])
  ])
  AS_IF([test $have_nccl = yes],
    [AC_DEFINE([PP_HAVE_NCCL], [1], [Define to 1 if the nccl communicator is built.])])
  AM_CONDITIONAL([HAVE_NCCL], [test $have_nccl = yes])
])
