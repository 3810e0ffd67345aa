/* Trampolines (issue 6): per-site stubs that replace the int3 at sites whose
 * patch plan (launcher/patchplan.py, in pd_site.plan) says NOP or DISPLACE.
 *
 * Included by pd_runtime.c after pd_run/pd_patch/pd_warn.  A site becomes a
 * `jmp rel32` to its stub; the stub
 *   - switches to the thread's private stack (pd_switch_stack, pd_pstack.c), or where
 *     it has none (or under -x) skips the red zone of its own (x86-64: 128 bytes),
 *     reserves a struct pd_regs (DWARF order, exactly what the trap fills: ip = the
 *     site, sp = the original stack pointer) plus one word for the flags (lahf/seto,
 *     no pushf/popf),
 *   - aligns the stack, clears DF; saves the vector registers only with
 *     pd_xmm_always (-x attach): the C it calls is general-regs-only and leaves
 *     through pd_xmm_call for any probe not FAST (PD_TRAMP_SAVE_XMM=0: never saved),
 *   - calls pd_tramp_entry(regs, site, bias) -> pd_run (reentrancy guard and all),
 *   - gives the private stack back, restores flags (add $0x7f,%al; sahf) and the
 *     caller-saved registers and the site's stack pointer,
 *   - runs the plan's relocated instructions and jumps back to plan.resume.
 * DF is not restored (C code at a USDT site always runs with DF=0).
 */
#ifndef PD_TRAMP_H
#define PD_TRAMP_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#ifndef PD_FORCE_TRAPS
#define PD_FORCE_TRAPS 0
#endif
#ifndef PD_TRAMP_SAVE_XMM
#define PD_TRAMP_SAVE_XMM 1
#endif
#ifndef PD_PRIVATE_STACK
#define PD_PRIVATE_STACK 1 /* -D PD_PRIVATE_STACK=0: stubs run handlers below the red zone */
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#if defined(__aarch64__)
/* aarch64 (issue 8): B-branch stubs, pd_write_stub, pd_stub_reaches,
 * pd_install_jump; the memory and pd_tramp_prepare below are shared. */
#include "arch/aarch64/tramp.h"
#else /* x86-64 and i386 stubs */

#define PD_TRAMP_REACH 0x7fff0000u /* rel32, less a margin */
#define PD_STUB_SIZE 640 /* bytes reserved per site (the x86-64 stub with xmm is ~420) */
/* The last word of a stub's slot: where a site shorter than a jmp rel32 (plan.island)
 * sends its jmp rel8 (pd_link_area writes it, pd_install_jump reads it). */
#define PD_STUB_ENTRY (PD_STUB_SIZE - 8)
/* A function exit's instructions before the exit (plan.pre code bytes, retplan.py) run
 * from here before the stub's start: its site jumps here, they `jmp` to the start. */
#define PD_STUB_PRE (PD_STUB_ENTRY - 24)

static unsigned pd_stub_code_off; /* where the relocated code starts: the same in every stub */

struct pd_emit {
    uint8_t *p;
    uint8_t *end;
};

static void pd_e(struct pd_emit *e, const char *bytes, unsigned n)
{
    if (e->p + n <= e->end)
        memcpy(e->p, bytes, n);
    e->p += n;
}
static void pd_e8(struct pd_emit *e, uint8_t b) { pd_e(e, (const char *)&b, 1); }
static void pd_e32(struct pd_emit *e, uint32_t v) { pd_e(e, (const char *)&v, 4); }
static void pd_e64(struct pd_emit *e, uint64_t v) { pd_e(e, (const char *)&v, 8); }

/* op reg, off(%rsp|%esp): modrm with a SIB of 0x24. */
static void pd_e_sp(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off)
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

/* movdqa %xmmN, off(%sp) (store) or movdqa off(%sp), %xmmN (load). */
static void pd_e_xmm(struct pd_emit *e, int store, int n, int32_t off)
{
    pd_e8(e, 0x66);
    if (n >= 8)
        pd_e8(e, 0x44);
    pd_e8(e, 0x0f);
    pd_e_sp(e, 0, store ? 0x7f : 0x6f, n, off);
}

static int pd_fits_rel32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* Whether the site's `jmp rel32` reaches the stub (i386: everything does). */
static int pd_stub_reaches(uintptr_t site, uintptr_t stub)
{
    return sizeof(void *) == 4 || pd_fits_rel32((int64_t)((intptr_t)stub - (intptr_t)(site + 5)));
}

