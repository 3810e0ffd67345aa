/* Function probes: entry dispatch and return probes.
 *
 * A function site (pd_site.nentry + nreturn > 0) is entered from its trampoline
 * stub or, on the trap path, from the SIGTRAP handler, with the register context
 * at the function's entry.  pd_func_fire runs the entry probes and, when the site
 * has return probes, replaces the return address at the stack pointer with
 * pd_ret_tramp, remembering the original on a per-thread shadow stack (thread-
 * local storage of this module, not the segment).  pd_ret_tramp (x86-64) first tries
 * pd_ret_fast, which needs no pd_regs (the top frame, one FAST return probe); else
 * it saves the registers in struct pd_regs order, calls pd_ret_handler (which pops
 * the shadow stack, runs the return probes with ip = the original return address
 * and returns it), restores and jumps there.  FAST probes (counting) run
 * here with one state check and a context in this thread's TLS block, so a
 * counting entry + return pair costs little more than two counter adds.
 *
 * Recursion and tail calls are LIFO on the shadow stack.  longjmp (or a signal
 * handler that never returns) skips frames: their entries are discarded, counted
 * as skipped probes, when an outer frame returns.  Unwinders (C++ exceptions,
 * backtrace) are given the real return addresses first (pd_unwind.c); stack
 * switching (swapcontext) across a pending return is only tolerated when the
 * frame is found on the shadow stack.
 *
 * All of that is the hijack.  Where launcher/plan/returns.py patched the function's exits
 * instead, each exit is a PD_FX_EXIT row whose "entry" probes are the return probes,
 * run here (or, one FAST probe, as a mark's) with the registers at the exit; the
 * entry row then hooks nothing.  pd_ret_choose picks one mechanism per function.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pd_internal.h"

/* Entry and return probes run before the vector registers are saved: the C here uses
 * none, and calls what may through pd_xmm_call. */
PD_FAST_UNIT

#include PD_ARCH_FUNC_H /* where a hooked function's return address is */

#define PD_SHADOW_MAX 65536u /* frames per thread (the mapping is touched lazily) */

struct pd_shadow {
    uintptr_t ret;                /* the original return address */
    uintptr_t at;                 /* where it was: the stack pointer at entry */
    const struct pd_site *site;
    uintptr_t bias;
    struct pd_ret_arch arch;
};

/* One TLS block: its address is found once per call (one TLS descriptor call). */
struct pd_thread {
    struct pd_shadow *stk;
    uint32_t n;
    int failed;
    uintptr_t alt_lo, alt_hi; /* the thread's sigaltstack (pd_unwind.c tracks it), or 0 */
    int *guard;               /* &pd_in_handler, kept here: one TLS descriptor call a hit */
    /* the context of a FAST probe (pd_func_fast): only the fields before errmsg, all it
     * touches (launcher/translate/fast.py: counter adds only); pd_in_handler keeps it unshared */
    _Alignas(16) unsigned char fctx[offsetof(struct pd_ctx, errmsg)];
};
static __thread struct pd_thread pd_thr;
/* The block's address, computed once per function: gcc would repeat the descriptor
 * call after every memory barrier. */
#define PD_THR(t)                  \
    struct pd_thread *t = &pd_thr; \
    __asm__("" : "+r"(t))
/* Whether two stack addresses are on the same stack (a signal handler on the
 * sigaltstack may lie above or below the thread's frames: slot order means nothing
 * across the two, so no frame is taken for a longjmp leftover there). */
static inline int pd_same_stack(const struct pd_thread *t, uintptr_t a, uintptr_t b)
{
    uintptr_t span = t->alt_hi - t->alt_lo;
    return (a - t->alt_lo < span) == (b - t->alt_lo < span);
}

void pd_note_altstack(uintptr_t lo, uintptr_t size)
{
    pd_thr.alt_lo = lo;
    pd_thr.alt_hi = lo + size;
}

static pthread_key_t pd_stk_key;
static pthread_once_t pd_stk_once = PTHREAD_ONCE_INIT;

#define PD_BARRIER() __asm__ volatile("" ::: "memory")

