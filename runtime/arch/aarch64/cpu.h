/* AArch64 (pd_arch.h). */
#ifndef PD_ARCH_CPU_H
#define PD_ARCH_CPU_H

#define PD_ARCH_REGS_H "arch/aarch64/regs.h" /* for pd_runtime.h */

/* A spinning waiter's hint (pd_lock.h). */
static inline void pd_cpu_relax(void)
{
    __asm__ __volatile__("yield" ::: "memory");
}

/* No vector registers go unsaved on the FAST path: FAST code is ordinary code. */
#define PD_FAST_FN
#define PD_FAST_UNIT

#endif
