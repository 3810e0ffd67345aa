/* pydyn benchmark target: hits one USDT mark N times in a tight loop and prints
 * the time per iteration.  Run bare, under pydyn with traps, and with trampolines
 * (bench/run.py). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        STAP_PROBE1(pydyn_bench, hit, i);
        __asm__ volatile("" ::: "memory");
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
    printf("bench hits %ld ns_per_hit %.2f\n", n, ns);
    return 0;
}
