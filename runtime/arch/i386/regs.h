/* i386 register context and trap mechanics (see x86_64/regs.h). */
#ifndef PD_ARCH_REGS_H
#define PD_ARCH_REGS_H
#include <stdint.h>
#include <ucontext.h>

#define PD_ARCH_ABI PD_ABI_I386
#define PD_ARCH_NAME "i386"
#define PD_TRAP_LEN 1
#define PD_NREGS 9 /* DWARF 0..8: eax ecx edx ebx esp ebp esi edi eip */
#define PD_DWARF_SP 4
#define PD_DWARF_IP 8

typedef uint32_t pd_ureg;

struct pd_regs {
    pd_ureg r[PD_NREGS];
    pd_ureg flags;
};

static inline pd_ureg pd_reg(const struct pd_regs *regs, int dwarfno)
{
    return (unsigned)dwarfno < PD_NREGS ? regs->r[dwarfno] : 0;
}

/* REG_UESP is the user stack pointer; REG_ESP is pusha's copy, which is not. */
static const int pd_gregs_by_dwarf[PD_NREGS] = {
    REG_EAX, REG_ECX, REG_EDX, REG_EBX, REG_UESP, REG_EBP, REG_ESI, REG_EDI, REG_EIP,
};

static inline void pd_regs_from_ucontext(struct pd_regs *regs, const ucontext_t *uc)
{
    for (int i = 0; i < PD_NREGS; i++)
        regs->r[i] = (pd_ureg)uc->uc_mcontext.gregs[pd_gregs_by_dwarf[i]];
    regs->flags = (pd_ureg)uc->uc_mcontext.gregs[REG_EFL];
}

static inline uintptr_t pd_uc_get_ip(const ucontext_t *uc)
{
    return (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
}

static inline void pd_uc_set_ip(ucontext_t *uc, uintptr_t ip)
{
    uc->uc_mcontext.gregs[REG_EIP] = (greg_t)ip;
}

static inline uintptr_t pd_trap_site_from_ip(uintptr_t ip) { return ip - PD_TRAP_LEN; }

static inline void pd_write_trap(uint8_t *at) { at[0] = 0xcc; }

/* glibc's i386 TCB holds its own address at %gs:0 (`%gs:x@ntpoff` base). */
static inline uintptr_t pd_thread_pointer(void)
{
    uintptr_t tp;
    __asm__ volatile("mov %%gs:0, %0" : "=r"(tp));
    return tp;
}

static inline void pd_flush_icache(void *start, void *end) { (void)start; (void)end; }

#endif
