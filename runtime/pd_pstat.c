/* Per-thread statistic slots: `s <<< v` without the globals lock.
 *
 * A scalar statistic the translator proves is only ever added to (never
 * deleted) gets PD_PSTAT_SLOTS + 1 slots in the globals area instead of one
 * struct pd_stat.  Each thread claims a small index once (a bit of the
 * header's stat_slots bitmap, shared by every process of the session, m64 and
 * m32 alike) and adds to its own slot of every such statistic: single writer,
 * no lock, no atomic read-modify-write.  A per-slot sequence word lets
 * readers (@count..., @hist_*, the exit report) copy a consistent snapshot
 * while the owner keeps writing; the merge is what stap's _stp_stat_get does
 * over its per-CPU copies.  Threads beyond PD_PSTAT_SLOTS use slot 0, whose
 * writers serialise on its own lock word (never the globals lock).
 *
 * A slot is released when its thread exits (a pthread key destructor) and a
 * later thread continues it: sums, counts and histograms just accumulate.
 * Slots of a process killed by a signal stay claimed until the session ends.
 */
#include "pd_runtime.h"
#include "pd_lock.h"
#include "pd_seq.h"

#include <pthread.h>
#include <string.h>

struct pd_pslot {
    struct pd_pslot_head h; /* pd_shm.h: seq, lock */
    struct pd_stat s;
};
_Static_assert(sizeof(struct pd_pslot) == PD_PSTAT_SLOT_SIZE, "pd_pslot is arch-neutral");

/* 0: not claimed yet, -1: none was free (use slot 0), k: owns slot k.  In the FAST
 * path's TLS block, which pd_fast_pstat_add reads without a TLS descriptor call. */
#define pd_pslot_mine (pd_in_handler.pslot)
static pthread_key_t pd_pslot_key;
static int pd_pslot_key_state; /* 0 none, 1 creating, 2 created */

static inline struct pd_pslot *pd_pslot_at(uint8_t *area, int k)
{
    return (struct pd_pslot *)(area + (size_t)k * PD_PSTAT_SLOT_SIZE);
}

static void pd_pslot_release(void *v)
{
    struct pd_header *h = pd_segment_header();
    int k = (int)(intptr_t)v;
    /* not this session's claim (pd_slots_rejoin forgot it): not this thread's bit now */
    int mine = pd_pslot_mine == k;
    /* a probe later in this thread's exit must not write the slot a new thread may own */
    pd_pslot_mine = -1;
    pd_in_handler.cslot = (int64_t *)1;
    pd_in_handler.inflight = (uint32_t *)1; /* pd_quiesce.c: the header's count */
    if (h && k > 0 && mine) {
        pd_quiesce_disown(k);
        __atomic_fetch_and(&h->stat_slots, ~((uint64_t)1 << (k - 1)), __ATOMIC_RELEASE);
    }
}

PD_FAST_FN void pd_slots_rejoin(struct pd_fast_tls *t, uint32_t epoch)
{
    pd_pslot_mine = 0;
    t->cslot = NULL;
    t->inflight = NULL;
    t->slots_epoch = epoch;
}

/* fork(): the child's thread must not write into its parent thread's slot, nor
 * release it when it exits. */
static void pd_pslot_atfork_child(void)
{
    pd_pslot_mine = 0;
    pd_in_handler.cslot = NULL; /* pd_counter.c: the parent thread's block */
    pd_in_handler.inflight = NULL; /* pd_quiesce.c: and its busy word */
    if (__atomic_load_n(&pd_pslot_key_state, __ATOMIC_ACQUIRE) == 2)
        pthread_setspecific(pd_pslot_key, NULL);
}

