/* pydyn function-probe benchmark target (bench/func_bench.py): calls a small function
 * N times and prints the time per call.  Unlike bench.c's bench_fn, whose first
 * instruction is a USDT nop (a function entry there must stay a trap: the patch plan
 * never overwrites another probe site), this entry is displaceable into a trampoline. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noipa)) long bench_fn(long x) { return (x ^ 0x55) * 3 + 7; }
/* Not the last function of .text: there bench_fn's `ret` would have no padding after
 * it, and a 10-byte function whose entry patch ends at its `ret` keeps the
 * return-address hijack (launcher/plan/returns.py); most functions are followed by some. */
__attribute__((noipa)) long bench_next(long x) { return x + 1; }
/* A leaf too small for patches at entry and exit on x86-64 (`lea; ret`): its return is
 * the `ret` in the entry's window (launcher/plan/returns.py).  `func_bench N work`. */
__attribute__((noipa)) long bench_work(long i, long s) { return s + i; }
__attribute__((noipa)) long bench_after(long x) { return x * 5; }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000000, acc = 0;
    int work = argc > 2 && argv[2][0] == 'w';
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (work)
        for (long i = 0; i < n; i++)
            acc = bench_work(i, acc);
    else
        for (long i = 0; i < n; i++)
            acc += bench_fn(i);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
    printf("bench calls %ld acc %ld ns_per_hit %.2f\n", n, acc, ns);
    return 0;
}
