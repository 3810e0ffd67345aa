/* Variables gcc -O2 describes with DWARF expressions, not one register or slot:
 * a value computed from another (DW_OP_stack_value), a 64-bit value in two
 * 32-bit registers on i386 (DW_OP_piece), a parameter whose register is reused
 * (DW_OP_entry_value).  The program prints the values it computes. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long long wide(long long v)
{
    __asm__ volatile("" : "+r"(v) :: "memory");
    return v;
}

__attribute__((noinline)) int sink(long v)
{
    __asm__ volatile("" :: "g"(v) : "memory");
    return (int)v;
}

__attribute__((noinline)) long computed(long x)
{
    long y = x * 2 + 7;   /* never stored: computed from x where it is read */
    sink(x);
    sink(3);              /* COMPUTED */
    return y + 1;
}

__attribute__((noinline)) int pieces(long long a)
{
    long long w = wide(a);
    sink(1);              /* PIECES */
    sink((long)(w >> 32));
    return (int)w;
}

int main(int argc, char **argv)
{
    long x = 100 + argc + (argc > 1 ? atol(argv[1]) : 0);
    long long a = 0x1234567800000000LL + 0x9abcdef0LL + argc;
    printf("x=%ld y=%ld\n", x, x * 2 + 7);
    printf("w=%lld\n", a);
    fflush(stdout);
    return computed(x) + pieces(a) == 0;
}
