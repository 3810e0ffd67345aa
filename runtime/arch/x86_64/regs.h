/* x86-64 register context and trap mechanics.  Everything the runtime knows
 * about this arch lives here; generated code only sees struct pd_regs through
 * pd_reg() with DWARF register numbers (the numbering sdt.h operands and the
 * launcher's argument descriptors use). */
#ifndef PD_ARCH_REGS_H
#define PD_ARCH_REGS_H
#include <stdint.h>
#include <ucontext.h>

#define PD_ARCH_ABI PD_ABI_X86_64
#define PD_ARCH_NAME "x86_64"
#define PD_TRAP_LEN 1
#define PD_NREGS 17 /* DWARF 0..16: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip */
#define PD_DWARF_SP 7
#define PD_DWARF_IP 16

typedef uint64_t pd_ureg;

/* A trampoline pushes registers in exactly this order, so trap and trampoline
 * hand the handler the same context. */
struct pd_regs {
    pd_ureg r[PD_NREGS];
    pd_ureg flags;
};

static inline pd_ureg pd_reg(const struct pd_regs *regs, int dwarfno)
{
    return (unsigned)dwarfno < PD_NREGS ? regs->r[dwarfno] : 0;
}

static const int pd_gregs_by_dwarf[PD_NREGS] = {
    REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP,
    REG_R8, REG_R9, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP,
};

static inline void pd_regs_from_ucontext(struct pd_regs *regs, const ucontext_t *uc)
{
    for (int i = 0; i < PD_NREGS; i++)
        regs->r[i] = (pd_ureg)uc->uc_mcontext.gregs[pd_gregs_by_dwarf[i]];
    regs->flags = (pd_ureg)uc->uc_mcontext.gregs[REG_EFL];
}

static inline uintptr_t pd_uc_get_ip(const ucontext_t *uc)
{
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
}

static inline void pd_uc_set_ip(ucontext_t *uc, uintptr_t ip)
{
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)ip;
}

/* int3 reports the address after itself. */
static inline uintptr_t pd_trap_site_from_ip(uintptr_t ip) { return ip - PD_TRAP_LEN; }

static inline void pd_write_trap(uint8_t *at) { at[0] = 0xcc; }

/* glibc keeps the TCB's own address at %fs:0; that is the %fs base that
 * `%fs:x@tpoff` operands are relative to. */
static inline uintptr_t pd_thread_pointer(void)
{
    uintptr_t tp;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
    return tp;
}

static inline void pd_flush_icache(void *start, void *end) { (void)start; (void)end; }

#endif
