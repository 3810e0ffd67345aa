/* A target for attaching while threads run through probed windows (tests/test_attach.py).
 *
 * attach_spin NTHREADS: each thread calls spin_sum and spin_pause in a tight loop and
 * checks their results; it prints "ready" once every thread runs, and runs until
 * SIGUSR1, then prints "spin ok" or "spin BAD".  Both functions are smaller than or about
 * as large as the jump written over their entry, so a thread that the attach stops is
 * often inside the window that jump replaces: spin_sum is bench/func_bench.c's
 * bench_work (i386: two 4-byte loads, then ret), spin_pause spends its time in the
 * `pause` instructions of its window.
 * attach_spin NTHREADS lock: one more thread spends its time inside a dl_iterate_phdr
 * callback, holding the loader's lock that the attach's dlopen and arming wait for, so
 * the spinning threads run while the attach goes on.
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noipa)) long spin_sum(long i, long s) { return s + i; }

__attribute__((noipa)) long spin_pause(long x)
{
    __asm__ volatile("pause\n\tpause\n\tpause\n\tpause" ::: "memory");
    return x + 1;
}

static volatile sig_atomic_t stop;
static volatile int bad, running;

static void on_usr1(int sig) { (void)sig; stop = 1; }

static int slow_callback(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)info, (void)size, (void)data;
    usleep(50 * 1000);
    return 1;
}

static void *hold_loader_lock(void *arg)
{
    (void)arg;
    while (!stop)
        dl_iterate_phdr(slow_callback, NULL);
    return NULL;
}

static void *spin(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&running, 1, __ATOMIC_SEQ_CST);
    long acc = 0, i = 0;
    while (!stop) {
        for (int k = 0; k < 1000; k++, i++) {
            long want = acc + i;
            if ((acc = spin_sum(i, acc)) != want || spin_pause(i) != i + 1)
                bad = 1;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    signal(SIGUSR1, on_usr1);
    pthread_t *t = calloc((size_t)n + 1, sizeof *t);
    int lock = argc > 2 && strcmp(argv[2], "lock") == 0;
    if (lock)
        pthread_create(&t[n], NULL, hold_loader_lock, NULL);
    for (int k = 0; k < n; k++)
        pthread_create(&t[k], NULL, spin, NULL);
    while (__atomic_load_n(&running, __ATOMIC_SEQ_CST) < n)
        usleep(1000);
    printf("ready\n");
    fflush(stdout);
    for (int k = 0; k < n + lock; k++)
        pthread_join(t[k], NULL);
    printf("spin %s\n", bad ? "BAD" : "ok");
    return 0;
}
