/* x86 trampolines (x86-64 and i386), written at run time as machine code: the
 * stubs, the jumps into them, and the branches redirected into them.
 *
 * A site becomes a `jmp rel32` to its stub; the stub
 *   - switches to the thread's private stack (pd_switch_stack, pd_pstack.c), or where
 *     it has none (or under -x) skips the red zone of its own (x86-64: 128 bytes),
 *     reserves a struct pd_regs (DWARF order, exactly what the trap fills: ip = the
 *     site, sp = the original stack pointer) plus one word for the flags (lahf/seto,
 *     no pushf/popf),
 *   - aligns the stack, clears DF; saves the vector registers only with
 *     pd_xmm_always (-x attach): the C it calls is general-regs-only and leaves
 *     through pd_xmm_call for any probe not FAST (PD_TRAMP_SAVE_XMM=0: never saved),
 *   - calls pd_tramp_entry(regs, site, bias) -> pd_run (reentrancy guard and all),
 *   - gives the private stack back, restores flags (add $0x7f,%al; sahf), every
 *     general register from the pd_regs (a guru-mode handler may have written one:
 *     `$var = v` of a variable in a register) and the site's stack pointer,
 *   - runs the plan's relocated instructions and jumps back to plan.resume.
 * DF is not restored (C code at a USDT site always runs with DF=0).
 * The register-saving parts differ per arch: pd_stub_frame and pd_fast_frame in
 * x86_64/x86_64_stub.c and i386/i386_stub.c; the rest is here.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pd_internal.h"
#include "pd_tramp.h"

/* 0: the stubs save no vector register (the C they call is general-regs-only); 1 once
 * pd_attach.c joins under -x, where a TLS descriptor may call malloc. */
int pd_xmm_always;

unsigned pd_stub_code_off;
unsigned pd_stub_store_off;
unsigned pd_stub_sp_delta;

/* ---- the emitter (tramp.h) ---------------------------------------------------- */

void pd_e(struct pd_emit *e, const char *bytes, unsigned n)
{
    if (e->p + n <= e->end)
        memcpy(e->p, bytes, n);
    e->p += n;
}
void pd_e8(struct pd_emit *e, uint8_t b) { pd_e(e, (const char *)&b, 1); }
void pd_e32(struct pd_emit *e, uint32_t v) { pd_e(e, (const char *)&v, 4); }
void pd_e64(struct pd_emit *e, uint64_t v) { pd_e(e, (const char *)&v, 8); }

void pd_e_sp(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off)
{
    if (rex)
        pd_e8(e, rex);
    pd_e8(e, op);
    if (off == 0) {
        pd_e8(e, (uint8_t)(((reg & 7) << 3) | 4));
        pd_e8(e, 0x24);
    } else if (off >= -128 && off < 128) {
        pd_e8(e, (uint8_t)(0x40 | ((reg & 7) << 3) | 4));
        pd_e8(e, 0x24);
        pd_e8(e, (uint8_t)off);
    } else {
        pd_e8(e, (uint8_t)(0x80 | ((reg & 7) << 3) | 4));
        pd_e8(e, 0x24);
        pd_e32(e, (uint32_t)off);
    }
}

void pd_e_xmm(struct pd_emit *e, int store, int n, int32_t off)
{
    pd_e8(e, 0x66);
    if (n >= 8)
        pd_e8(e, 0x44);
    pd_e8(e, 0x0f);
    pd_e_sp(e, 0, store ? 0x7f : 0x6f, n, off);
}

static int pd_fits_rel32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

int pd_put_rel32(uint8_t *field, uintptr_t anchor, uintptr_t target)
{
    int64_t d = (int64_t)((intptr_t)target - (intptr_t)anchor);
    if (sizeof(void *) == 4)
        d = (int32_t)(uint32_t)d; /* wraps modulo 2^32: everything is reachable */
    if (!pd_fits_rel32(d))
        return -1;
    int32_t v = (int32_t)d;
    memcpy(field, &v, 4);
    return 0;
}

/* Whether the site's `jmp rel32` reaches the stub (i386: everything does). */
int pd_stub_reaches(uintptr_t site, uintptr_t stub)
{
    return sizeof(void *) == 4 || pd_fits_rel32((int64_t)((intptr_t)stub - (intptr_t)(site + 5)));
}

