/* i386 (pd_arch.h). */
#ifndef PD_ARCH_CPU_H
#define PD_ARCH_CPU_H

#define PD_ARCH_REGS_H "arch/i386/regs.h" /* for pd_runtime.h */

#include "../x86/cpu.h"

/* pd_fast_mark's convention (pd_internal.h): probe in eax, env in edx. */
#define PD_FAST_MARK_CC __attribute__((regparm(2)))

#endif
