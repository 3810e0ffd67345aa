/* pydyn benchmark target (bench/run.py, bench/peers.py): `bench N` calls bench_fn N
 * times -- one USDT mark per call, and a function to probe at entry and return -- and
 * prints its own time per iteration, so attaching and start-up are not counted. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

static volatile long bench_acc, bench_xor;

/* The mark is neither the function's first instruction (a function probe on bench_fn
 * is another site) nor its last (Frida's interceptor needs 5 bytes to relocate there). */
__attribute__((noinline)) long bench_fn(long i)
{
    bench_acc += i;
    STAP_PROBE1(pydyn_bench, hit, i);
    bench_xor ^= i;
    return i;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000000, sum = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        sum += bench_fn(i);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
    printf("bench hits %ld sum %ld ns_per_hit %.2f\n", n, sum, ns);
    return 0;
}
