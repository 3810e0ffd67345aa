/* process.end for a process a signal kills.
 *
 * A signal whose default action ends the process (SIGTERM, SIGINT, SIGHUP, SIGSEGV,
 * abort's SIGABRT, ...) runs no code of the process: its destructor and _exit never
 * come.  So where the program leaves such a signal at SIG_DFL, pd_sig_end stands in
 * for the default action: it runs the process.end probes, puts SIG_DFL back and sends
 * itself the same signal with the same siginfo, which, pending and unblocked once the
 * handler returns, ends the process exactly as the default action would have (the same
 * signal in the parent's waitpid, a core dump where one is due, the core's registers
 * those of the interrupted code).  A fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL) is sent
 * again the same way, before the instruction would run again.
 *
 * The program never sees the stand-in: the sigaction/signal wrappers (pd_pstack.c)
 * report SIG_DFL, with the flags and mask the kernel would report, for a signal whose
 * handler is pd_sig_end, and put pd_sig_end back when the program sets SIG_DFL.  A
 * handler the program installs replaces it and runs as without pydyn; one installed
 * with SA_RESETHAND, which the kernel resets to SIG_DFL as it delivers the signal,
 * runs through pd_pstack.c's wrapper, which puts pd_sig_end back as its first act.
 * SIG_IGN stays SIG_IGN (nohup's SIGHUP).
 *
 * What cannot be covered: SIGKILL (and SIGSTOP) take no handler; a signal the kernel
 * forces while its handler cannot run (a fault with no stack to handle it on) kills at
 * once; a disposition set by a raw rt_sigaction system call bypasses the wrappers.  The
 * launcher names at the exit the processes that ended with process.end probes not run
 * (launcher/session.py), with the signal their parent's wait saw (the wait family
 * below).  Only in a preloaded module: one pydyn -x loads into a
 * running process does not interpose the program's sigaction calls, which would then
 * see the stand-in.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_internal.h"

/* What a sigaction query returns for a signal whose handler is pd_sig_end: the SIG_DFL
 * disposition the kernel held when pd_sig_end replaced it. */
static struct sigaction pd_dfl[NSIG];
static int pd_sigend_on;
static int pd_rtmin, pd_rtmax;

static void pd_sig_end(int sig, siginfo_t *si, void *uc);
static void pd_wait_resolve(void);

/* Whether the default action of `sig` ends the process (with or without a core). */
int pd_sigend_fatal(int sig)
{
    if (!pd_sigend_on)
        return 0;
    switch (sig) {
    case SIGHUP: case SIGINT: case SIGQUIT: case SIGILL: case SIGTRAP: case SIGABRT:
    case SIGBUS: case SIGFPE: case SIGUSR1: case SIGSEGV: case SIGUSR2: case SIGPIPE:
    case SIGALRM: case SIGTERM: case SIGSTKFLT: case SIGXCPU: case SIGXFSZ:
    case SIGVTALRM: case SIGPROF: case SIGIO: case SIGPWR: case SIGSYS:
        return 1;
    default: /* the real-time signals glibc leaves to programs */
        return sig >= pd_rtmin && sig <= pd_rtmax;
    }
}

int pd_sigend_is(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == pd_sig_end;
}

void pd_sigend_view(int sig, struct sigaction *old)
{
    *old = pd_dfl[sig];
}

/* `sig`'s disposition is SIG_DFL, or was when the caller looked: pd_sig_end takes its
 * place, unless meanwhile something else did (another thread's sigaction).  `siginfo`
 * (0 or SA_SIGINFO), unless -1: the program's own SA_SIGINFO, where the kernel holds
 * the flags of pd_pstack.c's wrapper, which a reset to SIG_DFL keeps. */
void pd_sigend_take(int sig, int siginfo)
{
    pd_sigaction_fn real = pd_real_sigaction();
    if (!real || !pd_sigend_fatal(sig))
        return;
    struct sigaction end, prev;
    memset(&end, 0, sizeof end);
    end.sa_sigaction = pd_sig_end;
    /* SA_RESETHAND: a second such signal while the probes run kills as SIG_DFL would;
     * every signal blocked: no handler of the program runs between the fatal signal and
     * the end; SA_ONSTACK: a stack overflow's SIGSEGV still runs it (pd_altstack.c) */
    end.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK | SA_RESTART;
    sigfillset(&end.sa_mask);
    if (real(sig, &end, &prev) != 0)
        return;
    if (prev.sa_handler == SIG_DFL) {
        if (siginfo >= 0)
            prev.sa_flags = (prev.sa_flags & ~SA_SIGINFO) | siginfo;
        pd_dfl[sig] = prev;
    }
    else if (!pd_sigend_is(&prev))
        real(sig, &prev, NULL); /* not ours to replace */
}

