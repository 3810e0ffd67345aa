/* Return probes on functions returning in x87/SSE registers and by hidden pointer
 * (i386 `ret $4`): the values the caller sees must be unchanged (test_func_stripped_dlopen_unwind.py). */
#include <stdio.h>

__attribute__((noipa)) double half(double x) { return x / 2; }
__attribute__((noipa)) long double third(long double x) { return x / 3; }
__attribute__((noipa)) float twice(float x) { return x * 2; }
__attribute__((noipa)) _Complex long double cplx(long double x) { return x + 2.0iL * x; }
struct big { long a, b, c; };
__attribute__((noipa)) struct big mkbig(long x) { struct big r = {x, 2 * x, 3 * x}; return r; }

int main(void)
{
    long double s = 0;
    long t = 0;
    for (int i = 0; i < 1000; i++) {
        s += half(i) + third(i) / 7 + twice(i);
        _Complex long double c = cplx(i);
        s += __real__ c + __imag__ c / 3;
        struct big b = mkbig(i);
        t += b.a + b.b + b.c;
    }
    printf("%.9Lf %ld\n", s, t);
    return 0;
}