/* rel32 from the end of a 4-byte field at `field` (anchor = field + 4 by default). */
static int pd_put_rel32(uint8_t *field, uintptr_t anchor, uintptr_t target)
{
    int64_t d = (int64_t)((intptr_t)target - (intptr_t)anchor);
#if defined(__i386__)
    d = (int32_t)(uint32_t)d; /* wraps modulo 2^32: everything is reachable */
#endif
    if (!pd_fits_rel32(d))
        return -1;
    int32_t v = (int32_t)d;
    memcpy(field, &v, 4);
    return 0;
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

/* Where the site's jump enters its stub. */
static uintptr_t pd_stub_start(uintptr_t stub, const struct pd_plan *p)
{
    return p->pre ? stub + PD_STUB_PRE : stub;
}

/* Writes relocated code offsets [from, to) of `plan` with their fixups into the stub at
 * `stub` (pd_stub_code_off set); -1 if an operand does not reach. */
static int pd_stub_code(uintptr_t stub, const struct pd_plan *plan, unsigned from, unsigned to,
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
 * probe that may use them runs through pd_xmm_call (pd_fire_probe). */
static PD_FAST_FN void pd_tramp_fire(struct pd_regs *regs, const struct pd_site *site,
                                     uintptr_t bias)
{
    if (site->nentry + site->nreturn + site->nshared) /* a function entry, or rows sharing */
        pd_func_fire(regs, site, bias);                   /* one address (pd_func.c) */
    else
        pd_fire_probe(&pd_probes[site->probe], site, regs, bias);
}

static PD_FAST_FN void pd_tramp_entry(struct pd_regs *regs, const struct pd_site *site, uintptr_t bias)
{
    if (site->nentry + site->nreturn) { /* a function entry: nothing there reads flags */
        pd_func_fire(regs, site, bias);
        return;
    }
    const struct pd_probe *p = &pd_probes[site->probe];
    if (PD_LIKELY((p->locks & PD_PROBE_FAST) && !site->nshared)) {
        pd_run_fast(p, site, regs, bias); /* reads no register: flags left unconverted */
        return;
    }
    pd_ureg raw = *(const pd_ureg *)(regs + 1); /* lahf in bits 8-15, seto in bit 0 */
    regs->flags = ((raw >> 8) & 0xd5) | ((raw & 1) << 11) | 0x2;
    pd_tramp_fire(regs, site, bias);
}

/* ---- a site whose stack pointer is garbage ------------------------------------
 * The stub's first write is to the stack below the site's sp.  If that faults (sp
 * unmapped: hand-written assembly, or a stack overflowing), the SIGSEGV handler below
 * -- on the thread's pd_altstack.c signal stack -- runs the probe from the signal
 * context, as a trap would, and resumes the stub at its relocated instructions with
 * every register as the site had it.  Other faults go to the handler that was there. */

static int pd_stub_private_stack(void);
#if defined(__x86_64__)
#define PD_STUB_DWARF_CX 2 /* the scratch register of pd_switch_stack */
#else
#define PD_STUB_DWARF_CX 1
#endif
static unsigned pd_stub_store_off; /* offset of the stub's first store to the stack */
static unsigned pd_stub_sp_delta;  /* the site's sp minus sp at that store (no private stacks) */
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
    greg_t *cx = &uc->uc_mcontext.gregs[pd_gregs_by_dwarf[PD_STUB_DWARF_CX]];
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
static int pd_stub_private_stack(void)
{
    static int ps = -1;
    if (ps < 0)
        ps = PD_PRIVATE_STACK && pd_ps_enabled && !pd_xmm_always;
    return ps;
}

/* op reg, %fs:off (x86-64) / %gs:off (i386): the thread's TLS word at `off`. */
static void pd_e_tls(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off)
{
#if defined(__x86_64__)
    pd_e8(e, 0x64);
    if (rex)
        pd_e8(e, rex);
    pd_e8(e, op);
    pd_e8(e, (uint8_t)(((reg & 7) << 3) | 4)); /* SIB, no base or index: absolute disp32 */
    pd_e8(e, 0x25);
#else
    (void)rex;
    pd_e8(e, 0x65);
    pd_e8(e, op);
    pd_e8(e, (uint8_t)(((reg & 7) << 3) | 5)); /* disp32 */
#endif
    pd_e32(e, (uint32_t)off);
}

/* The stub's first instructions: the stack pointer becomes the private stack's top
 * less two words, [sp] = the site's sp, [sp + W] = what TOP gets back at the end (the
 * top; 0 on the own-stack path), with no flag and no register changed.  TOP == 0 (in
 * use: a nested hit; or none: a thread pd_altstack.c did not equip): the thread's own
 * stack below the red zone instead, rounded down to 256 bytes by `movb $0,%cl` (no
 * flag changes, and the body needs no `and`: sp is 16-aligned on both paths).  Its
 * first store is where pd_stub_fault catches a garbage sp, which is then in rcx.
 * Signals between these instructions: pd_pstack.c's pd_sig_wrap. */
static void pd_switch_stack(struct pd_emit *e, const uint8_t *at)
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

/* A FAST probe's site (issue 6): after pd_switch_stack, a body that saves only what C
 * may clobber (and the flags), calls pd_fast_mark(probe, &pd_fenv) -- a FAST handler
 * reads no register, so no pd_regs is built -- and jumps to the relocated
 * code, which stays where the full body put it (pd_stub_code_off is the same in every
 * stub).  Written over the full body, between `at` and `code`. */
static int pd_write_fast_body(uint8_t *at, uint8_t *code, const struct pd_probe *p,
                              const struct pd_site *site, uintptr_t bias)
{
    struct pd_emit em = {at, code}, *e = &em;
    /* a function entry's FAST probe (issue 7): pd_func_fire_sp, which also hooks the return */
    const int fn = site->nentry + site->nreturn != 0;
    const uintptr_t target = fn ? (uintptr_t)pd_func_fire_sp : (uintptr_t)pd_fast_mark;
    /* the second argument: the site, or for pd_fast_mark(probe, env) the FAST env */
    const uintptr_t arg2 = fn ? (uintptr_t)site : (uintptr_t)&pd_fenv;
#if defined(__x86_64__)
    /* rax rcx rdx rsi rdi r8-r11, flags at 72; the site's sp at 80, TOP's value at 88.
     * sp stays 16-aligned (pd_switch_stack), so no `and` and no register to undo it. */
    static const int8_t save[9] = {0, 1, 2, 6, 7, 8, 9, 10, 11};
    pd_e(e, "\x48\x8d\x64\x24\xb0", 5);                       /* lea -80(%rsp),%rsp */
    pd_e_sp(e, 0x48, 0x89, 0, 0);                              /* mov %rax,(%rsp) */
    pd_e(e, "\x9f\x0f\x90\xc0", 4);                            /* lahf; seto %al */
    pd_e_sp(e, 0x48, 0x89, 0, 72);                             /* mov %rax,flagsword */
    for (int i = 1; i < 9; i++)
        pd_e_sp(e, (uint8_t)(0x48 | (save[i] >= 8 ? 4 : 0)), 0x89, save[i], 8 * i);
    pd_e8(e, 0xfc);                                            /* cld */
    pd_e(e, "\x48\xbf", 2);                                    /* movabs $probe,%rdi */
    pd_e64(e, (uint64_t)(uintptr_t)p);
    pd_e(e, "\x48\xbe", 2);                                    /* movabs $arg2,%rsi */
    pd_e64(e, (uint64_t)arg2);
    if (fn) { /* pd_func_fire_sp(p, site, the site's sp, bias) */
        pd_e(e, "\x48\x8b\x54\x24\x50\x48\xb9", 7);            /* mov 80(%rsp),%rdx; movabs */
        pd_e64(e, (uint64_t)bias);
    }
    pd_e(e, "\x48\xb8", 2);                                    /* movabs $target,%rax */
    pd_e64(e, (uint64_t)target);
    pd_e(e, "\xff\xd0", 2);                                    /* call *%rax */
    pd_e_sp(e, 0x48, 0x8b, 0, 88);                             /* release the stack */
    pd_e_tls(e, 0x48, 0x89, 0, pd_ps_top_off);
    pd_e_sp(e, 0x48, 0x8b, 0, 72);                             /* flags */
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < 9; i++)
        pd_e_sp(e, (uint8_t)(0x48 | (save[i] >= 8 ? 4 : 0)), 0x8b, save[i], 8 * i);
    pd_e(e, "\x48\x8d\x64\x24\x50\x48\x8b\x24\x24", 9);         /* lea 80(%rsp),%rsp; mov (%rsp),%rsp */
#else
    /* eax ecx edx, flags at 12; the site's sp at 16, TOP's value at 20 (sp 16-aligned) */
    pd_e(e, "\x8d\x64\x24\xf0", 4);                            /* lea -16(%esp),%esp */
    pd_e(e, "\x89\x04\x24\x9f\x0f\x90\xc0", 7);                   /* mov %eax,(%esp); lahf; seto */
    pd_e_sp(e, 0, 0x89, 0, 12);
    for (int i = 1; i < 3; i++)
        pd_e_sp(e, 0, 0x89, i, 4 * i);                         /* ecx edx */
    pd_e8(e, 0xfc);                                            /* cld */
    if (fn) {
        pd_e8(e, 0x68);                                        /* push $bias */
        pd_e32(e, (uint32_t)bias);
        pd_e(e, "\xff\x74\x24\x14\x68", 5);                    /* pushl 20(%esp) (sp); push $site */
        pd_e32(e, (uint32_t)(uintptr_t)site);
        pd_e8(e, 0x68);                                        /* push $probe */
    } else {                                                   /* regparm(2): */
        pd_e8(e, 0xba);                                        /* mov $env,%edx */
        pd_e32(e, (uint32_t)arg2);
        pd_e8(e, 0xb8);                                        /* mov $probe,%eax */
    }
    pd_e32(e, (uint32_t)(uintptr_t)p);
    pd_e8(e, 0xe8);                                            /* call target */
    uint8_t *call_field = e->p;
    pd_e32(e, 0);
    if (e->p <= e->end)
        pd_put_rel32(call_field, (uintptr_t)e->p, target);
    if (fn)
        pd_e(e, "\x8d\x64\x24\x10", 4);                        /* lea 16(%esp),%esp */
    pd_e_sp(e, 0, 0x8b, 0, 20);                                /* release the stack */
    pd_e_tls(e, 0, 0x89, 0, pd_ps_top_off);
    pd_e_sp(e, 0, 0x8b, 0, 12);                                /* flags */
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < 3; i++)
        pd_e_sp(e, 0, 0x8b, i, 4 * i);
    pd_e(e, "\x8d\x64\x24\x10\x8b\x24\x24", 7);                   /* lea 16(%esp),%esp; mov (%esp),%esp */
#endif
    pd_e8(e, 0xe9);                                            /* jmp code */
    pd_e32(e, 0);
    if (e->p > e->end)
        return -1;
    return pd_put_rel32(e->p - 4, (uintptr_t)e->p, (uintptr_t)code);
}

