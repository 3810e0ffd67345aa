/* proc_death: processes that end every way a process can end, for the process.end
 * tests (tests/test_process_end_deaths.py).
 *
 *   proc_death MODE...   fork one child per MODE, in turn, and wait for it; print
 *                        "pid MODE P" and then "child MODE status=0xS" (waitpid's view)
 *   proc_death -c MODE   end this very process that way (a signal from itself)
 *
 * MODEs: exit (exit(3)); term, int, hup, kill (the parent sends SIGTERM, SIGINT, SIGHUP,
 * SIGKILL to the waiting child); segv (a store to an unmapped page); abort; handler (a
 * signal() handler for SIGTERM prints, sets SIG_DFL and raises it again); oneshot (an
 * SA_RESETHAND handler for SIGTERM prints; the second SIGTERM kills); ign (SIGHUP
 * ignored, raised, then exit(4)); execvp (execlp of its own bare name, PATH set to its
 * directory: the new image exits 3); rawexec, rawexit (the execve and exit_group system
 * calls themselves, which pydyn does not see: the new image exits 3; status 5).  Each
 * child prints what sigaction reports for
 * SIGTERM, SIGSEGV and SIGINT, so a run with and without pydyn can be compared line
 * for line.  Every line is one write(2).
 */
#define _GNU_SOURCE
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (write(1, buf, (size_t)n) != n)
        _exit(90);
}

static void view(const char *when, int sig)
{
    struct sigaction sa;
    sigaction(sig, NULL, &sa);
    const char *h = sa.sa_handler == SIG_DFL ? "dfl" : sa.sa_handler == SIG_IGN ? "ign" : "fn";
    say("view %s %s %s flags=%#x\n", when, sigabbrev_np(sig), h, (unsigned)sa.sa_flags);
}

static void on_term(int sig)
{
    say("handled %s\n", sigabbrev_np(sig));
    view("in-handler", sig);
    signal(sig, SIG_DFL);
    raise(sig);
}

static volatile int oneshot_hits;

static void on_oneshot(int sig)
{
    say("oneshot %s\n", sigabbrev_np(sig));
    oneshot_hits++;
}

static int ready_fd = -1;

static void ready(void)
{
    char b = 1;
    if (write(ready_fd, &b, 1) != 1)
        _exit(91);
}

static void wait_for_signals(void)
{
    for (;;)
        pause();
}

static const char *self_name, *self_dir, *self_path;

/* The child's part: end the process as `mode` says.  `self`: no parent sends the
 * signal, it is sent from here. */
static void die(const char *mode, int self)
{
    static const struct { const char *name; int sig; } sent[] = {
        {"term", SIGTERM}, {"int", SIGINT}, {"hup", SIGHUP}, {"kill", SIGKILL}};
    view("start", SIGTERM);
    view("start", SIGSEGV);
    view("start", SIGINT);
    for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++)
        if (strcmp(mode, sent[i].name) == 0) {
            if (self)
                kill(getpid(), sent[i].sig);
            ready();
            wait_for_signals();
        }
    if (strcmp(mode, "exit") == 0)
        exit(3);
    if (strcmp(mode, "segv") == 0) {
        volatile uintptr_t addr = 16;
        *(volatile int *)addr = 1;
    }
    if (strcmp(mode, "abort") == 0)
        abort();
    if (strcmp(mode, "handler") == 0) {
        signal(SIGTERM, on_term);
        view("set", SIGTERM);
        if (self)
            raise(SIGTERM);
        ready();
        wait_for_signals();
    }
    if (strcmp(mode, "oneshot") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_oneshot;
        sa.sa_flags = SA_RESETHAND;
        sigaction(SIGTERM, &sa, NULL);
        view("set", SIGTERM);
        sigset_t term, before;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        sigprocmask(SIG_BLOCK, &term, &before);
        if (self)
            raise(SIGTERM);
        else
            ready();
        while (!oneshot_hits)
            sigsuspend(&before);
        sigprocmask(SIG_SETMASK, &before, NULL);
        view("after-oneshot", SIGTERM);
        if (self)
            raise(SIGTERM);
        ready();
        wait_for_signals();
    }
    if (strcmp(mode, "ign") == 0) {
        signal(SIGHUP, SIG_IGN);
        raise(SIGHUP);
        view("ignored", SIGHUP);
        exit(4);
    }
    if (strcmp(mode, "rawexec") == 0) {
        char *args[] = {(char *)self_name, "-c", "exit", NULL};
        syscall(SYS_execve, self_path, args, environ);
        _exit(95);
    }
    if (strcmp(mode, "rawexit") == 0)
        syscall(SYS_exit_group, 5);
    if (strcmp(mode, "execvp") == 0) {
        setenv("PATH", self_dir, 1);
        execlp(self_name, self_name, "-c", "exit", (char *)NULL);
        say("execlp failed\n");
        _exit(92);
    }
    say("unknown mode %s\n", mode);
    _exit(93);
}

int main(int argc, char **argv)
{
    /* no core files from the deaths; the same limit with and without pydyn */
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    char *copy1 = strdup(argv[0]), *copy2 = strdup(argv[0]);
    self_name = basename(copy1);
    self_dir = dirname(copy2);
    self_path = argv[0];
    if (argc == 3 && strcmp(argv[1], "-c") == 0) {
        int fds[2];
        if (pipe(fds) != 0)
            return 94;
        ready_fd = fds[1];
        die(argv[2], 1);
    }
    for (int i = 1; i < argc; i++) {
        int fds[2];
        if (pipe(fds) != 0)
            return 94;
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            ready_fd = fds[1];
            die(argv[i], 0);
        }
        close(fds[1]);
        say("pid %s %d\n", argv[i], (int)pid);
        int sigs[] = {SIGTERM, SIGTERM};
        int nsig = strcmp(argv[i], "oneshot") == 0 ? 2 : 1;
        if (strcmp(argv[i], "int") == 0)
            sigs[0] = SIGINT;
        else if (strcmp(argv[i], "hup") == 0)
            sigs[0] = SIGHUP;
        else if (strcmp(argv[i], "kill") == 0)
            sigs[0] = SIGKILL;
        char b;
        for (int k = 0; k < nsig && read(fds[0], &b, 1) == 1; k++)
            kill(pid, sigs[k]);
        close(fds[0]);
        int status;
        waitpid(pid, &status, 0);
        say("child %s status=%#x\n", argv[i], (unsigned)status);
    }
    return 0;
}