/* Where byte `off` of a plan's relocated code is in its stub: before plan.pre at
 * PD_STUB_PRE, the rest at pd_stub_code_off.  `pre_side`: of a fixup, the side of its
 * field (its anchor may be plan.pre itself). */
static uint8_t *pd_stub_at(uintptr_t stub, const struct pd_plan *p, unsigned off, int pre_side)
{
    return (uint8_t *)(pre_side ? stub + PD_STUB_PRE + off : stub + pd_stub_code_off + off - p->pre);
}

/* Where a branch to the instruction at code offset `off` goes: the exit itself (plan.pre)
 * through the handler, at the stub's start. */
static uintptr_t pd_stub_dest(uintptr_t stub, const struct pd_plan *p, unsigned off)
{
    if (p->pre && off == p->pre)
        return stub;
    return (uintptr_t)pd_stub_at(stub, p, off, off < p->pre);
}

/* Where the site's jump enters its stub: an exit's instructions before it, a bare entry's
 * relocated code (it runs no probe), else the frame. */
uintptr_t pd_stub_start(uintptr_t stub, const struct pd_site *site)
{
    if (site->fx & PD_FX_BARE)
        return stub + pd_stub_code_off;
    return site->plan.pre ? stub + PD_STUB_PRE : stub;
}

/* Writes relocated code offsets [from, to) of `plan` with their fixups into the stub at
 * `stub` (pd_stub_code_off set); -1 if an operand does not reach. */
int pd_stub_code(uintptr_t stub, const struct pd_plan *plan, unsigned from, unsigned to,
                 uintptr_t bias)
{
    const int pre_side = from < plan->pre;
    memcpy(pd_stub_at(stub, plan, from, pre_side), plan->code + from, to - from);
    for (unsigned i = 0; i < plan->nfixups; i++) {
        const struct pd_fixup *f = &plan->fixups[i];
        uint64_t t = (uint64_t)bias + f->target;
        if (f->at < from || f->at >= to)
            continue;
        uint8_t *field = pd_stub_at(stub, plan, f->at, pre_side);
        if (f->kind == PD_FIX_REL32) {
            if (pd_put_rel32(field, (uintptr_t)pd_stub_at(stub, plan, f->anchor, pre_side),
                             (uintptr_t)t) != 0)
                return -1;
        } else {
            uint32_t v = f->kind == PD_FIX_ABS32HI ? (uint32_t)(t >> 32) : (uint32_t)t;
            memcpy(field, &v, 4);
        }
    }
    return 0;
}

/* PD_FAST_FN: the x86-64 stub saves no vector register (unless pd_xmm_always); a
 * probe that may use them runs through pd_xmm_call (pd_run_probe). */
static PD_FAST_FN void pd_tramp_fire(struct pd_regs *regs, const struct pd_site *site,
                                     uintptr_t bias)
{
    if (site->nentry + site->nreturn + site->nshared) /* a function entry, or rows sharing */
        pd_func_fire(regs, site, bias);                   /* one address (pd_func.c) */
    else
        pd_run_probe(&pd_probes[site->probe], site, regs, bias);
}

/* The arithmetic flags from the stub's word: lahf in bits 8-15, seto in bit 0. */
static inline __attribute__((always_inline)) PD_FAST_FN void pd_stub_flags(struct pd_regs *regs)
{
    pd_ureg raw = *(const pd_ureg *)(regs + 1);
    regs->flags = ((raw >> 8) & 0xd5) | ((raw & 1) << 11) | 0x2;
}

PD_FAST_FN void pd_tramp_entry(struct pd_regs *regs, const struct pd_site *site, uintptr_t bias)
{
    if (site->nentry + site->nreturn) { /* a function entry (register("eflags") reads them) */
        pd_stub_flags(regs);
        pd_func_fire(regs, site, bias);
        return;
    }
    const struct pd_probe *p = &pd_probes[site->probe];
    if (PD_LIKELY((p->locks & (PD_PROBE_FAST | PD_PROBE_REGS)) == PD_PROBE_FAST &&
                  !site->nshared)) {
        pd_fast_mark(p, &pd_fenv); /* reads no register: flags left unconverted */
        return;
    }
    pd_stub_flags(regs);
    pd_tramp_fire(regs, site, bias);
}

