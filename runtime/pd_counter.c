/* Per-thread counter slots: `n++` / `x += v` without a lock prefix (issue 6 item 3).
 *
 * A scalar the translator proves is only ever updated by `x++`, `x--`, `x += v` or
 * `x -= v` statements keeps its base int64 (initial values from the launcher or
 * pydyn-run NAME=VALUE; the adds of threads without a slot, atomically) and gets a
 * slot in each thread's block of the counter area: PD_PSTAT_SLOTS blocks of `stride`
 * bytes (a cache line or more, so threads do not share a line), block k-1 for the
 * statistic slot k the thread claims from the header's bitmap (pd_pstat.c), shared by
 * every process, m64 and m32 alike.  On x86-64 the owner adds with a plain load and
 * store (pd_counter_add); i386 and aarch64 writers keep the atomic add on the base, so
 * they never claim.  A reader sums the base and every block up to the slots' high-water
 * mark with 64-bit atomic loads, so an m32 reader sees m64 threads' adds.  A slot given
 * back at thread exit and claimed again keeps accumulating: a sum does not care.
 */
#include "pd_runtime.h"

/* The block pointer of this thread, or 1 without a slot: claims one (libc, TLS). */
static uintptr_t pd_counter_claim(uintptr_t globals, uintptr_t area, uintptr_t stride,
                                  uintptr_t unused)
{
    (void)unused;
    int k = pd_pslot_index();
    int64_t *s = k > 0 ? (int64_t *)(globals + area + (uintptr_t)(k - 1) * stride)
                       : (int64_t *)1;
    pd_in_handler.cslot = s;
    return (uintptr_t)s;
}

/* An add of a thread with no slot block yet (claimed through pd_xmm_call, as this runs
 * on the FAST path) or none to have: out of line, so the handler holds no lock prefix. */
PD_FAST_FN void pd_counter_slow(struct pd_ctx *c, uint32_t base, uint32_t at, uint32_t area,
                                uint32_t stride, int64_t v)
{
#if defined(__x86_64__)
    if (!c->cslot)
        c->cslot = (int64_t *)pd_xmm_call(pd_counter_claim, (uintptr_t)c->globals, area,
                                          stride, 0);
    if ((uintptr_t)c->cslot > 1) {
        pd_counter_add(c, base, at, area, stride, v);
        return;
    }
#else
    (void)at, (void)area, (void)stride;
#endif
    (void)__atomic_fetch_add((int64_t *)(c->globals + base), v, __ATOMIC_RELAXED);
}

/* Base + every slot up to the high-water mark; `at` is the counter's offset from the
 * globals in block 0 (the area plus its offset in a block). */
int64_t pd_counter_read(const uint8_t *globals, uint32_t base, uint32_t at, uint32_t stride)
{
    struct pd_header *h = pd_segment_header();
    uint32_t hw = h ? __atomic_load_n(&h->stat_slots_hw, __ATOMIC_ACQUIRE) : 0;
    if (hw > PD_PSTAT_SLOTS + 1)
        hw = PD_PSTAT_SLOTS + 1;
    uint64_t sum = (uint64_t)__atomic_load_n((const int64_t *)(globals + base), __ATOMIC_RELAXED);
    for (uint32_t k = 1; k < hw; k++)
        sum += (uint64_t)__atomic_load_n(
            (const int64_t *)(globals + at + (size_t)(k - 1) * stride), __ATOMIC_RELAXED);
    return (int64_t)sum;
}
