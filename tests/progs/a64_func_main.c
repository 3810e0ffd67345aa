/* aarch64 function probe target: the relocated entries of a64_func.S, eight
 * register arguments, a function returning in q0 and in x0/x1.  Prints `expect NAME
 * VALUE` for what each returned, so the test compares probes with the program. */
#include <stdio.h>
#include <stdlib.h>

long f_adr(void), f_adrp(void), f_ldrx(void), f_ldrw(void), f_ldrsw(void), f_ldrd(void);
long f_ldrq(void), f_prfm(void), f_b(long), f_target(long), call_bl(void), call_bcond(long);
long f_cbz(long), f_tbz(long), f_tbnz(long), f_pac(long), f_bti(void), pac_active(void);

__attribute__((noipa)) long args8(long a, long b, long c, long d, long e, long f, long g,
                                  long h)
{
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}

/* a double result (d0) and a 16-byte struct (x0, x1) come back unchanged */
__attribute__((noipa)) double half(double x) { return x / 2; }
struct pair { long a, b; };
__attribute__((noipa)) struct pair mkpair(long x) { return (struct pair){x, -x}; }

#define SHOW(name, expr) printf("expect %s %ld\n", name, (long)(expr))

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 3;
    long sum = 0;
    /* an indirect call (blr): under BTI it must land on args8's `bti c` */
    long (*volatile fp)(long, long, long, long, long, long, long, long) = args8;
    for (long i = 0; i < n; i++)
        sum += fp(i, i + 1, i + 2, -i, 1L << 40, i * i, 7, -8);
    SHOW("args8", sum);
    SHOW("f_adr", f_adr());
    SHOW("f_adrp", f_adrp());
    SHOW("f_ldrx", f_ldrx());
    SHOW("f_ldrw", f_ldrw());
    SHOW("f_ldrsw", f_ldrsw());
    SHOW("f_ldrd", f_ldrd());
    SHOW("f_ldrq", f_ldrq());
    SHOW("f_prfm", f_prfm());
    SHOW("f_b", f_b(5));
    SHOW("call_bl", call_bl());
    SHOW("bcond", call_bcond(3) * 100 + call_bcond(7));
    SHOW("f_cbz", f_cbz(0) * 100 + f_cbz(9));
    SHOW("f_tbz", f_tbz(8) * 100 + f_tbz(0));
    SHOW("f_tbnz", f_tbnz(1L << 40) * 100 + f_tbnz(1));
    SHOW("f_pac", f_pac(11));
    SHOW("f_bti", f_bti());
    SHOW("pac_active", pac_active());
    SHOW("half", half(9.0) * 10);
    struct pair p = mkpair(n);
    SHOW("mkpair", p.a * 1000 - p.b);
    return 0;
}