/* ---- a site whose stack pointer is garbage ------------------------------------
 * The stub's first write is to the stack below the site's sp.  If that faults (sp
 * unmapped: hand-written assembly, or a stack overflowing), the SIGSEGV handler below
 * -- on the thread's pd_altstack.c signal stack -- runs the probe from the signal
 * context, as a trap would, and resumes the stub at its relocated instructions with
 * every register as the site had it.  Other faults go to the handler that was there. */

static struct sigaction pd_prev_sigsegv;

static void pd_stub_fault(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    uintptr_t at = pd_uc_get_ip(uc) - pd_stub_store_off;
    const struct pd_armed *a = NULL;
    for (uint32_t i = 0; i < pd_armed_cap && !a; i++)
        if (pd_armed[i].addr > PD_ARMED_DEAD && pd_armed[i].stub == at)
            a = &pd_armed[i];
    if (!a) {
        if (pd_prev_sigsegv.sa_flags & SA_SIGINFO && pd_prev_sigsegv.sa_sigaction)
            pd_prev_sigsegv.sa_sigaction(sig, si, ucv);
        else if (pd_prev_sigsegv.sa_handler != SIG_DFL && pd_prev_sigsegv.sa_handler != SIG_IGN)
            pd_prev_sigsegv.sa_handler(sig);
        else
            signal(SIGSEGV, SIG_DFL); /* the instruction faults again, fatally */
        return;
    }
    greg_t *sp = &uc->uc_mcontext.gregs[pd_gregs_by_dwarf[PD_DWARF_SP]];
    greg_t *cx = &uc->uc_mcontext.gregs[pd_gregs_by_dwarf[PD_DWARF_CX]];
    if (pd_stub_private_stack()) { /* pd_switch_stack's own path: rcx holds the site's sp */
        *sp = *cx;
        *cx = (greg_t)pd_ps_save;  /* and SAVE the site's rcx */
    } else {
        *sp += (greg_t)pd_stub_sp_delta;
    }
    struct pd_regs regs;
    pd_regs_from_ucontext(&regs, uc);
    regs.r[PD_DWARF_IP] = (pd_ureg)a->addr;
    pd_tramp_fire(&regs, a->site, a->bias);
    pd_regs_to_ucontext(uc, &regs);
    pd_uc_set_ip(uc, a->stub + pd_stub_code_off);
}

static void pd_install_stub_fault_handler(void)
{
    static int installed;
    if (installed++)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pd_stub_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &pd_prev_sigsegv);
}

/* ---- the switch to the thread's private stack (pd_pstack.c) -------------------- */

/* Whether stubs switch stacks; fixed once the first stub is written (pd_stub_fault
 * and the store offsets below are the same for every stub). */
int pd_stub_private_stack(void)
{
    static int ps = -1;
    if (ps < 0)
        ps = PD_PRIVATE_STACK && pd_ps_enabled && !pd_xmm_always;
    return ps;
}

/* The stub's first instructions: the stack pointer becomes the private stack's top
 * less two words, [sp] = the site's sp, [sp + W] = what TOP gets back at the end (the
 * top; 0 on the own-stack path), with no flag and no register changed.  TOP == 0 (in
 * use: a nested hit; or none: a thread pd_altstack.c did not equip): the thread's own
 * stack below the red zone instead, rounded down to 256 bytes by `movb $0,%cl` (no
 * flag changes, and the body needs no `and`: sp is 16-aligned on both paths).  Its
 * first store is where pd_stub_fault catches a garbage sp, which is then in rcx.
 * Signals between these instructions: pd_pstack.c's pd_sig_wrap. */
