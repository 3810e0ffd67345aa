/* Private per-thread handler stacks for the x86 trampolines.
 *
 * A stub must not store anything on the target's stack: its sp may be garbage
 * (hand-written assembly) or a few bytes from the guard page.  So each thread that
 * pd_altstack.c equips (the main thread, every pthread_create'd one) also gets a
 * private stack, whose top lives in pd_ps_top, a TLS word the stubs address as
 * %fs:off (x86-64) or %gs:off (i386).  The offset is a constant for every thread
 * only when this module's TLS is static, i.e. when it was loaded at start-up
 * (LD_PRELOAD: glibc places the TLS of every initially loaded object in the static
 * block at a fixed distance from the thread pointer, and resolves its TLS
 * descriptors to that offset).  A module dlopen'ed by -x may get dynamic TLS, so
 * there the stubs keep the old behaviour (pd_ps_enabled stays 0).
 *
 * The stub (arch/x86/x86_tramp.c) needs no flags before the switch:
 *     mov %rcx,%fs:SAVE; mov %fs:TOP,%rcx; jrcxz own_stack
 *     movq $0,%fs:TOP                    -- claimed: a nested hit stays where it is
 *     mov %rcx,-8(%rcx); mov %rsp,-16(%rcx); lea -16(%rcx),%rsp; mov %fs:SAVE,%rcx
 *     ... build pd_regs (sp from the saved word), call, restore ...
 *     TOP = the word at +8 (top, or 0 on the own-stack path); mov (%rsp),%rsp
 * TOP is 0 while the stack is in use and in threads that have none (raw clone,
 * glibc's internal threads): those run on their own stack as before, below the red
 * zone, and a fault there still goes to pd_stub_fault.
 *
 * Two TLS words are shared by every nesting level, so a signal that arrives while a
 * stub is between those instructions, and whose handler hits a probe, would see
 * them half-updated: SAVE holding the interrupted stub's rcx, or TOP not yet (or
 * no longer) 0 while the interrupted code already runs on the private stack.  Hence
 * the sigaction/signal wrappers below: every handler the program installs runs
 * through pd_sig_wrap, which puts SAVE and TOP back as they were after the handler
 * and marks the private stack busy while a handler runs on it.  Handlers installed
 * without these functions (a raw rt_sigaction, before this module's constructor)
 * are not wrapped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pd_runtime.h"

__thread uintptr_t pd_ps_top;          /* free private stack's top; 0: in use, or none */
__thread uintptr_t pd_ps_save;         /* the stub's scratch for rcx/ecx */
__thread uintptr_t pd_ps_lo, pd_ps_hi; /* the private stack, for pd_sig_wrap */
int pd_ps_enabled;                     /* the stubs switch stacks */
int32_t pd_ps_top_off, pd_ps_save_off; /* their offsets from the thread pointer */

/* From pd_altstack_init (the constructor), before any stub is written. */
static void pd_sigaction_setup(void);

void pd_pstack_init(void)
{
    pd_sigaction_setup();
#ifdef PD_ARCH_PRIVATE_STACK
    if (pd_xmm_always) /* -x: dlopen'ed, the TLS may be dynamic */
        return;
    uintptr_t tp = pd_thread_pointer();
    pd_ps_top_off = (int32_t)((uintptr_t)&pd_ps_top - tp);
    pd_ps_save_off = (int32_t)((uintptr_t)&pd_ps_save - tp);
    pd_ps_enabled = 1;
#endif
}

/* The calling thread's private stack is [lo, hi) (hi = 0: none any more). */
void pd_pstack_set(uintptr_t lo, uintptr_t hi)
{
    pd_ps_top = 0;
    pd_ps_lo = lo;
    pd_ps_hi = hi;
    if (hi)
        pd_ps_top = hi - 16; /* 16-aligned, as the stubs' frame expects */
}

/* ---- the program's signal handlers -------------------------------------------- */

struct pd_sighandler {
    void (*fn)(int, siginfo_t *, void *); /* the program's handler */
    int flags;                            /* its sa_flags */
};
static struct pd_sighandler pd_sigs[NSIG];

static void pd_sig_wrap(int sig, siginfo_t *si, void *uc)
{
    uintptr_t save = pd_ps_save, top = pd_ps_top;
    char here;
    if ((uintptr_t)&here - pd_ps_lo < pd_ps_hi - pd_ps_lo)
        pd_ps_top = 0; /* it interrupted code running on the private stack */
    if (pd_sigs[sig].flags & SA_RESETHAND) /* the kernel has set SIG_DFL: the stand-in */
        pd_sigend_take(sig, pd_sigs[sig].flags & SA_SIGINFO);
    void (*fn)(int, siginfo_t *, void *) = __atomic_load_n(&pd_sigs[sig].fn, __ATOMIC_ACQUIRE);
    if (fn && (pd_sigs[sig].flags & SA_SIGINFO))
        fn(sig, si, uc);
    else if (fn) /* (set before the kernel is given the wrapper) */
        ((void (*)(int))fn)(sig);
    pd_ps_top = top;
    pd_ps_save = save;
}