/* Writes the stub for `site` at `at` (PD_STUB_SIZE bytes).  Returns its length, or -1
 * if a jump or relocated operand does not reach from there. */
static int pd_write_stub(uint8_t *at, const struct pd_site *site, uintptr_t bias)
{
    struct pd_emit em = {at, at + PD_STUB_PRE}, *e = &em;
    const struct pd_plan *plan = &site->plan;
    const int ps = pd_stub_private_stack();
    uint8_t *body;
#if defined(__x86_64__)
    /* DWARF order -> x86 register encoding; rsp (7) is computed. */
    static const int8_t enc[PD_NREGS] = {0, 2, 1, 3, 6, 7, 5, -1, 8, 9, 10, 11, 12, 13, 14, 15, -1};
    const int32_t frame = (int32_t)sizeof(struct pd_regs) + 8; /* + the flags word */
    if (ps)
        pd_switch_stack(e, at);
    else
        pd_e(e, "\x48\x8d\x64\x24\x80", 5);                   /* lea -128(%rsp),%rsp */
    body = e->p;
    pd_e_sp(e, 0x48, 0x8d, 4, -frame);                         /* lea -frame(%rsp),%rsp */
    if (!ps) {
        pd_stub_store_off = (unsigned)(e->p - at);
        pd_stub_sp_delta = (unsigned)frame + 128;
    }
    pd_e_sp(e, 0x48, 0x89, 0, 0);                              /* mov %rax,(%rsp) */
    pd_e(e, "\x9f\x0f\x90\xc0", 4);                            /* lahf; seto %al */
    pd_e_sp(e, 0x48, 0x89, 0, frame - 8);                      /* mov %rax,flagsword */
    for (int i = 1; i < PD_DWARF_IP; i++) {
        if (enc[i] < 0)
            continue;
        pd_e_sp(e, (uint8_t)(0x48 | (enc[i] >= 8 ? 4 : 0)), 0x89, enc[i], 8 * i);
    }
    if (ps)
        pd_e_sp(e, 0x48, 0x8b, 0, frame);                      /* mov saved_sp,%rax */
    else
        pd_e_sp(e, 0x48, 0x8d, 0, frame + 128);                /* lea orig_rsp,%rax */
    pd_e_sp(e, 0x48, 0x89, 0, 8 * PD_DWARF_SP);
    pd_e(e, "\x48\xb8", 2);                                    /* movabs $site,%rax */
    pd_e64(e, (uint64_t)(bias + (uintptr_t)site->pc));
    pd_e_sp(e, 0x48, 0x89, 0, 8 * PD_DWARF_IP);
    pd_e(e, "\x48\x89\xe3", 3);                                /* mov %rsp,%rbx */
    pd_e(e, "\x48\x83\xe4\xf0", 4);                            /* and $-16,%rsp */
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        pd_e(e, "\x48\x81\xec\x00\x01\x00\x00", 7);            /* sub $256,%rsp */
        for (int n = 0; n < 16; n++)
            pd_e_xmm(e, 1, n, 16 * n);                         /* movdqa %xmmN,16n(%rsp) */
    }
    pd_e8(e, 0xfc);                                            /* cld */
    pd_e(e, "\x48\x89\xdf", 3);                                /* mov %rbx,%rdi */
    pd_e(e, "\x48\xbe", 2);                                    /* movabs $site,%rsi */
    pd_e64(e, (uint64_t)(uintptr_t)site);
    pd_e(e, "\x48\xba", 2);                                    /* movabs $bias,%rdx */
    pd_e64(e, (uint64_t)bias);
    pd_e(e, "\x48\xb8", 2);                                    /* movabs $entry,%rax */
    pd_e64(e, (uint64_t)(uintptr_t)pd_tramp_entry);
    pd_e(e, "\xff\xd0", 2);                                    /* call *%rax */
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        for (int n = 0; n < 16; n++)
            pd_e_xmm(e, 0, n, 16 * n);                         /* movdqa 16n(%rsp),%xmmN */
    }
    pd_e(e, "\x48\x89\xdc", 3);                                /* mov %rbx,%rsp */
    if (ps) {                                                  /* release the stack */
        pd_e_sp(e, 0x48, 0x8b, 0, frame + 8);                  /* mov top_or_0,%rax */
        pd_e_tls(e, 0x48, 0x89, 0, pd_ps_top_off);             /* mov %rax,%fs:TOP */
    }
    pd_e_sp(e, 0x48, 0x8b, 0, frame - 8);                      /* mov flagsword,%rax */
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < PD_DWARF_IP; i++) {                    /* caller-saved + rbx, rbp */
        if (enc[i] < 0 || (enc[i] >= 12))
            continue;
        pd_e_sp(e, (uint8_t)(0x48 | (enc[i] >= 8 ? 4 : 0)), 0x8b, enc[i], 8 * i);
    }
    if (ps) {
        pd_e_sp(e, 0x48, 0x8d, 4, frame);                      /* lea frame(%rsp),%rsp */
        pd_e(e, "\x48\x8b\x24\x24", 4);                        /* mov (%rsp),%rsp */
    } else {
        pd_e_sp(e, 0x48, 0x8d, 4, frame + 128);                /* lea ...(%rsp),%rsp */
    }
