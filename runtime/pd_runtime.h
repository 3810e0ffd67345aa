/* The interface between generated probe code and the pydyn runtime.
 *
 * One generated C file per script is compiled for every ABI (m64, m32, ...)
 * together with the runtime's units.  The generated file defines the tables declared
 * at the bottom (probes, sites, objects, module info); the runtime finds the
 * sites in the loaded objects, arms them, and calls the probe handlers with a
 * struct pd_ctx whose register context was filled by a trap (now) or a
 * trampoline (later) in the same way.
 */
#ifndef PD_RUNTIME_H
#define PD_RUNTIME_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* REG_* names in <ucontext.h> */
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pd_config.h" /* build-time defaults */
#include "pd_shm.h" /* generated from shmlayout/: the arch-neutral segment */

#include "pd_arch.h" /* the arch folder's cpu.h: PD_FAST_FN, PD_ARCH_REGS_H */
#include PD_ARCH_REGS_H

#ifndef PD_ARCH_READ_SELF
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
/* Reads n bytes of this process at src: n, or <= 0 for a bad address (never a crash).
 * An arch may define its own (aarch64: qemu-user's process_vm_readv is unusable). */
static inline ssize_t pd_read_self(void *dst, const void *src, size_t n)
{
    struct iovec local = {dst, n}, remote = {(void *)src, n};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
}
#endif

#define PD_EXPORT __attribute__((visibility("default")))
/* In an interposed libc/libgcc function: `real_NAME`, the definition we hide (needs <dlfcn.h>). */
#define PD_REAL(name, type) \
    static type real_##name; \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)
#define PD_LIKELY(x) __builtin_expect(!!(x), 1)
#define PD_UNLIKELY(x) __builtin_expect(!!(x), 0)


/* ---- tables emitted by the translator ---------------------------------- */

enum pd_arg_kind { PD_ARG_CONST = 0, PD_ARG_REG = 1, PD_ARG_MEM = 2, PD_ARG_EXPR = 3 };

/* A DWARF location expression, compiled by the launcher (launcher/elf/dwarf_expr.py)
 * to steps on a small value stack, evaluated by pd_fetch_arg.  The last step says what
 * the expression gives: an address to read, a value, or the pieces assembled. */
enum pd_dwop_kind {
    PD_DW_CONST, PD_DW_ADDR, PD_DW_REG, PD_DW_DEREF, PD_DW_PLUS_CONST, PD_DW_DUP,
    PD_DW_PLUS, PD_DW_MINUS, PD_DW_AND, PD_DW_OR, PD_DW_XOR, PD_DW_MUL, PD_DW_SHL,
    PD_DW_SHR, PD_DW_SHRA, PD_DW_NEG, PD_DW_NOT,
    PD_DW_PIECE_REG, PD_DW_PIECE_MEM, PD_DW_PIECE_VAL,   /* arg: the piece's bytes */
    PD_DW_END_MEMORY, PD_DW_END_VALUE, PD_DW_END_PIECES,
    PD_DW_ENTRY_REG   /* reg's value at the function's entry (c->entry_regs) */
};
struct pd_dwop {
    int64_t arg;     /* CONST/ADDR/PLUS_CONST: the operand; DEREF and PIECE_*: bytes */
    uint8_t op;      /* enum pd_dwop_kind */
    int8_t reg;      /* REG, PIECE_REG: DWARF register number */
};
enum pd_seg { PD_SEG_NONE = 0, PD_SEG_TP = 1 }; /* %fs / %gs: thread pointer */

/* One sdt.h operand, decoded offline by the launcher (launcher/elf/argspec.py). */
struct pd_argdesc {
    int64_t value;   /* CONST: the value; MEM: the displacement */
    uint8_t kind;    /* enum pd_arg_kind */
    uint8_t size;    /* 1, 2, 4, 8 */
    uint8_t is_signed;
    uint8_t seg;     /* enum pd_seg */
    int8_t reg;      /* REG: the register; MEM: base register or -1 */
    int8_t index;    /* MEM: index register or -1 */
    uint8_t scale;
    uint8_t shift;   /* 8 for %ah-style high-byte registers */
    uint8_t rel;     /* MEM: displacement is a link-time address: add the load bias */
    const struct pd_dwop *ops;   /* EXPR: the compiled location, ending in an END_* step */
};

struct pd_ctx;
typedef void (*pd_handler_fn)(struct pd_ctx *);

/* pd_probe.locks bits (PD_PROBE_LOCKS, PD_PROBE_FAST: pd_shm.h).  FAST: the translator
 * proved the handler does only counter adds (no calls) and compiled it PD_FAST_FN, so
 * trampolines may run it without saving the vector registers (pd_run_fast). */
/* PD_FAST_FN, PD_FAST_UNIT (the arch's cpu.h): code that runs from a trampoline before
 * the vector registers are saved. */
/* c->error of a FAST handler that ran out of MAXACTION: pd_error (vsnprintf) is
 * called after the handler, with the vector registers saved. */
#define PD_ERROR_DEFERRED 2
/* c->error of a FAST handler whose error pd_fast_slow reported already. */
#define PD_ERROR_REPORTED 3

struct pd_probe {
    uint32_t kind;       /* PD_PROBE_* (pd_shm.h) */
    uint32_t locks;      /* handler touches globals: run it under the globals lock */
    pd_handler_fn handler;
    const char *pp;      /* pp(): the point the site resolved to (pointnames.py) */
    int32_t object;      /* PROCESS_BEGIN/END: pd_objects index, -1 for any process */
    uint32_t period_ns;  /* TIMER */
    /* FAST: statement n's `where`, for its MAXACTION error (PD_ACTION_FAST): read
     * through c->probe, so a handler needs no i386 PIC register to name it */
    const char *const *where;
    const char *pn;      /* pn(), where it is not pp: the point as written, expanded */
};

/* pn(): how pydyn's own messages name a probe (a mark by its name, not its address) */
#define PD_PROBE_NAME(p) ((p)->pn ? (p)->pn : (p)->pp)

