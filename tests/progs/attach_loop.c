/* A long-running target for pydyn -x (tests/test_attach.py).
 *
 * attach_loop NTHREADS: each thread counts i = 1, 2, 3, ... and hits mark "tick"
 * (thread, i) every 100 us, and a semaphore-guarded mark "guarded" (thread, i), until
 * SIGUSR1.  It prints "ready" once every thread runs, and at the end, per thread,
 * "thread T last N sum S ok|BAD" (S must be N*(N+1)/2: a probe that disturbed a
 * register shows up here) and the semaphores' final values (0 once pydyn detached).
 * SIGUSR2 makes thread 0 fork a child that hits "tick" (98, 1..50) and exits, and
 * fork+exec `attach_loop child`, which hits "tick" (99, 1..100) and prints whether
 * pydyn's variables are in its environment; "children done" once both are reaped.
 * attach_loop NTHREADS lock: one more thread spends its time inside a
 * dl_iterate_phdr callback, holding the loader's lock that dlopen needs too.
 */
#define _GNU_SOURCE
#define _SDT_HAS_SEMAPHORES 1
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

/* with _SDT_HAS_SEMAPHORES every mark has one; only "guarded" tests its own */
__extension__ unsigned short pydyn_test_guarded_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short pydyn_test_tick_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

static volatile sig_atomic_t stop, spawn;
static char *self_path;
static volatile int started;
static long last[16], guarded[16];
static long long sums[16]; /* 64-bit on i386 too: a slow run passes 65,535 ticks */

static void on_usr1(int sig) { (void)sig; stop = 1; }
static void on_usr2(int sig) { (void)sig; spawn = 1; }

static int slow_callback(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)info;
    (void)size;
    (void)data;
    usleep(50 * 1000);
    return 1; /* one object is enough */
}

static void *hold_loader_lock(void *arg)
{
    (void)arg;
    while (!stop)
        dl_iterate_phdr(slow_callback, NULL);
    return NULL;
}

static void hits(long t, long n)
{
    for (long i = 1; i <= n; i++)
        STAP_PROBE2(pydyn_test, tick, t, i);
}

static void spawn_children(void)
{
    pid_t forked = fork();
    if (forked == 0) {
        hits(98, 50);
        _exit(0);
    }
    pid_t execed = fork();
    if (execed == 0) {
        execl(self_path, self_path, "child", (char *)NULL);
        _exit(127);
    }
    int st1 = -1, st2 = -1;
    waitpid(forked, &st1, 0);
    waitpid(execed, &st2, 0);
    printf("children done %d %d\n", st1, st2);
    fflush(stdout);
}

static void *loop(void *arg)
{
    long t = (long)arg, i = 0;
    long long sum = 0;
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    while (!stop) {
        if (t == 0 && spawn) {
            spawn = 0;
            spawn_children();
        }
        i++;
        sum += i;
        STAP_PROBE2(pydyn_test, tick, t, i);
        if (__builtin_expect(pydyn_test_guarded_semaphore, 0)) {
            guarded[t]++;
            STAP_PROBE2(pydyn_test, guarded, t, i);
        }
        usleep(100);
    }
    last[t] = i;
    sums[t] = sum;
    return NULL;
}

int main(int argc, char **argv)
{
    self_path = argv[0];
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        hits(99, 100);
        const char *pre = getenv("LD_PRELOAD");
        printf("child PYDYN_SHM %s LD_PRELOAD %s\n", getenv("PYDYN_SHM") ? "set" : "unset",
               pre ? pre : "unset");
        return 0;
    }
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (n < 1 || n > 16)
        return 2;
    signal(SIGUSR1, on_usr1);
    signal(SIGUSR2, on_usr2);
    pthread_t th[16], locker;
    int lock = argc > 2 && strcmp(argv[2], "lock") == 0;
    if (lock)
        pthread_create(&locker, NULL, hold_loader_lock, NULL);
    for (long t = 1; t < n; t++)
        pthread_create(&th[t], NULL, loop, (void *)t);
    while (started < n - 1)
        usleep(1000);
    printf("ready\n");
    fflush(stdout);
    loop((void *)0);
    for (long t = 1; t < n; t++)
        pthread_join(th[t], NULL);
    if (lock)
        pthread_join(locker, NULL);
    for (long t = 0; t < n; t++)
        printf("thread %ld last %ld sum %lld %s\n", t, last[t], sums[t],
               sums[t] == (long long)last[t] * (last[t] + 1) / 2 ? "ok" : "BAD");
    printf("semaphores %u %u\n", (unsigned)pydyn_test_tick_semaphore,
           (unsigned)pydyn_test_guarded_semaphore);
    return 0;
}
