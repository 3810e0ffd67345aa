/* x87 registers live across a USDT site (tests/test_fast_handlers.py, m32): at -O2 gcc
 * keeps the seven accumulators in st(0)..st(6) across the probe's asm, so a handler
 * that pushes x87 values of its own (fp_add) overflows the stack unless the runtime
 * saves the x87 state around it.  Prints the accumulators: they must equal an
 * unprobed run's. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    double a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7;
    for (long i = 0; i < n; i++) {
        a = a * 0.999 + 1.5;
        b = b * 0.998 + 2.5;
        c = c * 0.997 + 3.5;
        d = d * 0.996 + 4.5;
        e = e * 0.995 + 5.5;
        f = f * 0.994 + 6.5;
        g = g * 0.993 + 7.5;
        STAP_PROBE1(x87, hit, i);
    }
    printf("%.17g %.17g %.17g %.17g %.17g %.17g %.17g\n", a, b, c, d, e, f, g);
    return 0;
}
