/* clones N: at -O2/-O3 gcc makes walk.constprop.0 and walk.constprop.1, walk's copies
 * for its constant n and k; main calls each N times and prints the sum. */
#include <stdio.h>
#include <stdlib.h>
static __attribute__((noinline)) long walk(const long *a, long n, long k)
{
    long s = 0;
    for (long i = 0; i < n; i++)
        s += a[i] * k;
    return s;
}
int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 5, a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, s = 0;
    for (long i = 0; i < n; i++)
        s += walk(a + (i & 1), 8, 3) + walk(a + (i & 1), 4, 3);
    printf("s=%ld\n", s);
    return 0;
}