void pd_switch_stack(struct pd_emit *e, const uint8_t *at)
{
    const int w = (int)sizeof(void *), rz = sizeof(void *) == 8 ? 128 : 0;
    const uint8_t rex = w == 8 ? 0x48 : 0;
    pd_e_tls(e, rex, 0x89, 1, pd_ps_save_off);                 /* mov %rcx,SAVE */
    pd_e_tls(e, rex, 0x8b, 1, pd_ps_top_off);                  /* mov TOP,%rcx */
    pd_e8(e, 0xe3);                                            /* jrcxz own */
    uint8_t *own = e->p;
    pd_e8(e, 0);
    pd_e_tls(e, rex, 0xc7, 0, pd_ps_top_off);                  /* movq $0,TOP: claimed */
    pd_e32(e, 0);
    if (w == 8)
        pd_e(e, "\x48\x89\x49\xf8\x48\x89\x61\xf0\x48\x8d\x61\xf0", 12);
    else /* mov %rcx,-W(%rcx); mov %rsp,-2W(%rcx); lea -2W(%rcx),%rsp */
        pd_e(e, "\x89\x49\xfc\x89\x61\xf8\x8d\x61\xf8", 9);
    pd_e8(e, 0xeb);                                            /* jmp body */
    uint8_t *body = e->p;
    pd_e8(e, 0);
    *own = (uint8_t)(e->p - own - 1);
    pd_e_sp(e, rex, 0x8d, 1, -(rz + 2 * w));                   /* lea -(rz+2W)(%rsp),%rcx */
    pd_e(e, "\xb1\x00", 2);                                    /* movb $0,%cl */
    if (rex)
        pd_e8(e, rex);
    pd_e(e, "\x87\xcc", 2);                                    /* xchg %rcx,%rsp */
    pd_stub_store_off = (unsigned)(e->p - at);
    pd_e_sp(e, rex, 0x89, 1, 0);                               /* mov %rcx,(%rsp) */
    pd_e_sp(e, rex, 0xc7, 0, w);                               /* movq $0,W(%rsp) */
    pd_e32(e, 0);
    *body = (uint8_t)(e->p - body - 1);
    pd_e_tls(e, rex, 0x8b, 1, pd_ps_save_off);                 /* mov SAVE,%rcx */
}

/* A FAST probe's site: after pd_switch_stack, a body that saves only what C
 * may clobber (and the flags), calls pd_fast_mark(probe, &pd_fenv) -- a FAST handler
 * that reads no register needs no pd_regs -- or, for one whose one register is sp
 * (PD_PROBE_SP), pd_fast_sp(probe, site, sp, bias), and jumps to the relocated
 * code, which stays where the full body put it (pd_stub_code_off is the same in every
 * stub).  Written over the full body, between `at` and `code`. */
static int pd_write_fast_body(uint8_t *at, uint8_t *code, const struct pd_probe *p,
                              const struct pd_site *site, uintptr_t bias)
{
    struct pd_emit em = {at, code}, *e = &em;
    /* a function entry's FAST probe: pd_func_fire_sp, which also hooks the return */
    const int fn = site->nentry + site->nreturn != 0;
    const int sp = !fn && (p->locks & PD_PROBE_SP);
    const uintptr_t target = fn ? (uintptr_t)pd_func_fire_sp
                                : sp ? (uintptr_t)pd_fast_sp : (uintptr_t)pd_fast_mark;
    /* the second argument: the site, or for pd_fast_mark(probe, env) the FAST env */
    const uintptr_t arg2 = fn || sp ? (uintptr_t)site : (uintptr_t)&pd_fenv;
    pd_fast_frame(e, p, site, bias, fn || sp, target, arg2);
    pd_e8(e, 0xe9);                                            /* jmp code */
    pd_e32(e, 0);
    if (e->p > e->end)
        return -1;
    return pd_put_rel32(e->p - 4, (uintptr_t)e->p, (uintptr_t)code);
}

/* Writes the stub for `site` at `at` (PD_STUB_SIZE bytes).  Returns its length, or -1
 * if a jump or relocated operand does not reach from there. */
