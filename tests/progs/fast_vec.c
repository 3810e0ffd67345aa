/* Vector registers across probes (tests/test_fast_handlers.py): x86-64 trampolines save
 * no xmm register for FAST handlers, and keep them for others through pd_xmm_call.
 *   mark: xmm0-15 hold known values across a USDT site (pinned register variables);
 *   func: 8 double arguments at a probed entry and a double return value.
 * Prints "bad N" for every iteration that lost a value, then "done N". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>

typedef double v2d __attribute__((vector_size(16)));

static int mark_round(long i)
{
    int bad = 0;
#if defined(__x86_64__)
#define PIN(n) register v2d x##n __asm__("xmm" #n) = {i + n + 0.5, -(double)(n)}
    PIN(0); PIN(1); PIN(2); PIN(3); PIN(4); PIN(5); PIN(6); PIN(7);
    PIN(8); PIN(9); PIN(10); PIN(11); PIN(12); PIN(13); PIN(14); PIN(15);
#define KEEP()                                                                           \
    __asm__ volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5),    \
                     "+x"(x6), "+x"(x7));                                                \
    __asm__ volatile("" : "+x"(x8), "+x"(x9), "+x"(x10), "+x"(x11), "+x"(x12), "+x"(x13), \
                     "+x"(x14), "+x"(x15))
    KEEP();
    STAP_PROBE1(fastvec, hit, i);
    KEEP();
    v2d got[16] = {x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15};
    for (int n = 0; n < 16; n++)
        bad |= got[n][0] != i + n + 0.5 || got[n][1] != -(double)n;
#else
    STAP_PROBE1(fastvec, hit, i);
#endif
    return bad;
}

__attribute__((noipa)) double vec_fn(double a, double b, double c, double d, double e,
                                     double f, double g, double h)
{
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, bad = 0;
    for (long i = 0; i < n; i++) {
        double x = (double)i;
        double want = x + 2 * (x + 1) + 3 * (x + 2) + 4 * (x + 3) + 5 * (x + 4) +
                      6 * (x + 5) + 7 * (x + 6) + 8 * (x + 7);
        if (mark_round(i) || vec_fn(x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7) != want)
            bad++;
    }
    printf("bad %ld\ndone %ld\n", bad, n);
    return 0;
}