/* From the constructor of a preloaded module: every fatal signal left at SIG_DFL.  Not
 * in a namespace's init (pid 1), which the kernel spares the default action of a
 * signal sent from inside the namespace: a handler would see it. */
void pd_sigend_init(void)
{
    pd_wait_resolve();
    pd_sigaction_fn real = pd_real_sigaction();
    if (pd_sigend_on || !real || getpid() == 1)
        return;
    pd_rtmin = SIGRTMIN;
    pd_rtmax = SIGRTMAX;
    pd_sigend_on = 1;
    for (int sig = 1; sig < NSIG; sig++) {
        /* looked at first: an inherited SIG_IGN (nohup's SIGHUP) is never replaced,
         * not even for a moment */
        struct sigaction cur;
        if (pd_sigend_fatal(sig) && real(sig, NULL, &cur) == 0 && cur.sa_handler == SIG_DFL)
            pd_sigend_take(sig, -1);
    }
}

static void pd_sig_end(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved_errno = errno;
    pd_sigaction_fn real = pd_real_sigaction();
    if (real) /* (the kernel did already, unless a handler of ours called this one) */
        real(sig, &pd_dfl[sig], NULL);
    pd_process_killed(sig);
    /* The same signal again, to this thread: delivered as this handler returns, with the
     * program's mask back, to SIG_DFL. */
    pid_t pid = getpid();
    long tid = syscall(SYS_gettid);
    if (!si || syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, si) != 0)
        syscall(SYS_tgkill, pid, tid, sig);
    errno = saved_errno;
}

/* ---- the parent's view of a death ---------------------------------------------
 * A process SIGKILL ends runs nothing; its parent's wait tells which signal it was (or
 * the status of an exit pydyn did not see: a raw exit_group system call).  The wait
 * family is interposed to note it in the child's entry, which the launcher's exit
 * report then names (it would otherwise know the signal only for its own child or a
 * zombie it happens to see).  glibc's own waits (system's) do not come here. */

typedef pid_t (*pd_wait4_fn)(pid_t, int *, int, struct rusage *);
typedef int (*pd_waitid_fn)(idtype_t, id_t, siginfo_t *, int);
static pd_wait4_fn pd_wait4_real;
static pd_waitid_fn pd_waitid_real;

/* Found by pd_sigend_init (dlsym is not async-signal-safe, waitpid is), else at the
 * first call. */
static void pd_wait_resolve(void)
{
    if (!pd_wait4_real)
        pd_wait4_real = (pd_wait4_fn)dlsym(RTLD_NEXT, "wait4");
    if (!pd_waitid_real)
        pd_waitid_real = (pd_waitid_fn)dlsym(RTLD_NEXT, "waitid");
}

static pid_t pd_wait4_noting(pid_t pid, int *status, int options, struct rusage *ru)
{
    pd_wait_resolve();
    if (!pd_wait4_real) {
        errno = ENOSYS;
        return -1;
    }
    int st;
    pid_t got = pd_wait4_real(pid, &st, options, ru);
    if (got > 0) {
        if (WIFSIGNALED(st))
            pd_process_reaped(got, PD_PROC_KILLED, WTERMSIG(st));
        else if (WIFEXITED(st))
            pd_process_reaped(got, PD_PROC_EXITED, WEXITSTATUS(st));
        if (status)
            *status = st;
    }
    return got;
}

PD_EXPORT pid_t wait4(pid_t pid, int *status, int options, struct rusage *ru)
{
    return pd_wait4_noting(pid, status, options, ru);
}

PD_EXPORT pid_t wait3(int *status, int options, struct rusage *ru)
{
    return pd_wait4_noting(-1, status, options, ru);
}

PD_EXPORT pid_t waitpid(pid_t pid, int *status, int options)
{
    return pd_wait4_noting(pid, status, options, NULL);
}

PD_EXPORT pid_t wait(int *status)
{
    return pd_wait4_noting(-1, status, 0, NULL);
}

PD_EXPORT int waitid(idtype_t idtype, id_t id, siginfo_t *info, int options)
{
    pd_wait_resolve();
    if (!pd_waitid_real) {
        errno = ENOSYS;
        return -1;
    }
    int rc = pd_waitid_real(idtype, id, info, options);
    if (rc == 0 && info && info->si_pid > 0) {
        if (info->si_code == CLD_KILLED || info->si_code == CLD_DUMPED)
            pd_process_reaped(info->si_pid, PD_PROC_KILLED, info->si_status);
        else if (info->si_code == CLD_EXITED)
            pd_process_reaped(info->si_pid, PD_PROC_EXITED, info->si_status);
    }
    return rc;
}
