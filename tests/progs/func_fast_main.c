/* func_fast_regs.S's regs_check n times: "bad B" counts calls whose registers did not
 * survive a probed leaf_fn. */
#include <stdio.h>
#include <stdlib.h>

long regs_check(long x);

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, bad = 0;
    for (long i = 0; i < n; i++)
        bad += regs_check(i) != 0;
    printf("bad %ld\ndone %ld\n", bad, n);
    return 0;
}
