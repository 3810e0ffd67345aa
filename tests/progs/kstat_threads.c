/* Keyed statistics from many threads in two rounds (tests/test_stats_keyed_threads.py).
 *
 *   kstat_threads NTHREADS PER
 *
 * NTHREADS workers, all alive together, each fire mark "hit"(id, i, value) for i in
 * [0, PER); then the main thread fires mark "phase" while every worker waits (a
 * script deletes there), then the workers fire i in [PER, 2 PER).  The values are
 * pstat_threads.c's: negatives, zero and a few large ones.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

static long per;
static pthread_barrier_t round_done, phase_done;

static long value(long id, long i)
{
    long v = (i * 7919 + id * 104729) % 200003 - 100000;
    return i % 97 == 0 ? v * 4000 : v;
}

static void *work(void *arg)
{
    long id = (long)arg;
    for (long i = 0; i < 2 * per; i++) {
        if (i == per) {
            pthread_barrier_wait(&round_done);
            pthread_barrier_wait(&phase_done);
        }
        STAP_PROBE3(pydyn_ks, hit, id, i, value(id, i));
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int n = atoi(argv[1]);
    per = atol(argv[2]);
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_barrier_init(&round_done, NULL, (unsigned)n + 1);
    pthread_barrier_init(&phase_done, NULL, (unsigned)n + 1);
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    pthread_barrier_wait(&round_done);
    STAP_PROBE(pydyn_ks, phase);
    pthread_barrier_wait(&phase_done);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("kstat done\n");
    return 0;
}
