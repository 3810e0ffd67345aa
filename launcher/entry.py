"""`@entry(expr)` in function `.return` probes.

The translator gives a return probe that uses `@entry` a hidden entry handler
on the same sites (`probe_N_entry`): it evaluates each `@entry` operand with
the entry's registers and pushes the values, keyed by the return-address slot
(the stack pointer at the entry), on a per-thread stack of the module.  The
return handler pops the frame whose slot is just below its stack pointer
before its body runs; `@entry(x)` reads the popped value.

The slot is the stack pointer at the entry and, at a return, the stack pointer less a
word (pd_func.c shows a patched exit's registers as after the `ret`, as a hijacked
return's), so `@entry` works with either way of reaching returns.  The helpers are
general-regs-only, with no libc call but the stack's first mapping (through
pd_xmm_call): FAST handlers (translate/fast.py) push and pop too.

Frames are LIFO like pd_func.c's shadow stack: recursion and tail calls (the
same slot, pushed again) match in order; frames below a new entry's or a
returning frame's slot were left by `longjmp` and are dropped.  A return
whose entry values are missing (its entry was skipped: reentrancy, the stack
full) does not run and is counted as a skipped probe.

A probe inside a function (a statement, a label) reading a variable DWARF gives
as a register's value at the entry (`DW_OP_entry_value`) has a hidden entry
handler too: it keeps the registers (`pd_entry_keep`: the call's frame is
replaced, not pushed, as its slot's earlier call has returned whether or not a
return probe saw it), and the probe finds them again by the return-address
slot its CFA names (`pd_entry_peek`, the frame stays for the call's next hits).
Where none is found the read is "not accessible at this address".
"""

from __future__ import annotations


