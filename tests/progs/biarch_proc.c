/* biarch_proc: one program, built -m64, -m32 and -static, that plays every
 * role of tests/test_e2e_biarch.py: a worker hitting a mark, a launcher that
 * fork+execs children, a process that forks without exec, one that execs
 * with a scrubbed environment, and one that kills a child mid-run.
 *
 *   biarch_proc [OPTIONS] [-x CMD ARGS... | -E CMD ARGS...]
 *     -m N       hit biarch:hit N times first (N < 0: forever)
 *     -c "CMD"   fork+exec CMD (split on spaces) as a child; repeatable
 *     -x CMD...  fork+exec the rest of argv as one more child
 *     -E CMD...  after everything else, exec the rest of argv in this process
 *     -f N       fork without exec: the child hits N marks and exits
 *     -p N       hit N more marks after the children are started
 *     -s         children/exec get the environment {"FOO=1"} only
 *     -b         barrier: children wait until all of them are ready
 *     -B         as -b, and the children meet again halfway through their -m marks,
 *                so every child's marks overlap in time with every other's
 *     -k I:MS    SIGKILL child I (0-based, in -c/-x order) MS ms after it starts
 *                (after the barrier opens, with -b)
 *     -n NAME    after the -m marks, rename this thread (prctl PR_SET_NAME)
 *
 * Every mark is DTRACE_PROBE2(biarch, hit, j, bits) with j the running index
 * (0, 1, 2, ...) of this process's marks.  Each process reports itself on
 * stdout with one write(2):
 *   "proc pid=P ppid=Q bits=B marks=N role=R foo=F t0=NS t1=NS"
 * (foo: whether FOO is set; t0/t1: CLOCK_MONOTONIC around the -m marks).
 * The exit status is 0 when every child exited 0 (or died of the SIGKILL
 * this process sent it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXCHILD 16
#define MAXWORDS 32

static long nmarks;
static const char *role = "main";
static long long t_first, t_last; /* CLOCK_MONOTONIC ns around the -m loop */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int half_ready = -1, half_go = -1; /* the -B meeting, in a child */

/* Rendezvous: one byte to `ready`, then block until the parent closes `go`. */
static void meet(int rfd, int gfd)
{
    char b = 1;
    if (write(rfd, &b, 1) != 1)
        _exit(4);
    close(rfd);
    while (read(gfd, &b, 1) < 0 && errno == EINTR)
        ;
    close(gfd);
}

static void hit(long n)
{
    for (long i = 0; n < 0 || i < n; i++) {
        if (i == n / 2 && half_ready >= 0) {
            meet(half_ready, half_go);
            half_ready = half_go = -1;
        }
        DTRACE_PROBE2(biarch, hit, nmarks, (long)(8 * sizeof(void *)));
        nmarks++;
        if (n < 0 && i % 64 == 0)
            usleep(100);
    }
}

static void report(void)
{
    char line[256];
    int len = snprintf(line, sizeof line,
                       "proc pid=%d ppid=%d bits=%d marks=%ld role=%s foo=%d t0=%lld t1=%lld\n",
                       (int)getpid(), (int)getppid(), (int)(8 * sizeof(void *)), nmarks, role,
                       getenv("FOO") != NULL, t_first, t_last);
    if (write(1, line, (size_t)len) < 0)
        _exit(3);
}

static char *scrubbed_env[] = {"FOO=1", NULL};
static int scrub;

