/* Frames whose return address is hooked (aarch64): pointer authentication
 * and what pd_func.c (arch/aarch64/unhook.h) and pd_unwind.c share.
 *
 * A function built with -mbranch-protection=pac-ret signs x30 (`paciasp`, or `pacibsp`
 * with the B key) with sp at its entry as the modifier before it saves it, and
 * authenticates it before `ret`.  These use the HINT-space forms (x17 signed with x16,
 * x30 stripped), which are NOPs on a cpu without PAC, so one build serves both. */
#ifndef PD_A64_FRAMES_H
#define PD_A64_FRAMES_H
#include <stdint.h>

enum { PD_PAC_NONE, PD_PAC_A, PD_PAC_B };

/* v signed with `mod` under `key` (as paciasp/pacibsp would with sp = mod). */
static inline uintptr_t pd_a64_pac(uintptr_t v, uintptr_t mod, int key)
{
    register uintptr_t x17 __asm__("x17") = v;
    register uintptr_t x16 __asm__("x16") = mod;
    if (key == PD_PAC_A)
        __asm__("hint #8" : "+r"(x17) : "r"(x16)); /* pacia1716 */
    else if (key == PD_PAC_B)
        __asm__("hint #10" : "+r"(x17) : "r"(x16)); /* pacib1716 */
    return x17;
}

/* A saved return address without its signature (xpaclri). */
static inline uintptr_t pd_a64_strip(uintptr_t v)
{
    register uintptr_t x30 __asm__("x30") = v;
    __asm__("hint #7" : "+r"(x30)); /* xpaclri */
    return x30;
}

/* pd_unwind.c: libgcc walks this thread's stack; for each frame that returns to
 * pd_ret_tramp, with `cfa` its entry sp, x30 saved at `slot` and signed with `key`
 * (PD_PAC_*), it calls pd_shadow_a64_fix(cursor, ...) (arch/aarch64/unhook.h), which
 * writes the real return address there.  Returns 0 if libgcc is not to be had. */
int pd_a64_unhook_walk(uint32_t *cursor);
int pd_shadow_a64_fix(uint32_t *cursor, uintptr_t cfa, uintptr_t *slot, int key);
#endif
