/* Running a probe handler: the reentrancy guard, the globals lock, the context, and
 * the end of a run (errors, records to the ring, exit()); the FAST path's own runner
 * (pd_fast_mark) for handlers the translator proved FAST. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>

#include "pd_internal.h"
#include "pd_lock.h"

/* ---- running a handler --------------------------------------------------- */

/* The end of a handler run: report its error (a FAST handler's deferred MAXACTION
 * too), then write its records to the ring. */
static void pd_run_finish(struct pd_ctx *c)
{
    if (c->error == PD_ERROR_REPORTED) /* a FAST handler's, by pd_fast_slow */
        c->error = 0;
    if (c->error == PD_ERROR_DEFERRED) {
        c->error = 0;
        pd_error(c, "MAXACTION exceeded");
    }
    if (c->error) {
        /* Output of the failed handler up to the error is kept, as stap does.  stap's
         * form (its handler-error.h): the innermost statement, the call sites of the
         * functions the error unwound through, the probe point; a message without a
         * statement is alone. */
        char msg[512];
        const char *pp = c->probe ? c->probe->pp : NULL;
        if (c->where)
            snprintf(msg, sizeof msg, "%s near %s%s%s%s", c->errmsg, c->where, c->errtrail,
                     pp ? " in probe " : "", pp ? pp : "");
        else
            snprintf(msg, sizeof msg, "%s", c->errmsg);
        c->error = 0;
        pd_rec_open_at = c->outlen;
        pd_emit_text(c, PD_REC_ERROR, msg);
        uint32_t n = __atomic_add_fetch(&pd_hdr->error_count, 1, __ATOMIC_RELAXED);
        if (n > MAXERRORS) {
            pd_exit_pending = 1;
            pd_rec_open(c, PD_REC_EXIT, 0, 0);
            pd_rec_close(c);
        }
    }
    pd_flush(c);
    if (pd_exit_pending) {
        pd_exit_pending = 0;
        pd_request_exit();
    }
}

/* A wait for `word` given up (PD_LOCK_TIMEOUT): counted; the launcher (its `end`, the
 * exit report) also says which probe did not run and why, since what it would have
 * read or printed is missing. */
static void pd_lock_gave_up(const char *pp, volatile uint32_t *word)
{
    __atomic_add_fetch(&pd_hdr->lock_timeouts, 1, __ATOMIC_RELAXED);
    if (!pd_is_launcher)
        return;
    uint32_t tid = __atomic_load_n(word, __ATOMIC_RELAXED) & PD_LOCK_TID_MASK;
    int stopped = tid && pd_lock_holder_state_(tid) == PD_HOLDER_STOPPED;
    pd_warn("probe %s skipped: the globals lock is held by thread %u, %s; what it would "
            "read or print is missing", pp ? pp : "?", (unsigned)tid,
            stopped ? "which is stopped" : "for longer than STUCK_CONTEXT_MS");
}

/* The reentrancy guard's address, found once (one TLS descriptor call). */
#define PD_GUARD(g)                 \
    int *g = &pd_in_handler.busy;   \
    __asm__("" : "+r"(g))

