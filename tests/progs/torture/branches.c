/* Torture corpus (tests/test_torture.py): USDT sites followed by RIP-relative loads,
 * short jumps, calls, loop back-edges and a switch table.  Each site's own counter
 * (incremented next to it) is printed as "expect NAME N", and a checksum that the
 * probes must not change. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

#define SITE(name, ...) do { STAP_PROBE1(torture, name, __VA_ARGS__); n_##name++; } while (0)

static long n_ripload, n_shortjmp, n_call, n_backedge, n_case0, n_case1, n_case2, n_case3,
    n_case4, n_case5, n_tail;
volatile long g_table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
static volatile long g_acc;

__attribute__((noinline)) static long helper(long x) { return x * 7 + 1; }

__attribute__((noinline)) static long ripload(long i)
{
    SITE(ripload, i);
    return g_table[i & 15] + g_acc;          /* a RIP-relative load right after the site */
}

__attribute__((noinline)) static long shortjmp(long i)
{
    long r = i;
    if (i & 1) {
        SITE(shortjmp, i);
        goto out;                            /* a short jump right after the site */
    }
    r = helper(i);
out:
    return r;
}

__attribute__((noinline)) static long call_after(long i)
{
    SITE(call, i);
    return helper(i);                        /* a call (often a tail jump) after the site */
}

__attribute__((noinline)) static long backedge(long n)
{
    long s = 0;
    for (long i = 0; i < n; i++) {
        s += g_table[i & 15];
        SITE(backedge, s);                   /* the loop's back-edge follows the site */
    }
    return s;
}

__attribute__((noinline)) static long table(long i)
{
    long r;
    switch (i % 6) {                         /* dense enough for a jump table */
    case 0: SITE(case0, i); r = i + 3; break;
    case 1: SITE(case1, i); r = i * 5; break;
    case 2: SITE(case2, i); r = i ^ 0x55; break;
    case 3: SITE(case3, i); r = helper(i); break;
    case 4: SITE(case4, i); r = i - 17; break;
    default: SITE(case5, i); r = -i; break;
    }
    SITE(tail, r);
    return r;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, sum = 0;
    for (long i = 0; i < n; i++) {
        sum += ripload(i);
        sum += shortjmp(i);
        sum += call_after(i);
        sum += table(i);
        g_acc = sum & 7;
    }
    sum += backedge(n);
    printf("checksum %ld\n", sum);
    printf("expect ripload %ld\nexpect shortjmp %ld\nexpect call %ld\nexpect backedge %ld\n",
           n_ripload, n_shortjmp, n_call, n_backedge);
    printf("expect case0 %ld\nexpect case1 %ld\nexpect case2 %ld\nexpect case3 %ld\n",
           n_case0, n_case1, n_case2, n_case3);
    printf("expect case4 %ld\nexpect case5 %ld\nexpect tail %ld\n", n_case4, n_case5, n_tail);
    return 0;
}
