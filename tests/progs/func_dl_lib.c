/* A library the dlopen test (test_func_stripped_dlopen_unwind.py) loads and unloads in a loop. */
#include <sys/sdt.h>

volatile long lib_calls;

__attribute__((noipa)) long lib_f(long x)
{
    lib_calls++; /* the mark is not the function's first instruction */
    STAP_PROBE1(funcdl, libmark, x);
    return 3 * x + 1;
}