static void do_exec(char **argv)
{
    if (scrub)
        execve(argv[0], argv, scrubbed_env);
    else
        execv(argv[0], argv);
    fprintf(stderr, "biarch_proc: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Barrier: each child meets the others before its marks (and, under -B,
 * halfway through them). */
static void barrier_wait(void)
{
    const char *r = getenv("BIARCH_READY"), *g = getenv("BIARCH_GO");
    const char *hr = getenv("BIARCH_HALF_READY"), *hg = getenv("BIARCH_HALF_GO");
    if (!r || !g)
        return;
    if (hr && hg) {
        half_ready = atoi(hr);
        half_go = atoi(hg);
    }
    unsetenv("BIARCH_READY");
    unsetenv("BIARCH_GO");
    unsetenv("BIARCH_HALF_READY");
    unsetenv("BIARCH_HALF_GO");
    meet(atoi(r), atoi(g));
}

static long now_ms(void) { return (long)(now_ns() / 1000000); }

int main(int argc, char **argv)
{
    char **children[MAXCHILD];
    int nchild = 0, barrier = 0;
    long first = 0, post = 0, forked = -1;
    int kill_idx[MAXCHILD], kill_ms[MAXCHILD], nkill = 0;
    char **exec_argv = NULL;
    const char *new_name = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") && i + 1 < argc) {
            first = atol(argv[++i]);
        } else if (!strcmp(a, "-p") && i + 1 < argc) {
            post = atol(argv[++i]);
        } else if (!strcmp(a, "-f") && i + 1 < argc) {
            forked = atol(argv[++i]);
        } else if (!strcmp(a, "-n") && i + 1 < argc) {
            new_name = argv[++i];
        } else if (!strcmp(a, "-s")) {
            scrub = 1;
        } else if (!strcmp(a, "-b")) {
            barrier = 1;
        } else if (!strcmp(a, "-B")) {
            barrier = 2;
        } else if (!strcmp(a, "-k") && i + 1 < argc && nkill < MAXCHILD) {
            if (sscanf(argv[++i], "%d:%d", &kill_idx[nkill], &kill_ms[nkill]) == 2)
                nkill++;
        } else if (!strcmp(a, "-c") && i + 1 < argc && nchild < MAXCHILD) {
            char **words = calloc(MAXWORDS + 1, sizeof *words);
            int n = 0;
            for (char *w = strtok(strdup(argv[++i]), " "); w && n < MAXWORDS; w = strtok(NULL, " "))
                words[n++] = w;
            children[nchild++] = words;
        } else if (!strcmp(a, "-x") && i + 1 < argc && nchild < MAXCHILD) {
            children[nchild++] = &argv[i + 1];
            break;
        } else if (!strcmp(a, "-E") && i + 1 < argc) {
            exec_argv = &argv[i + 1];
            break;
        } else {
            fprintf(stderr, "biarch_proc: bad argument %s\n", a);
            return 2;
        }
    }

    if (!barrier)
        barrier_wait(); /* a child of a -b parent */
    t_first = now_ns();
    hit(first);
    t_last = now_ns();
    if (new_name)
        prctl(PR_SET_NAME, (unsigned long)new_name, 0, 0, 0);

    int ready[2] = {-1, -1}, go[2] = {-1, -1}, hready[2] = {-1, -1}, hgo[2] = {-1, -1};
    if (barrier && nchild) {
        if (pipe(ready) || pipe(go) || (barrier == 2 && (pipe(hready) || pipe(hgo))))
            return 5;
        char buf[16];
        snprintf(buf, sizeof buf, "%d", ready[1]);
        setenv("BIARCH_READY", buf, 1);
        snprintf(buf, sizeof buf, "%d", go[0]);
        setenv("BIARCH_GO", buf, 1);
        if (barrier == 2) {
            snprintf(buf, sizeof buf, "%d", hready[1]);
            setenv("BIARCH_HALF_READY", buf, 1);
            snprintf(buf, sizeof buf, "%d", hgo[0]);
            setenv("BIARCH_HALF_GO", buf, 1);
        }
    }

    pid_t pids[MAXCHILD];
    long started[MAXCHILD];
    for (int c = 0; c < nchild; c++) {
        fflush(NULL);
        pids[c] = fork();
        if (pids[c] < 0)
            return 6;
        if (pids[c] == 0) {
            if (barrier) {
                close(ready[0]);
                close(go[1]);
                if (barrier == 2) {
                    close(hready[0]);
                    close(hgo[1]);
                }
            }
            do_exec(children[c]);
        }
        started[c] = now_ms();
    }
    if (barrier && nchild) {
        unsetenv("BIARCH_READY");
        unsetenv("BIARCH_GO");
        close(ready[1]);
        close(go[0]);
        char b;
        for (int c = 0; c < nchild; c++)
            if (read(ready[0], &b, 1) != 1)
                return 7;
        close(go[1]); /* everyone goes at once */
        for (int c = 0; c < nchild; c++)
            started[c] = now_ms(); /* -k counts from here */
        if (barrier == 2) {
            unsetenv("BIARCH_HALF_READY");
            unsetenv("BIARCH_HALF_GO");
            close(hready[1]);
            close(hgo[0]);
            for (int c = 0; c < nchild; c++)
                if (read(hready[0], &b, 1) != 1)
                    return 7;
            close(hgo[1]); /* and on again at once, halfway */
        }
    }

    pid_t fork_child = -1;
    if (forked >= 0) {
        fflush(NULL);
        fork_child = fork();
        if (fork_child == 0) {
            role = "forked";
            nmarks = 0;
            t_first = now_ns();
            hit(forked);
            t_last = now_ns();
            report();
            exit(0); /* exit, not _exit: the destructors (process.end) run */
        }
    }

    hit(post);

    for (int k = 0; k < nkill; k++) {
        int c = kill_idx[k];
        if (c < 0 || c >= nchild)
            continue;
        long wait_ms = started[c] + kill_ms[k] - now_ms();
        if (wait_ms > 0)
            usleep((useconds_t)wait_ms * 1000);
        kill(pids[c], SIGKILL);
    }

    int failed = 0, status;
    for (int c = 0; c < nchild; c++) {
        if (waitpid(pids[c], &status, 0) < 0) {
            failed++;
            continue;
        }
        int killed = 0;
        for (int k = 0; k < nkill; k++)
            killed |= kill_idx[k] == c;
        if (killed ? !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
                   : !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "biarch_proc: child %d (pid %d) status 0x%x\n", c, (int)pids[c],
                    status);
            failed++;
        }
    }
    if (fork_child > 0 && (waitpid(fork_child, &status, 0) < 0 || !WIFEXITED(status) ||
                           WEXITSTATUS(status) != 0))
        failed++;

    if (exec_argv) {
        role = "execd";
        report();
        fflush(NULL);
        do_exec(exec_argv);
    }
    report();
    return failed ? 1 : 0;
}
