/* Unwinding through hooked aarch64 frames, included by pd_func.c.
 *
 * On x86 the hooked return address sits at the entry's sp, where pd_func_hook swapped
 * it.  An aarch64 function gets pd_ret_tramp in x30 and saves it (signed first by a
 * `paciasp` at its entry, with sp = the entry's) wherever its prologue puts it: only
 * its CFI says where.  So pd_shadow_unhook has libgcc walk the thread's stack
 * (pd_a64_unhook_walk, pd_unwind.c): at a frame that returns to pd_ret_tramp the
 * unwinder holds the address of the slot it read, and pd_shadow_a64_fix writes the
 * real return address there -- unsigned during the walk (pd_ret_tramp's FDE reads it as
 * is, so the same walk goes on to the next hooked frame: one walk, however deep),
 * signed like the original afterwards -- and records slot and key on the shadow entry,
 * so pd_shadow_rehook can put pd_ret_tramp back.  Whether and with which key the frame
 * signed comes from its FDE (pd_unwind.c): a signature may be 0.  A frame whose slot
 * holds anything but pd_ret_tramp so signed is left alone (an unwinder stops there). */
#include "frames.h"

static inline uintptr_t *pd_a64_slot(const struct pd_shadow *e, int *key)
{
    *key = (int)(e->arch.slot & 7);
    return (uintptr_t *)(e->arch.slot & ~(uintptr_t)7);
}

int pd_shadow_a64_fix(uint32_t *cursor, uintptr_t cfa, uintptr_t *slot, int key)
{
    PD_THR(t);
    uintptr_t at = cfa - sizeof(pd_ureg);
    uint32_t k = *cursor;
    /* the walk goes outwards: entries deeper than this frame were passed (or never met) */
    while (k > 0 && t->stk[k - 1].at < at)
        k--;
    *cursor = k;
    /* a tail call's entry holds pd_ret_tramp: the outer one of its slot has the real address */
    for (; k > 0 && t->stk[k - 1].at == at; k--) {
        struct pd_shadow *e = &t->stk[k - 1];
        if (e->ret == (uintptr_t)pd_ret_tramp)
            continue;
        if (*slot != pd_a64_pac((uintptr_t)pd_ret_tramp, cfa, key))
            return 0;
        e->arch.slot = (uintptr_t)slot | (uintptr_t)key;
        *slot = e->ret;
        return 1;
    }
    return 0;
}

void pd_shadow_unhook(uintptr_t cfa)
{
    PD_THR(t);
    pd_shadow_drop_dead(t, cfa);
    uint32_t cursor = t->n;
    if (cursor == 0 || !pd_a64_unhook_walk(&cursor))
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        struct pd_shadow *e = &t->stk[i];
        int key;
        uintptr_t *slot = pd_a64_slot(e, &key);
        if (slot && *slot == e->ret) /* written by this walk: sign it as the frame will check */
            *slot = pd_a64_pac(e->ret, e->at + sizeof(pd_ureg), key);
    }
}

void pd_shadow_rehook(uintptr_t cfa)
{
    PD_THR(t);
    pd_shadow_drop_dead(t, cfa);
    for (uint32_t i = 0; i < t->n; i++) {
        struct pd_shadow *e = &t->stk[i];
        int key;
        uintptr_t *slot = pd_a64_slot(e, &key), mod = e->at + sizeof(pd_ureg);
        if (slot && *slot == pd_a64_pac(e->ret, mod, key))
            *slot = pd_a64_pac((uintptr_t)pd_ret_tramp, mod, key);
        e->arch.slot = 0;
    }
}

/* A -x detach leaves aarch64 frames hooked: pd_ret_tramp's FDE stays registered
 * (pd_unwind.c), so an unwinder still walks through them. */
uint32_t pd_shadow_unhook_all(void) { return 0; }
