/* Per-thread alternate signal stacks.
 *
 * A probe site whose stack pointer holds garbage (hand-written assembly does
 * this) must still fire: the SIGTRAP handler of trap sites, and the SIGSEGV
 * handler that catches a trampoline's first write to such a stack
 * (arch/x86/x86_tramp.c), run with SA_ONSTACK on the stack installed here.  A signal
 * stack cannot be installed lazily from the handler that needs it, so it is
 * installed when a thread starts: the main thread in the constructor, every
 * other thread by the pthread_create below.  Threads created otherwise (glibc's
 * own SIGEV_THREAD helpers, raw clone) have none and handle signals on their
 * own stack, as without pydyn; nor do they fire process.thread.begin/.end.  A thread that already has a signal stack keeps
 * it; one that installs its own later replaces ours.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pd_runtime.h"

#define PD_ALTSTACK_SIZE (64 * 1024) /* a handler's context and output buffer: ~10 KiB */
#define PD_PSTACK_SIZE (64 * 1024)   /* the trampolines' private stack (pd_pstack.c) */

static int pd_alt_enabled;
static pthread_key_t pd_alt_key;

static size_t pd_page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* One mapping per thread: guard page, signal stack, and with pd_ps_enabled another
 * guard page and the private stack -- separate, so that a signal taken while a
 * handler runs on the private stack never writes over it. */
static size_t pd_alt_size(void)
{
    return PD_ALTSTACK_SIZE + pd_page() + (pd_ps_enabled ? PD_PSTACK_SIZE + pd_page() : 0);
}

/* Thread exit: stop using the stacks before they are unmapped. */
static void pd_alt_free(void *mem)
{
    stack_t cur, off = {.ss_flags = SS_DISABLE};
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == (char *)mem + pd_page())
        sigaltstack(&off, NULL);
    pd_pstack_set(0, 0);
    munmap(mem, pd_alt_size());
}

/* Gives the calling thread a signal stack unless it has one, and a private stack. */
void pd_altstack_thread(void)
{
    stack_t cur;
    if (!pd_alt_enabled || sigaltstack(NULL, &cur) != 0)
        return;
    int has_alt = !(cur.ss_flags & SS_DISABLE);
    if (has_alt && !pd_ps_enabled)
        return;
    size_t page = pd_page(), size = pd_alt_size();
    char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                   -1, 0);
    if (m == MAP_FAILED)
        return;
    mprotect(m, page, PROT_NONE);
    stack_t ss = {.ss_sp = m + page, .ss_size = PD_ALTSTACK_SIZE, .ss_flags = 0};
    if (!has_alt && sigaltstack(&ss, NULL) != 0 && !pd_ps_enabled) {
        munmap(m, size);
        return;
    }
    if (pd_ps_enabled) {
        mprotect(m + page + PD_ALTSTACK_SIZE, page, PROT_NONE);
        pd_pstack_set((uintptr_t)m + 2 * page + PD_ALTSTACK_SIZE, (uintptr_t)m + size);
    }
    pthread_setspecific(pd_alt_key, m); /* the main thread's is never freed: it exits with the process */
}

/* From the constructor of an attached target process. */
void pd_altstack_init(void)
{
    if (pd_alt_enabled || pthread_key_create(&pd_alt_key, pd_alt_free) != 0) /* -x attaches again */
        return;
    pd_pstack_init();
    pd_alt_enabled = 1;
    pd_altstack_thread();
}

struct pd_start {
    void *(*fn)(void *);
    void *arg;
};

static void pd_thread_ended(void *unused)
{
    (void)unused;
    pd_fire_thread_probes(PD_PROBE_THREAD_END);
}

/* Every thread pthread_create starts in a session: its stacks, then its start routine
 * between the process.thread.begin and .end probes. */
static void *pd_thread_start(void *p)
{
    struct pd_start s = *(struct pd_start *)p;
    free(p);
    pd_altstack_thread();
    pd_fire_thread_probes(PD_PROBE_THREAD_BEGIN);
    void *ret;
    pthread_cleanup_push(pd_thread_ended, NULL);
    ret = s.fn(s.arg);
    pthread_cleanup_pop(1);
    return ret;
}

typedef int (*pd_pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

PD_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static pd_pthread_create_fn real;
    if (!real)
        real = (pd_pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
    if (!real)
        return EAGAIN;
    struct pd_start *s = pd_alt_enabled ? malloc(sizeof *s) : NULL;
    if (!s) /* outside a session, or no memory: the thread runs without our signal stack */
        return real(t, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    int rc = real(t, attr, pd_thread_start, s);
    if (rc != 0)
        free(s);
    return rc;
}
