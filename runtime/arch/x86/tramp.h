/* x86 trampolines, shared by x86-64 and i386 (see x86_tramp.c): the stub layout,
 * the instruction emitter, and what x86_tramp.c and the arch's own stub writer
 * (x86_64/x86_64_stub.c, i386/i386_stub.c) share.  Included by the arch's tramp.h,
 * which adds PD_TRAMP_REACH. */
#ifndef PD_ARCH_X86_TRAMP_H
#define PD_ARCH_X86_TRAMP_H

#include <stdint.h>
#include <string.h>

#define PD_STUB_SIZE 640 /* bytes reserved per site (the x86-64 stub with xmm is ~420) */
/* The last word of a stub's slot: where a site shorter than a jmp rel32 (plan.island)
 * sends its jmp rel8 (pd_tramp_link_area writes it, pd_install_jump reads it). */
#define PD_STUB_ENTRY (PD_STUB_SIZE - 8)
/* A function exit's instructions before the exit (plan.pre code bytes, plan/returns.py) run
 * from here before the stub's start: its site jumps here, they `jmp` to the start. */
#define PD_STUB_PRE (PD_STUB_ENTRY - 24)
#define PD_OOL_SIZE 96 /* relocated code (<= 64) + jmp back */

struct pd_emit {
    uint8_t *p;
    uint8_t *end;
};

#pragma GCC visibility push(hidden)
/* Appending to a stub (bytes past e->end are counted, not written: the caller checks
 * e->p > e->end once): n bytes, a byte, a 32- and a 64-bit word. */
void pd_e(struct pd_emit *e, const char *bytes, unsigned n);
void pd_e8(struct pd_emit *e, uint8_t b);
void pd_e32(struct pd_emit *e, uint32_t v);
void pd_e64(struct pd_emit *e, uint64_t v);
/* op reg, off(%rsp|%esp): modrm with a SIB of 0x24. */
void pd_e_sp(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off);
/* movdqa %xmmN, off(%sp) (store) or movdqa off(%sp), %xmmN (load). */
void pd_e_xmm(struct pd_emit *e, int store, int n, int32_t off);
/* op reg, %fs:off (x86-64) / %gs:off (i386): the thread's TLS word at `off` (the
 * arch's *_stub.c). */
void pd_e_tls(struct pd_emit *e, uint8_t rex, uint8_t op, int reg, int32_t off);
/* rel32 from the end of a 4-byte field at `field` (anchor = field + 4 by default);
 * -1 if it does not reach (i386: everything does). */
int pd_put_rel32(uint8_t *field, uintptr_t anchor, uintptr_t target);
extern unsigned pd_stub_code_off;  /* where the relocated code starts: the same in every stub */
extern unsigned pd_stub_store_off; /* offset of the stub's first store to the stack */
extern unsigned pd_stub_sp_delta;  /* the site's sp minus sp at that store (no private stacks) */
/* Whether stubs switch to the thread's private stack (pd_pstack.c). */
int pd_stub_private_stack(void);
/* The stub's first instructions when they do (x86_tramp.c). */
void pd_switch_stack(struct pd_emit *e, const uint8_t *at);
/* Relocated code offsets [from, to) of `plan` with their fixups, into the stub. */
int pd_stub_code(uintptr_t stub, const struct pd_plan *plan, unsigned from, unsigned to,
                 uintptr_t bias);
/* What a full stub calls with its struct pd_regs. */
PD_FAST_FN void pd_tramp_entry(struct pd_regs *regs, const struct pd_site *site, uintptr_t bias);
/* The arch's part of a stub (x86_64/, i386/): from the stub's start, the switch to the
 * private stack (ps) or past the red zone, pd_regs and the flags word saved, the call of
 * target(regs, site, bias) (pd_tramp_entry or pd_fast_regs), all restored; returns where
 * the body after pd_switch_stack starts. */
uint8_t *pd_stub_frame(struct pd_emit *e, uint8_t *at, const struct pd_site *site,
                       uintptr_t bias, int ps, uintptr_t target);
/* The arch's part of a FAST site's body: the registers C may clobber and the flags
 * saved around target(p, arg2), or with fn pd_func_fire_sp(p, site, the site's sp,
 * bias). */
void pd_fast_frame(struct pd_emit *e, const struct pd_probe *p, const struct pd_site *site,
                   uintptr_t bias, int fn, uintptr_t target, uintptr_t arg2);
#pragma GCC visibility pop

#endif
