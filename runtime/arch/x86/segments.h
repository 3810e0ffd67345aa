/* The x86 registers a probe context does not carry (pd_uregs.c, PD_RN_*): the segment
 * selectors are the thread's own (a handler runs in the probed thread, in user mode, so
 * they are what the probed code had); orig_ax is -1, as the kernel stores it for a trap
 * (a probe is never inside a system call); eflags' bit 1 and IF are always set in user
 * mode (the stubs keep only the arithmetic flags, a return keeps none). */
#ifndef PD_X86_SEGMENTS_H
#define PD_X86_SEGMENTS_H
#include <stdint.h>

static inline uint64_t pd_x86_special_reg(const struct pd_regs *regs, int which)
{
    uint16_t sel = 0;
    switch (which) {
    case PD_RN_FLAGS: return (uint64_t)regs->flags | 0x202;
    case PD_RN_ORIG: return (uint64_t)(pd_ureg)-1;
    case PD_RN_CS: __asm__ volatile("mov %%cs, %0" : "=r"(sel)); break;
    case PD_RN_SS: __asm__ volatile("mov %%ss, %0" : "=r"(sel)); break;
    case PD_RN_DS: __asm__ volatile("mov %%ds, %0" : "=r"(sel)); break;
    case PD_RN_ES: __asm__ volatile("mov %%es, %0" : "=r"(sel)); break;
    case PD_RN_FS: __asm__ volatile("mov %%fs, %0" : "=r"(sel)); break;
    case PD_RN_GS: __asm__ volatile("mov %%gs, %0" : "=r"(sel)); break;
    default: break;
    }
    return sel;
}

#endif