struct pd_object {
    const char *path;    /* realpath, as the launcher resolved it */
    uint32_t abi;        /* PD_ABI_*: only a module of that ABI arms its sites */
};

/* How to patch a site: computed offline by launcher/plan/x86.py. */
enum pd_tactic { PD_TACTIC_TRAP = 0, PD_TACTIC_NOP = 1, PD_TACTIC_DISPLACE = 2 };
enum pd_fixup_kind { PD_FIX_REL32 = 1, PD_FIX_ABS32 = 2, PD_FIX_ABS32HI = 3, PD_FIX_B26 = 4 };

/* A field of the relocated code filled in once the stub's address is known:
 * REL32 = target + bias - (code + anchor); ABS32/ABS32HI = low/high half of target + bias;
 * B26 (aarch64): the B at `at` branches to target + bias. */
struct pd_fixup {
    uint64_t target;     /* link-time address */
    uint16_t at, anchor; /* offsets in the relocated code */
    uint8_t kind;        /* enum pd_fixup_kind */
};

/* A direct branch elsewhere in the object landing inside a DISPLACE window: pointed at
 * the relocated copy of the instruction it reaches (plan/x86.py Redirect). */
struct pd_redirect {
    uint64_t field, anchor; /* link-time: its displacement, and what that is relative to */
    uint64_t island, hop;   /* size 1: `jmp rel32` at island (reached via `jmp rel8` at hop) */
    uint16_t code_off;      /* the reached instruction in the relocated code */
    uint8_t size;           /* 4: rel32 to the stub; 1: rel8 to hop or island */
    uint8_t orig[4];        /* its displacement's bytes, verified before the write */
};

struct pd_plan {
    const uint8_t *orig;            /* DISPLACE: the bytes expected at pc (len) */
    const uint8_t *code;            /* DISPLACE: relocated instructions (code_len) */
    const struct pd_fixup *fixups;
    const char *reason;             /* why this tactic */
    uint64_t resume;                /* link-time address the stub jumps back to */
    uint8_t tactic;                 /* enum pd_tactic */
    uint8_t len;                    /* bytes overwritten at pc (>= 5 unless island) */
    uint8_t code_len;
    uint8_t nfixups;
    const struct pd_redirect *redirects;
    const uint8_t *bounds;          /* nbounds (window offset, code offset) pairs */
    uint64_t island, hop;           /* len < 5: `jmp rel8` at pc to hop or island */
    uint8_t nredirects;
    uint8_t nbounds;
    uint8_t pre;                    /* a function exit: code bytes run before the handler */
};

struct pd_site {
    uint64_t pc;         /* link-time address of the nop */
    uint64_t sema;       /* link-time address of the semaphore, 0 if none */
    const struct pd_argdesc *args;
    const char *provider;
    const char *name;
    uint32_t object;     /* pd_objects index */
    uint32_t probe;      /* pd_probes index */
    uint8_t nop_len;     /* 0: a function entry, not a nop */
    uint8_t nargs;
    struct pd_plan plan;
    const uint32_t *fprobes; /* function sites: nentry entry then nreturn return probes */
    uint16_t nentry;
    uint16_t nreturn;
    uint8_t fx;          /* PD_FX_*: how a function's return probes are reached */
    /* Several rows at one address (probes on one mark, a function entry that is a mark):
     * the armed one lists them all, itself included, in script order; the others are
     * PD_FX_SHARED and never armed themselves (pd_fire_shared). */
    const uint32_t *shared;
    uint16_t nshared;
};

/* A function whose exits are patched (launcher/plan/returns.py) has a PD_FX_HIJACK row (the
 * entry with nreturn return probes, as without exits) followed by PD_FX_ALT rows: the
 * entry without return probes (if it has entry probes, or a PD_FX_IN_ENTRY exit needs
 * its stub) and one PD_FX_EXIT row per exit,
 * whose nentry "entry" probes are the return probes, run with the registers at the
 * exit.  pd_ret_choose arms the ALT rows, or the HIJACK row under -x, in trap mode or
 * when an exit's stub cannot be written. */
enum { PD_FX_HIJACK = 1, PD_FX_ALT = 2, PD_FX_EXIT = 4, PD_FX_SHARED = 8, PD_FX_IN_ENTRY = 16,
       PD_FX_BARE = 32 };
/* PD_FX_IN_ENTRY: an exit row for the `ret` that ends the entry's own window (a function
 * too small for two patches): nothing is patched for it; the entry's ALT row's stub jumps
 * to its stub instead of running its copy of the `ret` (pd_tramp_in_entry), so it is
 * armed only with that row's stub.
 * PD_FX_BARE: that entry row of a function with return probes only: it runs no probe
 * (nentry 0, probe unused); its stub is the relocated code alone, entered past the frame
 * (pd_stub_start), whose `ret` becomes the jump to the exit's stub. */

struct pd_module_info {
    uint8_t checksum[PD_CHECKSUM_LEN];
    uint64_t globals_size;
    uint32_t nprobes;
    uint32_t nsites;
    uint32_t nobjects;
    uint32_t maxaction;
};

extern const struct pd_probe pd_probes[];
extern const struct pd_site pd_sites[];
extern const struct pd_object pd_objects[];
/* Per probe row, 1 for a .return point: emitted when a script calls is_return() where
 * its probe point does not tell. */
extern const uint8_t pd_probe_is_return[];
extern const struct pd_module_info pd_module;
/* Sets globals' initial values; run once by the launcher before `begin`. */
extern void pd_init_globals(uint8_t *globals);

/* ---- the handler context ------------------------------------------------ */

