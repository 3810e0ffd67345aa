/* Function probe target: a recursive function, a family for globs, a
 * library call count, a known output and exit status. */
#include <stdio.h>
#include <stdlib.h>

/* noipa and the barriers keep both calls real calls at -O2 (no splitting, no
 * accumulator loop): the number of calls is exactly the recursion's. */
__attribute__((noipa)) long fib(long n)
{
    if (n < 2)
        return n;
    long a = fib(n - 1);
    __asm__ volatile("" : "+r"(a));
    long b = fib(n - 2);
    __asm__ volatile("" : "+r"(b));
    return a + b;
}

__attribute__((noipa)) int read_one(int x) { return x + 1; }
__attribute__((noipa)) int read_two(int x) { return x * 2; }
__attribute__((noipa)) int write_one(int x) { return x - 1; }

__attribute__((noipa)) long depth(long n)
{
    if (n == 0)
        return 0;
    long r = depth(n - 1);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    long d = argc > 2 ? atol(argv[2]) : 100;
    long f = fib(n);
    int s = 0;
    for (int i = 0; i < 5; i++)
        s += read_one(i) + read_two(i) + write_one(i);
    void *volatile p[7];
    for (int i = 0; i < 7; i++)
        p[i] = malloc(100 + (size_t)i);
    for (int i = 0; i < 7; i++)
        free(p[i]);
    long dd = depth(d);
    printf("fib(%ld)=%ld s=%d depth=%ld\n", n, f, s, dd);
    return 3;
}
