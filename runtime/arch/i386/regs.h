/* i386 register context and trap mechanics (see x86_64/regs.h). */
#ifndef PD_ARCH_REGS_H_
#define PD_ARCH_REGS_H_
#include <stdint.h>
#include <ucontext.h>

#define PD_ARCH_ABI PD_ABI_I386
#define PD_ARCH_NAME "i386"
#define PD_NREGS 9 /* DWARF 0..8: eax ecx edx ebx esp ebp esi edi eip */
#define PD_DWARF_SP 4
#define PD_DWARF_IP 8
#define PD_DWARF_CX 1 /* ecx: the scratch register of a stub's stack switch */
#define PD_GREG_IP REG_EIP
#define PD_ARCH_TRAMP_H "arch/i386/tramp.h" /* for pd_tramp.h */
#define PD_ARCH_FUNC_H "arch/x86/func.h"     /* for pd_func.c */
#define PD_ARCH_UNHOOK_H "arch/x86/unhook.h" /* for pd_func.c */
#define PD_ARCH_HOST_H "arch/x86/host.h"     /* for pd_internal.h */
#define PD_ARGS_ON_STACK 1 /* *_arg() beyond the argument registers: the caller's stack */
#define PD_ARCH_COUNTER_H "arch/i386/counter.h" /* for pd_runtime.h */
#define PD_ARCH_WALK_H "arch/x86/walk.h"       /* for pd_usym.c */
#define PD_ARCH_GOT_H "arch/i386/got.h"        /* for pd_got.c */

typedef uint32_t pd_ureg;

/* REG_UESP is the user stack pointer; REG_ESP is pusha's copy, which is not. */
static const int pd_gregs_by_dwarf[PD_NREGS] = {
    REG_EAX, REG_ECX, REG_EDX, REG_EBX, REG_UESP, REG_EBP, REG_ESI, REG_EDI, REG_EIP,
};

/* glibc's i386 TCB holds its own address at %gs:0 (`%gs:x@ntpoff` base). */
static inline uintptr_t pd_thread_pointer(void)
{
    uintptr_t tp;
    __asm__ volatile("mov %%gs:0, %0" : "=r"(tp));
    return tp;
}

/* The same for PD_FAST_FN code, into which gcc does not inline pd_thread_pointer (another
 * target); not volatile: it may be shared. */
static inline PD_FAST_FN uintptr_t pd_fast_thread_pointer(void)
{
    uintptr_t tp;
    __asm__("mov %%gs:0, %0" : "=r"(tp));
    return tp;
}

#include "../x86/context.h"

#endif
