/* calls WORD N: a few plain C functions with arguments and return values, for
 * function probes (examples/calls.stp).  greet() measures WORD, sum_squares(N)
 * adds square(1) .. square(N); the exit status is their sum modulo 256, and the
 * program prints nothing, so the probes' output is all there is. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) int square(int x)
{
    return x * x;
}

__attribute__((noinline)) long sum_squares(int n)
{
    long sum = 0;
    for (int i = 1; i <= n; i++)
        sum += square(i);
    return sum;
}

__attribute__((noinline)) size_t greet(const char *name)
{
    return strlen(name);
}

int main(int argc, char **argv)
{
    size_t len = greet(argc > 1 ? argv[1] : "world");
    long sum = sum_squares(argc > 2 ? atoi(argv[2]) : 3);
    return (int)((len + (size_t)sum) % 256 == 0);
}