struct pd_fast_tls;
struct pd_ctx {
    const struct pd_probe *probe;
    const struct pd_site *site;   /* NULL outside mark probes */
    const struct pd_regs *regs;   /* NULL outside mark probes */
    uintptr_t bias;               /* load bias of the site's object */
    uint8_t *globals;             /* the segment's globals area */
    int64_t actions;              /* statements left before MAXACTION */
    int error;                    /* set: the handler unwinds to its end */
    int nesting;                  /* user function call depth (MAXNESTING) */
    const char *where;            /* the statement running, for error messages */
    int64_t *cslot;               /* the thread's counter block (pd_counter.c); 0 or 1: none */
    /* the thread's FAST TLS block (pd_fast_tls): its clock anchor, statistic slot and
     * @entry frames, one load away for a FAST handler (pd_fast.h, launcher/entry.py) */
    struct pd_fast_tls *tls;
    /* a probe inside a function: the registers at its entry, by DWARF number, that a
     * hidden entry probe kept (launcher/entry.py); NULL where none did */
    const int64_t *entry_regs;
    uint32_t outlen;
    char errmsg[160];
    /* the error's call chain, innermost caller first: " (called from W)" per script
     * function it unwound through (pd_error_caller); pd_error empties it.  A fixed
     * size (stap's default MAXSTRINGLEN, its message's bound): the context's layout
     * must not depend on a script's -D */
    char errtrail[512];
    int regparm;                  /* regparm(n): PD_REGPARM_SET | n, else 0 (pd_uregs.c) */
    /* the handler's last `=~` (pd_regex.c): set by every handler of a script that
     * reads sub-matches (matched(), ngroups()), unset in the others */
    struct pd_match *match;
    /* stap's CONTEXT->last_error: a guru function (launcher/guru.py) clears it when it
     * starts and fails with the message it holds when it returns */
    const char *last_error;
    uint8_t out[PD_OUTBUF_SIZE];  /* records, written to the ring when the handler ends */
};

/* Errors abort the handler (the generated code checks c->error after each
 * statement); they are counted and reported, and the target runs on. */
