/* Probe sites several probes share (tests/test_shared_sites.py).
 *
 * shared_sites N: N times, mark "tick" (i), a semaphore-guarded mark "guarded" (i),
 * then f(i), whose first instruction is the mark "fmark" (a function entry and a mark at
 * one address); prints "done SUM" (SUM = the sum of f(i) = 3i + 1).
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

/* with _SDT_HAS_SEMAPHORES every mark has one; only "guarded" tests its own */
__extension__ unsigned short shared_tick_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short shared_guarded_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short shared_fmark_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

#if defined(__i386__)
#define ARGS_IN_REGS __attribute__((regparm(1))) /* no load before the mark */
#else
#define ARGS_IN_REGS
#endif

__attribute__((noinline)) ARGS_IN_REGS long f(long x)
{
    DTRACE_PROBE(shared, fmark); /* the first instruction: f's entry is this nop */
    return x * 3 + 1;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10, sum = 0;
    for (long i = 0; i < n; i++) {
        DTRACE_PROBE1(shared, tick, i);
        if (shared_guarded_semaphore)
            DTRACE_PROBE1(shared, guarded, i);
        sum += f(i);
    }
    printf("done %ld\n", sum);
    return 0;
}