void pd_run(const struct pd_probe *p, const struct pd_site *site,
                   const struct pd_regs *regs, uintptr_t bias)
{
    if (!pd_seg || __atomic_load_n(&pd_inert, __ATOMIC_ACQUIRE))
        return;
    uint32_t state = __atomic_load_n(&pd_hdr->session_state, __ATOMIC_ACQUIRE);
    int launcher_probe = p->kind == PD_PROBE_BEGIN || p->kind == PD_PROBE_END ||
                         p->kind == PD_PROBE_ERROR;
    if (state != PD_SESSION_RUNNING && !(launcher_probe && pd_is_launcher))
        return;
    PD_GUARD(guard);
    if (*guard) {
        pd_count_reentered(p);
        return;
    }
    *guard = 1;
    /* in flight until its records are in the ring (pd_quiesce.h); the launcher's own
     * begin/end/error probes: nobody waits for them */
    struct pd_fast_tls *tls = (struct pd_fast_tls *)(void *)guard; /* busy is first */
    pd_slots_current(tls);
    int inside = !(launcher_probe && pd_is_launcher);
    if (inside && !pd_quiesce_enter(tls, PD_BUSY_PROBE + (uint32_t)(p - pd_probes))) {
        *guard = 0;
        return;
    }
    int saved_errno = errno;

    struct pd_ctx *c = __builtin_alloca(sizeof(struct pd_ctx));
    c->probe = p;
    c->site = site;
    c->regs = regs;
    c->bias = bias;
    c->globals = pd_seg + pd_hdr->globals_off;
    c->actions = pd_hdr->maxaction ? pd_hdr->maxaction : MAXACTION;
    if (p->kind == PD_PROBE_BEGIN || p->kind == PD_PROBE_END || p->kind == PD_PROBE_ERROR)
        c->actions = pd_hdr->maxaction ? (int64_t)pd_hdr->maxaction * 10
                                       : (int64_t)MAXACTION_INTERRUPTIBLE;
    c->error = 0;
    c->nesting = 0;
    c->where = NULL;
    c->cslot = ((struct pd_fast_tls *)(void *)guard)->cslot;
    c->tls = tls;
    c->entry_regs = NULL;
    c->outlen = 0;
    c->errmsg[0] = 0;
    c->regparm = 0;
    pd_rec_open_at = 0;

    if (p->locks & PD_PROBE_LOCKS) {
        int rc = pd_lock(&pd_hdr->globals_lock);
        /* this thread already holds it (never wait on ourselves), or its holder is
         * stopped or stuck: the probe is skipped, as stap skips one it cannot lock */
        if (rc == PD_LOCK_DEADLOCK || rc == PD_LOCK_TIMEOUT) {
            __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
            if (rc == PD_LOCK_TIMEOUT)
                pd_lock_gave_up(PD_PROBE_NAME(p), &pd_hdr->globals_lock);
            if (inside)
                pd_quiesce_leave(tls);
            errno = saved_errno;
            *guard = 0;
            return;
        }
        if (rc == PD_LOCK_RECOVERED)
            __atomic_add_fetch(&pd_hdr->lock_recoveries, 1, __ATOMIC_RELAXED);
    }
    p->handler(c);
    if (p->locks & PD_PROBE_LOCKS)
        pd_unlock(&pd_hdr->globals_lock);
    pd_run_finish(c);
    if (inside)
        pd_quiesce_leave(tls);
    *guard = 0;
    if (pd_raise_pending)
        pd_raise_now();
    errno = saved_errno;
}

/* A FAST handler failed: the rest of its context, then pd_run_finish. */
uintptr_t pd_run_finish_saved(uintptr_t cp, uintptr_t p, uintptr_t site, uintptr_t regs)
{
    struct pd_ctx *c = (struct pd_ctx *)cp;
    int saved_errno = errno;
    c->probe = (const struct pd_probe *)p;
    c->site = (const struct pd_site *)site;
    c->regs = (const struct pd_regs *)regs;
    c->nesting = 0;
    c->outlen = 0;
    c->errmsg[0] = 0;
    pd_rec_open_at = 0;
    pd_run_finish(c);
    errno = saved_errno;
    return 0;
}

uintptr_t pd_fast_slow(uintptr_t head, uintptr_t fn, uintptr_t a, uintptr_t b)
{
    struct pd_ctx *h = (struct pd_ctx *)head;
    struct pd_ctx *full = __builtin_alloca(sizeof(struct pd_ctx));
    int saved_errno = errno;
    memcpy(full, h, offsetof(struct pd_ctx, errmsg));
    full->nesting = 0;
    full->outlen = 0;
    full->errmsg[0] = 0;
    uintptr_t r = ((pd_full_fn)fn)(full, a, b);
    if (full->error) {
        int open_at = pd_rec_open_at;
        pd_rec_open_at = 0;
        pd_run_finish(full);
        pd_rec_open_at = open_at;
        h->error = PD_ERROR_REPORTED;
    }
    errno = saved_errno;
    return r;
}

