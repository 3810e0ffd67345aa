/* The floating-point control state a program set survives the probes it hits
 * (tests/test_fast_handlers.py): divide-by-zero and invalid unmasked (on i386 in the
 * x87 control word, which pd_xmm_call's check of the x87 stack reads with fnstenv,
 * an instruction that masks every exception), rounding toward zero.  Prints
 * fegetexcept() and fegetround() after each hit; they must stay what was set. */
#define _GNU_SOURCE
#include <fenv.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100;
    feenableexcept(FE_DIVBYZERO | FE_INVALID);
    fesetround(FE_TOWARDZERO);
    int want = fegetexcept(), changed = 0;
    for (long i = 0; i < n; i++) {
        STAP_PROBE1(x87cw, hit, i);
        changed += fegetexcept() != want || fegetround() != FE_TOWARDZERO;
    }
    printf("except %#x changed %d\n", want, changed);
    return 0;
}
