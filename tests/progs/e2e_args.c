/* USDT arguments of every size, sign and operand shape, for tests/test_e2e_core.py.
 *
 * Every mark is preceded by a line `expect TAG NAME V1 V2 ...` giving each argument as
 * a signed 64-bit decimal (what a script's `%d` of `$argN` prints), so the test
 * compares the program's own values with what pydyn fetched.  Memory-only
 * operands ("m" constraint) come from e2e_args_mem.c.  Run with no arguments
 * (argc == 1): some values derive from argc so the optimiser cannot fold them.
 */
#include <stdint.h>
#include <stdio.h>
#include <sys/sdt.h>

#define V(x) ((long long)(x))
/* Every line names the build (-DE2E_TAG="m64-O2"), so several builds can share a session. */
#ifndef E2E_TAG
#define E2E_TAG "e2e"
#endif
#define EXPECT(fmt, ...) printf("expect " E2E_TAG " " fmt, __VA_ARGS__)

__thread int e2e_tls = -0x1234;
int e2e_global = 0x5678;
long long e2e_global_ll = -0x123456789LL;
int e2e_arr[8] = {10, -11, 12, -13, 14, -15, 16, -17};

void e2e_mem_probes(int argc);   /* e2e_args_mem.c */

/* Opaque to the optimiser: -O2 keeps results in registers instead of folding them. */
__attribute__((noinline)) long long e2e_opaque(long long x)
{
    __asm__ volatile("" : "+g"(x));
    return x;
}

int main(int argc, char **argv)
{
    (void)argv;

    /* Constants ("n" operands, `$imm` at -O2). */
    EXPECT("consts %lld %lld %lld %lld %lld %lld %lld %lld\n",
           V((signed char)-127), V((unsigned char)0x81), V((short)-32767),
           V((unsigned short)0x8001), V(-1), V((long long)INT64_MIN),
           V((unsigned long long)UINT64_MAX), V(42));
    STAP_PROBE8(pydyn_e2e, consts, (signed char)-127, (unsigned char)0x81, (short)-32767,
                (unsigned short)0x8001, -1, (long long)INT64_MIN,
                (unsigned long long)UINT64_MAX, 42);

    /* Function results: registers (sub-registers for narrow types) at -O2. */
    signed char sc = (signed char)e2e_opaque(-127);
    unsigned char uc = (unsigned char)e2e_opaque(0x81);
    short ss = (short)e2e_opaque(-32767);
    unsigned short us = (unsigned short)e2e_opaque(0x8001);
    int i = (int)e2e_opaque(-1);
    unsigned u = (unsigned)e2e_opaque(0x80000001u);
    EXPECT("regs %lld %lld %lld %lld %lld %lld\n", V(sc), V(uc), V(ss), V(us), V(i),
           V(u));
    STAP_PROBE6(pydyn_e2e, regs, sc, uc, ss, us, i, u);

    /* 64-bit values.  On i386 a 64-bit register operand names only the low half of a
       register pair, which the note cannot describe: pass them through memory there. */
#if defined __i386__
    volatile long long ll = e2e_opaque(INT64_MIN);
    volatile unsigned long long ull = (unsigned long long)e2e_opaque(-1);
#else
    long long ll = e2e_opaque(INT64_MIN);
    unsigned long long ull = (unsigned long long)e2e_opaque(-1);
#endif
    long l = (long)e2e_opaque(-2);
    unsigned long ul = (unsigned long)e2e_opaque(-3);
    EXPECT("wide %lld %lld %lld %lld\n", V(ll), V(ull), V(l), V(ul));
    STAP_PROBE4(pydyn_e2e, wide, ll, ull, l, ul);

    /* volatile locals: on the stack even at -O2. */
    volatile signed char vsc = -100;
    volatile unsigned char vuc = 0xfe;
    volatile short vs = -300;
    volatile unsigned short vus = 0xfffe;
    volatile int vi = -3;
    volatile long long vll = 0x123456789abcdef0LL;
    volatile unsigned long vul = 0xdeadbeefUL;
    EXPECT("stack %lld %lld %lld %lld %lld %lld %lld\n", V(vsc), V(vuc), V(vs), V(vus),
           V(vi), V(vll), V(vul));
    STAP_PROBE7(pydyn_e2e, stack, vsc, vuc, vs, vus, vi, vll, vul);

    /* Array elements (variable indexes: base+index*scale), globals, a thread-local. */
    long long k = e2e_opaque(5);
    EXPECT("array %lld %lld %lld\n", V(e2e_arr[argc + 2]), V(e2e_arr[k]),
           V(e2e_arr[argc]));
    STAP_PROBE3(pydyn_e2e, array, e2e_arr[argc + 2], e2e_arr[k], e2e_arr[argc]);
    EXPECT("globals %lld %lld %lld\n", V(e2e_global), V(e2e_global_ll), V(e2e_tls));
    STAP_PROBE3(pydyn_e2e, globals, e2e_global, e2e_global_ll, e2e_tls);

    /* Pointers: a global's and an array element's address. */
    EXPECT("ptrs %lld %lld\n", V((uintptr_t)&e2e_global), V((uintptr_t)&e2e_arr[argc]));
    STAP_PROBE2(pydyn_e2e, ptrs, &e2e_global, &e2e_arr[argc]);

    /* Twelve arguments, more than there are free registers. */
    long a[12];
    for (int n = 0; n < 12; n++)
        a[n] = (long)e2e_opaque(n % 2 ? -n : n * 1000);
    EXPECT("many %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld\n",
           V(a[0]), V(a[1]), V(a[2]), V(a[3]), V(a[4]), V(a[5]), V(a[6]), V(a[7]), V(a[8]),
           V(a[9]), V(a[10]), V(a[11]));
    STAP_PROBE12(pydyn_e2e, many, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                 a[10], a[11]);

    /* The same values through DTRACE_PROBEn. */
    EXPECT("dtrace %lld %lld\n", V(uc), V(ull));
    DTRACE_PROBE2(pydyn_e2e, dtrace, uc, ull);

    e2e_mem_probes(argc);
    return 0;
}