/* Every thread with a shadow stack, for the detach (pd_shadow_unhook_all); threads
 * beyond PD_THREADS_MAX keep their hooked frames then. */
#define PD_THREADS_MAX 4096u
static struct pd_thread *pd_threads[PD_THREADS_MAX];

static void pd_thread_track(struct pd_thread *from, struct pd_thread *to)
{
    for (uint32_t i = 0; i < PD_THREADS_MAX; i++) {
        struct pd_thread *want = from;
        if (__atomic_compare_exchange_n(&pd_threads[i], &want, to, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return;
    }
}

static void pd_stk_free(void *p)
{
    pd_thread_track(&pd_thr, NULL);
    munmap(p, PD_SHADOW_MAX * sizeof(struct pd_shadow));
    pd_thr.stk = NULL;
    pd_thr.n = 0;
}

/* A forked child has only the forking thread: the others' blocks are not its own. */
static void pd_threads_forked(void)
{
    for (uint32_t i = 0; i < PD_THREADS_MAX; i++)
        if (pd_threads[i] != &pd_thr)
            pd_threads[i] = NULL;
}

static void pd_stk_key_init(void)
{
    pthread_key_create(&pd_stk_key, pd_stk_free);
    pthread_atfork(NULL, NULL, pd_threads_forked);
}

static __attribute__((noinline)) struct pd_shadow *pd_stack_alloc(struct pd_thread *t)
{
    if (t->failed)
        return NULL;
    t->failed = 1; /* a probed mmap/pthread function reached from here is not hooked */
    void *m = mmap(NULL, PD_SHADOW_MAX * sizeof(struct pd_shadow), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    pthread_once(&pd_stk_once, pd_stk_key_init);
    pthread_setspecific(pd_stk_key, m);
    pd_thread_track(NULL, t);
    t->stk = m;
    t->failed = 0;
    return m;
}

static uintptr_t pd_stack_alloc_saved(uintptr_t t, uintptr_t b, uintptr_t c, uintptr_t d)
{
    (void)b, (void)c, (void)d;
    return (uintptr_t)pd_stack_alloc((struct pd_thread *)t);
}

extern const char pd_ret_tramp[] __attribute__((visibility("hidden")));

/* A FAST probe's handler failed (MAXACTION): its report needs a whole context (also
 * pd_run_fast's, pd_run.c). */
uintptr_t pd_fast_failed(uintptr_t head, uintptr_t b, uintptr_t c, uintptr_t d)
{
    (void)b, (void)c, (void)d;
    const struct pd_ctx *h = (const struct pd_ctx *)head;
    if (h->error == PD_ERROR_REPORTED) /* by pd_fast_slow */
        return 0;
    struct pd_ctx *full = __builtin_alloca(sizeof(struct pd_ctx));
    memcpy(full, h, offsetof(struct pd_ctx, errmsg));
    return pd_run_finish_saved((uintptr_t)full, (uintptr_t)h->probe, (uintptr_t)h->site,
                               (uintptr_t)h->regs);
}

static __attribute__((noinline, noclone, cold)) int *pd_guard_init(struct pd_thread *t)
{
    return t->guard = &pd_in_handler.busy;
}

/* One FAST probe, as pd_run_fast runs it but with the thread's context. */
static inline __attribute__((always_inline)) void
pd_func_fast(struct pd_thread *t, const struct pd_probe *p, uint8_t *globals,
             const struct pd_site *site, const struct pd_regs *regs, uintptr_t bias)
{
    int *guard = t->guard;
    if (PD_UNLIKELY(!guard))
        guard = pd_guard_init(t); /* not hoisted: a TLS descriptor call */
    if (PD_UNLIKELY(*guard)) { /* a signal handler inside a handler: as pd_run does */
        pd_count_reentered(p);
        return;
    }
    struct pd_ctx *c = (struct pd_ctx *)t->fctx;
    pd_slots_current((struct pd_fast_tls *)(void *)guard); /* busy is first */
    pd_fast_ctx(c, globals, bias, guard);
    c->probe = p; /* for pd_fast_failed: fewer values live across the call */
    c->site = site;
    c->regs = regs;
    *guard = 1;
    struct pd_fast_tls *tls = (struct pd_fast_tls *)(void *)guard; /* busy is first */
    if (!pd_quiesce_enter(tls, PD_BUSY_FAST)) { /* STOPPING came in between */
        *guard = 0;
        return;
    }
    p->handler(c);
    if (PD_UNLIKELY(c->error))
        pd_xmm_call(pd_fast_failed, (uintptr_t)c, 0, 0, 0);
    pd_quiesce_leave((struct pd_fast_tls *)(void *)t->guard);
    *t->guard = 0;
}

/* Runs probes ids[0..n) of a function site in order (globals: pd_fast_globals()):
 * FAST ones here, the others through pd_run_probe. */
static __attribute__((noinline, noclone)) void
pd_func_run(struct pd_thread *t, uint8_t *globals, const struct pd_site *site,
            const uint32_t *ids, unsigned n, const struct pd_regs *regs, uintptr_t bias)
{
    for (unsigned i = 0; i < n; i++) {
        const struct pd_probe *p = &pd_probes[ids[i]];
        if (p->locks & PD_PROBE_FAST)
            pd_func_fast(t, p, globals, site, regs, bias);
        else
            pd_run_probe(p, site, regs, bias);
    }
}

/* Hooks the return of the function entered with `regs`: its return address becomes
 * pd_ret_tramp, the original goes on the shadow stack. */
static inline __attribute__((always_inline)) void
pd_func_hook(struct pd_thread *t, const struct pd_regs *regs, uintptr_t sp,
             const struct pd_site *site, uintptr_t bias)
{
    struct pd_shadow *stk = PD_LIKELY(t->stk != NULL) ? t->stk
        : (struct pd_shadow *)pd_xmm_call(pd_stack_alloc_saved, (uintptr_t)t, 0, 0, 0);
    uint32_t n = t->n;
    if (!stk || n >= PD_SHADOW_MAX) {
        pd_count_skipped(site->nreturn);
        return;
    }
    pd_ureg *slot = pd_ret_slot(regs, sp);
    uintptr_t at = pd_ret_at(sp);
    /* Frames at or below this return slot were left by longjmp: a live caller's slot
     * is above ours.  The same slot is live only for a tail call from a hooked frame,
     * where it already holds pd_ret_tramp. */
    if (PD_UNLIKELY(n > 0 && stk[n - 1].at <= at)) {
        int tail = *slot == (pd_ureg)(uintptr_t)pd_ret_tramp;
        while (n > 0 && pd_same_stack(t, stk[n - 1].at, at) &&
               (stk[n - 1].at < at || (stk[n - 1].at == at && !tail))) {
            pd_count_skipped(stk[n - 1].site->nreturn);
            n--;
        }
    }
    t->n = n + 1; /* claim the slot first: a signal handler nests above it */
    PD_BARRIER();
    stk[n].ret = (uintptr_t)*slot;
    stk[n].at = at;
    stk[n].site = site;
    stk[n].bias = bias;
    pd_ret_arch_init(&stk[n].arch);
    PD_BARRIER();
    *slot = (pd_ureg)(uintptr_t)pd_ret_tramp;
}

/* The rows sharing the address of `site` (pd_site.shared), each with its own argument
 * descriptors, in script order; then the return of the function, if it is one.  Part
 * of pd_func_fire: it runs before the vector registers are saved. */
static inline __attribute__((always_inline)) void
pd_fire_shared(struct pd_thread *t, uint8_t *globals, const struct pd_site *site,
               const struct pd_regs *regs, uintptr_t bias)
{
    for (unsigned i = 0; i < site->nshared; i++) {
        const struct pd_site *r = &pd_sites[site->shared[i]];
        if (r->nentry + r->nreturn)
            pd_func_run(t, globals, r, r->fprobes, r->nentry, regs, bias);
        else
            pd_func_run(t, globals, r, &r->probe, 1, regs, bias);
    }
    if (site->nreturn)
        pd_func_hook(t, regs, (uintptr_t)regs->r[PD_DWARF_SP], site, bias);
}

void pd_func_fire(const struct pd_regs *regs, const struct pd_site *site, uintptr_t bias)
{
    if (PD_UNLIKELY(!(site->nentry + site->nreturn + site->nshared))) {
        /* a one-probe row (PD_FX_ALT), trapped; a bare one runs none (never trapped) */
        if (!(site->fx & PD_FX_BARE))
            pd_run_probe(&pd_probes[site->probe], site, regs, bias);
        return;
    }
    PD_THR(t);
    uint8_t *globals = pd_fast_globals();
    if (PD_UNLIKELY(!globals)) /* a session not running (yet, or any more) */
        return;
    if (PD_UNLIKELY(site->nshared)) {
        pd_fire_shared(t, globals, site, regs, bias);
        return;
    }
    const struct pd_probe *p = &pd_probes[site->fprobes[0]]; /* fprobes is never empty */
    if (PD_LIKELY(site->nentry == 1 && (p->locks & PD_PROBE_FAST) &&
                  !((site->fx & PD_FX_EXIT) && (p->locks & PD_PROBE_REGS)))) {
        /* hooked first (a FAST probe reads at most argument registers, $return and
         * stack words above the return address): after its handler nothing but its
         * context is live.  At an exit one reads no register. */
        if (site->nreturn)
            pd_func_hook(t, regs, (uintptr_t)regs->r[PD_DWARF_SP], site, bias);
        pd_func_fast(t, p, globals, site, regs, bias);
        return;
    }
    struct pd_regs at_ret;
    if (site->fx & PD_FX_EXIT) { /* as pd_ret_handler shows a return: ip in the caller */
        at_ret = *regs;
        at_ret.r[PD_DWARF_IP] = *(const pd_ureg *)(uintptr_t)regs->r[PD_DWARF_SP];
        at_ret.r[PD_DWARF_SP] += sizeof(pd_ureg);
        pd_func_run(t, globals, site, site->fprobes, site->nentry, &at_ret, bias);
        /* what a guru-mode handler wrote ($return = v) goes back to the stub's frame,
         * which its caller made writable (the const is for handlers) */
        struct pd_regs *frame = (struct pd_regs *)(uintptr_t)regs;
        for (int i = 0; i < PD_NREGS; i++)
            if (i != PD_DWARF_SP && i != PD_DWARF_IP)
                pd_set_reg(frame, i, at_ret.r[i]);
        return; /* an exit's row hooks no return */
    }
    /* probes that may read the frame (ubacktrace, registers) see it unhooked */
    pd_func_run(t, globals, site, site->fprobes, site->nentry, regs, bias);
    if (site->nreturn)
        pd_func_hook(t, regs, (uintptr_t)regs->r[PD_DWARF_SP], site, bias);
}

#ifdef PD_ARCH_FIRE_SP
/* pd_func_fire for a site whose one entry probe p is FAST (pd_func_fast_probe), from a
 * stub that builds no pd_regs (x86's pd_write_fast_body): sp is the stack pointer at
 * entry. */
void pd_func_fire_sp(const struct pd_probe *p, const struct pd_site *site, uintptr_t sp,
                     uintptr_t bias)
{
    PD_THR(t);
    uint8_t *globals = pd_fast_globals();
    if (PD_UNLIKELY(!globals))
        return;
    if (site->nreturn)
        pd_func_hook(t, NULL, sp, site, bias);
    pd_func_fast(t, p, globals, site, NULL, bias);
}
#endif

/* The one entry probe of a function site if it is FAST and reads no register, else
 * NULL: such a site's stub needs no pd_regs (pd_func_fire_sp). */
const struct pd_probe *pd_func_fast_probe(const struct pd_site *site)
{
    if (site->nentry != 1 || site->nshared)
        return NULL;
    const struct pd_probe *p = &pd_probes[site->fprobes[0]];
    return (p->locks & (PD_PROBE_FAST | PD_PROBE_REGS)) == PD_PROBE_FAST ? p : NULL;
}

/* ---- unwinding through hooked frames (pd_unwind.c) ---------------------------
 * An unwinder (C++ throw, backtrace) finds no frame information for pd_ret_tramp,
 * so before it walks this thread's stack every live hooked frame gets its original
 * return address back; frames already below `cfa` (the interposed function's
 * caller's stack pointer) are dead: dropped and counted as skipped. */
static void pd_shadow_drop_dead(struct pd_thread *t, uintptr_t cfa)
{
    while (t->n > 0 && t->stk[t->n - 1].at < cfa &&
           pd_same_stack(t, t->stk[t->n - 1].at, cfa)) {
        pd_count_skipped(t->stk[t->n - 1].site->nreturn);
        t->n--;
    }
}

#include PD_ARCH_UNHOOK_H /* pd_shadow_unhook, pd_shadow_rehook, pd_shadow_unhook_all */

uintptr_t pd_ret_tramp_addr(void) { return (uintptr_t)pd_ret_tramp; }

int pd_ret_live;

/* Which rows of object o's functions are armed (struct pd_site's PD_FX_*): a function's
 * exits (PD_FX_ALT rows) when each has a stub, else -- and always under -x, where a
 * thread may be inside the function already, its return would fire without an entry
 * -- the hijack row.  The rows not chosen get off[s] = 1 and no stub. */
long pd_in_entry_row(uint32_t s)
{
    for (uint32_t r = s; r-- > 0 && (pd_sites[r].fx & PD_FX_ALT);)
        if (!(pd_sites[r].fx & PD_FX_EXIT))
            return (long)r;
    return -1;
}

int pd_stub_leads_on(uint32_t s)
{
    if (pd_sites[s].fx & PD_FX_EXIT)
        return 1;
    if (!(pd_sites[s].fx & PD_FX_ALT))
        return 0;
    for (uint32_t r = s + 1; r < pd_module.nsites && (pd_sites[r].fx & PD_FX_EXIT); r++)
        if (pd_sites[r].fx & PD_FX_IN_ENTRY)
            return 1;
    return 0;
}

void pd_ret_choose(uint32_t o, uintptr_t *stubs, uint8_t *off)
{
    for (uint32_t h = 0; h < pd_module.nsites; h++) {
        if (pd_sites[h].object != o || !(pd_sites[h].fx & PD_FX_HIJACK))
            continue;
        uint32_t end = h + 1;
        int exits = !pd_ret_live && stubs;
        for (; end < pd_module.nsites && (pd_sites[end].fx & PD_FX_ALT); end++) {
            if ((pd_sites[end].fx & PD_FX_EXIT) && !(stubs && stubs[end]))
                exits = 0;
            /* the ret in the entry's window is reached only through the entry's stub */
            long e = pd_sites[end].fx & PD_FX_IN_ENTRY ? pd_in_entry_row(end) : 0;
            if (e < 0 || (e > 0 && !(stubs && stubs[e])))
                exits = 0;
        }
        for (uint32_t s = h; s < end; s++) {
            off[s] = (s == h) == exits;
            if (off[s] && stubs)
                stubs[s] = 0;
        }
    }
}

/* For a backtrace walking through a hooked frame whose return slot is `at`. */
uintptr_t pd_shadow_ret(uintptr_t at)
{
    PD_THR(t);
    for (uint32_t i = t->n; i > 0; i--) /* a tail call's entry holds pd_ret_tramp: skip it */
        if (t->stk[i - 1].at == at && t->stk[i - 1].ret != pd_ret_tramp_addr())
            return t->stk[i - 1].ret;
    return 0;
}

/* Called by pd_ret_tramp with the registers at the return; returns where to go. */
pd_ureg pd_ret_handler(struct pd_regs *regs)
{
    uintptr_t sp = pd_ret_sp(regs);
    uintptr_t at = sp - sizeof(pd_ureg);
    regs->r[PD_DWARF_SP] = (pd_ureg)sp;
    PD_THR(t);
    struct pd_shadow *stk = t->stk;
    uint32_t n = t->n;
    struct pd_shadow e;
    uint32_t below = n; /* the entries below this return's slot: [below, n) */
    while (below > 0 && stk[below - 1].at < at && pd_same_stack(t, stk[below - 1].at, at))
        below--;
    if (PD_LIKELY(n > 0 && stk[n - 1].at == at)) { /* the common case: the top frame */
        e = stk[--n];
    } else if ((below == 0 || stk[below - 1].at != at) && below < n &&
               at - stk[below].at <= 0xffff) {
        /* `ret $N` (i386: a struct-returning function pops its hidden pointer) returned
         * N bytes above its slot: the frame that returned is the nearest one below, any
         * deeper ones were left by longjmp */
        for (uint32_t j = n; j > below + 1; j--)
            pd_count_skipped(stk[j - 1].site->nreturn);
        e = stk[below];
        n = below;
    } else {
        /* frames deeper than this one were left by longjmp: their returns never come */
        while (n > 0 && stk[n - 1].at < at) {
            n--;
            pd_count_skipped(stk[n].site->nreturn);
        }
        uint32_t k = n;
        while (k > 0 && stk[k - 1].at != at)
            k--;
        if (k == 0) {
            static const char msg[] = "pydyn: return probe: no shadow frame for this return "
                                      "(stack switched?); aborting\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            abort();
        }
        e = stk[k - 1];
        /* another stack's frames may sit above it (stack switching): keep them */
        for (uint32_t j = k - 1; j + 1 < n; j++) {
            stk[j] = stk[j + 1];
            PD_BARRIER(); /* not a memmove call: libc's may use vector registers */
        }
        n--;
    }
    PD_BARRIER();
    t->n = n;
    regs->r[PD_DWARF_IP] = (pd_ureg)e.ret;
    const struct pd_site *site = e.site;
    uint8_t *globals = pd_fast_globals();
    if (globals)
        pd_func_run(t, globals, site, site->fprobes + site->nentry, site->nreturn, regs, e.bias);
    return (pd_ureg)e.ret;
}

#ifdef PD_ARCH_RET_FAST
/* pd_ret_tramp's fast path (x86-64, unless pd_xmm_always): the return whose slot is
 * `at`, when it is the top shadow frame's and every return probe of its site is FAST,
 * needs no pd_regs: pops the frame, runs them, returns the original address.  Anything
 * else returns 0, and pd_ret_tramp builds pd_regs for pd_ret_handler, which knows the
 * rest (longjmp leftovers, probes that read registers). */
uintptr_t pd_ret_fast(uintptr_t at);
uintptr_t pd_ret_fast(uintptr_t at)
{
    PD_THR(t);
    uint32_t n = t->n;
    if (PD_UNLIKELY(n == 0 || t->stk[n - 1].at != at))
        return 0;
    const struct pd_shadow *e = &t->stk[n - 1];
    const struct pd_site *site = e->site;
    if (site->nreturn != 1) /* several: the loop of pd_ret_handler */
        return 0;
    const struct pd_probe *p = &pd_probes[site->fprobes[site->nentry]];
    if ((p->locks & (PD_PROBE_FAST | PD_PROBE_REGS)) != PD_PROBE_FAST) /* REGS: pd_regs */
        return 0;
    uintptr_t ret = e->ret, bias = e->bias;
    PD_BARRIER(); /* read before the pop: a signal handler may reuse the entry */
    t->n = n - 1;
    PD_BARRIER();
    uint8_t *globals = pd_fast_globals();
    if (PD_LIKELY(globals != NULL))
        pd_func_fast(t, p, globals, site, NULL, bias);
    return ret;
}
#endif

int64_t pd_func_return(struct pd_ctx *c)
{
    if (!c->regs) {
        pd_error(c, "$return not available here");
        return 0;
    }
    return (int64_t)(intptr_t)pd_reg(c->regs, 0); /* rax / eax, as a C long */
}

/* Guru mode's `$return = v` in a .return probe: the return value register, which the
 * return trampoline (or a patched exit's stub, or a trap) loads back. */
int64_t pd_set_return(struct pd_ctx *c, int64_t v)
{
    if (c->error) /* the value may come from a read that faulted */
        return v;
    if (!c->regs) {
        pd_error(c, "$return not available here");
        return v;
    }
    pd_set_reg((struct pd_regs *)(uintptr_t)c->regs, 0, (pd_ureg)v); /* rax / eax / x0 */
    return v;
}
