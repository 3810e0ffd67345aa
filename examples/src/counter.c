/* counter N: fires the `tick` mark N times with its loop index, then
 * `done` once with the sum, so a script's totals can be checked exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    long sum = 0;
    for (long i = 0; i < n; i++) {
        DTRACE_PROBE1(pydyn_example, tick, i);
        sum += i;
    }
    DTRACE_PROBE2(pydyn_example, done, n, sum);
    printf("counter: %ld ticks, sum %ld\n", n, sum);
    return 0;
}
