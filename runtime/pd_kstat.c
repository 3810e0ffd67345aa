/* Keyed statistics with per-thread tables: `s[k] <<< v` without the globals lock
 * (the translator's side is launcher/kstat.py).
 *
 * stap keeps a statistic array as a pmap: one map per CPU, written by that CPU
 * alone, merged into an aggregate map when read (_stp_pmap_agg).  Here a thread
 * takes the slot index pd_pstat.c gives it (1..PD_PSTAT_SLOTS, shared by every
 * process of the session) and adds to its own table in the segment, under that
 * slot's lock word: uncontended except while a reader merges that slot.  Threads
 * whose index is above the statistic's slot count (the translator sizes tables
 * to a memory budget), or that found no index, share slot 0 under the same kind
 * of lock.  Each table holds max_entries keys, like each of stap's per-CPU maps:
 * a full one is stap's "Array overflow" error, counted, never a crash.
 *
 * Readers and `delete` hold the globals lock (so they exclude each other) and
 * take each slot's lock in turn; writers hold only their slot's.  New keys take
 * their insertion number from one counter shared by all the tables, so the merged
 * map keeps the session's first-insertion order for an unsorted foreach.
 *
 * Keyed counters (`c[k]++`, `c[k] += v` on an array nothing else writes) use the same
 * tables with one int64 sum a key: stap's locked map becomes a pmap of sums.
 */
#include "pd_runtime.h"
#include "pd_lock.h"

static inline struct pd_kstat *pd_kstat_hdr(uint8_t *area, const struct pd_kstatdesc *kd)
{
    return (struct pd_kstat *)(area + kd->kstat_off);
}

static inline struct pd_kslot *pd_kslot_at(uint8_t *area, const struct pd_kstatdesc *kd,
                                           uint32_t k)
{
    return (struct pd_kslot *)(area + kd->kstat_off + sizeof(struct pd_kstat) +
                               (size_t)k * kd->slot_stride);
}

static inline uint8_t *pd_kslot_map(struct pd_kslot *ks)
{
    return (uint8_t *)ks + sizeof *ks;
}

/* Slots a reader must visit: those of indices ever claimed (the high-water mark). */
static uint32_t pd_kstat_used(const struct pd_kstatdesc *kd)
{
    struct pd_header *h = pd_segment_header();
    uint32_t n = h ? __atomic_load_n(&h->stat_slots_hw, __ATOMIC_ACQUIRE) : 0;
    if (n < 1)
        n = 1;
    return n > kd->nslots + 1 ? kd->nslots + 1 : n;
}

/* A keyed counter (an array whose every write is `c[k] += v`, translate/analysis.py's
 * _find_kcount_globals) keeps one int64 sum a key in each table, not a pd_stat. */
static inline int pd_kstat_is_count(const struct pd_kstatdesc *kd)
{
    return kd->slot->value_type == PD_T_LONG;
}

void pd_kstat_add(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                  const uint8_t *key, int64_t v)
{
    uint32_t k = (uint32_t)pd_pslot_index();
    struct pd_kslot *ks = pd_kslot_at(area, kd, k > kd->nslots ? 0 : k);
    /* pd_lock's inline fast path first: this runs on every hit */
    if (PD_UNLIKELY(pd_trylock(&ks->lock) != PD_LOCK_OK) && pd_slot_lock(c, &ks->lock) < 0)
        return;
    void *val = pd_map_get_seq(c, pd_kslot_map(ks), kd->slot, key, 1,
                               &pd_kstat_hdr(area, kd)->next_seq);
    if (val && pd_kstat_is_count(kd)) /* NULL: the table is full, an error is set */
        *(int64_t *)val = (int64_t)((uint64_t)*(int64_t *)val + (uint64_t)v);
    else if (val)
        pd_stat_add(val, v, kd->slot->stat);
    pd_unlock(&ks->lock);
}

