/* Floating-point parameters, members and globals: the program prints what it
 * passes, the probes read the same values from the DWARF. */
#include <stdio.h>
#include <stdlib.h>

struct fp {
    float a;
    double b;
    int n;
};

double gd = 2.5;
float gf = -0.75f;

__attribute__((noinline)) double scale(struct fp *p, double d, float f)
{
    double r = p->a * p->b + d * f;
    __asm__ volatile("" : "+m"(*p) :: "memory");
    r += p->n;              /* SCALE */
    return r;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    double s = 0;
    for (int i = 0; i < n; i++) {
        struct fp v = {1.5f + i, -3.25 * (i + 1), i};
        s += scale(&v, 0.5 + i, 4.0f * (i + 1));
    }
    printf("s=%.3f\n", s);
    return 0;
}
