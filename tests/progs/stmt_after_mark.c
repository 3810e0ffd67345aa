/* A statement that starts right after a USDT mark's 1-byte nop, for
 * tests/test_stmt_after_mark.py (built with -g at -O0 and -O2, m64 and m32):
 * `./stmt_after_mark N` calls step(i) for i in 0..N-1; each call passes mark
 * t:here (arg1 i), then the line marked NEXT, whose first instruction is the one
 * after the mark's nop.  The mark's plan cannot take that instruction into its
 * window: the statement's site starts there. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

volatile int total;

__attribute__((noinline, noclone)) void step(int i)
{
    total += i;
    STAP_PROBE1(t, here, i);
    total += 2 * i; /* NEXT */
    total -= 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    for (int i = 0; i < n; i++)
        step(i);
    printf("total=%d\n", total);
    return 0;
}
