/* The program of tests/test_ustack_tapset.py: `probed` is called through a library with
 * no probe (ustack_lib.c) with arguments of every width; its caller's and its own return
 * addresses and the functions' addresses are printed once the calls are done. */
#include <stdio.h>

typedef long (*ustk_cb)(int);
long lib_outer(ustk_cb cb, int x);
void ustk_lib_report(void);

int data_word = 7;
static void *ra_probed, *ra_cb;

/* 8 arguments: on x86-64 the 7th and 8th are on the stack, on i386 every one (d takes
 * two words: the 8th and 9th) */
__attribute__((noinline)) long probed(int a, unsigned b, long c, void *p, int e, int f, int g,
                                      long long d)
{
    ra_probed = __builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
    return a + b + c + (long)(p != 0) + e + f + g + (long)(d >> 32);
}

#if defined(__i386__)
/* arguments in eax, edx, ecx: what regparm(3) tells the *_arg() functions */
__attribute__((noinline, regparm(3))) long in_regs(int a, int b, int c)
{
    __asm__ volatile("" ::: "memory");
    return a * b + c;
}
#else
__attribute__((noinline)) long in_regs(int a, int b, int c)
{
    __asm__ volatile("" ::: "memory");
    return a * b + c;
}
#endif

__attribute__((noinline)) long cb(int x)
{
    ra_cb = __builtin_return_address(0);
    long r = probed(x, 3, -5, &data_word, 6, -7, 8, 0x100000002LL);
    __asm__ volatile("" ::: "memory");
    return r;
}

int main(void)
{
    long s = lib_outer(cb, -1) + in_regs(-11, 12, -13);
    printf("probed=%p cb=%p main=%p data_word=%p ra_probed=%p ra_cb=%p sum=%ld\n",
           (void *)probed, (void *)cb, (void *)main, (void *)&data_word, ra_probed, ra_cb, s);
    ustk_lib_report();
    return 0;
}