int pd_write_stub(uint8_t *at, const struct pd_site *site, uintptr_t bias)
{
    struct pd_emit em = {at, at + PD_STUB_PRE}, *e = &em;
    const struct pd_plan *plan = &site->plan;
    const int ps = pd_stub_private_stack();
    /* a row run as a mark's whose probe is FAST and reads registers: straight to its
     * runner, which needs no flags and no dispatch (pd_tramp_entry's) */
    const int bare = site->fx & PD_FX_BARE;
    const struct pd_probe *one = bare || site->nentry + site->nreturn + site->nshared
        ? NULL : &pd_probes[site->probe];
    const uint32_t fr = PD_PROBE_FAST | PD_PROBE_REGS;
    uintptr_t target = one && (one->locks & fr) == fr ? (uintptr_t)pd_fast_regs
                                                     : (uintptr_t)pd_tramp_entry;
    uint8_t *body = pd_stub_frame(e, at, site, bias, ps, target);
    /* the displaced instructions, relocated (a function exit's: those from the exit on) */
    uint8_t *code = e->p;
    pd_stub_code_off = (unsigned)(code - at);
    if (bare) /* entered at its code (pd_stub_start): a frame run by mistake traps */
        memset(at, 0xcc, (size_t)(code - at));
    e->p += plan->code_len - plan->pre;
    if (e->p > e->end || pd_stub_code((uintptr_t)at, plan, plan->pre, plan->code_len, bias) != 0)
        return -1;
    if (plan->pre) { /* the exit's instructions before it, then the stub's start */
        uint8_t *jmp = at + PD_STUB_PRE + plan->pre;
        if (plan->pre + 5 > PD_STUB_ENTRY - PD_STUB_PRE ||
            pd_stub_code((uintptr_t)at, plan, 0, plan->pre, bias) != 0)
            return -1;
        *jmp = 0xe9;
        if (pd_put_rel32(jmp + 1, (uintptr_t)(jmp + 5), (uintptr_t)at) != 0)
            return -1;
    }
    pd_e8(e, 0xe9);                                            /* jmp resume */
    uint8_t *field = e->p;
    pd_e32(e, 0);
    if (e->p > e->end)
        return -1;
    if (pd_put_rel32(field, (uintptr_t)e->p, bias + (uintptr_t)plan->resume) != 0)
        return -1;
    const uint32_t fast = one ? one->locks & (fr | PD_PROBE_SP) : 0;
    const struct pd_probe *probe = !one ? pd_func_fast_probe(site)
        : fast == PD_PROBE_FAST || fast == (fr | PD_PROBE_SP) ? one : NULL;
    if (ps && probe && !bare && pd_write_fast_body(body, code, probe, site, bias) != 0)
        return -1;
    return (int)(e->p - at);
}

/* ---- patching a site ---------------------------------------------------------- */

static const uint8_t *pd_patch_src; /* what pd_write_tail copies (constructor time) */
static unsigned pd_patch_n;
static uint8_t pd_patch_first;

static void pd_write_tail(uint8_t *at) { memcpy(at, pd_patch_src, pd_patch_n); }
static void pd_write_first(uint8_t *at) { __atomic_store_n(at, pd_patch_first, __ATOMIC_RELEASE); }

/* int3 at pc first (a thread arriving meanwhile traps and is sent to the stub), then
 * bytes 1..len-1 (rel32, int3 filler), then the jmp opcode: no thread ever runs a torn
 * instruction. */
int pd_install_jump(uintptr_t addr, unsigned len, int prot, uintptr_t stub)
{
    uint8_t tail[16];
    if (len < 2 || len > sizeof tail + 1)
        return -1;
    memset(tail, 0xcc, sizeof tail);
    if (len < 5) { /* jmp rel8 to the island (or its hop) that reaches the stub */
        uintptr_t entry;
        memcpy(&entry, (const void *)(stub + PD_STUB_ENTRY), sizeof entry);
        intptr_t d = (intptr_t)entry - (intptr_t)(addr + 2);
        if (!entry || d < -128 || d > 127)
            return -1;
        tail[0] = (uint8_t)(int8_t)d;
    } else {
        int32_t rel = (int32_t)(stub - (addr + 5));
        memcpy(tail, &rel, 4);
    }
    if (pd_patch(addr, PD_TRAP_LEN, prot, pd_write_trap) != 0)
        return -1;
    pd_patch_src = tail;
    pd_patch_n = len - 1;
    if (pd_patch(addr + 1, len - 1, prot, pd_write_tail) != 0)
        return -1;
    pd_patch_first = len < 5 ? 0xeb : 0xe9;
    return pd_patch(addr, 1, prot, pd_write_first);
}

