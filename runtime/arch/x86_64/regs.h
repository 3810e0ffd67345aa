/* x86-64 register context and trap mechanics.  Everything the runtime knows
 * about this arch lives here (and in ../x86/context.h, shared with i386);
 * generated code only sees struct pd_regs through pd_reg() with DWARF register
 * numbers (the numbering sdt.h operands and the launcher's argument descriptors
 * use). */
#ifndef PD_ARCH_REGS_H_
#define PD_ARCH_REGS_H_
#include <stdint.h>
#include <ucontext.h>

#define PD_ARCH_ABI PD_ABI_X86_64
#define PD_ARCH_NAME "x86_64"
#define PD_NREGS 17 /* DWARF 0..16: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip */
#define PD_DWARF_SP 7
#define PD_DWARF_IP 16
#define PD_DWARF_CX 2 /* rcx: the scratch register of a stub's stack switch */
#define PD_GREG_IP REG_RIP
#define PD_ARCH_TRAMP_H "arch/x86_64/tramp.h" /* for pd_tramp.h */
#define PD_ARCH_FUNC_H "arch/x86/func.h"     /* for pd_func.c */
#define PD_ARCH_UNHOOK_H "arch/x86/unhook.h" /* for pd_func.c */
#define PD_ARCH_HOST_H "arch/x86/host.h"     /* for pd_internal.h */
#define PD_ARGS_ON_STACK 1 /* *_arg() beyond the argument registers: the caller's stack */
#define PD_ARCH_COUNTER_H "arch/x86_64/counter.h" /* for pd_runtime.h */
#define PD_ARCH_WALK_H "arch/x86/walk.h"         /* for pd_usym.c */
#define PD_ARCH_GOT_H "arch/x86_64/got.h"        /* for pd_got.c */
#define PD_ARCH_RET_FAST 1 /* x86_64_ret.S tries pd_ret_fast (pd_func.c) first */

typedef uint64_t pd_ureg;

static const int pd_gregs_by_dwarf[PD_NREGS] = {
    REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP,
    REG_R8, REG_R9, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP,
};

/* glibc keeps the TCB's own address at %fs:0; that is the %fs base that
 * `%fs:x@tpoff` operands are relative to. */
static inline uintptr_t pd_thread_pointer(void)
{
    uintptr_t tp;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
    return tp;
}

/* The same for PD_FAST_FN code, into which gcc does not inline pd_thread_pointer (another
 * target); not volatile: it may be shared. */
static inline PD_FAST_FN uintptr_t pd_fast_thread_pointer(void)
{
    uintptr_t tp;
    __asm__("mov %%fs:0, %0" : "=r"(tp));
    return tp;
}

#include "../x86/context.h"

#endif
