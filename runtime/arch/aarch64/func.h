/* aarch64 function probes, included by pd_func.c: where a hooked function's return
 * address is.  It arrives in x30, which the stub or the trap handler restores from
 * pd_regs, and which pd_func_fire swaps before the function's first instruction runs
 * (before a `paciasp` there signs it).  The function's `ret` lands in pd_ret_tramp
 * (aarch64_stub.S) with sp as at its entry. */
#ifndef PD_ARCH_FUNC_H_
#define PD_ARCH_FUNC_H_

/* always_inline: pd_func_hook, on the hot path of every hooked call, compiles as if
 * these were written in place (gcc's early inliner otherwise allocates its registers
 * differently). */

/* while unhooked (unhook.h): where the frame saved x30, | its PAC key (pd_unwind.c) */
struct pd_ret_arch {
    uintptr_t slot;
};

/* x30 in the entry's pd_regs; the entry's shadow key is the word below sp, where
 * pd_ret_handler finds it too (sp at the return is sp at the entry).  Nothing is
 * stored there. */
static inline __attribute__((always_inline)) pd_ureg *
pd_ret_slot(const struct pd_regs *regs, uintptr_t sp)
{
    (void)sp;
    return &((struct pd_regs *)regs)->r[30];
}

static inline __attribute__((always_inline)) uintptr_t pd_ret_at(uintptr_t sp) { return sp - sizeof(pd_ureg); }

static inline void pd_ret_arch_init(struct pd_ret_arch *a) { a->slot = 0; }

/* pd_ret_tramp filled in sp. */
static inline uintptr_t pd_ret_sp(const struct pd_regs *regs)
{
    return (uintptr_t)regs->r[PD_DWARF_SP];
}

#endif