__attribute__((noinline, cold)) PD_FAST_FN struct pd_fast_tls *pd_fast_tls_dynamic(void)
{
    return &pd_in_handler;
}

/* A FAST handler failed: its report, with the vector registers saved (given the TLS
 * block, not the context: the caller keeps one register fewer). */
static __attribute__((noinline, cold)) PD_FAST_FN void pd_fast_error(struct pd_fast_tls *t)
{
    struct pd_ctx *c = (struct pd_ctx *)(void *)t->ctx;
    pd_xmm_call(pd_fast_failed, (uintptr_t)c, 0, 0, 0);
    c->error = 0;
}

/* pd_run for a FAST probe: no lock, no errno (nothing here calls libc), no
 * vector register, no stack frame for a context: the one in pd_in_handler, whose
 * cslot, tls, globals and actions (the session's, set on the thread's first hit) stay
 * set between hits.  Those, probe, and -- for a handler that reads arguments or $return
 * (PD_PROBE_REGS) -- site, regs and bias are all a FAST handler and its error report
 * read.  A FAST mark's stub calls pd_fast_mark with the probe and &pd_fenv as
 * immediates; only an error leaves through pd_xmm_call. */
static inline __attribute__((always_inline)) PD_FAST_FN void
pd_fast_run(const struct pd_probe *p, const struct pd_fast_env *env, const struct pd_site *site,
            const struct pd_regs *regs, uintptr_t bias, int with_regs)
{
    if (__atomic_load_n(env->state, __ATOMIC_ACQUIRE) != PD_SESSION_RUNNING)
        return;
    struct pd_fast_tls *t = pd_fast_tls_of(env);
    if (t->busy) { /* a signal handler's probe inside a handler: as pd_run does */
        pd_count_reentered(p);
        return;
    }
    t->busy = 1;
    struct pd_ctx *c = (struct pd_ctx *)(void *)t->ctx;
    c->probe = p;
    if (with_regs) {
        c->site = site;
        c->regs = regs;
        c->bias = bias;
    }
    uint32_t epoch = __atomic_load_n(&env->epoch, __ATOMIC_ACQUIRE);
    if (PD_UNLIKELY(t->epoch != epoch)) { /* the thread's first hit since it joined */
        c->globals = env->globals;
        c->actions = env->maxaction;
        c->tls = t;
        t->epoch = epoch;
        pd_slots_current(t);
    }
    if (!pd_quiesce_enter_on(t, PD_BUSY_FAST, env->state)) { /* STOPPING came in between */
        t->busy = 0;
        return;
    }
    /* the probe from c: nothing but t stays in a (callee-saved, pushed) register */
    __asm__ volatile("" ::: "memory");
    c->probe->handler(c);
    if (PD_UNLIKELY(((struct pd_ctx *)(void *)t->ctx)->error))
        pd_fast_error(t);
    if (with_regs) /* a later FAST mark's context has none */
        c->site = NULL, c->regs = NULL, c->bias = 0;
    pd_quiesce_leave(t);
    t->busy = 0;
}

/* noipa: gcc would split off the state check, a jump more. */
__attribute__((noipa)) PD_FAST_FN PD_FAST_MARK_CC void
pd_fast_mark(const struct pd_probe *p, const struct pd_fast_env *env)
{
    pd_fast_run(p, env, NULL, NULL, 0, 0);
}

/* A function exit's registers as a return probe sees them (as pd_func_fire and the
 * hijack show them): after the `ret`, ip in the caller, so that @entry's pop finds the
 * return-address slot one word below sp (launcher/entry.py). */
static inline PD_FAST_FN void pd_exit_regs(struct pd_regs *regs)
{
    regs->r[PD_DWARF_IP] = *(const pd_ureg *)(uintptr_t)regs->r[PD_DWARF_SP];
    regs->r[PD_DWARF_SP] += sizeof(pd_ureg);
}