#else
    const int32_t frame = (int32_t)sizeof(struct pd_regs) + 4;
    static const int8_t enc[PD_NREGS] = {0, 1, 2, 3, -1, 5, 6, 7, -1}; /* eax ecx edx ebx . ebp esi edi */
    if (ps)
        pd_switch_stack(e, at);
    body = e->p;
    pd_e_sp(e, 0, 0x8d, 4, -frame);                            /* lea -frame(%esp),%esp */
    if (!ps) {
        pd_stub_store_off = (unsigned)(e->p - at);
        pd_stub_sp_delta = (unsigned)frame;
    }
    pd_e_sp(e, 0, 0x89, 0, 0);                                 /* mov %eax,(%esp) */
    pd_e(e, "\x9f\x0f\x90\xc0", 4);                            /* lahf; seto %al */
    pd_e_sp(e, 0, 0x89, 0, frame - 4);
    for (int i = 1; i < PD_DWARF_IP; i++)
        if (enc[i] >= 0)
            pd_e_sp(e, 0, 0x89, enc[i], 4 * i);
    pd_e_sp(e, 0, ps ? 0x8b : 0x8d, 0, frame);                 /* mov saved_sp / lea orig_esp,%eax */
    pd_e_sp(e, 0, 0x89, 0, 4 * PD_DWARF_SP);
    pd_e_sp(e, 0, 0xc7, 0, 4 * PD_DWARF_IP);                   /* movl $site,ip */
    pd_e32(e, (uint32_t)(bias + (uintptr_t)site->pc));
    pd_e(e, "\x89\xe3", 2);                                    /* mov %esp,%ebx */
    pd_e(e, "\x83\xe4\xf0", 3);                                /* and $-16,%esp */
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        pd_e(e, "\x81\xec\x80\x00\x00\x00", 6);                /* sub $128,%esp */
        for (int n = 0; n < 8; n++)
            pd_e_xmm(e, 1, n, 16 * n);
    }
    pd_e8(e, 0xfc);                                            /* cld */
    pd_e(e, "\x83\xec\x04", 3);                                /* sub $4,%esp */
    pd_e8(e, 0x68);                                            /* push $bias */
    pd_e32(e, (uint32_t)bias);
    pd_e8(e, 0x68);                                            /* push $site */
    pd_e32(e, (uint32_t)(uintptr_t)site);
    pd_e8(e, 0x53);                                            /* push %ebx */
    pd_e8(e, 0xe8);                                            /* call pd_tramp_entry */
    uint8_t *call_field = e->p;
    pd_e32(e, 0);
    if (e->p <= e->end)
        pd_put_rel32(call_field, (uintptr_t)e->p, (uintptr_t)pd_tramp_entry);
    if (PD_TRAMP_SAVE_XMM && pd_xmm_always) {
        pd_e(e, "\x83\xc4\x10", 3);                            /* add $16,%esp */
        for (int n = 0; n < 8; n++)
            pd_e_xmm(e, 0, n, 16 * n);
    }
    pd_e(e, "\x89\xdc", 2);                                    /* mov %ebx,%esp */
    if (ps) {                                                  /* release the stack */
        pd_e_sp(e, 0, 0x8b, 0, frame + 4);                     /* mov top_or_0,%eax */
        pd_e_tls(e, 0, 0x89, 0, pd_ps_top_off);                /* mov %eax,%gs:TOP */
    }
    pd_e_sp(e, 0, 0x8b, 0, frame - 4);
    pd_e(e, "\x04\x7f\x9e", 3);                                /* add $0x7f,%al; sahf */
    for (int i = 0; i < 4; i++)                                /* eax ecx edx ebx */
        pd_e_sp(e, 0, 0x8b, enc[i], 4 * i);
    pd_e_sp(e, 0, 0x8d, 4, frame);                             /* lea frame(%esp),%esp */
    if (ps)
        pd_e(e, "\x8b\x24\x24", 3);                             /* mov (%esp),%esp */
