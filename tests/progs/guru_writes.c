/* Guru-mode writes to target variables (tests/test_guru_writes.py): each function
 * computes from what a probe may have written -- a parameter at the entry (in a
 * register at -O2, at -O0 too at the entry; on the stack on i386), a member, an array
 * element, bitfields of every kind, a static, a global, the return value, locals in
 * callee-saved registers -- and main prints what the program then sees. */
#include <stdio.h>
#include <stdlib.h>

struct bits {
    unsigned a : 3;              /* bits 0-2 */
    signed int b : 5;            /* 3-7 */
    unsigned c : 12;             /* 8-19: across a byte boundary */
    signed int d : 7;            /* 20-26 */
    unsigned long long e : 40;   /* a wide one in the next 8-byte unit */
    signed char f : 2;
    unsigned char g : 1;
};

struct rec {
    int v;
    long l;
    short arr[4];
    struct bits bf;
    struct rec *next;
};

/* packed: bitfields at odd bit offsets, one across 8 bytes, one across 9 */
struct __attribute__((packed)) packed_bits {
    unsigned char k;
    unsigned a : 3;
    unsigned long long w : 58;
    int z : 7;
    unsigned long long wide : 62;
};

struct rec global_rec = {.v = 1};
struct packed_bits gpk = {1, 5, 0x123456789abcdefULL, -7, 1};
static int counter_static = 5;
int garr[5] = {10, 11, 12, 13, 14};
int gscalar = 3;
struct rec *null_rec;

__attribute__((noinline)) int compute(int x, long y)
{
    return x * 2 + (int)y;
}

/* i386 -O2: a local function gets its parameters in registers (regparm) */
__attribute__((noinline)) static int local_fn(int x, int y)
{
    return x * 3 + y;
}

__attribute__((noinline)) long retval(long x)
{
    return x + 1;
}

/* noipa: main reloads what it may have written */
__attribute__((noipa)) int touch(struct rec *r, int i)
{
    __asm__ volatile("" ::: "memory");
    return r->v + r->arr[i] + counter_static;
}

/* structs passed by value: x86-64 in registers (pieces, a part of one), i386 on the stack */
struct pair {
    long a;
    int b;
    int c;
};
struct small_bits {
    unsigned x : 4;
    int y : 6;
};

__attribute__((noipa)) long by_value(struct pair s, struct small_bits t)
{
    return s.a + s.b * 10 + s.c * 100 + t.x * 1000 + t.y * 10000;
}

/* noipa: the callers keep no value in a register these do not clobber (IPA-RA), and
 * combine's arguments are loaded after the probe's line */
__attribute__((noipa)) void sink(int k)
{
    __asm__ volatile("" : : "r"(k) : "memory");
}

__attribute__((noipa)) int opaque(int k)
{
    return k;
}

__attribute__((noipa)) int combine(int a, int b, int c, int d, int e, int f)
{
    return a + 10 * b + 100 * c + 1000 * d + 10000 * e + 100000 * f;
}

/* six values live across a call: in callee-saved registers at -O2 (x86-64 has six:
 * rbx rbp r12-r15; i386 has four: the others are in the frame) */
__attribute__((noinline)) int keep(int n)
{
    int a = opaque(n + 1), b = opaque(n + 2), c = opaque(n + 3);
    int d = opaque(n + 4), e = opaque(n + 5), f = opaque(n + 6);
    sink(0); /* KEEP */
    return combine(a, b, c, d, e, f);
}

int main(int argc, char **argv)
{
    (void)argv;
    struct rec r = {.v = 7, .l = 8, .arr = {1, 2, 3, 4}};
    r.bf.a = 1;
    r.bf.b = -1;
    r.bf.c = 100;
    r.bf.d = -3;
    r.bf.e = 12345;
    r.bf.f = 1;
    r.bf.g = 0;
    counter_static += argc - 1; /* not a constant gcc may fold */
    printf("compute=%d\n", compute(argc, argc + 2));
    printf("local=%d\n", local_fn(argc, argc + 3));
    printf("retval=%ld\n", retval(argc));
    int t = touch(&r, argc);
    printf("touch=%d v=%d l=%ld arr=%d,%d,%d,%d static=%d\n", t, r.v, r.l, r.arr[0], r.arr[1],
           r.arr[2], r.arr[3], counter_static);
    printf("bits a=%u b=%d c=%u d=%d e=%llu f=%d g=%u\n", r.bf.a, r.bf.b, r.bf.c, r.bf.d,
           (unsigned long long)r.bf.e, r.bf.f, r.bf.g);
    printf("global v=%d garr=%d,%d scalar=%d\n", global_rec.v, garr[1], garr[4], gscalar);
    printf("packed k=%u a=%u w=%llx z=%d\n", gpk.k, gpk.a, (unsigned long long)gpk.w, gpk.z);
    printf("keep=%d\n", keep(argc));
    struct pair p = {argc, argc + 1, argc + 2};
    struct small_bits q = {argc, -argc};
    printf("by_value=%ld\n", by_value(p, q));
    fflush(stdout);
    return 0;
}
