/* Handlers still running when the session stops (tests/test_quiesce.py).
 *
 *   quiesce slow ITER    a second thread fires mark "slow"(ITER), whose handler loops
 *                        ITER times; 50 ms after it fired, the main thread fires mark
 *                        "stop" (the script's exit()), then waits for it.
 *   quiesce hammer N     N threads call tick() (function probes) and fire mark "hit"
 *                        in a loop; after 100 ms the main thread fires "stop" and lets
 *                        them hammer 200 ms more.
 *   quiesce killed ITER  a forked child fires "slow"(ITER) and is SIGKILLed 100 ms
 *                        later (inside the handler); then the parent fires "stop".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long iters;
static volatile int fired, quit;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *slow(void *arg)
{
    (void)arg;
    fired = 1;
    STAP_PROBE1(pydyn_q, slow, iters);
    return NULL;
}

static volatile long sink;

/* The mark is not the first instruction: the function's entry is another site. */
__attribute__((noinline)) void tick(void)
{
    sink++;
    STAP_PROBE(pydyn_q, hit);
    sink ^= 1;
}

static void *hammer(void *arg)
{
    (void)arg;
    while (!quit)
        tick();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    long n = atol(argv[2]);
    pthread_t t[80];
    if (!strcmp(argv[1], "slow")) {
        iters = n;
        pthread_create(&t[0], NULL, slow, NULL);
        while (!fired)
            sleep_ms(1);
        sleep_ms(50);
        STAP_PROBE(pydyn_q, stop);
        pthread_join(t[0], NULL);
    } else if (!strcmp(argv[1], "killed")) {
        iters = n;
        pid_t child = fork();
        if (child == 0) {
            slow(NULL);
            _exit(0);
        }
        sleep_ms(100);
        kill(child, SIGKILL); /* not reaped yet: a zombie while the session stops */
        STAP_PROBE(pydyn_q, stop);
        sleep_ms(100);
        waitpid(child, NULL, 0);
    } else {
        if (n < 1 || n > 80)
            return 2;
        for (long i = 0; i < n; i++)
            pthread_create(&t[i], NULL, hammer, NULL);
        sleep_ms(100);
        STAP_PROBE(pydyn_q, stop);
        sleep_ms(200);
        quit = 1;
        for (long i = 0; i < n; i++)
            pthread_join(t[i], NULL);
    }
    puts("quiesce: done");
    return 0;
}
