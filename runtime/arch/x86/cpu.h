/* What x86-64 and i386 code may use of the CPU (pd_arch.h). */
#ifndef PD_ARCH_X86_CPU_H
#define PD_ARCH_X86_CPU_H

#include <stddef.h>
#include <stdint.h>

/* A spinning waiter's pause (pd_lock.h). */
static inline void pd_cpu_relax(void)
{
    __builtin_ia32_pause();
}

/* The cycle counter that get_cycles() reads and pd_clock.c interpolates the clocks
 * with, and the name the kernel gives it as a clocksource: when the kernel keeps time
 * by it, it is synchronised across CPUs and runs at a constant rate. */
static inline __attribute__((always_inline, target("general-regs-only"))) uint64_t pd_cycles(void)
{
    return __builtin_ia32_rdtsc();
}
#define PD_ARCH_CYCLES_CLOCKSOURCE "tsc"

/* Code that runs from a trampoline before the vector registers are saved: gcc may use
 * no xmm (nor, on i386, x87) register in it. */
#define PD_FAST_FN __attribute__((target("general-regs-only")))
#define PD_FAST_UNIT _Pragma("GCC target(\"general-regs-only\")") /* every function after it */

/* The stubs run the probes' C on a per-thread private stack (pd_pstack.c). */
#define PD_ARCH_PRIVATE_STACK 1

/* Long copies and fills for runtime/pd_libc.c: `rep movsb`/`rep stosb` (ERMS) run at
 * the speed of vector loops without a vector register.  Forward only. */
#define PD_ARCH_REP_STRING 1
static inline __attribute__((always_inline, target("general-regs-only"))) void
pd_cpu_copy_forward(void *d, const void *s, size_t n)
{
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

static inline __attribute__((always_inline, target("general-regs-only"))) void
pd_cpu_fill(void *d, unsigned char ch, size_t n)
{
    __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(ch) : "memory");
}

/* IEEE's square root of a double, rounded once (pd_fp.c's fp_sqrt): SSE2's, which i386
 * has in PD_IEEE_FN code. */
static inline __attribute__((always_inline)) PD_IEEE_FN double pd_cpu_sqrt(double x)
{
    __asm__("sqrtsd %1, %0" : "=x"(x) : "x"(x));
    return x;
}

#endif
