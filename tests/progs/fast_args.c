/* tests/test_fast_args.py: functions too small for patches at both entry and exit
 * (tiny: `lea; ret` on x86-64, ident: `mov; ret` on both), called from recursion, from
 * frames longjmp leaves, from signal handlers that interrupt them, and from threads; a
 * bigger function (wide: its arguments in registers and, on i386, on the stack) and a USDT
 * mark with two arguments.  Prints what exact probes must count and sum.
 * usage: fast_args N THREADS */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>

__attribute__((noipa)) long tiny(long i, long s) { return s + i; }
__attribute__((noipa)) long ident(long x) { return x; }
__attribute__((noipa)) long wide(long a, long b, long c, long d, long e, long f, long g)
{
    return a * 3 + b - c + (d ^ e) + f * g;
}
/* not the last function of .text: tiny's and ident's rets have padding after them */
__attribute__((noipa)) long after_all(long x) { return x * 7 + 1; }

static volatile long tiny_calls, tiny_ret, tiny_isum, ident_calls, ident_sum;

static long call_tiny(long i, long s)
{
    __atomic_add_fetch(&tiny_calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&tiny_isum, i, __ATOMIC_RELAXED);
    long r = tiny(i, s);
    __atomic_add_fetch(&tiny_ret, r, __ATOMIC_RELAXED);
    return r;
}

static long call_ident(long x)
{
    __atomic_add_fetch(&ident_calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&ident_sum, x, __ATOMIC_RELAXED);
    return ident(x);
}

static long rec(long n)
{
    if (n == 0)
        return 0;
    long v = call_tiny(n, 1);
    return v + rec(n - 1) + call_ident(n);
}

static jmp_buf jb;
static void dive(long d)
{
    call_tiny(d, 2);
    if (d == 0)
        longjmp(jb, 1);
    dive(d - 1);
    call_tiny(d, 3); /* never reached */
}

static void on_signal(int sig)
{
    call_tiny(sig, 4);
    call_ident(sig);
}

static long per_thread;
static void *worker(void *arg)
{
    long base = (long)arg, acc = 0;
    for (long i = 0; i < per_thread; i++)
        acc = call_tiny(base + i, acc & 0xffff);
    return (void *)acc;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, nthreads = argc > 2 ? atol(argv[2]) : 4;
    long acc = 0, wsum = 0, wcalls = 0, marks = 0, msum = 0;
    signal(SIGUSR1, on_signal);
    for (long i = 0; i < n; i++) {
        acc = call_tiny(i, acc & 0xffff);
        call_ident(i * 5 - 7);
        wsum += wide(i, -i, i * 2, i + 3, 9, i & 7, -2);
        wcalls++;
        DTRACE_PROBE2(fast_args, hit, i, i * 2 + 1);
        marks++;
        msum += i + (i * 2 + 1);
        if (i % 97 == 0)
            raise(SIGUSR1); /* the handler runs between two probed calls */
    }
    rec(200);
    if (!setjmp(jb))
        dive(30);
    per_thread = n;
    pthread_t t[16];
    for (long k = 0; k < nthreads && k < 16; k++)
        pthread_create(&t[k], NULL, worker, (void *)(k * 1000));
    for (long k = 0; k < nthreads && k < 16; k++)
        pthread_join(t[k], NULL);
    printf("tiny %ld %ld %ld\nident %ld %ld\nwide %ld %ld\nmark %ld %ld\n", tiny_calls,
           tiny_ret, tiny_isum, ident_calls, ident_sum, wcalls, wsum, marks, msum);
    return 0;
}
