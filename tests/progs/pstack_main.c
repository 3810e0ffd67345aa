/* Handlers on the private per-thread stack (tests/test_private_stack.py), with
 * fp_garbage_sp.S's gs_probe (a mark hit with sp = 0x10).  SIGSEGV is reset to its
 * default first, so the runtime's fallback for a faulting stub store is gone: a
 * trampoline that touched the target's stack would kill the process.
 *   garbage T N   T threads (0: the main thread) each make N garbage-sp hits
 *   fork N        N garbage-sp hits in a forked child, then N in the parent
 *   deep N        N hits on a 64 KiB thread stack with less than 1 KiB left
 *   deepret N     the same place calls shallow() N times (test_func_exits.py probes
 *                 its return)
 *   nested N      N hits of "tick" while SIGALRM fires every 20 us; its handler hits
 *                 "sig" (often while a "tick" handler runs: nested, on the private stack)
 *   timer N       N hits from SIGEV_THREAD timer callbacks (glibc's own threads, which
 *                 have no private stack: they use their own, as before)
 *   getpid N      N hits of "tick", each followed by a getpid() (a probed libc function
 *                 the test's handler calls too: a nested hit, on the private stack)
 *   sigact N      the runtime wraps the program's signal handlers: sigaction and signal
 *                 still report and run exactly what the program installed
 * Prints what it computed, for the test to compare with the probes' output. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long gs_probe(long a, long b);

static long n;

static void *garbage(void *base)
{
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += gs_probe((long)base + i, 100 * i);
    return (void *)sum;
}

static uintptr_t stack_lo;
static int deep_ret;
static long deep_total;

__attribute__((noipa)) long shallow(long i) { return 3 * i + 1; }
__attribute__((noipa)) long shallow_next(long i) { return i; } /* padding after shallow */

__attribute__((noinline)) static long descend(long d)
{
    volatile char pad[256];
    pad[0] = (char)d;
    if ((uintptr_t)pad - stack_lo < 1024) {
        for (long i = 0; i < n; i++) {
            if (deep_ret)
                deep_total += shallow(i);
            else
                STAP_PROBE2(pydyn_ps, deep, d, i);
        }
        return pad[0];
    }
    return descend(d + 1) + pad[0];
}

static void *deep(void *arg)
{
    (void)arg;
    pthread_attr_t a;
    void *lo;
    size_t size;
    pthread_getattr_np(pthread_self(), &a);
    pthread_attr_getstack(&a, &lo, &size);
    stack_lo = (uintptr_t)lo;
    descend(0);
    return NULL;
}

static volatile long n_sig;

static void on_alarm(int sig)
{
    (void)sig;
    STAP_PROBE1(pydyn_ps, sig, n_sig);
    n_sig++;
}

static volatile long n_timer;

static void on_timer(union sigval v)
{
    (void)v;
    long k = __atomic_fetch_add(&n_timer, 1, __ATOMIC_RELAXED);
    if (k < n)
        STAP_PROBE1(pydyn_ps, timer, k);
}

static volatile long got_usr1, got_info;

static void on_usr1(int sig) { got_usr1 += sig == SIGUSR1; }
static void on_info(int sig, siginfo_t *si, void *uc)
{
    got_info += sig == SIGUSR2 && si && si->si_signo == SIGUSR2 && si->si_pid == getpid() && uc;
}

static int sigact(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_info;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGHUP);
    int bad = 0;
    bad |= sigaction(SIGUSR2, &sa, NULL) != 0;
    bad |= sigaction(SIGUSR2, NULL, &old) != 0;
    bad |= old.sa_sigaction != on_info; /* (glibc adds SA_RESTORER to the flags) */
    bad |= (old.sa_flags & (SA_SIGINFO | SA_RESTART | SA_NODEFER | SA_RESETHAND | SA_ONSTACK)) !=
           (SA_SIGINFO | SA_RESTART);
    bad |= !sigismember(&old.sa_mask, SIGHUP);
    bad |= signal(SIGUSR1, on_usr1) != SIG_DFL;
    bad |= signal(SIGUSR1, on_usr1) != on_usr1;
    for (long i = 0; i < n; i++) {
        raise(SIGUSR1);
        raise(SIGUSR2);
    }
    bad |= signal(SIGUSR1, SIG_IGN) != on_usr1;
    raise(SIGUSR1);
    bad |= signal(SIGUSR1, SIG_DFL) != SIG_IGN;
    bad |= got_usr1 != n || got_info != n;
    printf("sigact %s %ld %ld\n", bad ? "bad" : "ok", got_usr1, got_info);
    return bad;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "garbage";
    n = argc > 2 ? atol(argv[argc - 1]) : 10;
    signal(SIGSEGV, SIG_DFL);
    if (strcmp(mode, "garbage") == 0) {
        int nt = argc > 3 ? atoi(argv[2]) : 0;
        long total = nt ? 0 : (long)garbage(NULL);
        pthread_t t[8];
        for (int k = 0; k < nt && k < 8; k++)
            pthread_create(&t[k], NULL, garbage, (void *)(1000L * (k + 1)));
        for (int k = 0; k < nt && k < 8; k++) {
            void *r;
            pthread_join(t[k], &r);
            total += (long)r;
        }
        printf("garbage total %ld\n", total);
    } else if (strcmp(mode, "fork") == 0) {
        pid_t c = fork();
        long s = (long)garbage((void *)(c == 0 ? 1000L : 0L));
        if (c == 0) {
            printf("child %ld\n", s);
            return 0;
        }
        int st;
        waitpid(c, &st, 0);
        printf("parent %ld child status %d\n", s, st);
    } else if (strcmp(mode, "deep") == 0 || (deep_ret = strcmp(mode, "deepret") == 0)) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 64 * 1024);
        pthread_t t;
        pthread_create(&t, &a, deep, NULL);
        pthread_join(t, NULL);
        printf("deep done\n");
        if (deep_ret)
            printf("deepret %ld %ld\n", n, deep_total + shallow_next(0));
    } else if (strcmp(mode, "nested") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 20}, {0, 20}};
        setitimer(ITIMER_REAL, &it, NULL);
        long sum = 0;
        for (long i = 0; i < n; i++) {
            STAP_PROBE2(pydyn_ps, tick, i, sum);
            sum += i ^ (sum >> 3);
        }
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
        printf("nested sum %ld signals %ld\n", sum, n_sig);
    } else if (strcmp(mode, "getpid") == 0) {
        long s = 0;
        for (long i = 0; i < n; i++) {
            STAP_PROBE1(pydyn_ps, tick, i);
            s += getpid() > 0;
        }
        printf("getpid %ld\n", s);
    } else if (strcmp(mode, "sigact") == 0) {
        return sigact();
    } else if (strcmp(mode, "timer") == 0) {
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD;
        ev.sigev_notify_function = on_timer;
        timer_t tm;
        if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0)
            return 2;
        struct itimerspec it = {{0, 200000}, {0, 200000}};
        timer_settime(tm, 0, &it, NULL);
        while (__atomic_load_n(&n_timer, __ATOMIC_RELAXED) < n + 2)
            usleep(1000);
        timer_delete(tm);
        printf("timer done\n");
    }
    return 0;
}
