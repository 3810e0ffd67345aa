// C++ exceptions and backtraces through frames with return probes.
// outer -> middle (a destructor: cleanup pad) -> relay (catch, rethrow) -> thrower,
// which throws every third call; outer catches.  bt_leaf, called through bt_mid,
// checks that backtrace() still names its callers.  The output is the same probed or not.
#include <cstdio>
#include <cstdlib>

#include "exc_chain.h"

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 30, total = 0;
    for (long i = 0; i < n; i++)
        total += outer(i);
    printf("total=%ld cleanups=%ld rethrows=%ld bt=%d\n", total, cleanups, rethrows, bt_mid(3));
    return 0;
}