#endif
    /* the displaced instructions, relocated (a function exit's: those from the exit on) */
    uint8_t *code = e->p;
    pd_stub_code_off = (unsigned)(code - at);
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
    const struct pd_probe *probe = site->nentry + site->nreturn + site->nshared
        ? pd_func_fast_probe(site)
        : pd_probes[site->probe].locks & PD_PROBE_FAST ? &pd_probes[site->probe] : NULL;
    if (ps && probe && pd_write_fast_body(body, code, probe, site, bias) != 0)
        return -1;
    return (int)(e->p - at);
}

#endif /* x86 stubs */
#if defined(__aarch64__) /* no exit sites there (retplan.py): the stub's start */
static uintptr_t pd_stub_start(uintptr_t stub, const struct pd_plan *p)
{
    (void)p;
    return stub;
}
#endif

/* ---- trampoline memory ---------------------------------------------------- */

/* Maps `size` bytes RW within PD_TRAMP_REACH of every address in [lo, hi): on x86-64
 * and aarch64 the free gap nearest the object in /proc/self/maps
 * (MAP_FIXED_NOREPLACE); on i386 anywhere. */
static uint8_t *pd_map_near(uintptr_t lo, uintptr_t hi, size_t size)
{
#if defined(__x86_64__) || defined(__aarch64__)
    const uintptr_t reach = PD_TRAMP_REACH;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return NULL;
    uintptr_t best = 0, best_dist = UINTPTR_MAX, prev_end = 0x10000;
    long page = sysconf(_SC_PAGESIZE);
    char line[512];
    for (;;) {
        unsigned long s = 0, en = 0;
        int more = fgets(line, sizeof line, f) != NULL;
        if (more && sscanf(line, "%lx-%lx", &s, &en) != 2)
            continue;
        if (!more)
            s = 0x7ffffffff000UL; /* the gap after the last mapping */
        if (s > prev_end && s - prev_end >= size) {
            /* the end of the gap nearest the object */
            uintptr_t cand = prev_end >= hi ? prev_end : ((uintptr_t)s - size) & ~(uintptr_t)(page - 1);
            if (cand >= prev_end && cand + size <= s) {
                uintptr_t far_lo = cand < lo ? lo - cand : cand + size - lo;
                uintptr_t far_hi = cand < hi ? hi - cand : cand + size - hi;
                uintptr_t dist = far_lo > far_hi ? far_lo : far_hi;
                if (dist < reach && dist < best_dist) {
                    best = cand;
                    best_dist = dist;
                }
            }
        }
        if (!more)
            break;
        if (en > prev_end)
            prev_end = en;
    }
    fclose(f);
    if (!best)
        return NULL;
    void *m = mmap((void *)best, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    if ((uintptr_t)m != best) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        munmap(m, size);
        return NULL;
    }
    return m;
#else
    (void)lo;
    (void)hi;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
#endif
}

