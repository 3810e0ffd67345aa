/* A library with no probe between the program's frames (tests/test_ustack_tapset.py):
 * main -> lib_outer -> lib_inner -> (the program's) cb -> probed.  Each function notes
 * the address it returns to, which the program prints with its functions' addresses. */
#include <stdio.h>

typedef long (*ustk_cb)(int);
void *ustk_ra_inner, *ustk_ra_outer;

__attribute__((noinline)) long lib_inner(ustk_cb cb, int x)
{
    ustk_ra_inner = __builtin_return_address(0);
    long r = cb(x + 1);
    __asm__ volatile("" ::: "memory");
    return r + 1;
}

__attribute__((noinline)) long lib_outer(ustk_cb cb, int x)
{
    ustk_ra_outer = __builtin_return_address(0);
    long r = lib_inner(cb, x * 2);
    __asm__ volatile("" ::: "memory");
    return r + 2;
}

void ustk_lib_report(void)
{
    printf("lib_inner=%p lib_outer=%p ra_inner=%p ra_outer=%p\n", (void *)lib_inner,
           (void *)lib_outer, ustk_ra_inner, ustk_ra_outer);
}