/* A full stub's call for a row whose one probe is FAST and reads registers (x86_tramp.c):
 * the probe with the stub's pd_regs (whose ip and sp the stub never loads back). */
__attribute__((noipa)) PD_FAST_FN void pd_fast_regs(struct pd_regs *regs,
                                                   const struct pd_site *site, uintptr_t bias)
{
    if (site->fx & PD_FX_EXIT)
        pd_exit_regs(regs);
    pd_fast_run(&pd_probes[site->probe], &pd_fenv, site, regs, bias, 1);
}

/* A fast stub's call for a row whose one probe p is FAST and reads no register but sp
 * (PD_PROBE_SP, x86_tramp.c): the probe with a pd_regs whose only register is that sp
 * (a function exit's: after the `ret`, as pd_exit_regs shows it). */
__attribute__((noipa)) PD_FAST_FN void pd_fast_sp(const struct pd_probe *p,
                                                 const struct pd_site *site, uintptr_t sp,
                                                 uintptr_t bias)
{
    struct pd_regs regs;
    regs.r[PD_DWARF_SP] = (pd_ureg)(site->fx & PD_FX_EXIT ? sp + sizeof(pd_ureg) : sp);
    pd_fast_run(p, &pd_fenv, site, &regs, bias, 1);
}

static __attribute__((noinline)) PD_FAST_FN void
pd_run_fast(const struct pd_probe *p, const struct pd_site *site, const struct pd_regs *regs,
            uintptr_t bias)
{
    if (p->locks & PD_PROBE_REGS) {
        struct pd_regs at_ret;
        if (site && regs && (site->fx & PD_FX_EXIT)) { /* a trapped exit row (stub fault) */
            at_ret = *regs;
            pd_exit_regs(&at_ret);
            regs = &at_ret;
        }
        pd_fast_run(p, &pd_fenv, site, regs, bias, 1);
    } else
        pd_fast_mark(p, &pd_fenv);
}

static uintptr_t pd_run_saved(uintptr_t p, uintptr_t site, uintptr_t regs, uintptr_t bias)
{
    pd_run((const struct pd_probe *)p, (const struct pd_site *)site,
           (const struct pd_regs *)regs, bias);
    return 0;
}

/* A probe from a trampoline, whose stub did not save the vector registers. */
static PD_FAST_FN void pd_fire_probe(const struct pd_probe *p, const struct pd_site *site,
                                     const struct pd_regs *regs, uintptr_t bias)
{
    if (p->locks & PD_PROBE_FAST)
        pd_run_fast(p, site, regs, bias);
    else
        pd_xmm_call(pd_run_saved, (uintptr_t)p, (uintptr_t)site, (uintptr_t)regs, bias);
}

/* For pd_func.c (function probes): called before the vector registers are saved. */
PD_FAST_FN void pd_run_probe(const struct pd_probe *p, const struct pd_site *site,
                             const struct pd_regs *regs, uintptr_t bias)
{
    pd_fire_probe(p, site, regs, bias);
}

PD_FAST_FN int pd_session_running(void)
{
    return pd_seg && __atomic_load_n(&pd_hdr->session_state, __ATOMIC_ACQUIRE) ==
                         PD_SESSION_RUNNING;
}

/* A hit while its thread already runs a handler (a signal handler's probe, or a
 * function the handler calls itself: runtime/pd_libc.c keeps libc's string functions
 * out of it): skipped, counted apart so the exit report can name the cause. */
__attribute__((noinline, cold)) PD_FAST_FN void pd_count_reentered(const struct pd_probe *p)
{
    if (!pd_seg)
        return;
    __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pd_hdr->reentered_count, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&pd_hdr->reentered_probe, (uint32_t)(p - pd_probes) + 1,
                     __ATOMIC_RELAXED);
}

PD_FAST_FN void pd_count_skipped(unsigned n)
{
    if (pd_seg && n)
        __atomic_add_fetch(&pd_hdr->skipped_count, n, __ATOMIC_RELAXED);
}
