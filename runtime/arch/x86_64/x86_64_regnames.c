/* x86-64's register names, as stap's tapset/x86_64/registers.stp has them (pd_uregs.c);
 * DWARF numbers: rax 0 rdx 1 rcx 2 rbx 3 rsi 4 rdi 5 rbp 6 rsp 7 r8..r15 8..15 rip 16. */
#define _GNU_SOURCE
#include "../../pd_internal.h"
#include "../x86/segments.h"

const struct pd_regname pd_regnames[] = {
    {"rax", 0, 64, 0}, {"rdx", 1, 64, 0}, {"rcx", 2, 64, 0}, {"rbx", 3, 64, 0},
    {"rsi", 4, 64, 0}, {"rdi", 5, 64, 0}, {"rbp", 6, 64, 0}, {"rsp", 7, 64, 0},
    {"r8", 8, 64, 0}, {"r9", 9, 64, 0}, {"r10", 10, 64, 0}, {"r11", 11, 64, 0},
    {"r12", 12, 64, 0}, {"r13", 13, 64, 0}, {"r14", 14, 64, 0}, {"r15", 15, 64, 0},
    {"rip", 16, 64, 0}, {"eflags", PD_RN_FLAGS, 64, 0}, {"orig_rax", PD_RN_ORIG, 64, 0},
    {"xcs", PD_RN_CS, 64, 0}, {"xss", PD_RN_SS, 64, 0},
    {"eax", 0, 32, 0}, {"edx", 1, 32, 0}, {"ecx", 2, 32, 0}, {"ebx", 3, 32, 0},
    {"esi", 4, 32, 0}, {"edi", 5, 32, 0}, {"ebp", 6, 32, 0}, {"esp", 7, 32, 0},
    {"eip", 16, 32, 0}, {"orig_eax", PD_RN_ORIG, 32, 0},
    {"ax", 0, 16, 0}, {"dx", 1, 16, 0}, {"cx", 2, 16, 0}, {"bx", 3, 16, 0},
    {"si", 4, 16, 0}, {"di", 5, 16, 0}, {"bp", 6, 16, 0}, {"sp", 7, 16, 0},
    {"ip", 16, 16, 0}, {"orig_ax", PD_RN_ORIG, 16, 0}, {"cs", PD_RN_CS, 16, 0},
    {"ss", PD_RN_SS, 16, 0}, {"flags", PD_RN_FLAGS, 16, 0},
    {"al", 0, 8, 0}, {"ah", 0, 8, 8}, {"bl", 3, 8, 0}, {"bh", 3, 8, 8},
    {"cl", 2, 8, 0}, {"ch", 2, 8, 8}, {"dl", 1, 8, 0}, {"dh", 1, 8, 8},
};
const unsigned pd_nregnames = sizeof pd_regnames / sizeof pd_regnames[0];

/* the System V ABI: rdi rsi rdx rcx r8 r9 */
const int pd_arg_regs[] = {5, 4, 1, 2, 8, 9};
const unsigned pd_narg_regs = 6;

uint64_t pd_arch_special_reg(const struct pd_regs *regs, int which)
{
    return pd_x86_special_reg(regs, which);
}
