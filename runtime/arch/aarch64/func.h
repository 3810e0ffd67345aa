/* aarch64 return probes, included by pd_func.c.
 *
 * pd_func_fire swaps the link register: x30 in the entry's struct pd_regs, which the
 * stub (arch/aarch64/tramp.h) or the BRK handler (pd_trap.c) restores, becomes
 * pd_ret_tramp before the function's first instruction runs -- before a `paciasp`
 * there signs it, so the `autiasp` of the epilogue authenticates pd_ret_tramp signed
 * with the same sp.  The function's `ret` lands here with sp as at its entry: the
 * shadow stack's slot is the word below it (pd_func.c).
 *
 * pd_ret_tramp is a stub of the entry stubs' shape whose literals live in the module:
 * pd_a64_tramp_common saves x0-x30, nzcv, fpsr/fpcr and q0-q31 (SVE: z, p, ffr) --
 * the return values x0-x7 / q0-q7 and whatever the caller keeps in call-clobbered
 * registers of a local callee (IPA-RA) -- fills pd_regs (sp = the return's), calls
 * pd_a64_ret_entry, restores, and x30 comes back as the original return address,
 * where the `ret` below goes (x30 holds the return address after a return anyway). */
#ifndef PD_A64_FUNC_H
#define PD_A64_FUNC_H

extern const uint8_t pd_a64_tramp_common[] __attribute__((visibility("hidden")));

static void pd_a64_ret_entry(struct pd_regs *regs, const struct pd_site *site, uintptr_t bias)
{
    (void)site;
    (void)bias;
    regs->r[30] = pd_ret_handler(regs);
}

/* {pc, site, bias, common, C entry}, as in a stub: pc is pd_ret_handler's to fill in */
__attribute__((visibility("hidden"), used)) const uintptr_t pd_a64_ret_lits[5] = {
    0, 0, 0, (uintptr_t)pd_a64_tramp_common, (uintptr_t)pd_a64_ret_entry};

__asm__(".text\n"
        ".balign 4\n"
        /* the unwinder looks a return address up at the address - 1: pd_ret_tramp's FDE
         * (pd_unwind.c registers it) starts at this nop, which no other FDE covers */
        ".globl pd_ret_tramp_lo\n"
        ".hidden pd_ret_tramp_lo\n"
        "pd_ret_tramp_lo:\n"
        "  nop\n"
        ".globl pd_ret_tramp\n"
        ".hidden pd_ret_tramp\n"
        ".type pd_ret_tramp,%function\n"
        "pd_ret_tramp:\n"
        "  sub sp, sp, #32\n"
        "  stp x16, x17, [sp]\n"
        "  str x30, [sp, #16]\n"
        "  adrp x16, pd_a64_ret_lits\n"
        "  add x16, x16, :lo12:pd_a64_ret_lits\n"
        "  ldr x17, [x16, #24]\n"
        "  blr x17\n"
        "  ldp x16, x17, [sp]\n"
        "  ldr x30, [sp, #16]\n"  /* the original return address */
        "  add sp, sp, #32\n"
        "  ret\n"
        ".globl pd_ret_tramp_end\n"
        ".hidden pd_ret_tramp_end\n"
        "pd_ret_tramp_end:\n"
        ".size pd_ret_tramp, .-pd_ret_tramp\n");

#endif