/* ---- branches into windows (plan/x86.py Redirect, plan.bounds, plan.island) ---------- */

/* Code outside the site windows that pd_tramp_link_code rewrote (redirected branches, islands
 * of dead padding), with its original bytes, so that a detach (pd_disarm_all) can give
 * the process back its code byte for byte. */
struct pd_link_undo {
    uintptr_t at, bias;
    uint32_t object;
    int prot;
    uint8_t n, orig[5];
};
static struct pd_link_undo *pd_link_undos;
static uint32_t pd_link_undo_n, pd_link_undo_cap;
static uint32_t pd_link_object; /* the object pd_tramp_link_code is linking */

/* The stub's copy of the instruction at runtime address `t` in the window at `lo`; 0 when
 * t is not the start of one (or is the window's first). */
static uintptr_t pd_window_copy(uintptr_t stub, const struct pd_plan *p, uintptr_t lo, uintptr_t t)
{
    for (unsigned k = 0; k < p->nbounds; k++)
        if (lo + p->bounds[2 * k] == t)
            return pd_stub_dest(stub, p, p->bounds[2 * k + 1]);
    return 0;
}

/* The stubbed site of object `o` (other than `self`) whose window holds runtime address
 * `t` past its first byte, or -1.  *to: the stub's copy of the instruction at t, 0 when t
 * is not the start of one. */
static long pd_window_of(uintptr_t bias, uint32_t o, const uintptr_t *stubs, uint32_t self,
                         uintptr_t t, uintptr_t *to)
{
    for (uint32_t s = 0; s < pd_module.nsites; s++) {
        const struct pd_plan *p = &pd_sites[s].plan;
        uintptr_t lo = bias + (uintptr_t)pd_sites[s].pc;
        if (s == self || !stubs[s] || pd_sites[s].object != o || t <= lo || t >= lo + p->len)
            continue;
        *to = pd_window_copy(stubs[s], p, lo, t);
        return (long)s;
    }
    return -1;
}

/* A thread stopped at an instruction inside a window the site's jump now covers would
 * resume in the middle of that jump: it goes on at the stub's copy of the instruction
 * instead, which continues to the window's end as the original would have. */
uintptr_t pd_tramp_window_pc(uintptr_t pc)
{
    for (uint32_t i = 0; pd_armed && i < pd_armed_cap; i++) {
        const struct pd_armed *a = &pd_armed[i];
        uintptr_t lo = __atomic_load_n(&a->addr, __ATOMIC_ACQUIRE);
        if (lo <= PD_ARMED_DEAD || !a->stub || pc <= lo || pc >= lo + a->site->plan.len)
            continue;
        uintptr_t to = pd_window_copy(a->stub, &a->site->plan, lo, pc);
        return to ? to : pc;
    }
    return pc;
}

/* PD_FX_IN_ENTRY exit row s: its `ret` is the last instruction of its entry row's
 * relocated code; that copy becomes `jmp` to s's stub (over the dead `jmp resume` after
 * it), which runs the return probes and the `ret`.  -1 (s keeps no stub) if the copy is
 * not that `ret` or the entry row has no stub. */
static int pd_tramp_in_entry(uintptr_t *stubs, uint32_t s)
{
    long e = pd_in_entry_row(s);
    const struct pd_plan *ep = e >= 0 ? &pd_sites[e].plan : NULL, *xp = &pd_sites[s].plan;
    if (!ep || !stubs[e] || ep->pre || ep->code_len < xp->code_len ||
        memcmp(ep->code + ep->code_len - xp->code_len, xp->code, xp->code_len) != 0)
        return -1;
    uint8_t *ret = pd_stub_at(stubs[e], ep, ep->code_len - xp->code_len, 0);
    ret[0] = 0xe9;
    return pd_put_rel32(ret + 1, (uintptr_t)(ret + 5), pd_stub_start(stubs[s], &pd_sites[s]));
}

/* Before the stubs turn executable: a relocated branch of one stub that lands inside
 * another stubbed site's window goes to that stub's copy instead (that site, if the
 * branch lands inside one of its instructions, keeps its trap); short sites get their
 * entry word; the SIGSEGV handler for a garbage sp is installed. */