/* Merging one slot's value for a key into acc.  count, sum, min, max and buckets
 * add up; avg_s, m2 and variance_s of acc collect sum(c avg), sum(c avg^2) and
 * sum((c - 1) var) (mod 2^64) for pd_kacc_end. */
static void pd_kacc_add(struct pd_stat *acc, const struct pd_stat *one, uint32_t nbuckets)
{
    uint64_t n = (uint64_t)one->count, a = (uint64_t)one->avg_s;
    pd_stat_merge(acc, one, nbuckets);
    acc->avg_s = (int64_t)((uint64_t)acc->avg_s + n * a);
    acc->m2 = (int64_t)((uint64_t)acc->m2 + n * a * a);
    acc->variance_s = (int64_t)((uint64_t)acc->variance_s + (n - 1) * (uint64_t)one->variance_s);
}

/* _stp_stat_get's combination of per-CPU variances: S1 = sum c (avg_i - avg)^2, which is
 * sum c avg_i^2 - 2 avg sum c avg_i + avg^2 count exactly in wrapping arithmetic, and
 * S2 = sum (c - 1) var_i; stored so pd_stat_get returns (S1 + S2) / (count - 1). */
static void pd_kacc_end(struct pd_stat *acc)
{
    uint64_t ca = (uint64_t)acc->avg_s, ca2 = (uint64_t)acc->m2, s2 = (uint64_t)acc->variance_s;
    int64_t avg = acc->count ? acc->sum / acc->count : 0;
    int64_t one = acc->count ? (int64_t)ca / acc->count : 0;
    uint64_t n = (uint64_t)acc->count;
    if (n > 1 && (uint64_t)one * n == ca && (uint64_t)one * (uint64_t)one * n == ca2) {
        /* one running average (one thread's, as stap's pmap copies one CPU's entry):
         * its variance as it is, no correction towards the exact average */
        acc->avg_s = one;
        acc->m2 = 0;
        acc->variance_s = (int64_t)(s2 / (n - 1));
        return;
    }
    uint64_t s1 = ca2 - 2 * (uint64_t)avg * ca + (uint64_t)avg * (uint64_t)avg * (uint64_t)acc->count;
    acc->avg_s = avg;
    acc->m2 = 0;
    acc->variance_s = acc->count > 1 ? (int64_t)(s1 + s2) / (acc->count - 1) : 0;
}

/* One slot's value of a key into the merged one: a counter's sum, or a statistic. */
static void pd_kval_add(const struct pd_kstatdesc *kd, void *acc, const void *one)
{
    if (pd_kstat_is_count(kd))
        *(int64_t *)acc = (int64_t)((uint64_t)*(int64_t *)acc + (uint64_t)*(const int64_t *)one);
    else
        pd_kacc_add(acc, one, kd->nbuckets);
}

/* The key's statistic (a counter's: its sum, the first int64) over every slot, valid
 * until this thread's next call (the generated code uses it at once); NULL when no
 * slot has the key. */
const struct pd_stat *pd_kstat_get(struct pd_ctx *c, uint8_t *area,
                                   const struct pd_kstatdesc *kd, const uint8_t *key)
{
    static __thread struct pd_stat acc;
    int found = 0;
    memset(&acc, 0, sizeof acc);
    for (uint32_t k = 0, n = pd_kstat_used(kd); k < n; k++) {
        struct pd_kslot *ks = pd_kslot_at(area, kd, k);
        if (pd_slot_lock(c, &ks->lock) < 0)
            return NULL;
        const struct pd_stat *one = pd_map_get(c, pd_kslot_map(ks), kd->slot, key, 0);
        if (one) {
            pd_kval_add(kd, &acc, one);
            found = 1;
        }
        pd_unlock(&ks->lock);
    }
    if (!found)
        return NULL;
    if (!pd_kstat_is_count(kd))
        pd_kacc_end(&acc);
    return &acc;
}