/* ---- patching a site ---------------------------------------------------------- */
#if !defined(__aarch64__) /* x86; aarch64's pd_install_jump is in arch/aarch64/tramp.h */

static const uint8_t *pd_patch_src; /* what pd_write_tail copies (constructor time) */
static unsigned pd_patch_n;
static uint8_t pd_patch_first;

static void pd_write_tail(uint8_t *at) { memcpy(at, pd_patch_src, pd_patch_n); }
static void pd_write_first(uint8_t *at) { __atomic_store_n(at, pd_patch_first, __ATOMIC_RELEASE); }

/* int3 at pc first (a thread arriving meanwhile traps and is sent to the stub), then
 * bytes 1..len-1 (rel32, int3 filler), then the jmp opcode: no thread ever runs a torn
 * instruction. */
static int pd_install_jump(uintptr_t addr, unsigned len, int prot, uintptr_t stub)
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

/* ---- branches into windows (patchplan.Redirect, plan.bounds, plan.island) ---------- */

/* Code outside the site windows that pd_link_code rewrote (redirected branches, islands
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
static uint32_t pd_link_object; /* the object pd_link_code is linking */

static int pd_segment_prot(const struct dl_phdr_info *info, uintptr_t vaddr);

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
        *to = 0;
        for (unsigned k = 0; k < p->nbounds; k++)
            if (lo + p->bounds[2 * k] == t)
                *to = pd_stub_dest(stubs[s], p, p->bounds[2 * k + 1]);
        return (long)s;
    }
    return -1;
}