void pd_tramp_link_area(uintptr_t bias, uint32_t o, uintptr_t *stubs)
{
    for (uint32_t s = 0; s < pd_module.nsites; s++) {
        const struct pd_plan *p = &pd_sites[s].plan;
        if (!stubs[s] || pd_sites[s].object != o)
            continue;
        for (unsigned i = 0; i < p->nfixups; i++) {
            const struct pd_fixup *f = &p->fixups[i];
            uintptr_t to;
            const int pre_side = f->at < p->pre;
            long w = f->kind == PD_FIX_REL32
                         ? pd_window_of(bias, o, stubs, s, bias + (uintptr_t)f->target, &to) : -1;
            if (w >= 0 && (!to || pd_put_rel32(pd_stub_at(stubs[s], p, f->at, pre_side),
                                               (uintptr_t)pd_stub_at(stubs[s], p, f->anchor,
                                                                     pre_side), to)))
                stubs[w] = 0;
        }
        if (p->island) {
            uintptr_t entry = bias + (uintptr_t)(p->hop ? p->hop : p->island);
            memcpy((uint8_t *)stubs[s] + PD_STUB_ENTRY, &entry, sizeof entry);
        }
    }
    for (uint32_t s = 0; s < pd_module.nsites; s++)
        if (stubs[s] && pd_sites[s].object == o && (pd_sites[s].fx & PD_FX_IN_ENTRY) &&
            pd_tramp_in_entry(stubs, s) != 0)
            stubs[s] = 0;
    pd_install_stub_fault_handler(); /* before any thread can enter a stub */
}

static uint8_t pd_link_buf[5];
static unsigned pd_link_n;
static void pd_write_link(uint8_t *at) { memcpy(at, pd_link_buf, pd_link_n); }

/* Writes `jmp rel32` (op 0xe9, n 5) or `jmp rel8` (0xeb, 2) at runtime address `at` to
 * `to`, or just the displacement (op 0, n 4 or 1) of the branch whose field is `at`. */
static int pd_write_branch(const struct dl_phdr_info *info, uintptr_t at, uint8_t op, unsigned n,
                           uintptr_t anchor, uintptr_t to)
{
    int prot = pd_segment_prot(info, at - (uintptr_t)info->dlpi_addr);
    unsigned k = op ? 1 : 0;
    intptr_t d = (intptr_t)to - (intptr_t)anchor;
    if (prot < 0 || (n - k == 1 && (d < -128 || d > 127)))
        return -1;
    pd_link_buf[0] = op;
    if (n - k == 1)
        pd_link_buf[k] = (uint8_t)(int8_t)d;
    else if (pd_put_rel32(pd_link_buf + k, anchor, to) != 0)
        return -1;
    pd_link_n = n;
    if (pd_link_undo_n == pd_link_undo_cap) {
        uint32_t cap = pd_link_undo_cap ? 2 * pd_link_undo_cap : 16;
        struct pd_link_undo *grown = realloc(pd_link_undos, cap * sizeof *grown);
        if (!grown)
            return -1; /* a write that could not be undone is not made */
        pd_link_undos = grown;
        pd_link_undo_cap = cap;
    }
    struct pd_link_undo *u = &pd_link_undos[pd_link_undo_n];
    *u = (struct pd_link_undo){at, (uintptr_t)info->dlpi_addr, pd_link_object, prot, (uint8_t)n, {0}};
    memcpy(u->orig, (const void *)at, n);
    if (pd_patch(at, n, prot, pd_write_link) != 0)
        return -1;
    pd_link_undo_n++;
    return 0;
}

/* Once the stubs are executable: the object's own branches into windows (through
 * islands of dead padding for rel8 ones) and the short sites' islands.  A site any of
 * whose writes fails keeps its trap (what was written already leads into its stub's
 * faithful copy). */
