/* What x86-64 and i386 share: the register context filled from a ucontext,
 * and int3 traps.  The arch header defines PD_NREGS, pd_ureg,
 * pd_gregs_by_dwarf (the ucontext slot of each DWARF register), PD_GREG_IP and
 * pd_thread_pointer() before including this. */
#ifndef PD_ARCH_X86_CONTEXT_H
#define PD_ARCH_X86_CONTEXT_H

#define PD_TRAP_LEN 1

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

/* A guru-mode handler's write to a variable in a register (pd_store_arg). */
static inline void pd_set_reg(struct pd_regs *regs, int dwarfno, pd_ureg v)
{
    if ((unsigned)dwarfno < PD_NREGS)
        regs->r[dwarfno] = v;
}

static inline void pd_regs_from_ucontext(struct pd_regs *regs, const ucontext_t *uc)
{
    for (int i = 0; i < PD_NREGS; i++)
        regs->r[i] = (pd_ureg)uc->uc_mcontext.gregs[pd_gregs_by_dwarf[i]];
    regs->flags = (pd_ureg)uc->uc_mcontext.gregs[REG_EFL];
}

/* A trapped probe's registers back into the context the thread resumes with: what a
 * handler wrote ($var = v in guru mode) and a hooked return.  Not sp and ip, which
 * the trap sets itself. */
static inline void pd_regs_to_ucontext(ucontext_t *uc, const struct pd_regs *regs)
{
    for (int i = 0; i < PD_NREGS; i++)
        if (i != PD_DWARF_SP && i != PD_DWARF_IP)
            uc->uc_mcontext.gregs[pd_gregs_by_dwarf[i]] = (greg_t)regs->r[i];
}

static inline uintptr_t pd_uc_get_ip(const ucontext_t *uc)
{
    return (uintptr_t)uc->uc_mcontext.gregs[PD_GREG_IP];
}

static inline void pd_uc_set_ip(ucontext_t *uc, uintptr_t ip)
{
    uc->uc_mcontext.gregs[PD_GREG_IP] = (greg_t)ip;
}

/* int3 reports the address after itself. */
static inline uintptr_t pd_trap_site_from_ip(uintptr_t ip) { return ip - PD_TRAP_LEN; }

static inline void pd_write_trap(uint8_t *at) { at[0] = 0xcc; }

/* Whether the len bytes at p are a nop: sdt.h emits `nop` (90); 66 90 and the
 * multi-byte [66]* 0f 1f ... forms are nops too. */
static inline int pd_arch_is_nop(const uint8_t *p, unsigned len)
{
    if (len == 1)
        return p[0] == 0x90;
    unsigned i = 0;
    while (i < len && p[i] == 0x66)
        i++;
    return (i < len && p[i] == 0x90 && i + 1 == len) ||
           (i + 1 < len && p[i] == 0x0f && p[i + 1] == 0x1f);
}

/* x86 keeps instruction and data caches coherent. */
static inline void pd_flush_icache(void *start, void *end) { (void)start; (void)end; }

#endif