void pd_error(struct pd_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A script function returning with an error: its call site `caller` (the caller's
 * `where` at the call) joins the error's call chain, as stap's "(called from ...)". */
void pd_error_caller(struct pd_ctx *c, const char *caller);

/* Output records (see shmlayout for the encoding). */
void pd_rec_open(struct pd_ctx *c, uint16_t kind, uint32_t fmt_id, uint16_t nargs);
void pd_rec_i64(struct pd_ctx *c, int64_t v);
void pd_rec_str(struct pd_ctx *c, const char *s);
void pd_rec_close(struct pd_ctx *c);

/* Function probes (pd_func.c). */
PD_FAST_FN void pd_run_probe(const struct pd_probe *p, const struct pd_site *site,
                             const struct pd_regs *regs, uintptr_t bias);
PD_FAST_FN int pd_session_running(void);
PD_FAST_FN void pd_count_skipped(unsigned n);
PD_FAST_FN void pd_count_reentered(const struct pd_probe *p);
/* fn(a, b, c, d) with every vector register kept (arch/x86_64/x86_64_ret.S; i386:
 * arch/i386/pd_fast_i386.S, also the x87 state; aarch64: a plain call): how PD_FAST_FN code calls code that may use them.  pd_xmm_always: the
 * stubs and pd_ret_tramp save them themselves (a module dlopened by -x, whose TLS
 * descriptors may call malloc, which glibc 2.36's _dl_tlsdesc_dynamic does not guard;
 * the i386 pd_ret_tramp always does). */
typedef uintptr_t (*pd_saved_fn)(uintptr_t, uintptr_t, uintptr_t, uintptr_t);
uintptr_t pd_xmm_call(pd_saved_fn fn, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d);
extern int pd_xmm_always;
PD_FAST_FN void pd_func_fire(const struct pd_regs *regs, const struct pd_site *site, uintptr_t bias);
PD_FAST_FN void pd_func_fire_sp(const struct pd_probe *p, const struct pd_site *site,
                                uintptr_t sp, uintptr_t bias);
const struct pd_probe *pd_func_fast_probe(const struct pd_site *site);
int64_t pd_func_return(struct pd_ctx *c);
/* What FAST handlers run with: pd_run_fast and pd_func.c's entry/return path, which
 * runs a site's FAST probes with one check, one guard and one context. */
extern uint8_t *pd_seg __attribute__((visibility("hidden")));
extern struct pd_header *pd_hdr __attribute__((visibility("hidden")));
extern int pd_inert __attribute__((visibility("hidden")));
/* The thread's FAST-path TLS block, found once per hit: the reentrancy guard, and the
 * context of a FAST mark probe (pd_fast_mark): only the fields before errmsg, all a FAST
 * handler touches (launcher/translate/fast.py: counter adds only), kept between hits.
 * Its cslot is the thread's counter block pointer (pd_counter.c: NULL not claimed yet, 1 none), also
 * reachable as `cslot`; its error is 0 between hits (the error path clears it). */
/* A thread's clock anchor (pd_clock.c): the clocks read at cycle count `cyc`, the
 * cycle's length in 2^-32 ns, and how many cycles after cyc the anchor serves. */
struct pd_clock_anchor {
    uint64_t cyc;
    int64_t ns[2]; /* CLOCK_MONOTONIC, CLOCK_REALTIME */
    uint64_t mult;
    uint64_t span; /* 0: no anchor (every read goes to clock_gettime) */
    int64_t last[2]; /* the thread's last reads: a new anchor never takes its time back */
};
struct pd_fast_tls {
    int busy;
    union {
        _Alignas(16) unsigned char ctx[offsetof(struct pd_ctx, errmsg)];
        struct {
            unsigned char cslot_at_[offsetof(struct pd_ctx, cslot)];
            int64_t *cslot;
        };
    };
    uint32_t *inflight; /* pd_quiesce.h: the thread's busy word in the segment (NULL, 1: none) */
    uint32_t epoch;     /* pd_fenv.epoch when ctx's globals and actions were set */
    uint32_t slots_epoch; /* pd_fenv.epoch when the slot state above was last valid */
    int pslot; /* pd_pstat.c: 0 not claimed yet, -1 none free (slot 0), k: owns slot k */
    struct pd_clock_anchor clock;
    /* launcher/entry.py: the thread's stack of @entry frames (laid out by the module),
     * how many it holds, and whether mapping it failed */
    void *ent;
    uint32_t ent_n;
    int ent_failed;
};
_Static_assert(offsetof(struct pd_fast_tls, cslot) ==
               offsetof(struct pd_fast_tls, ctx) + offsetof(struct pd_ctx, cslot),
               "pd_fast_tls.cslot is its context's");
extern __thread struct pd_fast_tls pd_in_handler __attribute__((visibility("hidden")));
#include "pd_quiesce.h"
/* What the FAST path reads, set when the process joins the session (pd_runtime.c):
 * state: the segment's session_state, or a word of 0 before that and once inert (one
 * load says whether probes may run); tls_off: pd_in_handler's offset from the thread
 * pointer when this module's TLS is static (preloaded), 0 when it may be dynamic (-x);
 * epoch: see pd_fast_tls.  A FAST mark stub passes its address, so the i386 path needs
 * no PIC register. */
struct pd_fast_env {
    const uint32_t *state;
    uint8_t *globals;
    int64_t maxaction;
    intptr_t tls_off;
    uint32_t epoch; /* bumped at every join: a context from before takes the new values */
};
extern struct pd_fast_env pd_fenv __attribute__((visibility("hidden")));
/* The globals area while probes may run, else NULL. */
static inline PD_FAST_FN uint8_t *pd_fast_globals(void)
{
    if (__atomic_load_n(pd_fenv.state, __ATOMIC_ACQUIRE) != PD_SESSION_RUNNING)
        return NULL;
    return pd_fenv.globals;
}
#define PD_HIDDEN __attribute__((visibility("hidden")))
/* &pd_in_handler through the TLS descriptor, out of line (i386: it needs the GOT
 * register, the hot path does not); may allocate: the -x stubs saved the vector
 * registers. */
PD_HIDDEN PD_FAST_FN struct pd_fast_tls *pd_fast_tls_dynamic(void);
/* This thread's pd_in_handler: the thread pointer plus a constant where the TLS is
 * static, else pd_fast_tls_dynamic. */
static inline PD_FAST_FN struct pd_fast_tls *pd_fast_tls_of(const struct pd_fast_env *env)
{
    intptr_t off = env->tls_off;
    if (PD_LIKELY(off != 0)) {
        uintptr_t tp = pd_fast_thread_pointer();
        return (struct pd_fast_tls *)(tp + (uintptr_t)off);
    }
    return pd_fast_tls_dynamic();
}
static inline PD_FAST_FN struct pd_fast_tls *pd_fast_tls(void) { return pd_fast_tls_of(&pd_fenv); }
/* A thread's statistic slot index, counter block and busy word were claimed in the
 * segment of the session the process was in then: after it joins another (-x again,
 * the module still loaded) they are forgotten and claimed anew (pd_pstat.c).  Called
 * with the guard taken, before any of them is used. */
__attribute__((visibility("hidden"), cold)) PD_FAST_FN void
pd_slots_rejoin(struct pd_fast_tls *t, uint32_t epoch);
static inline PD_FAST_FN void pd_slots_current(struct pd_fast_tls *t)
{
    uint32_t epoch = __atomic_load_n(&pd_fenv.epoch, __ATOMIC_ACQUIRE);
    if (PD_UNLIKELY(t->slots_epoch != epoch))
        pd_slots_rejoin(t, epoch);
}
/* Only the fields a FAST handler touches (launcher/translate/fast.py: counter adds only), for a
 * context outside pd_in_handler (pd_func.c's). */
static inline PD_FAST_FN void pd_fast_ctx(struct pd_ctx *c, uint8_t *globals, uintptr_t bias,
                                          const int *guard)
{
    c->cslot = ((const struct pd_fast_tls *)(const void *)guard)->cslot; /* busy is first */
    c->tls = (struct pd_fast_tls *)(uintptr_t)guard;
    c->bias = bias;
    c->globals = globals;
    c->actions = pd_fenv.maxaction;
    c->error = 0;
    c->where = NULL;
}
/* What FAST handlers read and feed beyond counter adds (pd_fastval.c): an argument, the
 * return value, a keyed add (a statistic's `<<<` and the clocks: pd_fast.h).  Each does
 * the common case with general registers only -- a register or a stack word of the
 * site's own page -- and anything else (a memory or DWARF location that may fault, a
 * keyed table) through pd_fast_slow, with the vector registers saved and a whole
 * context.  Hidden: i386 handlers call them with no PLT. */
struct pd_statdesc;
struct pd_kstatdesc;
PD_HIDDEN PD_FAST_FN int64_t pd_fast_arg(struct pd_ctx *c, unsigned index);
PD_HIDDEN PD_FAST_FN int64_t pd_fast_return(struct pd_ctx *c);
PD_HIDDEN PD_FAST_FN void pd_fast_kstat_add(struct pd_ctx *c, uint8_t *area,
                                            const struct pd_kstatdesc *kd, const uint8_t *key,
                                            int64_t v);
/* fn(full, a, b) on a whole context copied from the FAST context head c, with errno
 * kept; an error fn sets is reported at once and c->error becomes PD_ERROR_REPORTED
 * (the handler stops, nothing reports it again).  Called through pd_xmm_call. */
typedef uintptr_t (*pd_full_fn)(struct pd_ctx *full, uintptr_t a, uintptr_t b);
PD_HIDDEN uintptr_t pd_fast_slow(uintptr_t c, uintptr_t fn, uintptr_t a, uintptr_t b);
/* A FAST probe's handler failed (MAXACTION): its report, from a context head (pd_func.c),
 * called as pd_xmm_call(pd_fast_failed, head, 0, 0, 0). */
PD_HIDDEN uintptr_t pd_fast_failed(uintptr_t head, uintptr_t b, uintptr_t c, uintptr_t d);
/* After a FAST handler set c->error: the rest of c and the error report, called as
 * pd_xmm_call(pd_run_finish_saved, c, probe, site, regs). */
uintptr_t pd_run_finish_saved(uintptr_t c, uintptr_t p, uintptr_t site, uintptr_t regs);
/* Return addresses of hooked frames put back for an unwinder, and re-hooked. */
void pd_shadow_unhook(uintptr_t cfa);
void pd_shadow_rehook(uintptr_t cfa);
uint32_t pd_shadow_unhook_all(void); /* every thread's, at a -x detach */
extern int pd_ret_live; /* attached by -x: return probes keep the hijack (pd_ret_choose) */
void pd_ret_choose(uint32_t o, uintptr_t *stubs, uint8_t *off);
/* Objects loaded and unloaded at run time (pd_dlopen.c's passes call these, under
 * its pass lock, which -x attach and detach take too). */
void pd_arm_loaded(void);
void pd_disarm_unloaded(void);
int pd_dl_tables_lock(void);
void pd_dl_tables_unlock(int taken);
void *pd_dlopen_noload(const char *lib);
#define PD_LIBGCC "libgcc_s.so.1" /* the unwinder pd_unwind.c interposes */
/* GOT redirection of those interposers in a process pydyn -x attached to (pd_got.c);
 * counts[0] += entries restored, counts[1] += entries not redirected or not restored. */
void pd_got_redirect_all(void);
void pd_got_redirect_loaded(void);
void pd_got_forget_unloaded(void);
void pd_got_restore_all(uint32_t counts[2]);
/* A warning line for the session (stderr when there is none). */
void pd_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether pd_objects[o] is armed in this process, and its load bias. */
int pd_object_bias(uint32_t o, uintptr_t *bias);
/* The load bias of the armed object at `path`, else the handler's error (@var in a
 * script function). */
int64_t pd_object_bias_of(struct pd_ctx *c, const char *path, const char *where);
/* pd_ret_tramp's address; the original return address stored at `at` (0: none). */
uintptr_t pd_ret_tramp_addr(void);
uintptr_t pd_shadow_ret(uintptr_t at);
void pd_note_altstack(uintptr_t lo, uintptr_t size); /* this thread's sigaltstack */

/* usymname/ubacktrace (pd_usym.c): per probed object (and -d, --ldd object), its
 * function symbols and .eh_frame CFA rules, emitted by the translator as
 * pd_unwind_tables[] when a script uses them.  kind 0: CFA = sp + cfa_off, 1: fp + cfa_off,
 * 2: stop; fp_off: where the caller's frame pointer is saved, from the CFA (0: not). */
struct pd_usym {
    uint64_t addr;
    uint64_t size;
    const char *name;
};
struct pd_cfarow {
    uint64_t pc;
    int32_t cfa_off;
    uint8_t kind;
    int16_t fp_off; /* where the caller's fp was saved, from the CFA; 0: not saved */
    int16_t ra_off; /* aarch64: where x30 was saved, from the CFA; 0: still in x30 */
};
struct pd_unwind {
    const struct pd_usym *syms;
    uint32_t nsyms;
    const struct pd_cfarow *rows;
    uint32_t nrows;
    uint64_t lo, hi; /* link-time extent of the code described */
    /* usymdata only (else NULL, 0): data symbols, the extent of the PT_LOAD segments */
    const struct pd_usym *data;
    uint32_t ndata;
    uint64_t mlo, mhi;
    const char *path; /* the object's realpath */
    uint32_t abi;     /* PD_ABI_*: only a module of that ABI looks for it */
    int32_t object;   /* its pd_objects row; -1: no probe in it (-d, --ldd) */
};
char *pd_usymname(struct pd_ctx *c, char *dst, int64_t addr);
char *pd_umodname(struct pd_ctx *c, char *dst, int64_t addr);
int64_t pd_ustack(struct pd_ctx *c, int64_t n);
int64_t pd_ustack_or_zero(struct pd_ctx *c, int64_t n);
char *pd_ucallers(struct pd_ctx *c, char *dst, int64_t n);
char *pd_sprint_ubacktrace(struct pd_ctx *c, char *dst);
char *pd_sprint_usyms(struct pd_ctx *c, char *dst, const char *stk);
void pd_print_usyms(struct pd_ctx *c, uint32_t fmt_id, const char *stk);

/* register(), u_register(), @uregister, uaddr(), *_arg(), regparm() (pd_uregs.c) */
#define PD_REGPARM_SET 0x100
int64_t pd_uregister(struct pd_ctx *c, const char *name, int sign_extend);
int64_t pd_uregno(struct pd_ctx *c, int64_t regno, int user);
int64_t pd_uaddr(struct pd_ctx *c);
void pd_regparm(struct pd_ctx *c, int64_t n);
int64_t pd_uarg(struct pd_ctx *c, int64_t argnum, int sign_extend, int truncate);
int64_t pd_uarg64(struct pd_ctx *c, int64_t argnum);
char *pd_usymdata(struct pd_ctx *c, char *dst, int64_t addr);
char *pd_ubacktrace(struct pd_ctx *c, char *dst);
void pd_print_ubacktrace(struct pd_ctx *c, uint32_t fmt_id, int brief);

/* Built-ins the translator calls. */
int64_t pd_fetch_arg(struct pd_ctx *c, unsigned index);
int64_t pd_pid(void);
int64_t pd_tid(void);
int64_t pd_ppid(void);
const char *pd_execname(void);
int64_t pd_target(struct pd_ctx *c);
void pd_exit(struct pd_ctx *c);
void pd_raise(struct pd_ctx *c, int64_t sig);
int64_t pd_div(struct pd_ctx *c, int64_t a, int64_t b, const char *where);
int64_t pd_mod(struct pd_ctx *c, int64_t a, int64_t b, const char *where);

/* ---- arrays and statistics (pd_map.c) ------------------------------------ */

enum pd_type { PD_T_LONG = 1, PD_T_STRING = 2, PD_T_STAT = 3 };
#define PD_MAX_KEYS 9

struct pd_mapdesc {
    const char *name;
    uint32_t capacity;     /* a power of two, > max_entries */
    uint32_t max_entries;
    uint32_t nkeys;
    uint32_t key_size;
    uint32_t value_size;
    uint32_t entry_size;   /* 16 + key_size + value_size */
    uint32_t value_type;   /* enum pd_type */
    uint8_t key_types[PD_MAX_KEYS];
    const struct pd_statdesc *stat;
    uint32_t wrap;         /* `global a%`: a full array drops its oldest entry */
    uint32_t sized;        /* `global a[N]`: an overflow names N, else MAXMAPENTRIES */
};

/* struct pd_stat lives in the segment: pd_shm.h (shmlayout/globals.py). */

struct pd_statdesc {
    uint8_t hist_log;
    uint8_t hist_linear;
    int64_t lo, hi, step;
    uint8_t variance; /* @variance is read: keep the Welford state (two divisions a hit) */
    uint8_t shift;    /* @variance(s, N): the state kept in values << N, as stap does */
};

enum { PD_STAT_COUNT, PD_STAT_SUM, PD_STAT_MIN, PD_STAT_MAX, PD_STAT_AVG, PD_STAT_VARIANCE };

/* A long key's bytes: inline and general-regs-only, as FAST keyed adds build keys too. */
static inline PD_FAST_FN void pd_key_i64(uint8_t *slot, int64_t v) { __builtin_memcpy(slot, &v, 8); }
void pd_key_str(uint8_t *slot, const char *s);
void *pd_map_get(struct pd_ctx *c, uint8_t *map, const struct pd_mapdesc *d,
                 const uint8_t *key, int create);
/* `a[k] = v` of a long array, in a handler of many statements (one call, not an
 * inline lookup and store a statement): `where` names the array for an overflow. */
int64_t pd_map_set_i64(struct pd_ctx *c, uint8_t *map, const struct pd_mapdesc *d,
                       const uint8_t *key, int64_t v, const char *where);
void *pd_map_get_seq(struct pd_ctx *c, uint8_t *map, const struct pd_mapdesc *d,
                     const uint8_t *key, int create, uint64_t *seq_src);
uint8_t *pd_map_next(uint8_t *map, const struct pd_mapdesc *d, uint32_t *i);
/* An entry is a struct pd_map_ent (state, hash, seq), key, value: the seq before a key blob. */
#define PD_MAP_KEY_SEQ(key) ((uint64_t *)((key) - 8))
void pd_map_delete(uint8_t *map, const struct pd_mapdesc *d, const uint8_t *key);
void pd_map_clear(uint8_t *map, const struct pd_mapdesc *d);
/* Wildcard keys: `mask` has bit k set where key k is `*`.  Returns how many
 * entries match; with `remove`, deletes them. */
uint32_t pd_map_match(uint8_t *map, const struct pd_mapdesc *d, const uint8_t *key,
                      uint32_t mask, int remove);
int pd_map_entry_matches(const struct pd_mapdesc *d, const uint8_t *entry_key,
                         const uint8_t *key, uint32_t mask);
uint32_t pd_map_count(const uint8_t *map);
uint32_t pd_map_sorted(const uint8_t *map, const struct pd_mapdesc *d, uint8_t **out,
                       int column, int order);
PD_HIDDEN PD_FAST_FN void pd_stat_add(struct pd_stat *s, int64_t v, const struct pd_statdesc *d);
void pd_stat_merge(struct pd_stat *agg, const struct pd_stat *one, uint32_t nbuckets);
int64_t pd_stat_get(struct pd_ctx *c, const struct pd_stat *s, int what);
int64_t pd_stat_variance(struct pd_ctx *c, const struct pd_stat *s, int shift, int entry);
void pd_stat_emit_hist(struct pd_ctx *c, const struct pd_stat *s, const struct pd_statdesc *d,
                       uint32_t fmt_id);
char *pd_stat_sprint_hist(struct pd_ctx *c, char *dst, const struct pd_stat *s,
                          const struct pd_statdesc *d);

/* Per-thread statistic slots (pd_pstat.c): a statistic only ever added to takes
 * 1 + PD_PSTAT_SLOTS slots of PD_PSTAT_SLOT_SIZE bytes, a struct pd_pslot_head then a
 * struct pd_stat (pd_shm.h); `<<<` writes the thread's own slot without the globals lock,
 * reads merge them. */
void pd_pstat_setup(void);
void pd_pstat_add(struct pd_ctx *c, uint8_t *area, int64_t v, const struct pd_statdesc *d);
const struct pd_stat *pd_pstat_read(const uint8_t *area);
int pd_pslot_index(void);
int pd_slot_lock(struct pd_ctx *c, uint32_t *w);

/* Counter-only scalars (pd_counter.c): a base int64 (initial value, adds of threads
 * without a slot) and, from `area`, one block of `stride` bytes per statistic slot
 * 1..PD_PSTAT_SLOTS: a u32 sequence word (odd while an i386 owner writes both halves of
 * a value; 8 bytes with its padding), then every counter; reads sum base and slots. */
/* hidden: an i386 handler calling them sets up no GOT register (no PLT) */
PD_HIDDEN PD_FAST_FN void pd_counter_slow(struct pd_ctx *c, uint32_t base, uint32_t at,
                                          uint32_t area, uint32_t stride, int64_t v);
PD_HIDDEN PD_FAST_FN void pd_counter_wide(int64_t *blk, uint32_t at, int64_t v);
int64_t pd_counter_read(const uint8_t *globals, uint32_t base, uint32_t area, uint32_t at,
                        uint32_t stride);
#ifdef PD_ARCH_COUNTER_H
#include PD_ARCH_COUNTER_H /* PD_ARCH_COUNTER_SLOTS, pd_counter_slot_add */
#endif
/* x += v on counter `at` (its byte offset in a block): where the arch has slot blocks, a
 * plain add to the thread's own slot (pd_counter_slot_add: single writer, no lock
 * prefix); elsewhere the atomic add on the base. */
static inline PD_FAST_FN void pd_counter_add(struct pd_ctx *c, uint32_t base, uint32_t at,
                                             uint32_t area, uint32_t stride, int64_t v)
{
#ifdef PD_ARCH_COUNTER_SLOTS
    int64_t *s = c->cslot;
    if (PD_LIKELY((uintptr_t)s > 1)) {
        pd_counter_slot_add(s, at, v);
    } else {
        pd_counter_slow(c, base, at, area, stride, v); /* claims; without a slot: atomic */
    }
#else
    (void)at, (void)area, (void)stride;
    (void)__atomic_fetch_add((int64_t *)(c->globals + base), v, __ATOMIC_RELAXED);
#endif
}

/* Keyed statistics with per-thread tables (pd_kstat.c): `s[k] <<< v` takes only its
 * slot's lock; reads merge the slots.  The area is the merged map (agg, rebuilt by
 * pd_kstat_merge), a struct pd_kstat at kstat_off, then 1 + nslots slots of
 * slot_stride bytes: struct pd_kslot, then a pd_map of `slot` (compact values). */
struct pd_kstatdesc {
    const struct pd_mapdesc *agg;
    const struct pd_mapdesc *slot;
    uint32_t nslots;       /* per-thread slots; threads with a higher index share slot 0 */
    uint32_t nbuckets;     /* histogram buckets kept in a slot's values */
    uint32_t kstat_off;
    uint32_t slot_stride;
};
void pd_kstat_add(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                  const uint8_t *key, int64_t v);
const struct pd_stat *pd_kstat_get(struct pd_ctx *c, uint8_t *area,
                                   const struct pd_kstatdesc *kd, const uint8_t *key);
void pd_kstat_merge(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd);
void pd_kstat_delete(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                     const uint8_t *key);
void pd_kstat_clear(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd);
uint32_t pd_kstat_match(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                        const uint8_t *key, uint32_t mask, int remove);
struct pd_header *pd_segment_header(void); /* NULL when inert */

/* ---- regex sub-matches (pd_regex.c) ------------------------------------------ */
/* A pattern as the translator flattened its tree (launcher/translate/regex.py
 * _Program): the items of a concatenation are a chain linked by `next`; GROUP and REP
 * name their body's chain in `child`, ALT its alternatives' heads in alts[arg ..
 * arg + child).  Lengths are in bytes, PD_RE_INF: no bound. */
enum { PD_RE_SET = 1, PD_RE_BOL, PD_RE_EOL, PD_RE_GROUP, PD_RE_ALT, PD_RE_REP };
#define PD_RE_INF 0xFFFF
struct pd_re_node {
    uint8_t op;          /* PD_RE_* */
    uint16_t arg;        /* SET: its set; GROUP: its number; ALT: its first alternative */
    int16_t next;        /* the chain's next node, -1 at its end */
    int16_t child;       /* GROUP, REP: the body's chain (-1: empty); ALT: how many */
    uint16_t lo, hi;     /* REP: how many times */
    uint16_t min, max;   /* the lengths the node matches */
    uint16_t rmin, rmax; /* the lengths the chain from it on matches */
};
struct pd_re_prog {
    const struct pd_re_node *nodes;
    const uint8_t (*sets)[32];   /* byte bitmaps */
    const int16_t *alts;
    const uint16_t (*next)[256]; /* the anchored DFA: the leftmost-longest match's span */
    const uint8_t *flags;        /* per state: 1 matched, 2 matched at the end, 4 dead */
    uint16_t later;              /* its start state for a match not at byte 0 */
    int16_t root;                /* the pattern's chain (-1: empty pattern) */
    uint16_t ngroups;            /* groups + 1: matched(0) is the whole match */
};
/* What the handler's last `=~` left: the pattern, whether it matched, a copy of the
 * string and, once matched()/ngroups() asked, each group's [start, end) (-1: unset). */
struct pd_match {
    const struct pd_re_prog *prog;  /* NULL: no `=~` yet in this handler */
    int32_t *caps;                  /* 2 * prog->ngroups: the handler's buffer */
    int32_t len;
    uint8_t result, solved;
    char str[MAXSTRINGLEN];
};
void pd_re_attempt(struct pd_ctx *c, const struct pd_re_prog *p, const char *s, int64_t matched);
char *pd_re_matched(struct pd_ctx *c, char *dst, int64_t n);
int64_t pd_re_ngroups(struct pd_ctx *c);

/* ---- strings --------------------------------------------------------------- */
char *pd_strcpy(char *dst, const char *src);
char *pd_concat(char *dst, const char *a, const char *b);
char *pd_sprintf(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *pd_user_string(struct pd_ctx *c, char *dst, int64_t addr, int64_t maxlen);
char *pd_long_to_str(char *dst, int64_t v);
int64_t pd_str_to_long(const char *s);
int64_t pd_gettime_ns(int clock_realtime);
char *pd_substr(char *dst, const char *s, int64_t start, int64_t len);
char *pd_str_replace(char *dst, const char *s, const char *from, const char *to);
int64_t pd_user_read(struct pd_ctx *c, int64_t addr, unsigned size, int is_signed);
int64_t pd_user_read_or0(int64_t addr, unsigned size, int is_signed);
void pd_warn_probe(struct pd_ctx *c, const char *msg);
void pd_system(struct pd_ctx *c, const char *cmd);
void pd_follow_init(void);
void pd_altstack_init(void); /* pd_altstack.c: per-thread signal stacks */
void pd_fire_thread_probes(uint32_t kind);  /* pd_registry.c: PD_PROBE_THREAD_* in this thread */
/* pd_pstack.c: the trampolines' private per-thread stacks. */
void pd_pstack_init(void);
struct sigaction;
/* The next sigaction, not pd_pstack.c's (found in the constructor: async-signal-safe). */
typedef int (*pd_sigaction_fn)(int, const struct sigaction *, struct sigaction *);
pd_sigaction_fn pd_real_sigaction(void);
/* pd_sigend.c: process.end for a process a fatal signal ends. */
void pd_sigend_init(void);
int pd_sigend_fatal(int sig);
void pd_sigend_take(int sig, int siginfo);
int pd_sigend_is(const struct sigaction *sa);
void pd_sigend_view(int sig, struct sigaction *old);
void pd_pstack_set(uintptr_t lo, uintptr_t hi);
extern __thread uintptr_t pd_ps_save __attribute__((visibility("hidden")));
extern int pd_ps_enabled;
extern int32_t pd_ps_top_off, pd_ps_save_off;
/* Attaching to and detaching from a running process (pydyn -x, pd_attach.c). */
int pd_session_attach(const char *name);
uint32_t pd_disarm_all(uint32_t *bytes, uint32_t *semas);
void pd_go_inert(void);
char *pd_text_str(char *dst, const char *s, int64_t max, int quoted);
char *pd_text_buf(char *dst, const char *s, size_t n, int64_t max, int quoted);
char *pd_user_string_utf(struct pd_ctx *c, char *dst, int64_t addr, int width);
char *pd_user_buffer_quoted(struct pd_ctx *c, char *dst, int64_t addr, int64_t inlen,
                            int64_t outlen, int raise);
char *pd_user_string_safe(struct pd_ctx *c, char *dst, int64_t addr, int64_t maxlen,
                          const char *fallback);
char *pd_tokenize(char *dst, const char *s, const char *delim);
/* pd_tapset.c: stap's tapset functions that need C */
int64_t pd_strtol(const char *s, int64_t base);
int64_t pd_stringat(struct pd_ctx *c, const char *s, int64_t pos);
int64_t pd_strpos(const char *s1, const char *s2);
int64_t pd_randint(struct pd_ctx *c, int64_t n);
char *pd_ctime(struct pd_ctx *c, char *dst, int64_t secs);
char *pd_errno_str(char *dst, int64_t err);
int64_t pd_errno_p(int64_t err);
int64_t pd_returnval(struct pd_ctx *c);
char *pd_returnstr(struct pd_ctx *c, char *dst, int64_t format);
int pd_user_read_ok(struct pd_ctx *c, int64_t addr);
/* Guru mode (-g) set_user_*: writes into the target, a bad address is an error. */
int64_t pd_set_user(struct pd_ctx *c, int64_t addr, int64_t value, unsigned size);
int64_t pd_set_user_string(struct pd_ctx *c, int64_t addr, const char *s);
/* Guru mode's writes to target variables: a bitfield in memory, a variable where its
 * location puts it (a register of the saved context, or memory), $return. */
int64_t pd_set_user_bits(struct pd_ctx *c, int64_t addr, unsigned size, unsigned shift,
                         unsigned width, int64_t v);
int64_t pd_store_arg(struct pd_ctx *c, unsigned index, int64_t v);
int64_t pd_set_return(struct pd_ctx *c, int64_t v);
/* `old` with its `width` bits from bit `shift` replaced by the low bits of v. */
static inline uint64_t pd_merge_bits(uint64_t old, uint64_t v, unsigned shift, unsigned width)
{
    uint64_t mask = (width >= 64 ? ~0ull : (1ull << width) - 1) << shift;
    return (old & ~mask) | ((v << shift) & mask);
}
/* stap's floatingpoint tapset (pd_fp.c) */
int64_t pd_fp_op(int64_t a, int64_t b, char op);
int64_t pd_fp32_to_fp64(int64_t v);
int64_t pd_long_to_fp(int64_t v);
int64_t pd_fp_sqrt(int64_t v);
int64_t pd_fp_to_long(int64_t v, int64_t mode);
int64_t pd_string_to_fp(struct pd_ctx *c, const char *s);
char *pd_fp_to_string(char *dst, int64_t v, int64_t precision);
void pd_sf_lit(char *dst, const char *s);
int64_t pd_sf_clamp(int64_t v);
void pd_sf_num(char *dst, int64_t num, char conv, char flag, int64_t size, int64_t precision);
void pd_sf_str(char *dst, const char *s, char flag, int64_t width, int64_t precision);
void pd_sf_chr(char *dst, int64_t v, char flag, int64_t width);

#define PD_G_I64(c, off) (*(volatile int64_t *)((c)->globals + (off)))

/* A statement: count it against MAXACTION.  As stap's actionremaining, the budget
 * running out is the error: the statement that reaches MAXACTION fails. */
#define PD_ACTION(c, where_)                                                  \
    do {                                                                      \
        (c)->where = (where_);                                                \
        if (PD_UNLIKELY(--(c)->actions <= 0)) {                               \
            pd_error((c), "MAXACTION exceeded");                             \
        }                                                                     \
    } while (0)
/* PD_ACTION out of line: what a handler of many statements uses (the translator's
 * OUTLINE_STATEMENTS), whose size gcc's time grows faster than with. */
void pd_action(struct pd_ctx *c, const char *where);
/* PD_ACTION as FAST handler statement n_ (1, 2, ...; a FAST handler has no loop): no
 * call, no store while within MAXACTION -- c->actions is the budget, never counted
 * down -- and `where` (c->probe->where[n_ - 1]) is only stored when the statement
 * fails.  Every runner of a FAST handler sets c->probe. */
#define PD_ACTION_FAST(c, n_)                                                 \
    do {                                                                      \
        if (PD_UNLIKELY((c)->actions <= (n_))) {                              \
            (c)->where = (c)->probe->where[(n_) - 1];                         \
            (c)->error = PD_ERROR_DEFERRED;                                   \
        }                                                                     \
    } while (0)

#include "pd_fast.h"

#endif
