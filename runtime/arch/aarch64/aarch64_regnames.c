/* AArch64's register names, as stap's tapset/arm64/registers.stp has them (pd_uregs.c);
 * DWARF numbers: x0..x30 0..30, sp 31, the pc 32 (regs.h). */
#define _GNU_SOURCE
#include "../../pd_internal.h"

#define X(n) {"x" #n, n, 64, 0}, {"w" #n, n, 32, 0}
const struct pd_regname pd_regnames[] = {
    X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), X(12),
    X(13), X(14), X(15), X(16), X(17), X(18), X(19), X(20), X(21), X(22), X(23), X(24),
    X(25), X(26), X(27), X(28), X(29), X(30),
    {"fp", 29, 64, 0}, {"lr", 30, 64, 0}, {"sp", 31, 64, 0}, {"pc", 32, 64, 0},
    {"pstate", PD_RN_FLAGS, 64, 0},
};
const unsigned pd_nregnames = sizeof pd_regnames / sizeof pd_regnames[0];

/* AAPCS64: x0..x7 (stap's arm64 tapset reads no stack argument) */
const int pd_arg_regs[] = {0, 1, 2, 3, 4, 5, 6, 7};
const unsigned pd_narg_regs = 8;

/* pstate's condition flags as the probe saw them (orig_x0, a system call's, is not
 * named: a probe context has none) */
uint64_t pd_arch_special_reg(const struct pd_regs *regs, int which)
{
    (void)which;
    return (uint64_t)regs->flags;
}
