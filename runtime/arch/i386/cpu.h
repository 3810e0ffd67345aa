/* i386 (pd_arch.h). */
#ifndef PD_ARCH_CPU_H
#define PD_ARCH_CPU_H

#define PD_ARCH_REGS_H "arch/i386/regs.h" /* for pd_runtime.h */

/* Double arithmetic rounded to double at every step, as IEEE (stap's SoftFloat) has it:
 * SSE2's, not the x87's wider intermediates (pd_fp.c). */
#define PD_IEEE_FN __attribute__((target("sse2,fpmath=sse")))
#include "../x86/cpu.h" /* after PD_IEEE_FN: its pd_cpu_sqrt is one */

/* pd_fast_mark's convention (pd_internal.h): probe in eax, env in edx. */
#define PD_FAST_MARK_CC __attribute__((regparm(2)))

#endif