/* Rebuilds the merged map at the start of the area from every slot (_stp_pmap_agg).
 * It holds max_entries keys: more distinct keys over all the slots are stap's
 * "aggregation overflow" error, and the map keeps the ones merged so far. */
void pd_kstat_merge(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd)
{
    const struct pd_mapdesc *ad = kd->agg, *sd = kd->slot;
    pd_map_clear(area, ad);
    for (uint32_t k = 0, n = pd_kstat_used(kd); k < n; k++) {
        struct pd_kslot *ks = pd_kslot_at(area, kd, k);
        if (pd_slot_lock(c, &ks->lock) < 0)
            break;
        uint8_t *map = pd_kslot_map(ks), *key;
        uint32_t i = 0;
        int full = 0;
        while (!full && (key = pd_map_next(map, sd, &i)) != NULL) {
            uint8_t *val = pd_map_get(c, area, ad, key, 0);
            if (!val && pd_map_count(area) >= ad->max_entries) {
                pd_error(c, "aggregation overflow in %s (%u entries)", ad->name, ad->max_entries);
                full = 1;
                break;
            }
            if (!val) {
                if ((val = pd_map_get(c, area, ad, key, 1)) == NULL) { /* error set */
                    full = 1;
                    break;
                }
                *PD_MAP_KEY_SEQ(val - ad->key_size) = *PD_MAP_KEY_SEQ(key);
            } else if (*PD_MAP_KEY_SEQ(key) < *PD_MAP_KEY_SEQ(val - ad->key_size)) {
                *PD_MAP_KEY_SEQ(val - ad->key_size) = *PD_MAP_KEY_SEQ(key);
            }
            pd_kval_add(kd, val, key + sd->key_size);
        }
        pd_unlock(&ks->lock);
        if (full)
            break;
    }
    uint32_t i = 0;
    for (uint8_t *key; !pd_kstat_is_count(kd) && (key = pd_map_next(area, ad, &i)) != NULL;)
        pd_kacc_end((struct pd_stat *)(key + ad->key_size));
}

/* Applies op to every slot's table under its lock; the sum of what op returned. */
static uint32_t pd_kstat_each(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                              uint32_t (*op)(uint8_t *, const struct pd_mapdesc *,
                                             const uint8_t *, uint32_t, int),
                              const uint8_t *key, uint32_t mask, int remove)
{
    uint32_t total = 0;
    for (uint32_t k = 0, n = pd_kstat_used(kd); k < n; k++) {
        struct pd_kslot *ks = pd_kslot_at(area, kd, k);
        if (pd_slot_lock(c, &ks->lock) < 0)
            break;
        total += op(pd_kslot_map(ks), kd->slot, key, mask, remove);
        pd_unlock(&ks->lock);
    }
    return total;
}

static uint32_t pd_kslot_delete(uint8_t *map, const struct pd_mapdesc *d, const uint8_t *key,
                                uint32_t mask, int remove)
{
    (void)mask, (void)remove;
    pd_map_delete(map, d, key);
    return 0;
}

static uint32_t pd_kslot_clear(uint8_t *map, const struct pd_mapdesc *d, const uint8_t *key,
                               uint32_t mask, int remove)
{
    (void)key, (void)mask, (void)remove;
    pd_map_clear(map, d);
    return 0;
}

void pd_kstat_delete(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                     const uint8_t *key)
{
    pd_kstat_each(c, area, kd, pd_kslot_delete, key, 0, 1);
}

void pd_kstat_clear(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd)
{
    pd_kstat_each(c, area, kd, pd_kslot_clear, NULL, 0, 1);
    pd_map_clear(area, kd->agg);
}

/* Wildcard keys (`[*, k] in s`, `delete s[*, k]`): matches summed over the slots. */
uint32_t pd_kstat_match(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                        const uint8_t *key, uint32_t mask, int remove)
{
    return pd_kstat_each(c, area, kd, pd_map_match, key, mask, remove);
}
