# PP_PTHREAD: POSIX threads through the compiler's -pthread switch, which
# every compiler Debian ships (gcc, clang) understands.
AC_DEFUN([PP_PTHREAD], [
  pp_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS -pthread"
  AC_MSG_CHECKING([whether $CC supports -pthread])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pthread.h>]],
                                  [[pthread_t t; (void)pthread_create(&t, 0, 0, 0);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([POSIX threads are required])])
  CFLAGS=$pp_save_CFLAGS
  PTHREAD_CFLAGS=-pthread
  PTHREAD_LIBS=-pthread
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])
