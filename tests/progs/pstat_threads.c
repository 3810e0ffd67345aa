/* Statistics from many threads (tests/test_stats_threads.py).
 *
 *   pstat_threads NTHREADS PER seq|par [LOCK_OFF FALLBACKS_OFF [SECS]]
 *
 * Each of NTHREADS workers fires mark "hit"(id, v) PER times with a fixed
 * sequence of values (negatives, zero, large); `seq` runs them one after the
 * other on the main thread, `par` on NTHREADS threads alive together (a barrier
 * keeps every one alive until all are done, so none gives its slot back early).
 * With the offsets of pd_header.globals_lock and .stat_slot_fallbacks, the main
 * thread maps the session's segment ($PYDYN_SHM), holds the globals lock while
 * the workers run and reports whether they finished under it: a handler that
 * took the lock could not (it waits; SECS, 20 by default, bounds the wait).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sdt.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long per;
static int done;
static pthread_barrier_t all_done;

static long value(long id, long i)
{
    long v = (i * 7919 + id * 104729) % 200003 - 100000;
    return i % 97 == 0 ? v * 4000 : v; /* a few big ones for the upper buckets */
}

static void run(long id)
{
    for (long i = 0; i < per; i++)
        STAP_PROBE2(pydyn_ps, hit, id, value(id, i));
}

static void *work(void *arg)
{
    run((long)arg);
    __atomic_add_fetch(&done, 1, __ATOMIC_RELEASE);
    pthread_barrier_wait(&all_done);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int n = atoi(argv[1]);
    per = atol(argv[2]);
    if (argv[3][0] == 's') {
        for (long id = 0; id < n; id++)
            run(id);
        printf("seq done\n");
        return 0;
    }
    volatile uint32_t *lock = NULL, *fallbacks = NULL;
    if (argc > 5 && getenv("PYDYN_SHM")) {
        /* NAME, or NAME:FD when a root session also passes the segment open */
        char name[256];
        snprintf(name, sizeof name, "%s", getenv("PYDYN_SHM"));
        name[strcspn(name, ":")] = 0;
        int fd = shm_open(name, O_RDWR, 0);
        uint8_t *seg = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (seg == MAP_FAILED) {
            perror("segment");
            return 1;
        }
        lock = (volatile uint32_t *)(seg + atol(argv[4]));
        fallbacks = (volatile uint32_t *)(seg + atol(argv[5]));
        uint32_t free_word = 0, tid = (uint32_t)syscall(SYS_gettid);
        while (!__atomic_compare_exchange_n(lock, &free_word, tid, 0, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED))
            free_word = 0;
    }
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_barrier_init(&all_done, NULL, (unsigned)n + 1);
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int secs = argc > 6 ? atoi(argv[6]) : 20;
    do { /* up to secs for every worker to finish */
        usleep(1000);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) < n && now.tv_sec - start.tv_sec < secs);
    if (lock) {
        printf("finished under the globals lock: %d of %d\n", __atomic_load_n(&done, __ATOMIC_ACQUIRE), n);
        __atomic_store_n(lock, 0, __ATOMIC_RELEASE); /* waiters poll every 10 ms */
        printf("slot fallbacks: %u\n", *fallbacks);
    }
    pthread_barrier_wait(&all_done);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("par done\n");
    return 0;
}
