/* rel_target.c -- one small target for tests/test_reliability.py, by mode:
 *   spin N            N marks "tick" (arg i), prints "spin done N"
 *   lock              fork a child that hits "hold" (its handler spins holding
 *                     the globals lock); a thread hits "tick" (blocks); SIGKILL
 *                     the child; print how long after the kill the tick returned
 *   flood N FILE      N marks "flood"; writes "flood done N" to FILE
 *   alarm N           SIGALRM every 100us hits "sig"; the main loop hits "tick" N times
 *   threads N         8 threads x N marks "hammer" (arg thread, i)
 *   strings           user_string on NULL, unmapped, partly mapped and good addresses
 *   ready             prints "ready PID", then sleeps 2 s, hits "armed" and "notnop"
 *   forks N           N forked children, each hits "tick" once and exits
 *   storm N C32 C64   N fork+exec of C32/C64 alternately (8 at a time)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sdt.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

static volatile long sig_hits;
static void on_alarm(int sig)
{
    (void)sig;
    sig_hits++;
    DTRACE_PROBE1(rel, sig, sig_hits);
}

static long tick_returned_us;
static void *tick_thread(void *arg)
{
    (void)arg;
    DTRACE_PROBE1(rel, tick, 1);
    tick_returned_us = now_us();
    return NULL;
}

static long per_thread;
static void *hammer(void *arg)
{
    long id = (long)arg;
    for (long i = 0; i < per_thread; i++)
        DTRACE_PROBE2(rel, hammer, id, i);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "spin";
    long n = argc > 2 ? atol(argv[2]) : 10;
    if (!strcmp(mode, "spin")) {
        for (long i = 0; i < n; i++)
            DTRACE_PROBE1(rel, tick, i);
        printf("spin done %ld\n", n);
    } else if (!strcmp(mode, "lock")) {
        pid_t holder = fork();
        if (holder == 0) {
            DTRACE_PROBE1(rel, hold, 0); /* never returns: killed inside the handler */
            _exit(3);
        }
        /* Wait until the holder spins with the lock: >= 20 ticks of CPU time. */
        for (int i = 0; i < 1000; i++) {
            char path[64], buf[512];
            snprintf(path, sizeof path, "/proc/%d/stat", (int)holder);
            FILE *f = fopen(path, "r");
            size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            buf[got] = 0;
            char *p = strrchr(buf, ')');
            unsigned long ut = 0;
            if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu", &ut) == 1 &&
                ut >= 20)
                break;
            usleep(10000);
        }
        pthread_t t;
        pthread_create(&t, NULL, tick_thread, NULL);
        usleep(200000);                 /* the thread is waiting for the lock */
        long killed = now_us();
        kill(holder, SIGKILL);
        pthread_join(t, NULL);
        int st;
        waitpid(holder, &st, 0);
        for (int i = 0; i < 5; i++)
            DTRACE_PROBE1(rel, tick, i);
        printf("holder killed=%d, tick returned %ld ms after the kill\n",
               WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, (tick_returned_us - killed) / 1000);
    } else if (!strcmp(mode, "flood")) {
        for (long i = 0; i < n; i++)
            DTRACE_PROBE1(rel, flood, i);
        FILE *f = fopen(argv[3], "w");
        fprintf(f, "flood done %ld\n", n);
        fclose(f);
    } else if (!strcmp(mode, "alarm")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 100}, {0, 100}};
        setitimer(ITIMER_REAL, &it, NULL);
        for (long i = 0; i < n; i++)
            DTRACE_PROBE1(rel, tick, i);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
        printf("alarm done %ld signals=%ld\n", n, (long)sig_hits);
    } else if (!strcmp(mode, "threads")) {
        per_thread = n;
        pthread_t t[8];
        for (long i = 0; i < 8; i++)
            pthread_create(&t[i], NULL, hammer, (void *)i);
        for (int i = 0; i < 8; i++)
            pthread_join(t[i], NULL);
        printf("threads done %ld\n", 8 * n);
    } else if (!strcmp(mode, "strings")) {
        long pg = sysconf(_SC_PAGESIZE);
        char *gone = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(gone, (size_t)pg);
        char *two = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        mprotect(two + pg, (size_t)pg, PROT_NONE);
        memset(two, 'x', (size_t)pg);   /* no NUL before the PROT_NONE page */
        DTRACE_PROBE1(rel, str, (char *)0);
        DTRACE_PROBE1(rel, str, gone);
        DTRACE_PROBE1(rel, str, two + pg - 4);
        DTRACE_PROBE1(rel, str, "good");
        printf("strings done\n");
    } else if (!strcmp(mode, "ready")) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        sleep(2);
        DTRACE_PROBE1(rel, armed, 0);
        DTRACE_PROBE1(rel, notnop, 0);
        printf("ready done\n");
    } else if (!strcmp(mode, "forks")) {
        for (long i = 0; i < n; i++) {
            pid_t p = fork();
            if (p == 0) {
                DTRACE_PROBE1(rel, tick, i);
                _exit(0);
            }
            waitpid(p, NULL, 0);
        }
        printf("forks done %ld\n", n);
    } else if (!strcmp(mode, "storm")) {
        long ok = 0, running = 0;
        for (long i = 0; i < n || running; ) {
            if (i < n && running < 8) {
                pid_t p = fork();
                if (p == 0) {
                    char *exe = argv[3 + (i & 1)];
                    char arg[32];
                    snprintf(arg, sizeof arg, "%ld", i);
                    execl(exe, exe, arg, (char *)NULL);
                    _exit(127);
                }
                i++;
                running++;
                continue;
            }
            int st;
            if (wait(&st) > 0) {
                running--;
                ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
            }
        }
        printf("storm done %ld ok %ld\n", n, ok);
    }
    return 0;
}
