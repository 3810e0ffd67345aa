/* i386's register names (pd_uregs.c): stap's tapset/i386/registers.stp's, and those of
 * tapset/x86_64/registers.stp that name a register a 32-bit process has (stap runs the
 * x86_64 tapset for a 32-bit process on an x86-64 kernel: rax is eax, zero-extended, as
 * the kernel's 64-bit frame holds it).  Every i386 name is 32 bits wide or less: register()
 * sign-extends eax as stap's i386 tapset does.
 * DWARF numbers: eax 0 ecx 1 edx 2 ebx 3 esp 4 ebp 5 esi 6 edi 7 eip 8. */
#define _GNU_SOURCE
#include "../../pd_internal.h"
#include "../x86/segments.h"

const struct pd_regname pd_regnames[] = {
    {"eax", 0, 32, 0}, {"ecx", 1, 32, 0}, {"edx", 2, 32, 0}, {"ebx", 3, 32, 0},
    {"esp", 4, 32, 0}, {"ebp", 5, 32, 0}, {"esi", 6, 32, 0}, {"edi", 7, 32, 0},
    {"eip", 8, 32, 0}, {"eflags", PD_RN_FLAGS, 32, 0}, {"orig_eax", PD_RN_ORIG, 32, 0},
    {"xcs", PD_RN_CS, 32, 0}, {"xss", PD_RN_SS, 32, 0}, {"xds", PD_RN_DS, 32, 0},
    {"xes", PD_RN_ES, 32, 0}, {"xfs", PD_RN_FS, 32, 0}, {"xgs", PD_RN_GS, 32, 0},
    {"ax", 0, 16, 0}, {"cx", 1, 16, 0}, {"dx", 2, 16, 0}, {"bx", 3, 16, 0},
    {"sp", 4, 16, 0}, {"bp", 5, 16, 0}, {"si", 6, 16, 0}, {"di", 7, 16, 0},
    {"ip", 8, 16, 0}, {"flags", PD_RN_FLAGS, 16, 0}, {"orig_ax", PD_RN_ORIG, 16, 0},
    {"cs", PD_RN_CS, 16, 0}, {"ss", PD_RN_SS, 16, 0}, {"ds", PD_RN_DS, 16, 0},
    {"es", PD_RN_ES, 16, 0}, {"fs", PD_RN_FS, 16, 0}, {"gs", PD_RN_GS, 16, 0},
    {"al", 0, 8, 0}, {"ah", 0, 8, 8}, {"bl", 3, 8, 0}, {"bh", 3, 8, 8},
    {"cl", 1, 8, 0}, {"ch", 1, 8, 8}, {"dl", 2, 8, 0}, {"dh", 2, 8, 8},
    /* x86_64's names: 64-bit slots holding the 32-bit registers */
    {"rax", 0, 64, 0}, {"rcx", 1, 64, 0}, {"rdx", 2, 64, 0}, {"rbx", 3, 64, 0},
    {"rsp", 4, 64, 0}, {"rbp", 5, 64, 0}, {"rsi", 6, 64, 0}, {"rdi", 7, 64, 0},
    {"rip", 8, 64, 0}, {"orig_rax", PD_RN_ORIG, 64, 0},
};
const unsigned pd_nregnames = sizeof pd_regnames / sizeof pd_regnames[0];

/* regparm(n) (gcc's): eax edx ecx; without it every argument is on the stack */
const int pd_arg_regs[] = {0, 2, 1};
const unsigned pd_narg_regs = 3;

uint64_t pd_arch_special_reg(const struct pd_regs *regs, int which)
{
    return pd_x86_special_reg(regs, which);
}
