/* Statement probes for tests/test_statement.py (built with -g at -O0 and -O2,
 * m64 and m32): `./dwarf_stmt N` runs sum_to(N), whose loop body line (marked
 * LOOP) runs N times with `i` and `acc` in scope, and label `done` once. */
#include <stdio.h>
#include <stdlib.h>

#define PROBED __attribute__((noinline, noclone))

volatile long sink;

PROBED long sum_to(long n)
{
    long acc = 0;
    for (long i = 0; i < n; i++) {
        sink = i;
        acc += i * 3;   /* LOOP */
    }
done:
    sink = acc;
    return acc;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 3;
    printf("sum=%ld\n", sum_to(n));
    return 0;
}