void pd_tramp_link_code(const struct dl_phdr_info *info, uint32_t o, uintptr_t *stubs)
{
    uintptr_t bias = (uintptr_t)info->dlpi_addr;
    pd_link_object = o;
    for (uint32_t s = 0; s < pd_module.nsites; s++) {
        const struct pd_plan *p = &pd_sites[s].plan;
        if (!stubs[s] || pd_sites[s].object != o)
            continue;
        int ok = 1;
        if (p->island) {
            ok = pd_write_branch(info, bias + p->island, 0xe9, 5, bias + p->island + 5,
                                 pd_stub_start(stubs[s], &pd_sites[s])) == 0;
            if (ok && p->hop)
                ok = pd_write_branch(info, bias + p->hop, 0xeb, 2, bias + p->hop + 2,
                                     bias + p->island) == 0;
        }
        for (unsigned i = 0; ok && i < p->nredirects; i++) {
            const struct pd_redirect *r = &p->redirects[i];
            uintptr_t field = bias + (uintptr_t)r->field, to;
            if (pd_window_of(bias, o, stubs, s, field, &to) >= 0 ||
                pd_window_of(bias, o, stubs, s, field + r->size - 1, &to) >= 0)
                continue; /* displaced with that site: pd_tramp_link_area sent its copy here */
            if (memcmp((const void *)field, r->orig, r->size) != 0) {
                ok = 0;
                break;
            }
            uintptr_t dest = pd_stub_dest(stubs[s], p, r->code_off);
            if (r->size == 1) {
                uintptr_t isl = bias + (uintptr_t)r->island;
                ok = pd_write_branch(info, isl, 0xe9, 5, isl + 5, dest) == 0;
                if (ok && r->hop)
                    ok = pd_write_branch(info, bias + r->hop, 0xeb, 2, bias + r->hop + 2, isl) == 0;
                dest = r->hop ? bias + (uintptr_t)r->hop : isl;
            }
            ok = ok && pd_write_branch(info, field, 0, r->size, bias + (uintptr_t)r->anchor, dest) == 0;
        }
        if (!ok)
            stubs[s] = 0;
    }
}

/* A -x detach: the branches and islands that led into stubs, newest first; never in an
 * object unloaded (or loaded again elsewhere) since it was linked. */
static const struct pd_link_undo *pd_unlink_u;
static void pd_write_unlink(uint8_t *at) { memcpy(at, pd_unlink_u->orig, pd_unlink_u->n); }

void pd_tramp_unlink_all(uint32_t *bytes)
{
    for (uint32_t i = pd_link_undo_n; i-- > 0;) {
        const struct pd_link_undo *u = &pd_link_undos[i];
        if (!pd_obj_armed[u->object] || pd_obj_bias[u->object] != u->bias)
            continue;
        pd_unlink_u = u;
        if (pd_patch(u->at, u->n, u->prot, pd_write_unlink) == 0)
            *bytes += u->n;
    }
    pd_link_undo_n = 0;
}

/* x86 pages carry no protection bits beyond read, write and execute. */
int pd_tramp_exec_prot(const struct dl_phdr_info *info)
{
    (void)info;
    return 0;
}

/* ---- out-of-line copies for function entries on the trap path -------- */

/* The plan's relocated instructions + `jmp resume`: what a trapped function entry
 * runs instead of the instruction the int3 replaced.  -1 if it does not reach. */
int pd_write_ool(uint8_t *at, const struct pd_site *site, uintptr_t bias)
{
    const struct pd_plan *plan = &site->plan;
    if (!plan->code_len || plan->code_len + 5 > PD_OOL_SIZE)
        return -1;
    memcpy(at, plan->code, plan->code_len);
    for (unsigned i = 0; i < plan->nfixups; i++) {
        const struct pd_fixup *f = &plan->fixups[i];
        uint64_t t = (uint64_t)bias + f->target;
        if (f->kind == PD_FIX_REL32) {
            if (pd_put_rel32(at + f->at, (uintptr_t)(at + f->anchor), (uintptr_t)t) != 0)
                return -1;
        } else {
            uint32_t v = f->kind == PD_FIX_ABS32HI ? (uint32_t)(t >> 32) : (uint32_t)t;
            memcpy(at + f->at, &v, 4);
        }
    }
    uint8_t *p = at + plan->code_len;
    *p = 0xe9;
    if (pd_put_rel32(p + 1, (uintptr_t)(p + 5), bias + (uintptr_t)plan->resume) != 0)
        return -1;
    return 0;
}