/* Before the stubs turn executable: a relocated branch of one stub that lands inside
 * another stubbed site's window goes to that stub's copy instead (that site, if the
 * branch lands inside one of its instructions, keeps its trap); short sites get their
 * entry word. */
static void pd_link_area(uintptr_t bias, uint32_t o, uintptr_t *stubs)
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
static void pd_link_code(const struct dl_phdr_info *info, uint32_t o, uintptr_t *stubs)
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
                                 pd_stub_start(stubs[s], p)) == 0;
            if (ok && p->hop)
                ok = pd_write_branch(info, bias + p->hop, 0xeb, 2, bias + p->hop + 2,
                                     bias + p->island) == 0;
        }
        for (unsigned i = 0; ok && i < p->nredirects; i++) {
            const struct pd_redirect *r = &p->redirects[i];
            uintptr_t field = bias + (uintptr_t)r->field, to;
            if (pd_window_of(bias, o, stubs, s, field, &to) >= 0 ||
                pd_window_of(bias, o, stubs, s, field + r->size - 1, &to) >= 0)
                continue; /* displaced with that site: pd_link_area sent its copy here */
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
#else /* aarch64 plans are in-place B: no branch lands in a window, no islands */
static void pd_link_area(uintptr_t bias, uint32_t o, uintptr_t *stubs)
{
    (void)bias;
    (void)o;
    (void)stubs;
}
static void pd_link_code(const struct dl_phdr_info *info, uint32_t o, uintptr_t *stubs)
{
    (void)info;
    (void)o;
    (void)stubs;
}
static void pd_install_stub_fault_handler(void) {}
#endif

/* `bytes` (rounded up to pages, returned in *size) of RX-able memory within
 * reach of every PT_LOAD segment of the object, or NULL. */
static uint8_t *pd_map_near_object(const struct dl_phdr_info *info, size_t bytes,
                                   size_t *size)
{
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo)
            lo = a;
        if (a + ph->p_memsz > hi)
            hi = a + ph->p_memsz;
    }
    long page = sysconf(_SC_PAGESIZE);
    *size = (bytes + (size_t)page - 1) & ~(size_t)(page - 1);
    return pd_map_near(lo, hi, *size);
}

/* Maps and writes the stubs of object `o`'s trampoline sites; returns an array
 * indexed like pd_sites with each stub's address (0: that site keeps the trap), or
 * NULL.  The stubs are executable before any site jumps to them. */
