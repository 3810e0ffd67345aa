/* x86 (x86-64 and i386) function probes, included by pd_func.c: where a hooked
 * function's return address is.  `call` pushed it: it is the word at the stack
 * pointer of the function's entry, which pd_func_hook swaps for pd_ret_tramp and
 * pd_ret_tramp finds just below its own stack pointer. */
#ifndef PD_ARCH_FUNC_H_
#define PD_ARCH_FUNC_H_

/* always_inline: pd_func_hook, on the hot path of every hooked call, compiles as if
 * these were written in place (gcc's early inliner otherwise allocates its registers
 * differently). */

/* A FAST probe's stub builds no pd_regs (x86_tramp.c): pd_func_fire_sp. */
#define PD_ARCH_FIRE_SP 1

/* What a shadow entry keeps besides the return address and its slot: nothing. */
struct pd_ret_arch {};

/* The return address of the function entered with stack pointer `sp` (regs may be
 * NULL: a FAST stub builds none), and the address its shadow entry keys on. */
static inline __attribute__((always_inline)) pd_ureg *
pd_ret_slot(const struct pd_regs *regs, uintptr_t sp)
{
    (void)regs;
    return (pd_ureg *)sp;
}

static inline __attribute__((always_inline)) uintptr_t pd_ret_at(uintptr_t sp) { return sp; }

static inline void pd_ret_arch_init(struct pd_ret_arch *a) { (void)a; }

/* The stack pointer after the return, from pd_ret_tramp's frame: just above the slot
 * it left for the return address, above its struct pd_regs. */
static inline uintptr_t pd_ret_sp(const struct pd_regs *regs)
{
    return (uintptr_t)(regs + 1) + sizeof(pd_ureg);
}

#endif
