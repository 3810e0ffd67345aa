/* Structs passed by value: x86-64 -O2 passes `pair` in two registers (DWARF
 * pieces), `small` in one (bitfields included), `wide` in memory (an array and an
 * enum member); i386 passes all three in memory.  The probes read their members. */
#include <stdio.h>
#include <stdlib.h>

enum color { RED = 1, GREEN = 2, BLUE = 7 };
struct pair { long a; long b; };
struct small { int x; short y; unsigned char f1 : 3, f2 : 5; };
struct wide { long v[3]; enum color c; };

__attribute__((noinline)) long sink(long v)
{
    __asm__ volatile("" : "+r"(v) :: "memory");
    return v;
}

__attribute__((noinline)) long take(struct pair p, struct small s, struct wide w)
{
    long r = sink(p.a) + p.b + s.x + s.y + s.f1 + s.f2 + w.v[1] + w.c;
    r += sink(r);           /* TAKE */
    return r;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2, sum = 0;
    for (long i = 0; i < n; i++) {
        struct pair p = {10 + i, -20 - i};
        struct small s = {300 + (int)i, (short)(-4 - i), (unsigned char)(i + 1),
                          (unsigned char)(7 + i)};
        struct wide w = {{i, 100 * i, 3}, i ? BLUE : GREEN};
        sum += take(p, s, w);
    }
    printf("sum=%ld\n", sum);
    return 0;
}
