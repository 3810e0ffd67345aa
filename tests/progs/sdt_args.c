/* USDT arguments of every shape the compiler produces, for pydyn's decoder tests.
 *
 * Every argument has a value tests/test_elf.py knows (EXPECTED there), so a
 * debugger stopped at each probe site can check the decoded ArgSpecs.  Built
 * -m64/-m32 x -O0/-O2 x PIE/non-PIE; linked with sdt_sema.c.  Run with no
 * arguments (argc == 1): some values are derived from argc so they are not
 * constants.
 */
#include <stdint.h>
#include <sys/sdt.h>

__thread int pydyn_tls = 0x1234;
int pydyn_global = 0x5678;
static long long pydyn_static = -5;   /* file-local: only in .symtab */
int pydyn_array[8] = {10, 11, 12, 13, 14, 15, 16, 17};
/* The thread pointer, for the test's debugger: gdb has no $gs_base on i386. */
void *volatile pydyn_tp;

void pydyn_sema_probe(int x);   /* sdt_sema.c */

/* Opaque to the optimiser, so -O2 keeps results in registers instead of folding them. */
__attribute__((noinline)) long long pydyn_opaque(long long x)
{
    __asm__ volatile("" : "+g"(x));
    return x;
}

int main(int argc, char **argv)
{
    void *tp;
    (void)argv;
#if defined __x86_64__
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
#elif defined __i386__
    __asm__ volatile("mov %%gs:0, %0" : "=r"(tp));
#else
    tp = 0;
#endif
    pydyn_tp = tp;

    /* Constants: "n" operands, printed as $imm. */
    STAP_PROBE8(pydyn_test, consts, (signed char)-127, (unsigned char)0x81, (short)-32767,
                (unsigned short)0x8001, -1, (long long)INT64_MIN, (unsigned long long)UINT64_MAX,
                42);

    /* Values in registers at -O2 (on the stack at -O0), sub-registers for narrow types. */
    signed char sc = (signed char)pydyn_opaque(-127);
    unsigned char uc = (unsigned char)pydyn_opaque(0x81);
    short ss = (short)pydyn_opaque(-32767);
    unsigned short us = (unsigned short)pydyn_opaque(0x8001);
    int i = (int)pydyn_opaque(-1);
    unsigned u = (unsigned)pydyn_opaque(0x80000001u);
    STAP_PROBE6(pydyn_test, regs, sc, uc, ss, us, i, u);

    /* 64-bit values: on i386 a register pair, which the note cannot describe. */
    long long ll = pydyn_opaque(INT64_MIN);
    unsigned long long ull = (unsigned long long)pydyn_opaque(-1);
    long l = (long)pydyn_opaque(-2);
    STAP_PROBE3(pydyn_test, wide, ll, ull, l);

    /* Locals that live on the stack even at -O2. */
    volatile signed char vsc = -100;
    volatile short vs = -300;
    volatile int vi = -3;
    volatile long long vll = 0x123456789abcdef0LL;
    volatile unsigned long vul = 0xdeadbeefUL;
    STAP_PROBE5(pydyn_test, stack, vsc, vs, vi, vll, vul);

    /* Pointers: a global, an array element, a thread-local. */
    STAP_PROBE3(pydyn_test, ptrs, &pydyn_global, &pydyn_array[argc], &pydyn_tls);

    /* Array elements with a variable index: base+index*scale operands. */
    STAP_PROBE2(pydyn_test, array, pydyn_array[argc + 2], pydyn_array[pydyn_opaque(5)]);

    /* Globals, a file-local static and a thread-local read directly. */
    STAP_PROBE4(pydyn_test, globals, pydyn_global, pydyn_static, pydyn_array[3], pydyn_tls);

    /* Floating point (passed as their bit patterns in integer registers or memory). */
    float f = (float)pydyn_opaque(3) / 2;
    double d = -(double)pydyn_opaque(9) / 4;
    STAP_PROBE2(pydyn_test, floats, f, d);

    /* The maximum of 12 arguments, more than there are free registers. */
    long a[12];
    for (int k = 0; k < 12; k++)
        a[k] = (long)pydyn_opaque(k + 1);
    STAP_PROBE12(pydyn_test, many, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                 a[10], a[11]);

    STAP_PROBE(pydyn_test, noargs);

    pydyn_sema_probe(7);

    /* Memory operands forced with the "m" constraint: sym(%rip), sym@GOTOFF(%ebx),
       absolute sym, %fs:sym@tpoff / %gs:sym@ntpoff, locals relative to the frame. */
#undef STAP_SDT_ARG_CONSTRAINT
#define STAP_SDT_ARG_CONSTRAINT m
    STAP_PROBE5(pydyn_test, mem, pydyn_tls, pydyn_global, pydyn_static, pydyn_array[3], vi);
    return 0;
}
