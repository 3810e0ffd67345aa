/* callees N: main calls top(i) and leaf(i) N times; top calls leaf and other, other
 * calls leaf: leaf runs 3N times, N from each of main, top and other. */
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long leaf(long v) { __asm__ volatile("" ::: "memory"); return v * 2; }
__attribute__((noinline)) long other(long v) { return leaf(v + 1) + 1; }
__attribute__((noinline)) long top(long v) { return leaf(v) + other(v); }
int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 5, s = 0;
    for (long i = 0; i < n; i++)
        s += top(i) + leaf(i);
    printf("s=%ld\n", s);
    return 0;
}
