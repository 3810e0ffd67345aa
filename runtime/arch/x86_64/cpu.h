/* x86-64 (pd_arch.h). */
#ifndef PD_ARCH_CPU_H
#define PD_ARCH_CPU_H

#if defined(__ILP32__)
#error "pydyn runtime: x32 is not supported (its futex timeout is not two longs)"
#endif

#define PD_ARCH_REGS_H "arch/x86_64/regs.h" /* for pd_runtime.h */

/* Double arithmetic is IEEE's, rounded at every step (SSE2): nothing to ask (pd_fp.c). */
#define PD_IEEE_FN
#include "../x86/cpu.h" /* after PD_IEEE_FN: its pd_cpu_sqrt is one */

#endif