def helpers_c(nvals: int) -> list[str]:
    """The per-thread stack of entry values; `nvals` values a frame at most."""
    return f"""#include <pthread.h>
#include <sys/mman.h>
#define PD_ENTRY_VALS {nvals}
#define PD_ENTRY_MAX 65536u /* frames per thread (the mapping is touched lazily) */
struct pd_entry_frame {{ uintptr_t at; uint32_t probe; int64_t v[PD_ENTRY_VALS]; }};
/* the frames, their count and whether mapping them failed are the FAST TLS block's
 * (c->tls: no TLS descriptor call on the FAST path; pd_in_handler elsewhere) */
static pthread_key_t pd_ent_key;
static pthread_once_t pd_ent_once = PTHREAD_ONCE_INIT;
static void pd_ent_free(void *p)
{{
    munmap(p, PD_ENTRY_MAX * sizeof(struct pd_entry_frame));
    pd_in_handler.ent = NULL;
    pd_in_handler.ent_n = 0;
}}
static void pd_ent_key_init(void) {{ pthread_key_create(&pd_ent_key, pd_ent_free); }}
/* frames below `at` belong to calls that longjmp left: their returns never come */
static inline PD_FAST_FN uint32_t pd_ent_drop_below(const struct pd_entry_frame *ent, uint32_t n,
                                                   uintptr_t at)
{{
    while (n > 0 && ent[n - 1].at < at)
        n--;
    return n;
}}
static uintptr_t pd_ent_alloc(uintptr_t a, uintptr_t b, uintptr_t cc, uintptr_t d)
{{
    (void)b, (void)cc, (void)d;
    struct pd_fast_tls *t = (struct pd_fast_tls *)a;
    t->ent_failed = 1; /* until the mapping exists: a probed mmap must not recurse */
    void *m = mmap(NULL, PD_ENTRY_MAX * sizeof(struct pd_entry_frame),
                   PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
        return 0;
    pthread_once(&pd_ent_once, pd_ent_key_init);
    pthread_setspecific(pd_ent_key, m);
    t->ent = m;
    t->ent_failed = 0;
    return 0;
}}
/* `keep`: replace the frame this probe has for the same slot (a call that returned) */
static PD_FAST_FN void pd_entry_save(struct pd_ctx *c, uint32_t probe, const int64_t *v,
                                     int keep)
{{
    struct pd_fast_tls *t = c->tls;
    if (PD_UNLIKELY(!t->ent) && !t->ent_failed)
        pd_xmm_call(pd_ent_alloc, (uintptr_t)t, 0, 0, 0);
    struct pd_entry_frame *ent = t->ent;
    uintptr_t at = (uintptr_t)c->regs->r[PD_DWARF_SP]; /* the return-address slot */
#if defined(__aarch64__) /* the return address is in x30: pd_func.c's slot is sp - 8 */
    at -= sizeof(pd_ureg);
#endif
    if (PD_UNLIKELY(!ent))
        return; /* the return finds no frame: skipped, counted */
    uint32_t n = pd_ent_drop_below(ent, t->ent_n, at);
    t->ent_n = n;
    for (uint32_t k = n; keep && k > 0 && ent[k - 1].at == at; k--)
        if (ent[k - 1].probe == probe) {{
            for (unsigned i = 0; i < PD_ENTRY_VALS; i++)
                ent[k - 1].v[i] = v[i];
            return;
        }}
    if (n >= PD_ENTRY_MAX)
        return;
    struct pd_entry_frame *f = &ent[n];
    f->at = at;
    f->probe = probe;
    for (unsigned i = 0; i < PD_ENTRY_VALS; i++)
        f->v[i] = v[i];
    __asm__ volatile("" ::: "memory"); /* filled before a signal handler can see it */
    t->ent_n = n + 1;
}}
static PD_FAST_FN void pd_entry_push(struct pd_ctx *c, uint32_t probe, const int64_t *v)
{{
    pd_entry_save(c, probe, v, 0);
}}
/* The registers at the entry, by DWARF number (pd_ctx.entry_regs) */
static void pd_entry_keep(struct pd_ctx *c, uint32_t probe)
{{
    int64_t v[PD_ENTRY_VALS] = {{0}};
    for (int r = 0; r < PD_NREGS && r < PD_ENTRY_VALS; r++)
        v[r] = (int64_t)pd_reg(c->regs, r);
    pd_entry_save(c, probe, v, 1);
}}
/* `at`: the return-address slot of the running call, from the CFA at the probe */
static const int64_t *pd_entry_peek(uint32_t probe, uintptr_t at)
{{
    struct pd_fast_tls *t = &pd_in_handler;
    const struct pd_entry_frame *ent = t->ent;
    if (!ent)
        return NULL;
    uint32_t n = t->ent_n = pd_ent_drop_below(ent, t->ent_n, at);
    for (uint32_t k = n; k > 0 && ent[k - 1].at == at; k--)
        if (ent[k - 1].probe == probe)
            return ent[k - 1].v;
    return NULL;
}}
static PD_FAST_FN int pd_entry_pop(struct pd_ctx *c, uint32_t probe, int64_t *v)
{{
    uintptr_t at = (uintptr_t)c->regs->r[PD_DWARF_SP] - sizeof(pd_ureg);
    struct pd_fast_tls *t = c->tls;
    struct pd_entry_frame *ent = t->ent;
    if (PD_UNLIKELY(!ent))
        return 0;
    uint32_t n = pd_ent_drop_below(ent, t->ent_n, at);
    t->ent_n = n;
    for (uint32_t k = n; k > 0 && ent[k - 1].at == at; k--) {{
        if (ent[k - 1].probe != probe)
            continue; /* another probe's frame for the same call */
        for (unsigned i = 0; i < PD_ENTRY_VALS; i++)
            v[i] = ent[k - 1].v[i];
        for (uint32_t j = k; j < n; j++) {{ /* not memmove: libc's uses xmm */
            ent[j - 1].at = ent[j].at;
            ent[j - 1].probe = ent[j].probe;
            for (unsigned i = 0; i < PD_ENTRY_VALS; i++)
                ent[j - 1].v[i] = ent[j].v[i];
            __asm__ volatile("" ::: "memory");
        }}
        t->ent_n = n - 1;
        return 1;
    }}
    return 0;
}}
""".splitlines()


def pop_c(probe: int, label: str = "out") -> list[str]:
    return [f"    if (!pd_entry_pop(c, {probe}, ent_)) {{ pd_count_skipped(1); goto {label}; }}"]


def peek_c(probe: int, at_c: str) -> list[str]:
    """A probe inside a function: the registers its call's entry kept (`at_c`: the
    return-address slot, from the CFA at the site)."""
    return [f"    c->entry_regs = pd_entry_peek({probe}, (uintptr_t)({at_c}));"]
