/* A target for attaching while threads run through probed windows (tests/test_attach.py).
 *
 * attach_spin NTHREADS: each thread calls spin_sum and spin_pause in a tight loop and
 * checks their results; it prints "ready" once every thread runs, and runs until
 * SIGUSR1, then prints "spin ok" or "spin BAD".  Both functions are smaller than or about
 * as large as the jump written over their entry, so a thread that the attach stops is
 * often inside the window that jump replaces: spin_sum is bench/func_bench.c's
 * bench_work (i386: two 4-byte loads, then ret), spin_pause spends its time in the
 * `pause` instructions of its window.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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
    pthread_t *t = calloc((size_t)n, sizeof *t);
    for (int k = 0; k < n; k++)
        pthread_create(&t[k], NULL, spin, NULL);
    while (__atomic_load_n(&running, __ATOMIC_SEQ_CST) < n)
        usleep(1000);
    printf("ready\n");
    fflush(stdout);
    for (int k = 0; k < n; k++)
        pthread_join(t[k], NULL);
    printf("spin %s\n", bad ? "BAD" : "ok");
    return 0;
}
