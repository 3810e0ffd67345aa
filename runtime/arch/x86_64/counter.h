/* x += v on a counter of the thread's own slot block (pd_runtime.h's pd_counter_add):
 * single writer, so a plain 64-bit load and store, no lock prefix. */
#ifndef PD_ARCH_COUNTER_H_
#define PD_ARCH_COUNTER_H_

#define PD_ARCH_COUNTER_SLOTS 1 /* threads add to slot blocks (pd_counter.c) */

static inline PD_FAST_FN void pd_counter_slot_add(int64_t *s, uint32_t at, int64_t v)
{
    int64_t *p = (int64_t *)((uint8_t *)s + at);
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

#endif
