/* Sequence words (seqlocks) over per-thread slots with one writer each: pd_pstat.c's
 * statistic slots and pd_counter.c's i386 counter blocks.  The writer makes the word
 * odd, writes, makes it even; a reader copies between two reads of the word and
 * retries while it was odd or changed.  A writer killed mid-update leaves its word
 * odd forever: after PD_SEQ_READ_TRIES the copy is taken as it is.  The writer's half
 * is PD_FAST_FN (pd_runtime.h first), so FAST handlers inline it. */
#ifndef PD_SEQ_H
#define PD_SEQ_H

#include <sched.h>
#include <stdint.h>

#define PD_SEQ_READ_TRIES 10000

static inline PD_FAST_FN uint32_t pd_seq_write_begin(uint32_t *seq)
{
    uint32_t q = *seq; /* the only writer */
    __atomic_store_n(seq, q + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return q;
}

static inline PD_FAST_FN void pd_seq_write_end(uint32_t *seq, uint32_t q)
{
    __atomic_store_n(seq, q + 2, __ATOMIC_RELEASE);
}

/* The word once even (or the tries are used up); counts the tries spent waiting. */
static inline uint32_t pd_seq_read_begin(const uint32_t *seq, int *tries)
{
    for (;; ++*tries) {
        uint32_t q = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (!(q & 1) || *tries >= PD_SEQ_READ_TRIES)
            return q;
        if (*tries > 100)
            sched_yield();
    }
}

/* After the copy: whether it must be taken again. */
static inline int pd_seq_read_retry(const uint32_t *seq, uint32_t q, int tries)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(seq, __ATOMIC_RELAXED) != q && tries < PD_SEQ_READ_TRIES;
}

#endif