void pd_pstat_setup(void)
{
    int expect = 0;
    if (!__atomic_compare_exchange_n(&pd_pslot_key_state, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    pthread_atfork(NULL, NULL, pd_pslot_atfork_child);
    /* without a key slots are still correct, only never given back */
    __atomic_store_n(&pd_pslot_key_state, pthread_key_create(&pd_pslot_key, pd_pslot_release) == 0
                                              ? 2 : 3, __ATOMIC_RELEASE);
}

static int pd_pslot_claim(void)
{
    struct pd_header *h = pd_segment_header();
    pd_pstat_setup();
    uint64_t bits = __atomic_load_n(&h->stat_slots, __ATOMIC_RELAXED);
    while (~bits) {
        int k = __builtin_ctzll(~bits) + 1;
        if (k > PD_PSTAT_SLOTS)
            break;
        if (__atomic_compare_exchange_n(&h->stat_slots, &bits, bits | ((uint64_t)1 << (k - 1)), 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            uint32_t hw = __atomic_load_n(&h->stat_slots_hw, __ATOMIC_RELAXED);
            while (hw < (uint32_t)k + 1 &&
                   !__atomic_compare_exchange_n(&h->stat_slots_hw, &hw, (uint32_t)k + 1, 0,
                                                __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                ;
            if (__atomic_load_n(&pd_pslot_key_state, __ATOMIC_ACQUIRE) == 2)
                pthread_setspecific(pd_pslot_key, (void *)(intptr_t)k);
            return k;
        }
    }
    __atomic_add_fetch(&h->stat_slot_fallbacks, 1, __ATOMIC_RELAXED);
    return -1;
}

/* This thread's slot index, claimed on first use: 1..PD_PSTAT_SLOTS, or 0 when it
 * shares slot 0 (keyed statistics, pd_kstat.c, use the same index). */
int pd_pslot_index(void)
{
    int k = pd_pslot_mine;
    if (PD_UNLIKELY(k == 0))
        k = pd_pslot_mine = pd_pslot_claim();
    return k > 0 ? k : 0;
}

/* Takes a statistic slot's own lock word: 0, or -1 with an error (never hangs). */
int pd_slot_lock(struct pd_ctx *c, uint32_t *w)
{
    int rc = pd_lock(w);
    if (rc == PD_LOCK_DEADLOCK) { /* cannot happen outside a nested handler; never hang */
        if (c)
            pd_error(c, "statistic slot lock held by this thread");
        return -1;
    }
    if (rc == PD_LOCK_TIMEOUT) { /* its holder is stopped or stuck: the handler is half done */
        __atomic_add_fetch(&pd_segment_header()->lock_timeouts, 1, __ATOMIC_RELAXED);
        if (c)
            pd_error(c, "statistic slot lock held by a stopped or stuck thread");
        return -1;
    }
    if (rc == PD_LOCK_RECOVERED)
        __atomic_add_fetch(&pd_segment_header()->lock_recoveries, 1, __ATOMIC_RELAXED);
    return 0;
}

void pd_pstat_add(struct pd_ctx *c, uint8_t *area, int64_t v, const struct pd_statdesc *d)
{
    int k = pd_pslot_index();
    struct pd_pslot *ps = pd_pslot_at(area, k);
    if (k == 0 && pd_slot_lock(c, &ps->h.lock) < 0)
        return;
    uint32_t q = pd_seq_write_begin(&ps->h.seq); /* readers retry across it */
    pd_stat_add(&ps->s, v, d);
    pd_seq_write_end(&ps->h.seq, q);
    if (k == 0)
        pd_unlock(&ps->h.lock);
}

/* A consistent copy of one slot (pd_seq.h). */
static void pd_pslot_snapshot(const struct pd_pslot *ps, struct pd_stat *out)
{
    for (int tries = 0;; tries++) {
        uint32_t q = pd_seq_read_begin(&ps->h.seq, &tries);
        memcpy(out, &ps->s, sizeof *out);
        if (!pd_seq_read_retry(&ps->h.seq, q, tries))
            return;
    }
}

/* The merged statistic, valid until this thread's next pd_pstat_read (the
 * generated code uses it at once).  Exact for count, sum, min, max and the
 * histograms; @variance combines the slots as stap combines its per-CPU
 * copies, and equals the single-slot value when one thread did all the adds. */
const struct pd_stat *pd_pstat_read(const uint8_t *area)
{
    static __thread struct pd_stat agg, one;
    struct pd_header *h = pd_segment_header();
    uint32_t n = h ? __atomic_load_n(&h->stat_slots_hw, __ATOMIC_ACQUIRE) : 0;
    if (n > PD_PSTAT_SLOTS + 1)
        n = PD_PSTAT_SLOTS + 1;
    memset(&agg, 0, sizeof agg);
    int64_t cnt[PD_PSTAT_SLOTS + 1], avgs[PD_PSTAT_SLOTS + 1];
    uint32_t used = 0;
    uint64_t s2 = 0;
    for (uint32_t k = 0; k < (n ? n : 1); k++) {
        pd_pslot_snapshot((const struct pd_pslot *)(area + (size_t)k * PD_PSTAT_SLOT_SIZE), &one);
        cnt[used] = one.count;
        avgs[used] = one.avg_s;
        if (!one.count)
            continue;
        s2 += (uint64_t)(one.count - 1) * (uint64_t)one.variance_s;
        if (!used++) {
            memcpy(&agg, &one, sizeof agg);
            continue;
        }
        pd_stat_merge(&agg, &one, PD_HIST_MAX_BUCKETS);
    }
    if (used < 2)
        return &agg;
    /* _stp_stat_get: S1 = sum of count_i (avg_i - avg)^2, S2 = sum of (count_i - 1) var_i;
     * stored so that pd_stat_get's formula returns (S1 + S2) / (count - 1). */
    int64_t avg = agg.sum / agg.count;
    uint64_t s1 = 0;
    for (uint32_t i = 0; i < used; i++) {
        uint64_t dlt = (uint64_t)avgs[i] - (uint64_t)avg;
        s1 += (uint64_t)cnt[i] * dlt * dlt;
    }
    agg.avg_s = avg;
    agg.variance_s = (int64_t)(s1 + s2) / (agg.count - 1);
    return &agg;
}
