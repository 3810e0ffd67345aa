/* What a FAST handler (launcher/translate/fast.py) compiles in place: a clock read
 * through the thread's anchor and a statistic's add to the thread's own slot.  Inlined
 * into the handler, a statistic's add folds its descriptor -- a static const of the
 * generated file: which histogram, whether @variance keeps its state -- to the few
 * updates that statistic needs, and a clock read is a cycle count, a multiply and the
 * thread's last read; both find the FAST TLS block in the context (c->tls).
 * What they cannot do with general registers (a new clock anchor, a slot to claim)
 * goes out of line to pd_clock.c and pd_fastval.c.  The runtime's own statistic adds
 * (pd_stat_add: pd_pstat.c, pd_kstat.c, a locked statistic) are this code out of
 * line.  Included by pd_runtime.h. */
#ifndef PD_FAST_H
#define PD_FAST_H

#include "pd_seq.h"

#define PD_INLINE_FAST static inline __attribute__((always_inline)) PD_FAST_FN

/* ---- statistics -------------------------------------------------------------- */

/* stap's log2 histogram: bucket 64 holds 0, 64+k holds [2^(k-1), 2^k), and 64-k the
 * negatives mirrored (bits is at most 63 above 0 and 64 below: no bucket is out of
 * range). */
PD_INLINE_FAST int pd_hist_log_bucket(int64_t v)
{
    _Static_assert(PD_HIST_LOG_BUCKETS / 2 == 64, "stap's buckets: 64 either side of 0");
    if (v == 0)
        return PD_HIST_LOG_BUCKETS / 2;
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int bits = 64 - __builtin_clzll(m);
    return v < 0 ? PD_HIST_LOG_BUCKETS / 2 - bits : PD_HIST_LOG_BUCKETS / 2 + bits;
}

/* stap's __stp_stat_add: Welford's running variance in integers, with its truncation
 * drift (the 32-bit `delta` included), so @variance matches stap.  d NULL: no
 * histogram, the variance kept. */
PD_INLINE_FAST void pd_stat_add_in(struct pd_stat *s, int64_t v, const struct pd_statdesc *d)
{
    int64_t vs = d ? (int64_t)((uint64_t)v << d->shift) : v;
    if (PD_UNLIKELY(s->count == 0)) {
        s->count = 1;
        s->sum = s->min = s->max = v;
        s->avg_s = vs;
        s->m2 = 0;
        s->variance_s = 0;
    } else {
        s->count++;
        s->sum = (int64_t)((uint64_t)s->sum + (uint64_t)v);
        if (v > s->max)
            s->max = v;
        if (v < s->min)
            s->min = v;
        if (!d || d->variance) {
            int32_t delta = (int32_t)(uint32_t)((uint64_t)vs - (uint64_t)s->avg_s);
            s->avg_s = (int64_t)((uint64_t)s->avg_s + (uint64_t)(delta / s->count));
            s->m2 = (int64_t)((uint64_t)s->m2 + (uint64_t)((int64_t)delta *
                                                           (int64_t)((uint64_t)vs -
                                                                     (uint64_t)s->avg_s)));
            s->variance_s = s->m2 / (s->count - 1);
        }
    }
    if (d && d->hist_log) {
        s->hist[pd_hist_log_bucket(v)]++;
    } else if (d && d->hist_linear) {
        int64_t nb = (d->hi - d->lo) / d->step + 3; /* underflow, buckets, overflow */
        int64_t b = v < d->lo ? 0 : (int64_t)(((uint64_t)v - (uint64_t)d->lo) / (uint64_t)d->step) + 1;
        if (b >= nb)
            b = nb - 1;
        if (b < PD_HIST_MAX_BUCKETS)
            s->hist[b]++;
    }
}

/* `s <<< v` when this thread has a slot (pd_pstat.c), else out of line: the slot to
 * claim, or slot 0 under its lock. */
PD_HIDDEN PD_FAST_FN void pd_fast_pstat_add_slow(struct pd_ctx *c, uint8_t *area, int64_t v,
                                                 const struct pd_statdesc *d);
PD_INLINE_FAST void pd_fast_pstat_add(struct pd_ctx *c, uint8_t *area, int64_t v,
                                      const struct pd_statdesc *d)
{
    int k = c->tls->pslot;
    if (PD_UNLIKELY(k <= 0)) {
        pd_fast_pstat_add_slow(c, area, v, d);
        return;
    }
    struct pd_pslot_head *h = (struct pd_pslot_head *)(area + (size_t)k * PD_PSTAT_SLOT_SIZE);
    uint32_t q = pd_seq_write_begin(&h->seq);
    pd_stat_add_in((struct pd_stat *)(h + 1), v, d);
    pd_seq_write_end(&h->seq, q);
}

/* ---- clocks (pd_clock.c) --------------------------------------------------------- */

/* The clock read through the thread's anchor, or -1 past it.  The anchor's span is
 * below 2^32 cycles (pd_clock.c), so the elapsed count is a 32-bit number: one
 * 32 x 64-bit multiply (two multiplies on i386, not three). */
PD_INLINE_FAST int64_t pd_clock_interp(const struct pd_clock_anchor *a, int realtime)
{
#ifdef PD_ARCH_CYCLES_CLOCKSOURCE
    uint64_t d = pd_cycles() - a->cyc;
    if (PD_LIKELY(d < a->span))
        return a->ns[realtime] + (int64_t)(((uint64_t)(uint32_t)d * a->mult) >> 32);
#else
    (void)a, (void)realtime;
#endif
    return -1;
}

#define PD_CLOCK_JITTER_NS 1000 /* a realtime read this much behind the last is kept
                                 * back at it; further behind, the clock was set */

/* v as this thread's next read of the clock: never behind its last one. */
PD_INLINE_FAST int64_t pd_clock_forward(struct pd_clock_anchor *a, int realtime, int64_t v)
{
    int64_t last = a->last[realtime];
    if (PD_UNLIKELY(v < last) && (!realtime || last - v < PD_CLOCK_JITTER_NS))
        v = last;
    a->last[realtime] = v;
    return v;
}

/* A read past the anchor: a new one (libc's clock_gettime, with the vector registers
 * saved), then forward. */
PD_HIDDEN PD_FAST_FN int64_t pd_fast_gettime_slow(struct pd_clock_anchor *a, int realtime);

/* gettimeofday_ns() (1) and local_clock_ns() (0) in a FAST handler. */
PD_INLINE_FAST int64_t pd_fast_gettime_ns(const struct pd_ctx *c, int clock_realtime)
{
    int rt = clock_realtime != 0;
    struct pd_clock_anchor *a = &c->tls->clock;
    int64_t v = pd_clock_interp(a, rt);
    if (PD_UNLIKELY(v < 0))
        return pd_fast_gettime_slow(a, rt);
    return pd_clock_forward(a, rt, v);
}

#endif
