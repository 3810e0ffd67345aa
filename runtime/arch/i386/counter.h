/* x += v on a counter of the thread's own slot block (pd_runtime.h's pd_counter_add),
 * single writer: an add that leaves the high half as it is (a carry-free n++) is one
 * 32-bit store, which a reader's 64-bit load sees whole; anything else goes through
 * pd_counter_wide's sequence word. */
#ifndef PD_ARCH_COUNTER_H_
#define PD_ARCH_COUNTER_H_

#define PD_ARCH_COUNTER_SLOTS 1 /* threads add to slot blocks (pd_counter.c) */

static inline PD_FAST_FN void pd_counter_slot_add(int64_t *s, uint32_t at, int64_t v)
{
    uint32_t *lo = (uint32_t *)((uint8_t *)s + at), old = *lo, n;
    uint64_t u = (uint64_t)v;
    if (PD_LIKELY(u >> 32 == 0 ? !__builtin_add_overflow(old, (uint32_t)u, &n)
                               : -u >> 32 == 0 && !__builtin_sub_overflow(old, (uint32_t)-u, &n)))
        __atomic_store_n(lo, n, __ATOMIC_RELAXED);
    else
        pd_counter_wide(s, at, v);
}

#endif