/* Looked up and measured once from pd_pstack_init (the constructor): sigaction is
 * async-signal-safe and called from signal handlers and fork children, where dlsym and
 * dladdr (the loader's lock, maybe malloc) must not run; a call before the constructor
 * (another library's) still finds them the slow way. */
static pd_sigaction_fn pd_sigaction_real;
static uintptr_t pd_self_lo, pd_self_hi; /* this module's mapped range */

pd_sigaction_fn pd_real_sigaction(void)
{
    if (!pd_sigaction_real)
        pd_sigaction_real = (pd_sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return pd_sigaction_real;
}

static int pd_self_range(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    uintptr_t lo = UINTPTR_MAX, hi = 0, at = (uintptr_t)pd_sig_wrap;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
    }
    if (at < lo || at >= hi)
        return 0;
    pd_self_lo = lo;
    pd_self_hi = hi;
    return 1;
}

static void pd_sigaction_setup(void)
{
    pd_real_sigaction();
    if (!pd_self_hi)
        dl_iterate_phdr(pd_self_range, NULL);
}

/* Whether `fn` is this module's own (pd_sigtrap, pd_stub_fault): never wrapped. */
static int pd_is_ours(void *fn)
{
    if (pd_self_hi)
        return (uintptr_t)fn - pd_self_lo < pd_self_hi - pd_self_lo;
    static void *base;
    Dl_info di;
    if (!base && dladdr((void *)pd_sig_wrap, &di))
        base = di.dli_fbase;
    return dladdr(fn, &di) && di.dli_fbase == base;
}

PD_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    pd_sigaction_fn real = pd_real_sigaction();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (sig <= 0 || sig >= NSIG)
        return real(sig, act, old);
    struct sigaction mine, prev;
    const struct sigaction *use = act;
    void *h = act ? (void *)act->sa_sigaction : NULL;
    int handler = act && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
    /* also where stacks are not switched: a one-shot handler of a fatal signal, whose
     * reset to SIG_DFL must bring back pd_sigend.c's stand-in */
    int wrap = handler && (pd_ps_enabled || (act->sa_flags & SA_RESETHAND &&
                                             pd_sigend_fatal(sig))) && !pd_is_ours(h);
    int dfl = act && act->sa_handler == SIG_DFL && pd_sigend_fatal(sig);
    struct sigaction before_dfl;
    pd_sigend_view(sig, &before_dfl);
    if (wrap) {
        mine = *act;
        mine.sa_sigaction = pd_sig_wrap;
        mine.sa_flags |= SA_SIGINFO;
        use = &mine;
    }
    struct pd_sighandler before = pd_sigs[sig];
    if (wrap) { /* before the kernel can call the wrapper with it */
        pd_sigs[sig].flags = act->sa_flags;
        __atomic_store_n(&pd_sigs[sig].fn, act->sa_sigaction, __ATOMIC_RELEASE);
    }
    int rc = real(sig, use, &prev);
    if (rc != 0) {
        pd_sigs[sig] = before;
        return rc;
    }
    if (dfl) /* SIG_DFL as asked, then pd_sigend.c's stand-in for it */
        pd_sigend_take(sig, -1);
    if (old) {
        *old = prev;
        if (prev.sa_sigaction == pd_sig_wrap) { /* what the program installed */
            old->sa_sigaction = before.fn;
            old->sa_flags = (prev.sa_flags & ~SA_SIGINFO) | (before.flags & SA_SIGINFO);
        } else if (pd_sigend_is(&prev)) { /* the SIG_DFL it stands in for */
            *old = before_dfl;
        }
    }
    return 0;
}

/* glibc's signal() and friends call its internal sigaction, which the one above does
 * not interpose: the same semantics through it (BSD: SA_RESTART, the signal blocked
 * in its handler; System V: one shot, not blocked). */
static __sighandler_t pd_signal_with(int sig, __sighandler_t fn, int flags)
{
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = fn;
    act.sa_flags = flags;
    sigemptyset(&act.sa_mask);
    if (!(flags & SA_NODEFER) && sig > 0 && sig < NSIG)
        sigaddset(&act.sa_mask, sig);
    if (sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

PD_EXPORT __sighandler_t signal(int sig, __sighandler_t fn)
{
    return pd_signal_with(sig, fn, SA_RESTART);
}

PD_EXPORT __sighandler_t bsd_signal(int sig, __sighandler_t fn)
{
    return pd_signal_with(sig, fn, SA_RESTART);
}

PD_EXPORT __sighandler_t sysv_signal(int sig, __sighandler_t fn)
{
    return pd_signal_with(sig, fn, SA_RESETHAND | SA_NODEFER);
}
