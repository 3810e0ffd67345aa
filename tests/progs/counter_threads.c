/* Counters from many threads and processes (tests/test_counters.py).
 *
 *   counter_threads NTHREADS PER [par | read | fork | exec PATH]
 *
 * Each of NTHREADS workers calls hit_fn(v) -- a probed function holding mark "hit"(v)
 * -- for v = 1..PER, all alive together (a barrier keeps each until every one is done,
 * so none gives its slot back early and more than 64 really overflow the slots).
 * read: another thread fires mark "peek" while they run, and once after them.
 * fork: the main thread hits PER times, forks, and parent and child then both run the
 * workers and PER more hits on the main thread at the same time: a child that kept its
 * parent's slot would lose adds.  exec PATH: a child runs `PATH NTHREADS PER` (the
 * other ABI) while the parent runs its workers; then PATH: `PATH NTHREADS PER read`
 * after them, so its last peek sees every add of both processes.  mixread PATH: as
 * exec, with a reader in both processes while both add.  waves: the workers three
 * times over, each wave's threads taking the slots the last one gave back.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

static long per;
static int running;
static pthread_barrier_t all_done;

static volatile long sink;
static int reader_on, peeks; /* with a reader: how many peeks it has made */

/* The mark is not the first instruction: the function's entry is another site. */
__attribute__((noinline)) void hit_fn(long v)
{
    sink += v;
    STAP_PROBE1(pydyn_ct, hit, v);
    sink ^= v;
}

static void run(void)
{
    for (long v = 1; v <= per; v++)
        hit_fn(v);
}

static void *work(void *arg)
{
    (void)arg;
    run();
    /* However the threads are scheduled, the reader peeks while they still count as
     * running: a worker that finished waits for two peeks before it says so. */
    while (__atomic_load_n(&reader_on, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&peeks, __ATOMIC_ACQUIRE) < 2)
        sched_yield();
    __atomic_sub_fetch(&running, 1, __ATOMIC_RELEASE);
    pthread_barrier_wait(&all_done);
    return NULL;
}

static void *peek(void *arg)
{
    (void)arg;
    while (__atomic_load_n(&running, __ATOMIC_ACQUIRE)) {
        STAP_PROBE(pydyn_ct, peek);
        __atomic_add_fetch(&peeks, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static pid_t spawn(const char *path, char *n, char *per, const char *mode)
{
    pid_t child = fork();
    if (child == 0) {
        execl(path, path, n, per, mode, (char *)NULL);
        _exit(127);
    }
    return child;
}

static void workers(int n, int reader, int main_hits)
{
    pthread_t *t = calloc((size_t)n + 1, sizeof *t);
    running = n;
    reader_on = reader;
    pthread_barrier_init(&all_done, NULL, (unsigned)n);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, work, NULL) != 0) {
            perror("pthread_create");
            exit(1);
        }
    if (reader)
        pthread_create(&t[n], NULL, peek, NULL);
    if (main_hits)
        run(); /* while the workers run: in a forked child, against its parent's */
    for (int i = 0; i < n + reader; i++)
        pthread_join(t[i], NULL);
    if (reader)
        STAP_PROBE(pydyn_ct, peek);
    free(t);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int n = atoi(argv[1]);
    per = atol(argv[2]);
    const char *mode = argc > 3 ? argv[3] : "par";
    pid_t child = -1;
    if (!strcmp(mode, "fork")) {
        run(); /* the main thread claims a slot before the fork */
        child = fork();
    } else if ((!strcmp(mode, "exec") || !strcmp(mode, "mixread")) && argc > 4) {
        child = spawn(argv[4], argv[1], argv[2], strcmp(mode, "exec") ? "read" : "par");
    }
    for (int wave = 0; wave < (strcmp(mode, "waves") ? 1 : 3); wave++)
        workers(n, !strcmp(mode, "read") || !strcmp(mode, "mixread"), !strcmp(mode, "fork"));
    if (!strcmp(mode, "then") && argc > 4)
        child = spawn(argv[4], argv[1], argv[2], "read");
    if (child == 0)
        return 0;
    if (child > 0) {
        int st;
        if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "child failed\n");
            return 1;
        }
    }
    printf("done\n");
    return 0;
}
