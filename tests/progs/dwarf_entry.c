/* Parameters that gcc -O2 keeps, after a call reuses their registers, only as their
 * value at the function's entry (DW_OP_entry_value); i386 passes them in registers
 * with regparm.  depth() recurses, so each level's kept values must be its own.
 * `PROG N wait` first loops in spin() until SIGUSR1, for a session attached while
 * the call runs (its entry was before the probes). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__i386__)
#define REGS __attribute__((regparm(3)))
#else
#define REGS
#endif

__attribute__((noinline)) long churn(long v)
{
    __asm__ volatile("" : "+r"(v) :: "memory");
    return v + 1;
}

__attribute__((noinline)) REGS long later(long a, long b)
{
    long r = churn(b);
here: __attribute__((unused));
    r += churn(r);          /* LATER */
    return r;
}

__attribute__((noinline)) REGS long depth(long level, long tag)
{
    long r = level > 0 ? depth(level - 1, tag + 1) : churn(tag);
    r += churn(r);          /* DEPTH */
    return r;
}

static volatile sig_atomic_t go;

static void on_usr1(int sig)
{
    (void)sig;
    go = 1;
}

__attribute__((noinline)) REGS long spin(long a, long b)
{
    long r = churn(b);
    printf("ready\n");
    fflush(stdout);
    while (!go) {
        r += churn(r);      /* SPIN */
        usleep(20000);
    }
    return r;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 3;
    long s = 0;
    if (argc > 2 && strcmp(argv[2], "wait") == 0) {
        signal(SIGUSR1, on_usr1);
        volatile long spun = spin(4242, 1);
        (void)spun;
    }
    for (long i = 0; i < n; i++)
        s += later(1000 + i, 7 * i);
    s += depth(3, 50);
    printf("s=%ld\n", s);
    return 0;
}
