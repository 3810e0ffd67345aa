/* Driver for gpr_keep.S: `gpr_keep_main N` fires the mark N times and prints
 * "gpr bad B done N", B the iterations in which any register or flag changed. */
#include <stdio.h>
#include <stdlib.h>

unsigned long gpr_keep(unsigned long seed);

/* r: the registers after the site in gpr_keep.S's push order, the flags last. */
unsigned long gpr_check(const unsigned long *r, unsigned long seed);
unsigned long gpr_check(const unsigned long *r, unsigned long seed)
{
#if defined(__x86_64__)
    static const int add[15] = {1, 2, 3, 4, 5, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    const int nregs = 15;
#else
    static const int add[7] = {1, 2, 3, 4, 5, 7, 6};
    const int nregs = 7;
#endif
    unsigned long bad = 0;
    for (int k = 0; k < nregs; k++)
        if (r[k] != seed + (unsigned long)add[k])
            bad |= 1ul << k;
    if ((r[nregs] & 0x8d5) != 0x8d5)
        bad |= 1ul << nregs;
    return bad;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, bad = 0;
    for (long i = 0; i < n; i++)
        bad += gpr_keep(0x1000u * (unsigned long)i + 0x10) != 0;
    printf("gpr bad %ld done %ld\n", bad, n);
    return 0;
}
