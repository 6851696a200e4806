#include "config.h"
#include <check.h>
#include "tests/testutil.h"
Suite *pp_test_suite(void) { return suite_create("datasets"); }
