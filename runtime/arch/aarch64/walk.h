/* How pd_usym.c's backtrace walk finds a frame's return address on aarch64: where the
 * CFA row says x30 went, else x30 itself in the first frame; its PAC signature stripped. */
#ifndef PD_ARCH_WALK_H_
#define PD_ARCH_WALK_H_
#include "frames.h"

#define PD_DWARF_FP 29
#define PD_LEAF_CFA 1 /* at a function's entry the CFA is sp, x30 the return address */

/* The return address of the frame `n` (1: the probe's) whose CFA is `cfa`, by row r. */
static inline int pd_walk_ra(const struct pd_regs *regs, const struct pd_cfarow *r,
                             uintptr_t cfa, unsigned n, uintptr_t *ra)
{
    if (!r->ra_off) {
        *ra = (uintptr_t)regs->r[30];
        return n == 1; /* an outer frame has saved x30 before its call */
    }
    const void *slot = (const void *)(cfa + (intptr_t)r->ra_off);
    if (pd_read_self(ra, slot, sizeof *ra) != (ssize_t)sizeof *ra)
        return 0;
    *ra = pd_a64_strip(*ra);
    return 1;
}

#endif
