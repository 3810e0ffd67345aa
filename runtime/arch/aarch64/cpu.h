/* AArch64 (pd_arch.h). */
#ifndef PD_ARCH_CPU_H
#define PD_ARCH_CPU_H

#include <stdint.h>

#define PD_ARCH_REGS_H "arch/aarch64/regs.h" /* for pd_runtime.h */

/* A spinning waiter's hint (pd_lock.h). */
static inline void pd_cpu_relax(void)
{
    __asm__ __volatile__("yield" ::: "memory");
}

/* The virtual counter, which get_cycles() reads and pd_clock.c interpolates the clocks
 * with when the kernel keeps time by it (its clocksource name). */
static inline uint64_t pd_cycles(void)
{
    uint64_t v;
    __asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v) :: "memory");
    return v;
}
#define PD_ARCH_CYCLES_CLOCKSOURCE "arch_sys_counter"

/* No vector registers go unsaved on the FAST path: FAST code is ordinary code. */
#define PD_FAST_FN
#define PD_FAST_UNIT

/* Double arithmetic is IEEE's, rounded at every step: nothing to ask (pd_fp.c). */
#define PD_IEEE_FN
/* IEEE's square root of a double, rounded once (pd_fp.c's fp_sqrt). */
static inline double pd_cpu_sqrt(double x)
{
    __asm__("fsqrt %d0, %d1" : "=w"(x) : "w"(x));
    return x;
}
#endif
