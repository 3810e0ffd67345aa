/* inline_copies N: scale() is inlined into twice() and thrice() (always_inline, even
 * at -O0); main calls both N times and prints the sum. */
#include <stdio.h>
#include <stdlib.h>
static inline __attribute__((always_inline)) long scale(long v, long k)
{
    long r = v * k;
    return r + 1;
}
__attribute__((noinline)) long twice(long v) { return scale(v, 2); }
__attribute__((noinline)) long thrice(long v) { return scale(v, 3); }
int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 5, s = 0;
    for (long i = 0; i < n; i++)
        s += twice(i) + thrice(i);
    printf("s=%ld\n", s);
    return 0;
}