static uintptr_t *pd_tramp_prepare(const struct dl_phdr_info *info, uint32_t o)
{
    const char *mode = getenv("PYDYN_PROBE_MODE"); /* pydyn --probe-mode=trap */
    if (PD_FORCE_TRAPS || (mode && strcmp(mode, "trap") == 0))
        return NULL;
    uint32_t n = 0;
    for (uint32_t s = 0; s < pd_module.nsites; s++)
        n += pd_sites[s].object == o && pd_sites[s].plan.tactic != PD_TACTIC_TRAP;
    if (!n)
        return NULL;
    size_t size;
    uint8_t *area = pd_map_near_object(info, (size_t)n * PD_STUB_SIZE, &size);
    if (!area) {
        pd_warn("no memory for trampolines within reach of %s; using traps",
                pd_objects[o].path);
        return NULL;
    }
    uintptr_t *stubs = calloc(pd_module.nsites, sizeof *stubs);
    if (!stubs) {
        munmap(area, size);
        return NULL;
    }
    uint8_t *at = area;
    for (uint32_t s = 0; s < pd_module.nsites; s++) {
        const struct pd_site *site = &pd_sites[s];
        const struct pd_plan *plan = &site->plan;
        if (site->object != o || plan->tactic == PD_TACTIC_TRAP || (site->fx & PD_FX_SHARED))
            continue; /* (a shared row is run by the one armed at its address) */
        uintptr_t addr = (uintptr_t)info->dlpi_addr + (uintptr_t)site->pc;
        if (plan->tactic == PD_TACTIC_DISPLACE && memcmp((const void *)addr, plan->orig, plan->len))
            continue; /* not the bytes the plan was made for: the trap is always safe */
        if (plan->tactic == PD_TACTIC_NOP && plan->len != site->nop_len)
            continue;
        if (pd_write_stub(at, site, (uintptr_t)info->dlpi_addr) < 0)
            continue;
        if (!pd_stub_reaches(addr, (uintptr_t)at))
            continue;
        stubs[s] = (uintptr_t)at;
        at += PD_STUB_SIZE;
    }
    pd_ret_choose(o, stubs, pd_site_off); /* exits or the hijack: before any linking */
    pd_link_area((uintptr_t)info->dlpi_addr, o, stubs);
    pd_install_stub_fault_handler();
    if (mprotect(area, size, PROT_READ | PROT_EXEC) != 0) {
        free(stubs);
        munmap(area, size);
        return NULL;
    }
    pd_flush_icache(area, at); /* written through the data path (aarch64) */
    pd_link_code(info, o, stubs);
    return stubs;
}

/* ---- out-of-line copies for function entries on the trap path (issue 7) -------- */
#if !defined(__aarch64__) /* aarch64's PD_OOL_SIZE and pd_write_ool: arch/aarch64/tramp.h */

#define PD_OOL_SIZE 96 /* relocated code (<= 64) + jmp back */

/* The plan's relocated instructions + `jmp resume`: what a trapped function entry
 * runs instead of the instruction the int3 replaced.  -1 if it does not reach. */
static int pd_write_ool(uint8_t *at, const struct pd_site *site, uintptr_t bias)
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
#endif /* x86 pd_write_ool */

/* Per function site of object `o`: the address of its out-of-line copy (0: none, the
 * site cannot be trapped), indexed like pd_sites; NULL if the object has none. */
static uintptr_t *pd_ool_prepare(const struct dl_phdr_info *info, uint32_t o)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < pd_module.nsites; s++)
        n += pd_sites[s].object == o && pd_sites[s].nop_len == 0 && pd_sites[s].plan.code_len;
    if (!n)
        return NULL;
    size_t size;
    uint8_t *area = pd_map_near_object(info, (size_t)n * PD_OOL_SIZE, &size);
    uintptr_t *ool = area ? calloc(pd_module.nsites, sizeof *ool) : NULL;
    if (!ool) {
        if (area)
            munmap(area, size);
        pd_warn("no memory for function entry copies within reach of %s", pd_objects[o].path);
        return NULL;
    }
    uint8_t *at = area;
    for (uint32_t s = 0; s < pd_module.nsites; s++) {
        const struct pd_site *site = &pd_sites[s];
        if (site->object != o || site->nop_len != 0 || !site->plan.code_len)
            continue;
        if (pd_write_ool(at, site, (uintptr_t)info->dlpi_addr) != 0)
            continue;
        ool[s] = (uintptr_t)at;
        at += PD_OOL_SIZE;
    }
    if (mprotect(area, size, PROT_READ | PROT_EXEC) != 0) {
        free(ool);
        munmap(area, size);
        return NULL;
    }
    pd_flush_icache(area, at); /* written through the data path (aarch64) */
    return ool;
}

#endif
