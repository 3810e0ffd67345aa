/* pydyn runtime: linked into every probe module, for every ABI.
 *
 * In a traced process the module is preloaded; its constructor attaches to
 * the session's segment (named in PYDYN_SHM), checks that the segment was
 * made for the same source checksum, registers the process, finds its probe
 * sites in the loaded objects and arms them.  In the launcher the same
 * (m64) module is dlopen'ed by cffi and driven through the pd_launcher_*
 * entry points: begin/end probes and draining the output ring.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <sys/prctl.h>

#include "pd_lock.h"
#include "pd_runtime.h"

static int prctl_get_name(char name[17])
{
    name[16] = 0;
    return prctl(PR_GET_NAME, (unsigned long)name, 0, 0, 0);
}

/* ---- process state ------------------------------------------------------- */

uint8_t *pd_seg;                      /* the mapped segment, NULL when inert */
struct pd_header *pd_hdr;
static size_t pd_seg_size;
static int pd_is_launcher;
int pd_inert;                         /* detached from a -x process: every entry is a no-op */
static struct pd_proc *pd_self;       /* this process's registry entry */

struct pd_armed {
    uintptr_t addr;                   /* runtime address of the patched nop */
    uintptr_t bias;
    const struct pd_site *site;
    uint8_t saved[24];                /* original bytes, for disarming (pd_disarm_all) */
    uint8_t saved_len;
    int prot;                         /* the page protection pd_patch restores */
    uintptr_t stub;                   /* trampoline stub, 0 for a trap site */
    uintptr_t ool;                    /* function entry: out-of-line copy the trap resumes in */
};
/* Open-addressing hash on addr, never resized or moved: objects dlopen'ed later are
 * armed (and dlclose'd ones forgotten) while other threads look sites up from the
 * SIGTRAP handler, so an entry is published by its addr store (release) and retired
 * as PD_ARMED_DEAD. */
static struct pd_armed *pd_armed;
static uint32_t pd_armed_cap;         /* a power of two > 2 * nsites */
static uint32_t pd_narmed;
#define PD_ARMED_DEAD ((uintptr_t)1)
/* Per pd_objects entry: armed in this process, and at which load bias. */
static uint8_t *pd_obj_armed;
static uint8_t *pd_site_off; /* 1: a row pd_ret_choose did not choose, never armed */
static uintptr_t pd_stub_start(uintptr_t stub, const struct pd_plan *p); /* pd_tramp.h */
static uintptr_t *pd_obj_bias;

__thread struct pd_fast_tls pd_in_handler; /* reentrancy guard (signal inside a handler) */

static const uint32_t pd_no_session; /* 0: not PD_SESSION_RUNNING */
struct pd_fast_env pd_fenv = {&pd_no_session, NULL, 0, 0, NULL, 0};

/* The FAST path's view of the session (pd_fast_globals): on once mapped and checked
 * (the launcher writes maxaction before any process joins), off before the segment goes. */
static void pd_fast_env_set(int on)
{
    if (!on) {
        __atomic_store_n(&pd_fenv.state, &pd_no_session, __ATOMIC_RELEASE);
        return;
    }
    pd_fenv.globals = pd_seg + pd_hdr->globals_off;
    pd_fenv.maxaction = pd_hdr->maxaction ? pd_hdr->maxaction : MAXACTION;
    pd_fenv.skipped = &pd_hdr->skipped_count;
    /* static TLS (preloaded, not the launcher's or -x's dlopen): one offset for every thread */
    pd_fenv.tls_off = pd_is_launcher || pd_xmm_always
        ? 0 : (intptr_t)((uintptr_t)&pd_in_handler - pd_thread_pointer());
    __atomic_store_n(&pd_fenv.epoch, pd_fenv.epoch + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&pd_fenv.state, &pd_hdr->session_state, __ATOMIC_RELEASE);
}

static uint64_t pd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint8_t *pd_ring_data(void) { return pd_seg + pd_hdr->ring_off; }

/* ---- output ring ------------------------------------------------------------
 * A byte stream of records; positions are free-running u32 (atomic on every
 * ABI).  Producers append under ring_lock; the launcher is the only consumer.
 * Lossless: a producer that finds the ring full waits for space. */

static int pd_launcher_alive(void)
{
    pid_t lp = pd_hdr->launcher_pid;
    return lp <= 0 || kill(lp, 0) == 0 || errno != ESRCH;
}

