/* How pd_usym.c's backtrace walk finds a frame's return address on x86-64 and i386:
 * the word a call pushed below the CFA. */
#ifndef PD_ARCH_WALK_H_
#define PD_ARCH_WALK_H_

#define PD_DWARF_FP (sizeof(void *) == 8 ? 6 : 5) /* rbp / ebp */
#define PD_LEAF_CFA 0 /* a call pushed the return address: the CFA is above sp */

/* The return address of the frame `n` (1: the probe's) whose CFA is `cfa`, by row r. */
static inline int pd_walk_ra(const struct pd_regs *regs, const struct pd_cfarow *r,
                             uintptr_t cfa, unsigned n, uintptr_t *ra)
{
    (void)regs, (void)r, (void)n;
    return pd_read_self(ra, (const void *)(cfa - sizeof *ra), sizeof *ra) == (ssize_t)sizeof *ra;
}

#endif
