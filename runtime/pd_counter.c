/* Per-thread counter slots: `n++` / `x += v` without a lock prefix.
 *
 * A scalar the translator proves is only ever updated by `x++`, `x--`, `x += v` or
 * `x -= v` statements keeps its base int64 (initial values from the launcher or
 * pydyn-run NAME=VALUE; the adds of threads without a slot, atomically) and gets a
 * slot in each thread's block of the counter area: PD_PSTAT_SLOTS blocks of `stride`
 * bytes (a cache line or more, so threads do not share a line), block k-1 for the
 * statistic slot k the thread claims from the header's bitmap (pd_pstat.c), shared by
 * every process, m64 and m32 alike.  The owner is the block's only writer, so it adds
 * with a plain load and store (pd_counter_add).  x86-64 stores the 64-bit value whole.
 * i386 cannot (general registers only), so a block starts with a sequence word: an add
 * that changes only the low half is one 32-bit store; one that changes the high half
 * (a carry every 2^32 `n++`, a negative or wide v) makes the word odd, stores low then
 * high half and makes it even again (pd_counter_wide; x86 keeps stores in order).  A
 * reader takes the word, a 64-bit atomic load of the value and the word again, and
 * retries while it was odd or changed: a value it returns is one the slot held.  aarch64
 * writers keep the atomic add on the base, so they never claim.  A reader sums the base
 * and every block up to the slots' high-water mark, so any ABI sees every other's adds.
 * A slot given back at thread exit and claimed again keeps accumulating: a sum does not
 * care.
 */
#include "pd_runtime.h"

#include "pd_seq.h"

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
#ifdef PD_ARCH_COUNTER_SLOTS
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

/* The owner's add that changes the high half (i386): inside an odd sequence word. */
PD_FAST_FN void pd_counter_wide(int64_t *blk, uint32_t at, int64_t v)
{
    uint32_t *seq = &((struct pd_counter_blk *)blk)->seq, *w = (uint32_t *)((uint8_t *)blk + at);
    uint64_t n = ((uint64_t)w[1] << 32 | w[0]) + (uint64_t)v;
    uint32_t q = pd_seq_write_begin(seq);
    __atomic_store_n(&w[0], (uint32_t)n, __ATOMIC_RELAXED);
    __atomic_store_n(&w[1], (uint32_t)(n >> 32), __ATOMIC_RELAXED);
    pd_seq_write_end(seq, q);
}

/* One block's counter (pd_seq.h): a 64-bit atomic load, as x86-64 owners store whole. */
static int64_t pd_counter_slot(const uint8_t *blk, uint32_t at)
{
    const uint32_t *seq = &((const struct pd_counter_blk *)blk)->seq;
    for (int tries = 0;; tries++) {
        uint32_t q = pd_seq_read_begin(seq, &tries);
        int64_t v = __atomic_load_n((const int64_t *)(blk + at), __ATOMIC_RELAXED);
        if (!pd_seq_read_retry(seq, q, tries))
            return v;
    }
}

/* Base + every slot up to the high-water mark; `at` is the counter's offset in a block
 * of the area, which starts `area` bytes into the globals. */
int64_t pd_counter_read(const uint8_t *globals, uint32_t base, uint32_t area, uint32_t at,
                        uint32_t stride)
{
    struct pd_header *h = pd_segment_header();
    uint32_t hw = h ? __atomic_load_n(&h->stat_slots_hw, __ATOMIC_ACQUIRE) : 0;
    if (hw > PD_PSTAT_SLOTS + 1)
        hw = PD_PSTAT_SLOTS + 1;
    uint64_t sum = (uint64_t)__atomic_load_n((const int64_t *)(globals + base), __ATOMIC_RELAXED);
    for (uint32_t k = 1; k < hw; k++)
        sum += (uint64_t)pd_counter_slot(globals + area + (size_t)(k - 1) * stride, at);
    return (int64_t)sum;
}