static void pd_futex_wait(volatile uint32_t *word, uint32_t val, long timeout_ns)
{
    struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
    syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void pd_futex_wake(volatile uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void pd_ring_copy_in(uint32_t pos, const uint8_t *src, uint32_t len)
{
    uint32_t size = pd_hdr->ring_size, at = pos & (size - 1);
    uint32_t first = len < size - at ? len : size - at;
    memcpy(pd_ring_data() + at, src, first);
    memcpy(pd_ring_data(), src + first, len - first);
}

/* Returns 0, or -1 if the launcher is gone (the bytes are then discarded and
 * this process's probes go inert). */
static int pd_ring_write(const uint8_t *buf, uint32_t len)
{
    uint32_t size = pd_hdr->ring_size;
    if (len > size)
        return -1;
    for (;;) {
        int rc = pd_lock(&pd_hdr->ring_lock);
        if (rc == PD_LOCK_DEADLOCK)
            return -1;
        if (rc == PD_LOCK_TIMEOUT) { /* a writer stopped in here: these records are lost */
            __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&pd_hdr->lock_timeouts, 1, __ATOMIC_RELAXED);
            return -1;
        }
        if (rc == PD_LOCK_RECOVERED)
            __atomic_add_fetch(&pd_hdr->lock_recoveries, 1, __ATOMIC_RELAXED);
        uint32_t tail = pd_hdr->ring_tail;
        uint32_t head = __atomic_load_n(&pd_hdr->ring_head, __ATOMIC_ACQUIRE);
        if (size - (tail - head) >= len) {
            pd_ring_copy_in(tail, buf, len);
            __atomic_store_n(&pd_hdr->ring_tail, tail + len, __ATOMIC_RELEASE);
            pd_unlock(&pd_hdr->ring_lock);
            __atomic_add_fetch(&pd_hdr->ring_data_seq, 1, __ATOMIC_RELEASE);
            /* Batched wake-ups: a sleeping consumer is woken once the ring is an eighth
             * full; below that its wait times out (pd_launcher_wait, ~10 ms) -- a wake
             * per record (a syscall) would cost more than the record. */
            if (PD_UNLIKELY(__atomic_load_n(&pd_hdr->flags, __ATOMIC_RELAXED) & PD_FLAG_DRAIN_WAITS) &&
                tail + len - head >= size / 8)
                pd_futex_wake(&pd_hdr->ring_data_seq);
            return 0;
        }
        uint32_t seq = __atomic_load_n(&pd_hdr->ring_space_seq, __ATOMIC_ACQUIRE);
        __atomic_add_fetch(&pd_hdr->ring_waiters, 1, __ATOMIC_RELAXED);
        pd_unlock(&pd_hdr->ring_lock);
        pd_futex_wake(&pd_hdr->ring_data_seq); /* the consumer may be asleep */
        pd_futex_wait(&pd_hdr->ring_space_seq, seq, 20 * 1000 * 1000);
        __atomic_sub_fetch(&pd_hdr->ring_waiters, 1, __ATOMIC_RELAXED);
        if (!pd_launcher_alive()) {
            __atomic_store_n(&pd_hdr->session_state, PD_SESSION_STOPPED, __ATOMIC_RELEASE);
            return -1;
        }
    }
}

/* ---- records ------------------------------------------------------------- */

/* Offset in c->out of the record being written (a handler has one context). */
static __thread uint32_t pd_rec_open_at;

static void pd_flush(struct pd_ctx *c)
{
    if (c->outlen && pd_seg)
        pd_ring_write(c->out, c->outlen);
    c->outlen = 0;
}

static int pd_out_reserve(struct pd_ctx *c, uint32_t n)
{
    if (c->outlen + n <= sizeof c->out)
        return 1;
    /* Flush the complete records before the open one, then retry. */
    uint32_t open = pd_rec_open_at;
    if (open > 0) {
        if (pd_seg)
            pd_ring_write(c->out, open);
        memmove(c->out, c->out + open, c->outlen - open);
        c->outlen -= open;
        pd_rec_open_at = 0;
    }
    if (c->outlen + n <= sizeof c->out)
        return 1;
    pd_error(c, "output record larger than %u bytes", (unsigned)sizeof c->out);
    return 0;
}

void pd_rec_open(struct pd_ctx *c, uint16_t kind, uint32_t fmt_id, uint16_t nargs)
{
    if (!pd_out_reserve(c, sizeof(struct pd_rec)))
        return;
    pd_rec_open_at = c->outlen;
    struct pd_rec rec;
    memset(&rec, 0, sizeof rec);
    rec.kind = kind;
    rec.nargs = nargs;
    rec.fmt_id = fmt_id;
    rec.pid = pd_self ? pd_self->pid : (int32_t)getpid(); /* getpid() is a syscall a record */
    memcpy(c->out + c->outlen, &rec, sizeof rec);
    c->outlen += sizeof rec;
}

void pd_rec_i64(struct pd_ctx *c, int64_t v)
{
    if (!pd_out_reserve(c, 8))
        return;
    memcpy(c->out + c->outlen, &v, 8);
    c->outlen += 8;
}

static void pd_rec_strn(struct pd_ctx *c, const char *s, size_t max);

void pd_rec_str(struct pd_ctx *c, const char *s) { pd_rec_strn(c, s, MAXSTRINGLEN); }

static void pd_rec_strn(struct pd_ctx *c, const char *s, size_t max)
{
    uint32_t len = (uint32_t)strnlen(s, max);
    uint32_t padded = (4 + len + 7) & ~7u;
    if (!pd_out_reserve(c, padded))
        return;
    uint8_t *p = c->out + c->outlen;
    memcpy(p, &len, 4);
    memcpy(p + 4, s, len);
    memset(p + 4 + len, 0, padded - 4 - len);
    c->outlen += padded;
}

void pd_rec_close(struct pd_ctx *c)
{
    if (c->error) { /* an error aborts the statement: its record is dropped */
        c->outlen = pd_rec_open_at;
        return;
    }
    uint32_t len = c->outlen - pd_rec_open_at;
    memcpy(c->out + pd_rec_open_at, &len, 4); /* pd_rec.len is the first field */
    pd_rec_open_at = c->outlen;
}

static void pd_emit_text(struct pd_ctx *c, uint16_t kind, const char *msg)
{
    pd_rec_open(c, kind, 0, 1);
    pd_rec_strn(c, msg, 1024); /* messages are not script strings: no MAXSTRINGLEN cut */
    pd_rec_close(c);
}

void pd_error(struct pd_ctx *c, const char *fmt, ...)
{
    if (c->error)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->error = 1;
}

/* ---- context built-ins --------------------------------------------------- */

static int pd_read_user(struct pd_ctx *c, uintptr_t addr, void *dst, size_t n)
{
    /* process_vm_readv on ourselves: a bad pointer is an error, not a crash. */
    if (pd_read_self(dst, (const void *)addr, n) == (ssize_t)n)
        return 0;
    pd_error(c, "user memory read fault at 0x%lx (%u bytes)", (unsigned long)addr, (unsigned)n);
    return -1;
}

static int64_t pd_extend(uint64_t raw, unsigned size, int is_signed)
{
    if (size >= 8)
        return (int64_t)raw;
    unsigned bits = size * 8;
    uint64_t mask = (1ull << bits) - 1;
    raw &= mask;
    if (is_signed && (raw >> (bits - 1)))
        raw |= ~mask;
    return (int64_t)raw;
}

int64_t pd_user_read(struct pd_ctx *c, int64_t addr, unsigned size, int is_signed)
{
    uint64_t raw = 0;
    if (pd_read_user(c, (uintptr_t)addr, &raw, size))
        return 0;
    return pd_extend(raw, size, is_signed);
}

void pd_warn_probe(struct pd_ctx *c, const char *msg)
{
    pd_emit_text(c, PD_REC_WARNING, msg);
}

int64_t pd_fetch_arg(struct pd_ctx *c, unsigned index)
{
    if (!c->site || index >= c->site->nargs) {
        pd_error(c, "probe argument %u not available here", index + 1);
        return 0;
    }
    const struct pd_argdesc *a = &c->site->args[index];
    uint64_t raw = 0;
    switch (a->kind) {
    case PD_ARG_CONST:
        return a->rel ? (int64_t)((uint64_t)a->value + c->bias) : a->value;
    case PD_ARG_REG:
        raw = (uint64_t)pd_reg(c->regs, a->reg) >> a->shift;
        break;
    case PD_ARG_MEM: {
        uintptr_t addr = (uintptr_t)a->value;
        if (a->reg >= 0)
            addr += (uintptr_t)pd_reg(c->regs, a->reg);
        if (a->index >= 0)
            addr += (uintptr_t)pd_reg(c->regs, a->index) * a->scale;
        if (a->rel)
            addr += c->bias;
        if (a->seg == PD_SEG_TP)
            addr += pd_thread_pointer();
        if (pd_read_user(c, addr, &raw, a->size))
            return 0;
        break;
    }
    default:
        pd_error(c, "bad argument descriptor");
        return 0;
    }
    return pd_extend(raw, a->size, a->is_signed);
}

int64_t pd_pid(void) { return getpid(); }
/* gettid costs a syscall a call (~1 us in some sandboxes); pd_lock.h caches it per
 * thread and forgets it in a forked child. */
int64_t pd_tid(void) { return (int64_t)pd_lock_self(); }
int64_t pd_ppid(void) { return getppid(); }

/* Read each time: a process may rename itself (PR_SET_NAME) at any point. */
const char *pd_execname(void)
{
    static __thread char name[17];
    if (prctl_get_name(name) != 0)
        strcpy(name, "?");
#ifdef __aarch64__
    /* Under qemu-user the kernel's comm is the emulator's ("qemu-aarch64")
     * until the guest renames itself; report what a native kernel would. */
    else if (strncmp(name, "qemu-", 5) == 0 && strncmp(program_invocation_short_name, "qemu-", 5) != 0)
        snprintf(name, sizeof name, "%s", program_invocation_short_name);
#endif
    return name;
}

int64_t pd_target(struct pd_ctx *c)
{
    (void)c;
    return pd_hdr ? pd_hdr->target_pid : 0;
}

/* exit() stops new probe handlers (session STOPPING); the launcher then runs `end`. */
static void pd_request_exit(void)
{
    __atomic_store_n(&pd_hdr->exit_requested, 1, __ATOMIC_RELEASE);
    uint32_t st = __atomic_load_n(&pd_hdr->session_state, __ATOMIC_ACQUIRE);
    while (st < PD_SESSION_STOPPING &&
           !__atomic_compare_exchange_n(&pd_hdr->session_state, &st, PD_SESSION_STOPPING, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

/* Set by exit() in this thread's handler: the request waits until the handler's
 * records are in the ring (pd_run_finish), or the launcher could finish its last
 * drain before they arrive.  stap's exit() does not unwind the handler either. */
static __thread int pd_exit_pending;

void pd_exit(struct pd_ctx *c)
{
    if (!pd_hdr)
        return;
    pd_exit_pending = 1;
    pd_rec_open(c, PD_REC_EXIT, 0, 0);
    pd_rec_close(c);
}

int64_t pd_div(struct pd_ctx *c, int64_t a, int64_t b, const char *where)
{
    if (b == 0) {
        c->where = where;
        pd_error(c, "division by 0");
        return 0;
    }
    if (b == -1)
        return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 must not trap */
    return a / b;
}

int64_t pd_mod(struct pd_ctx *c, int64_t a, int64_t b, const char *where)
{
    if (b == 0) {
        c->where = where;
        pd_error(c, "division by 0");
        return 0;
    }
    if (b == -1)
        return 0;
    return a % b;
}

struct pd_header *pd_segment_header(void)
{
    return pd_hdr;
}

/* ---- running a handler --------------------------------------------------- */

/* The end of a handler run: report its error (a FAST handler's deferred MAXACTION
 * too), then write its records to the ring. */
static void pd_run_finish(struct pd_ctx *c)
{
    if (c->error == PD_ERROR_DEFERRED) {
        c->error = 0;
        pd_error(c, "MAXACTION exceeded");
    }
    if (c->error) {
        /* Output of the failed handler up to the error is kept, as stap does. */
        char msg[256];
        if (c->where)
            snprintf(msg, sizeof msg, "%s near %s", c->errmsg, c->where);
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
 * printed is missing. */
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

static void pd_run(const struct pd_probe *p, const struct pd_site *site,
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
        __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
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
    c->error = 0;
    c->nesting = 0;
    c->where = NULL;
    c->cslot = ((struct pd_fast_tls *)(void *)guard)->cslot;
    c->outlen = 0;
    c->errmsg[0] = 0;
    pd_rec_open_at = 0;

    if (p->locks & PD_PROBE_LOCKS) {
        int rc = pd_lock(&pd_hdr->globals_lock);
        /* this thread already holds it (never wait on ourselves), or its holder is
         * stopped or stuck: the probe is skipped, as stap skips one it cannot lock */
        if (rc == PD_LOCK_DEADLOCK || rc == PD_LOCK_TIMEOUT) {
            __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
            if (rc == PD_LOCK_TIMEOUT)
                pd_lock_gave_up(p->pp, &pd_hdr->globals_lock);
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
    errno = saved_errno;
    *guard = 0;
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

__attribute__((noinline, cold)) PD_FAST_FN struct pd_fast_tls *pd_fast_tls_dynamic(void)
{
    return &pd_in_handler;
}

#if defined(__i386__)
#define PD_FAST_MARK_CC __attribute__((regparm(2))) /* probe in eax, env in edx */
#else
#define PD_FAST_MARK_CC
#endif

/* A FAST handler failed: its report, with the vector registers saved (given the TLS
 * block, not the context: the caller keeps one register fewer). */
static __attribute__((noinline, cold)) PD_FAST_FN void pd_fast_error(struct pd_fast_tls *t)
{
    struct pd_ctx *c = (struct pd_ctx *)(void *)t->ctx;
    pd_xmm_call(pd_fast_failed, (uintptr_t)c, 0, 0, 0);
    c->error = 0;
}

/* pd_run for a FAST probe (issue 6): no lock, no errno (nothing here calls libc), no
 * vector register, no stack frame for a context: the one in pd_in_handler, whose
 * cslot, globals and actions (the session's, set on the thread's first hit) stay set
 * between hits.  Those and probe are all a FAST handler and its error report read
 * (site, regs and bias stay NULL: fastprobe.py's whitelist has no context built-in).
 * A FAST mark's stub calls this with the probe and &pd_fenv as immediates; only an
 * error leaves through pd_xmm_call.  noipa: gcc would split off the state check, a
 * jump more. */
static __attribute__((noipa)) PD_FAST_FN PD_FAST_MARK_CC void
pd_fast_mark(const struct pd_probe *p, const struct pd_fast_env *env)
{
    if (__atomic_load_n(env->state, __ATOMIC_ACQUIRE) != PD_SESSION_RUNNING)
        return;
    struct pd_fast_tls *t = pd_fast_tls_of(env);
    if (t->busy) { /* a signal handler's probe inside a handler: as pd_run does */
        __atomic_add_fetch(env->skipped, 1, __ATOMIC_RELAXED);
        return;
    }
    t->busy = 1;
    struct pd_ctx *c = (struct pd_ctx *)(void *)t->ctx;
    c->probe = p;
    uint32_t epoch = __atomic_load_n(&env->epoch, __ATOMIC_ACQUIRE);
    if (PD_UNLIKELY(t->epoch != epoch)) { /* the thread's first hit since it joined */
        c->globals = env->globals;
        c->actions = env->maxaction;
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
    pd_quiesce_leave(t);
    t->busy = 0;
}

static PD_FAST_FN void pd_run_fast(const struct pd_probe *p, const struct pd_site *site,
                                   const struct pd_regs *regs, uintptr_t bias)
{
    (void)site, (void)regs, (void)bias;
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

/* For pd_func.c (function probes, issue 7): called before the vector registers are saved. */
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

PD_FAST_FN void pd_count_skipped(unsigned n)
{
    if (pd_seg && n)
        __atomic_add_fetch(&pd_hdr->skipped_count, n, __ATOMIC_RELAXED);
}

/* ---- traps --------------------------------------------------------------- */

static struct sigaction pd_prev_sigtrap;

static uint32_t pd_armed_slot(uintptr_t addr)
{
    return (uint32_t)(((uint64_t)addr * 0x9e3779b97f4a7c15ull) >> 32) & (pd_armed_cap - 1);
}

static const struct pd_armed *pd_find_armed(uintptr_t addr)
{
    if (!pd_armed)
        return NULL;
    for (uint32_t k = 0, i = pd_armed_slot(addr); k < pd_armed_cap; k++, i = (i + 1) & (pd_armed_cap - 1)) {
        uintptr_t a = __atomic_load_n(&pd_armed[i].addr, __ATOMIC_ACQUIRE);
        if (a == addr)
            return &pd_armed[i];
        if (a == 0)
            break;
    }
    return NULL;
}

/* Publishes a copy of *e (its addr last); the caller serializes writers. */
static struct pd_armed *pd_armed_insert(const struct pd_armed *e)
{
    for (uint32_t k = 0, i = pd_armed_slot(e->addr); k < pd_armed_cap; k++, i = (i + 1) & (pd_armed_cap - 1)) {
        struct pd_armed *a = &pd_armed[i];
        if (a->addr == 0 || a->addr == PD_ARMED_DEAD) {
            struct pd_armed copy = *e;
            copy.addr = a->addr;
            *a = copy;
            __atomic_store_n(&a->addr, e->addr, __ATOMIC_RELEASE);
            pd_narmed++;
            return a;
        }
    }
    return NULL; /* cannot happen: the table has room for every site twice */
}

static void pd_armed_remove(struct pd_armed *a)
{
    __atomic_store_n(&a->addr, PD_ARMED_DEAD, __ATOMIC_RELEASE);
    pd_narmed--;
}

static void pd_sigtrap(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    uintptr_t at = pd_trap_site_from_ip(pd_uc_get_ip(uc));
    const struct pd_armed *a = pd_find_armed(at);
    if (!a) {
        /* Not ours: behave as if we were never installed. */
        if (pd_prev_sigtrap.sa_flags & SA_SIGINFO && pd_prev_sigtrap.sa_sigaction) {
            pd_prev_sigtrap.sa_sigaction(sig, si, ucv);
        } else if (pd_prev_sigtrap.sa_handler != SIG_DFL &&
                   pd_prev_sigtrap.sa_handler != SIG_IGN) {
            pd_prev_sigtrap.sa_handler(sig);
        } else if (pd_prev_sigtrap.sa_handler == SIG_DFL) {
            signal(SIGTRAP, SIG_DFL);
            raise(SIGTRAP);
        }
        return;
    }
    if (a->stub) {
        /* The transient int3 of a jump being installed: the stub runs the probe. */
        pd_uc_set_ip(uc, pd_stub_start(a->stub, &a->site->plan));
        return;
    }
    struct pd_regs regs;
    pd_regs_from_ucontext(&regs, uc);
    regs.r[PD_DWARF_IP] = (pd_ureg)at;
    if (a->site->nop_len == 0) {
        /* A function entry: the displaced instruction runs from its out-of-line copy. */
        pd_func_fire(&regs, a->site, a->bias);
#if defined(__aarch64__) /* a return probe replaced the link register (pd_func.c) */
        uc->uc_mcontext.regs[30] = (unsigned long long)regs.r[30];
#endif
        pd_uc_set_ip(uc, a->ool);
        return;
    }
    pd_run(&pd_probes[a->site->probe], a->site, &regs, a->bias);
    /* The patched instruction is a nop: resuming after it is its emulation. */
    pd_uc_set_ip(uc, at + a->site->nop_len);
}

static int pd_install_trap_handler(void)
{
    static int installed; /* a -x process attached again: pd_prev_sigtrap must not become us */
    if (installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pd_sigtrap;
    /* on the thread's pd_altstack.c stack: the site's own sp may be garbage */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    int rc = sigaction(SIGTRAP, &sa, &pd_prev_sigtrap);
    installed = rc == 0;
    return rc;
}

/* ---- arming -------------------------------------------------------------- */

void pd_warn(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (pd_seg) {
        struct pd_ctx *c = __builtin_alloca(sizeof(struct pd_ctx));
        c->outlen = 0;
        c->error = 0;
        pd_rec_open_at = 0;
        pd_emit_text(c, PD_REC_WARNING, msg);
        pd_flush(c);
    } else {
        fprintf(stderr, "pydyn: WARNING: %s\n", msg);
    }
}

static int pd_is_nop(const uint8_t *p, unsigned len)
{
#if defined(__aarch64__)
    return pd_arch_is_nop(p, len); /* d503201f */
#endif
    if (len == 1)
        return p[0] == 0x90;
    /* multi-byte nops: [66]* 0f 1f ..., or 66 90 */
    unsigned i = 0;
    while (i < len && p[i] == 0x66)
        i++;
    return (i < len && p[i] == 0x90 && i + 1 == len) ||
           (i + 1 < len && p[i] == 0x0f && p[i + 1] == 0x1f);
}

/* mprotect exactly the pages the instruction spans: the page after may not be
 * mapped at all (ENOMEM), which is a layout accident, not a failure to report. */
static int pd_patch(uintptr_t addr, unsigned len, int prot_after, void (*write)(uint8_t *))
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t first = addr & ~(uintptr_t)(page - 1);
    uintptr_t last = (addr + len - 1) & ~(uintptr_t)(page - 1);
    size_t span = last - first + (size_t)page;
    /* other bits of prot_after (aarch64 PROT_BTI) are kept while writing too */
    int extra = prot_after & ~(PROT_READ | PROT_WRITE | PROT_EXEC);
    if (mprotect((void *)first, span, PROT_READ | PROT_WRITE | PROT_EXEC | extra) != 0) {
        pd_warn("cannot make 0x%lx writable (%lu bytes from page 0x%lx): %s",
                (unsigned long)addr, (unsigned long)span, (unsigned long)first,
                strerror(errno));
        return -1;
    }
    write((uint8_t *)addr);
    pd_flush_icache((void *)addr, (void *)(addr + len));
    mprotect((void *)first, span, prot_after);
    return 0;
}

#include "pd_tramp.h" /* trampolines: stubs, memory near the object, jump install */

static int pd_object_matches(const char *path, const char *loaded_name)
{
    char resolved[PATH_MAX];
    const char *name = loaded_name;
    if (!name || !name[0]) {
        ssize_t n = readlink("/proc/self/exe", resolved, sizeof resolved - 1);
        if (n <= 0)
            return 0;
        resolved[n] = 0;
    } else if (!realpath(name, resolved)) {
        return 0;
    }
#if defined(__aarch64__)
    /* Under qemu-user the loader names sysroot libraries by guest paths (/lib/libc.so.6
     * for the launcher's /usr/aarch64-linux-gnu/lib/libc.so.6); stat sees both through
     * qemu's -L mapping: the same file is the same inode. */
    struct stat a, b;
    if (strcmp(resolved, path) != 0)
        return stat(resolved, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino;
#endif
    return strcmp(resolved, path) == 0;
}

static int pd_segment_prot(const struct dl_phdr_info *info, uintptr_t vaddr)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && vaddr >= ph->p_vaddr && vaddr < ph->p_vaddr + ph->p_memsz)
            return ((ph->p_flags & PF_R) ? PROT_READ : 0) |
                   ((ph->p_flags & PF_W) ? PROT_WRITE : 0) |
#if defined(__aarch64__) /* guarded pages stay guarded (arch/aarch64/tramp.h) */
                   ((ph->p_flags & PF_X) && pd_a64_guarded(info) ? PROT_BTI : 0) |
#endif
                   ((ph->p_flags & PF_X) ? PROT_EXEC : 0);
    }
    return -1;
}

static int pd_arm_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    for (uint32_t o = 0; o < pd_module.nobjects; o++) {
        if (pd_obj_armed[o] || pd_objects[o].abi != PD_ARCH_ABI ||
            !pd_object_matches(pd_objects[o].path, info->dlpi_name))
            continue;
        pd_obj_armed[o] = 1;
        pd_obj_bias[o] = (uintptr_t)info->dlpi_addr;
        uintptr_t *stubs = pd_tramp_prepare(info, o);
        if (!stubs) /* traps only: every function keeps the return-address hijack */
            pd_ret_choose(o, NULL, pd_site_off);
        uintptr_t *ool = pd_ool_prepare(info, o); /* function entries (issue 7) */
        for (uint32_t s = 0; s < pd_module.nsites; s++) {
            const struct pd_site *site = &pd_sites[s];
            if (site->object != o || pd_site_off[s])
                continue;
            if ((site->fx & PD_FX_EXIT) && !(stubs && stubs[s])) {
                /* its stub was refused after the choice (a branch into its window): a trap
                 * there would run the handler before the exit's own instructions */
                pd_warn("%s: function %s: the exit at window 0x%lx could not be linked; its "
                        "returns are not probed", pd_objects[o].path, site->name,
                        (unsigned long)site->pc);
                if (pd_self)
                    pd_self->sites_failed++;
                __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
                continue;
            }
            uintptr_t addr = (uintptr_t)info->dlpi_addr + (uintptr_t)site->pc;
            int prot = pd_segment_prot(info, (uintptr_t)site->pc);
            if (site->nop_len == 0) { /* a function entry: the plan's bytes, and a way to run them */
                if (prot < 0 || !(prot & PROT_EXEC) || !ool || !ool[s] ||
                    memcmp((const void *)addr, site->plan.orig, site->plan.len) != 0) {
                    pd_warn("%s: function %s at 0x%lx: %s; not armed", pd_objects[o].path,
                            site->name, (unsigned long)site->pc,
                            ool && ool[s] ? "not the instructions the plan was made for"
                                          : "its first instruction cannot run out of line");
                    if (pd_self)
                        pd_self->sites_failed++;
                    __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
                    continue;
                }
            } else if (prot < 0 || !(prot & PROT_EXEC) || !pd_is_nop((const uint8_t *)addr, site->nop_len)) {
                pd_warn("%s: probe %s:%s at 0x%lx is not a nop in memory; not armed",
                        pd_objects[o].path, site->provider, site->name, (unsigned long)site->pc);
                if (pd_self)
                    pd_self->sites_failed++;
                __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
                continue;
            }
            struct pd_armed e = {.addr = addr, .bias = (uintptr_t)info->dlpi_addr, .site = site,
                                 .stub = stubs ? stubs[s] : 0, .ool = ool ? ool[s] : 0};
            /* every byte a trap or jump may overwrite (nop_len is 0 at a function entry) */
            unsigned save = site->plan.len > site->nop_len ? site->plan.len : site->nop_len;
            e.saved_len = (uint8_t)(save < PD_TRAP_LEN ? PD_TRAP_LEN
                                    : save > sizeof e.saved ? sizeof e.saved : save);
            e.prot = prot;
            memcpy(e.saved, (const void *)addr, e.saved_len);
            /* published before the first int3 is written: a thread may hit it at once */
            struct pd_armed *a = pd_armed_insert(&e);
            if (!a)
                continue;
            /* a short window jumps to its island (the stub's entry word) */
            if (a->stub && pd_install_jump(addr, site->plan.len, prot, site->plan.len < 5 ? a->stub
                                           : pd_stub_start(a->stub, &site->plan)) != 0) {
                /* an exit's handler must run after the window's first instructions: its
                 * int3 keeps sending threads to the stub (pd_sigtrap), never traps itself */
                if (!(site->fx & PD_FX_EXIT))
                    a->stub = 0;
                else if (pd_patch(addr, PD_TRAP_LEN, prot, pd_write_trap) != 0)
                    a->stub = 0; /* nothing written: the exit is not armed below */
            }
            if (!a->stub && (site->fx & PD_FX_EXIT)) {
                pd_armed_remove(a);
                if (pd_self)
                    pd_self->sites_failed++;
                __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
                continue;
            }
            if (!a->stub && pd_patch(addr, PD_TRAP_LEN, prot, pd_write_trap) != 0) {
                pd_armed_remove(a);
                if (pd_self)
                    pd_self->sites_failed++;
                continue;
            }
            if (site->sema)
                __atomic_add_fetch((uint16_t *)(info->dlpi_addr + (uintptr_t)site->sema), 1,
                                   __ATOMIC_RELAXED);
            if (pd_self)
                pd_self->sites_armed++;
        }
        free(stubs);
        free(ool);
    }
    return 0;
}

static void pd_arm_all(void)
{
    if (!pd_module.nsites)
        return;
    uint32_t cap = 4;
    while (cap <= 2 * pd_module.nsites)
        cap *= 2;
    pd_obj_armed = calloc(pd_module.nobjects + 1, 1);
    pd_obj_bias = calloc(pd_module.nobjects + 1, sizeof *pd_obj_bias);
    pd_site_off = calloc(pd_module.nsites, 1);
    struct pd_armed *table = calloc(cap, sizeof *table);
    if (!table || !pd_obj_armed || !pd_obj_bias || !pd_site_off)
        return;
    if (pd_install_trap_handler() != 0) {
        pd_warn("cannot install the SIGTRAP handler: %s", strerror(errno));
        return;
    }
    pd_armed_cap = cap;
    pd_armed = table;
    dl_iterate_phdr(pd_arm_object, NULL);
}

int pd_object_bias(uint32_t o, uintptr_t *bias)
{
    if (!pd_obj_armed || o >= pd_module.nobjects || !pd_obj_armed[o])
        return 0;
    *bias = pd_obj_bias[o];
    return 1;
}

/* In a pass after a dlopen or dlclose (pd_dlopen.c, one pass at a time): arms the objects that
 * are new since the last pass. */
void pd_arm_loaded(void)
{
    if (pd_armed && pd_session_running())
        dl_iterate_phdr(pd_arm_object, NULL);
}

static int pd_find_bias(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    return (uintptr_t)info->dlpi_addr == *(uintptr_t *)data;
}

/* In the same passes: forgets the sites of armed objects that are no longer loaded
 * (their memory is gone: nothing is read or restored there) and frees their stubs. */
void pd_disarm_unloaded(void)
{
    if (!pd_armed)
        return;
    long page = sysconf(_SC_PAGESIZE);
    for (uint32_t o = 0; o < pd_module.nobjects; o++) {
        uintptr_t bias = pd_obj_bias[o];
        if (!pd_obj_armed[o] || bias == 0 || dl_iterate_phdr(pd_find_bias, &bias))
            continue;
        pd_obj_armed[o] = 0;
        for (uint32_t i = 0; i < pd_armed_cap; i++) {
            struct pd_armed *a = &pd_armed[i];
            if (a->addr <= PD_ARMED_DEAD || a->site->object != o)
                continue;
            uintptr_t code[2] = {a->stub, a->ool};
#ifndef PD_OOL_SIZE
#define PD_OOL_SIZE 0 /* this arch makes no out-of-line copies: a->ool is 0 */
#endif
            size_t len[2] = {PD_STUB_SIZE, PD_OOL_SIZE};
            pd_armed_remove(a);
            if (pd_self)
                pd_self->sites_armed--;
            for (int k = 0; k < 2; k++) /* the pages this site's code spans (areas are per object) */
                if (code[k] && len[k]) {
                    uintptr_t first = code[k] & ~(uintptr_t)(page - 1);
                    munmap((void *)first, code[k] + len[k] - first);
                }
        }
    }
}

/* ---- attaching and the process registry ---------------------------------- */

enum { PD_ATTACH_OK = 0, PD_ATTACH_NOSHM = -1, PD_ATTACH_BADSEG = -2, PD_ATTACH_MISMATCH = -3,
       PD_ATTACH_EMULATOR = -4, PD_ATTACH_ENDED = -5, PD_ATTACH_ALREADY = -6 };

static char pd_hex_buf[2 * PD_CHECKSUM_LEN + 1];
static const char *pd_hex(const uint8_t *sum)
{
    for (int i = 0; i < 8; i++)
        snprintf(pd_hex_buf + 2 * i, 3, "%02x", sum[i]);
    return pd_hex_buf;
}

static int pd_map_segment(const char *name)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return PD_ATTACH_NOSHM;
    struct stat st;
    /* A segment of another user is never trusted (it could feed us pointers). */
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() ||
        (size_t)st.st_size < sizeof(struct pd_header)) {
        close(fd);
        return PD_ATTACH_BADSEG;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return PD_ATTACH_NOSHM;
    struct pd_header *h = m;
    if (h->magic != PD_MAGIC || h->layout_version != PD_LAYOUT_VERSION ||
        h->segment_size != (uint64_t)st.st_size) {
        munmap(m, (size_t)st.st_size);
        return PD_ATTACH_BADSEG;
    }
    pd_seg = m;
    pd_hdr = h;
    pd_seg_size = (size_t)st.st_size;
    if (memcmp(h->checksum, pd_module.checksum, PD_CHECKSUM_LEN) != 0)
        return PD_ATTACH_MISMATCH;
    return PD_ATTACH_OK;
}

static void pd_unmap(void)
{
    pd_fast_env_set(0);
    if (pd_seg)
        munmap(pd_seg, pd_seg_size);
    pd_seg = NULL;
    pd_hdr = NULL;
}

static struct pd_proc *pd_proc_at(uint32_t i)
{
    return (struct pd_proc *)(pd_seg + pd_hdr->proctab_off + (uint64_t)i * pd_hdr->proc_entry_size);
}

static void pd_copy_name(uint8_t *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    memset(dst + n, 0, cap - n);
}

/* An exec'd image re-registers under the same pid: its old entry is marked
 * EXECED, so the table keeps the history the launcher reports with -v.  That
 * history is the first to go: with no free entry left, an EXECED one is reused
 * (a fork+exec storm needs one entry per process, not two). */
static struct pd_proc *pd_register(uint32_t state)
{
    int rc = pd_lock(&pd_hdr->proctab_lock);
    if (rc == PD_LOCK_RECOVERED)
        __atomic_add_fetch(&pd_hdr->lock_recoveries, 1, __ATOMIC_RELAXED);
    if (rc == PD_LOCK_TIMEOUT) { /* a process stopped while registering: not listed */
        __atomic_add_fetch(&pd_hdr->lock_timeouts, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    pid_t pid = getpid();
    struct pd_proc *slot = NULL, *execed = NULL;
    for (uint32_t i = 0; i < pd_hdr->proctab_count; i++) {
        struct pd_proc *p = pd_proc_at(i);
        if (p->state == PD_PROC_ALIVE && p->pid == pid)
            p->state = PD_PROC_EXECED;
        if (!slot && p->state == PD_PROC_FREE)
            slot = p;
        if (!execed && p->state == PD_PROC_EXECED)
            execed = p;
    }
    if (!slot)
        slot = execed;
    if (slot) {
        memset(slot, 0, sizeof *slot);
        slot->pid = pid;
        slot->ppid = getppid();
        slot->abi = PD_ARCH_ABI;
        slot->start_ns = pd_now_ns();
        char comm[17] = {0};
        prctl_get_name(comm);
        pd_copy_name(slot->comm, sizeof slot->comm, comm);
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        pd_copy_name(slot->exe, sizeof slot->exe, exe);
        __atomic_store_n(&slot->state, state, __ATOMIC_RELEASE);
        __atomic_add_fetch(&pd_hdr->attach_count, 1, __ATOMIC_RELAXED);
    } else {
        __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
    }
    pd_unlock(&pd_hdr->proctab_lock);
    return slot;
}

static void pd_fire_process_probes(uint32_t kind)
{
    for (uint32_t i = 0; i < pd_module.nprobes; i++) {
        const struct pd_probe *p = &pd_probes[i];
        if (p->kind != kind)
            continue;
        if (p->object >= 0 && !pd_object_matches(pd_objects[p->object].path, NULL))
            continue;
        pd_run(p, NULL, NULL, 0);
    }
}

static void pd_atfork_child(void)
{
    if (!pd_seg || pd_is_launcher || pd_inert)
        return;
    pd_self = pd_register(PD_PROC_ALIVE);
    if (pd_self)
        pd_self->sites_armed = pd_narmed;
    pd_fire_process_probes(PD_PROBE_PROCESS_BEGIN);
}

/* Whether this process is a qemu-user emulator (qemu-aarch64 ...): it carries the
 * session's environment to its guest, whose own loader preloads the guest's module
 * (issue 8).  The host module loaded into the emulator itself stays out, so the pid
 * is registered once, by the guest. */
static int pd_in_emulator(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return 0;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    return strncmp(base, "qemu-", 5) == 0;
}

/* Joins the session of segment `name`: maps and checks it, registers this process and
 * arms its sites.  0 or a PD_ATTACH_* error.  Run by the constructor of a preloaded
 * module, and by pd_attach_live (pd_attach.c) in a process pydyn -x attached to. */
int pd_session_attach(const char *name)
{
    if (pd_seg && !pd_inert)
        return PD_ATTACH_ALREADY;
    if (pd_in_emulator())
        return PD_ATTACH_EMULATOR;
    int rc = pd_map_segment(name);
    if (rc == PD_ATTACH_NOSHM || rc == PD_ATTACH_BADSEG) {
        /* The session is gone (or never was): stay inert, say nothing loud. */
        pd_unmap();
        return rc;
    }
    if (rc == PD_ATTACH_MISMATCH) {
        fprintf(stderr,
                "pydyn: error: probe module %s (" PD_ARCH_NAME ") was built from another "
                "source (checksum %s) than this session's; probes not armed in pid %d\n",
                "for this process", pd_hex(pd_module.checksum), (int)getpid());
        __atomic_add_fetch(&pd_hdr->mismatch_count, 1, __ATOMIC_RELAXED);
        pd_register(PD_PROC_REFUSED);
        pd_unmap();
        return rc;
    }
    if (__atomic_load_n(&pd_hdr->session_state, __ATOMIC_ACQUIRE) > PD_SESSION_RUNNING) {
        pd_unmap();
        return PD_ATTACH_ENDED;
    }
    /* a later -x session reloading the same module file (dlopen returns the loaded
     * one) finds it inert; the zero pages of the last segment stay mapped */
    __atomic_store_n(&pd_inert, 0, __ATOMIC_RELEASE);
    pd_fast_env_set(1);
    pd_lock_setup();
    pd_pstat_setup();
    pd_quiesce_attach();
    pd_follow_init();
    pd_altstack_init();
    pd_self = pd_register(PD_PROC_ALIVE);
    pd_arm_all();
    static int atfork_set; /* once, though a -x process may be attached again */
    if (!atfork_set)
        pthread_atfork(NULL, NULL, pd_atfork_child);
    atfork_set = 1;
    pd_fire_process_probes(PD_PROBE_PROCESS_BEGIN);
    return PD_ATTACH_OK;
}

__attribute__((constructor)) static void pd_target_init(void)
{
    const char *name = getenv("PYDYN_SHM");
    if (name && *name) /* else the launcher, a -x process (pd_attach.c) or no session */
        pd_session_attach(name);
}

/* Detaching from a -x process: puts back every byte arming changed (int3 first, so a
 * thread never runs a torn instruction, then the tail, then the first byte) and undoes
 * the semaphore increments.  pd_armed, the stubs and out-of-line copies stay: a thread
 * stopped inside a stub, or with a SIGTRAP from a site still pending, finds them and
 * resumes correctly.  Returns the sites restored; adds to *bytes and *semas. */
static const uint8_t *pd_restore_src;
static unsigned pd_restore_n;
static void pd_write_restore(uint8_t *at) { memcpy(at, pd_restore_src, pd_restore_n); }

uint32_t pd_disarm_all(uint32_t *bytes, uint32_t *semas)
{
    uint32_t sites = 0;
    for (uint32_t i = 0; pd_armed && i < pd_armed_cap; i++) {
        struct pd_armed *a = &pd_armed[i];
        if (a->addr <= PD_ARMED_DEAD)
            continue;
        unsigned len = a->stub ? a->site->plan.len : PD_TRAP_LEN;
        if (len > a->saved_len)
            len = a->saved_len;
        if (len > PD_TRAP_LEN && pd_patch(a->addr, PD_TRAP_LEN, a->prot, pd_write_trap) == 0) {
            pd_restore_src = a->saved + PD_TRAP_LEN;
            pd_restore_n = len - PD_TRAP_LEN;
            pd_patch(a->addr + PD_TRAP_LEN, pd_restore_n, a->prot, pd_write_restore);
            len = PD_TRAP_LEN;
            *bytes += pd_restore_n;
        }
        pd_restore_src = a->saved;
        pd_restore_n = len;
        if (pd_patch(a->addr, len, a->prot, pd_write_restore) != 0)
            continue;
        *bytes += len;
        sites++;
        if (a->site->sema) {
            __atomic_sub_fetch((uint16_t *)(a->bias + (uintptr_t)a->site->sema), 1,
                               __ATOMIC_RELAXED);
            (*semas)++;
        }
    }
#if !defined(__aarch64__)
    /* Then the branches and islands that led into stubs, newest first; never in an
     * object unloaded (or loaded again elsewhere) since it was linked. */
    for (uint32_t i = pd_link_undo_n; i-- > 0;) {
        const struct pd_link_undo *u = &pd_link_undos[i];
        if (!pd_obj_armed[u->object] || pd_obj_bias[u->object] != u->bias)
            continue;
        pd_restore_src = u->orig;
        pd_restore_n = u->n;
        if (pd_patch(u->at, u->n, u->prot, pd_write_restore) == 0)
            *bytes += u->n;
    }
    pd_link_undo_n = 0;
#endif
    return sites;
}

/* After pd_disarm_all: no probe, fork handler or destructor touches the session again.
 * The segment's pages are replaced by zero pages instead of unmapped: a thread stopped
 * half way into a handler may still hold pointers into them. */
void pd_go_inert(void)
{
    __atomic_store_n(&pd_inert, 1, __ATOMIC_RELEASE);
    pd_fast_env_set(0);
    if (pd_seg)
        mmap(pd_seg, pd_seg_size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

__attribute__((destructor)) static void pd_target_fini(void)
{
    if (!pd_seg || pd_is_launcher || pd_inert)
        return;
    pd_fire_process_probes(PD_PROBE_PROCESS_END);
    if (pd_self && pd_self->pid == getpid()) {
        pd_self->end_ns = pd_now_ns();
        __atomic_store_n(&pd_self->state, PD_PROC_EXITED, __ATOMIC_RELEASE);
    }
}

/* ---- launcher entry points (called through cffi) -------------------------- */

PD_EXPORT const struct pd_module_info *pd_launcher_module_info(void) { return &pd_module; }

/* Maps the segment the launcher created and initialised from shmlayout. */
PD_EXPORT int pd_launcher_attach(const char *name)
{
    pd_is_launcher = 1;
    int rc = pd_map_segment(name);
    if (rc != PD_ATTACH_OK)
        pd_unmap();
    else
        pd_fast_env_set(1);
    return rc;
}

PD_EXPORT void pd_launcher_init_globals(void)
{
    if (pd_seg)
        pd_init_globals(pd_seg + pd_hdr->globals_off);
}

/* Runs every probe of one kind (begin, end, error) in the launcher. */
PD_EXPORT int pd_launcher_run(uint32_t kind)
{
    int ran = 0;
    for (uint32_t i = 0; i < pd_module.nprobes; i++) {
        /* begin probes after an exit() do not run (stap: no longer STARTING) */
        if (kind == PD_PROBE_BEGIN && pd_hdr && pd_hdr->exit_requested)
            break;
        if (pd_probes[i].kind == kind) {
            pd_run(&pd_probes[i], NULL, NULL, 0);
            ran++;
        }
    }
    return ran;
}

/* Runs one probe by index (timers). */
PD_EXPORT void pd_launcher_run_probe(uint32_t index)
{
    if (index < pd_module.nprobes)
        pd_run(&pd_probes[index], NULL, NULL, 0);
}

/* Copies whole records from the ring into out (at most cap bytes) and frees
 * their space.  Returns the number of bytes copied. */
/* Appends the text of the TEXT record at out+at (len bytes) to the one at out+prev, if
 * both are single-string TEXT records of the same pid: the launcher then writes a
 * whole chunk of printf output at once (PD_FLAG_MERGE_TEXT; the record shrinks). */
static int pd_merge_text(uint8_t *out, uint32_t prev, uint32_t at, uint32_t len)
{
    struct pd_rec a, b;
    memcpy(&a, out + prev, sizeof a);
    memcpy(&b, out + at, sizeof b);
    if (prev == at || a.kind != PD_REC_TEXT || b.kind != PD_REC_TEXT || a.nargs != 1 ||
        b.nargs != 1 || a.pid != b.pid || len < sizeof b + 4)
        return 0;
    uint32_t la, lb;
    memcpy(&la, out + prev + sizeof a, 4);
    memcpy(&lb, out + at + sizeof b, 4);
    if (sizeof b + 4 + lb > len)
        return 0;
    memmove(out + prev + sizeof a + 4 + la, out + at + sizeof b + 4, lb);
    la += lb;
    uint32_t padded = (4 + la + 7) & ~7u;
    memset(out + prev + sizeof a + 4 + la, 0, padded - 4 - la);
    memcpy(out + prev + sizeof a, &la, 4);
    a.len = (uint32_t)sizeof a + padded;
    memcpy(out + prev, &a, sizeof a);
    return 1;
}

PD_EXPORT uint32_t pd_launcher_drain(uint8_t *out, uint32_t cap)
{
    if (!pd_seg)
        return 0;
    int merge = (__atomic_load_n(&pd_hdr->flags, __ATOMIC_RELAXED) & PD_FLAG_MERGE_TEXT) != 0;
    uint32_t text_at = 0;
    uint32_t size = pd_hdr->ring_size;
    uint32_t head = pd_hdr->ring_head;
    uint32_t tail = __atomic_load_n(&pd_hdr->ring_tail, __ATOMIC_ACQUIRE);
    uint32_t done = 0;
    while (head != tail) {
        uint32_t len;
        uint32_t at = head & (size - 1);
        uint8_t lenbuf[4];
        for (int i = 0; i < 4; i++)
            lenbuf[i] = pd_ring_data()[(at + (uint32_t)i) & (size - 1)];
        memcpy(&len, lenbuf, 4);
        if (len < sizeof(struct pd_rec) || len > tail - head)
            break; /* cannot happen with a committed record; never read garbage */
        if (done + len > cap)
            break;
        uint32_t first = len < size - at ? len : size - at;
        memcpy(out + done, pd_ring_data() + at, first);
        memcpy(out + done + first, pd_ring_data(), len - first);
        head += len;
        if (merge && pd_merge_text(out, text_at, done, len))
            done = text_at + ((const struct pd_rec *)(out + text_at))->len;
        else {
            text_at = done;
            done += len;
        }
    }
    if (done) {
        __atomic_store_n(&pd_hdr->ring_head, head, __ATOMIC_RELEASE);
        __atomic_add_fetch(&pd_hdr->ring_space_seq, 1, __ATOMIC_RELEASE);
        if (__atomic_load_n(&pd_hdr->ring_waiters, __ATOMIC_RELAXED))
            pd_futex_wake(&pd_hdr->ring_space_seq);
    }
    return done;
}

/* Sleeps until a producer commits a record or timeout_ms passes. */
PD_EXPORT void pd_launcher_wait(uint32_t timeout_ms)
{
    if (!pd_seg)
        return;
    uint32_t seq = __atomic_load_n(&pd_hdr->ring_data_seq, __ATOMIC_ACQUIRE);
    if (pd_hdr->ring_head != __atomic_load_n(&pd_hdr->ring_tail, __ATOMIC_ACQUIRE))
        return;
    __atomic_or_fetch(&pd_hdr->flags, PD_FLAG_DRAIN_WAITS, __ATOMIC_SEQ_CST);
    pd_futex_wait(&pd_hdr->ring_data_seq, seq, (long)timeout_ms * 1000000L);
    __atomic_and_fetch(&pd_hdr->flags, ~(uint32_t)PD_FLAG_DRAIN_WAITS, __ATOMIC_SEQ_CST);
}

/* Ends a pd_launcher_wait() at once: the launcher's drain thread, when the session
 * stops (else the join waits out the timeout, ~50 ms of every run). */
PD_EXPORT void pd_launcher_wake(void)
{
    if (!pd_seg)
        return;
    __atomic_add_fetch(&pd_hdr->ring_data_seq, 1, __ATOMIC_RELEASE);
    pd_futex_wake(&pd_hdr->ring_data_seq);
}

PD_EXPORT void pd_launcher_detach(void) { pd_unmap(); }
