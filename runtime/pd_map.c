/* Script arrays and statistics, stored in the segment's globals area.
 *
 * Everything here is reached through offsets and fixed-size integers, so a
 * 64-bit and a 32-bit process update the same array.  Callers hold the
 * globals lock (the translator marks every handler that touches globals).
 *
 * An array is a header (struct pd_map_hdr) followed by `capacity` entries:
 *   u32 state; u32 hash; u64 seq; key blob (desc->key_size); value (desc->value_size)
 * `seq` numbers insertions, so an unsorted foreach visits in insertion order.
 * with open addressing and linear probing.  Keys are serialised into a blob:
 * a long is 8 bytes, a string MAXSTRINGLEN bytes, NUL padded.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "pd_hist.h"
#include "pd_runtime.h"

/* struct pd_map_hdr and struct pd_map_ent: pd_shm.h (shmlayout/globals.py) */
#define PD_ENTRY_HDR sizeof(struct pd_map_ent)

static inline uint8_t *pd_map_entry(uint8_t *map, const struct pd_mapdesc *d, uint32_t i)
{
    return map + sizeof(struct pd_map_hdr) + (size_t)i * d->entry_size;
}

static uint32_t pd_hash_key(const struct pd_mapdesc *d, const uint8_t *key)
{
    /* FNV-1a over the key, strings only up to their NUL (the rest is zeros). */
    uint32_t h = 2166136261u;
    uint32_t at = 0;
    for (uint32_t k = 0; k < d->nkeys; k++) {
        if (d->key_types[k] == PD_T_STRING) {
            uint32_t n = (uint32_t)strnlen((const char *)key + at, MAXSTRINGLEN);
            for (uint32_t i = 0; i < n; i++)
                h = (h ^ key[at + i]) * 16777619u;
            at += MAXSTRINGLEN;
        } else { /* the same bytes, unrolled: a long key is hashed on every hit */
#pragma GCC unroll 8
            for (uint32_t i = 0; i < 8; i++)
                h = (h ^ key[at + i]) * 16777619u;
            at += 8;
        }
        h = (h ^ 0xffu) * 16777619u;
    }
    return h | 1u; /* never 0, so a hash alone tells a used slot */
}

static int pd_key_equal(const struct pd_mapdesc *d, const uint8_t *a, const uint8_t *b)
{
    uint32_t at = 0;
    for (uint32_t k = 0; k < d->nkeys; k++) {
        if (d->key_types[k] == PD_T_STRING) {
            if (strncmp((const char *)a + at, (const char *)b + at, MAXSTRINGLEN) != 0)
                return 0;
            at += MAXSTRINGLEN;
        } else {
            if (memcmp(a + at, b + at, 8) != 0)
                return 0;
            at += 8;
        }
    }
    return 1;
}


void pd_key_str(uint8_t *slot, const char *s)
{
    size_t n = strnlen(s, MAXSTRINGLEN - 1);
    memcpy(slot, s, n);
    memset(slot + n, 0, MAXSTRINGLEN - n);
}

static void pd_map_drop_oldest(uint8_t *map, const struct pd_mapdesc *d)
{
    struct pd_map_hdr *h = (struct pd_map_hdr *)map;
    uint8_t *oldest = NULL;
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 0; i < d->capacity; i++) {
        uint8_t *e = pd_map_entry(map, d, i);
        uint64_t seq;
        memcpy(&seq, e + 8, 8);
        if (((uint32_t *)e)[0] == PD_ENTRY_USED && seq < best) {
            best = seq;
            oldest = e;
        }
    }
    if (oldest) {
        ((uint32_t *)oldest)[0] = PD_ENTRY_DELETED;
        h->count--;
        h->tombstones++;
    }
}

void *pd_map_get(struct pd_ctx *c, uint8_t *map, const struct pd_mapdesc *d,
                 const uint8_t *key, int create)
{
    return pd_map_get_seq(c, map, d, key, create, NULL);
}

int64_t pd_map_set_i64(struct pd_ctx *c, uint8_t *map, const struct pd_mapdesc *d,
                       const uint8_t *key, int64_t v, const char *where)
{
    c->where = where;
    int64_t *p = pd_map_get_seq(c, map, d, key, 1, NULL);
    if (p)
        *p = v;
    return v;
}

/* pd_map_get whose insertions take their number from *seq_src (atomically) when it is
 * not NULL: the per-thread tables of one keyed statistic share one order (pd_kstat.c). */
void *pd_map_get_seq(struct pd_ctx *c, uint8_t *map, const struct pd_mapdesc *d,
                     const uint8_t *key, int create, uint64_t *seq_src)
{
    struct pd_map_hdr *h = (struct pd_map_hdr *)map;
    uint32_t hash = pd_hash_key(d, key);
    uint32_t mask = d->capacity - 1;
    uint8_t *reuse = NULL;
    for (uint32_t n = 0, i = hash & mask; n < d->capacity; n++, i = (i + 1) & mask) {
        uint8_t *e = pd_map_entry(map, d, i);
        uint32_t state = ((uint32_t *)e)[0];
        if (state == PD_ENTRY_EMPTY)
            break;
        if (state == PD_ENTRY_DELETED) {
            if (!reuse)
                reuse = e;
            continue;
        }
        if (((uint32_t *)e)[1] == hash && pd_key_equal(d, e + PD_ENTRY_HDR, key))
            return e + PD_ENTRY_HDR + d->key_size;
        if (n + 1 == d->capacity)
            break;
    }
    if (!create)
        return NULL;
    if (h->count >= d->max_entries && d->wrap)
        pd_map_drop_oldest(map, d);
    if (h->count >= d->max_entries) {
        pd_error(c, "Array overflow, check size limit (%u)", d->max_entries);
        return NULL;
    }
    uint8_t *e = reuse;
    if (!e) {
        for (uint32_t n = 0, i = hash & mask; n < d->capacity; n++, i = (i + 1) & mask) {
            uint8_t *cand = pd_map_entry(map, d, i);
            if (((uint32_t *)cand)[0] != PD_ENTRY_USED) {
                e = cand;
                break;
            }
        }
    } else {
        h->tombstones--;
    }
    if (!e) {
        pd_error(c, "array %s is full", d->name);
        return NULL;
    }
    memcpy(e + PD_ENTRY_HDR, key, d->key_size);
    memset(e + PD_ENTRY_HDR + d->key_size, 0, d->value_size);
    ((uint32_t *)e)[1] = hash;
    uint64_t seq = seq_src ? __atomic_fetch_add(seq_src, 1, __ATOMIC_RELAXED)
                           : h->next_seq++;
    memcpy(e + 8, &seq, 8);
    ((uint32_t *)e)[0] = PD_ENTRY_USED;
    h->count++;
    return e + PD_ENTRY_HDR + d->key_size;
}

void pd_map_delete(uint8_t *map, const struct pd_mapdesc *d, const uint8_t *key)
{
    struct pd_map_hdr *h = (struct pd_map_hdr *)map;
    uint32_t hash = pd_hash_key(d, key), mask = d->capacity - 1;
    for (uint32_t n = 0, i = hash & mask; n < d->capacity; n++, i = (i + 1) & mask) {
        uint8_t *e = pd_map_entry(map, d, i);
        uint32_t state = ((uint32_t *)e)[0];
        if (state == PD_ENTRY_EMPTY)
            return;
        if (state == PD_ENTRY_USED && ((uint32_t *)e)[1] == hash && pd_key_equal(d, e + PD_ENTRY_HDR, key)) {
            ((uint32_t *)e)[0] = PD_ENTRY_DELETED;
            h->count--;
            h->tombstones++;
            return;
        }
    }
}

void pd_map_clear(uint8_t *map, const struct pd_mapdesc *d)
{
    uint64_t seq = ((struct pd_map_hdr *)map)->next_seq;
    memset(map, 0, sizeof(struct pd_map_hdr) + (size_t)d->capacity * d->entry_size);
    ((struct pd_map_hdr *)map)->next_seq = seq;
}

int pd_map_entry_matches(const struct pd_mapdesc *d, const uint8_t *entry_key,
                         const uint8_t *key, uint32_t mask)
{
    uint32_t at = 0;
    for (uint32_t k = 0; k < d->nkeys; k++) {
        uint32_t len = d->key_types[k] == PD_T_STRING ? MAXSTRINGLEN : 8;
        if (!(mask & (1u << k))) {
            int same = d->key_types[k] == PD_T_STRING
                           ? strncmp((const char *)entry_key + at, (const char *)key + at,
                                     MAXSTRINGLEN) == 0
                           : memcmp(entry_key + at, key + at, 8) == 0;
            if (!same)
                return 0;
        }
        at += len;
    }
    return 1;
}

uint32_t pd_map_match(uint8_t *map, const struct pd_mapdesc *d, const uint8_t *key,
                      uint32_t mask, int remove)
{
    struct pd_map_hdr *h = (struct pd_map_hdr *)map;
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->capacity; i++) {
        uint8_t *e = pd_map_entry(map, d, i);
        if (((uint32_t *)e)[0] != PD_ENTRY_USED ||
            !pd_map_entry_matches(d, e + PD_ENTRY_HDR, key, mask))
            continue;
        n++;
        if (remove) {
            ((uint32_t *)e)[0] = PD_ENTRY_DELETED;
            h->count--;
            h->tombstones++;
        }
    }
    return n;
}

uint32_t pd_map_count(const uint8_t *map) { return ((const struct pd_map_hdr *)map)->count; }

/* The used entry at or after slot *i, as its key blob (advancing *i past it); NULL at
 * the end.  Its insertion number is PD_MAP_KEY_SEQ(key), its value follows the key. */
uint8_t *pd_map_next(uint8_t *map, const struct pd_mapdesc *d, uint32_t *i)
{
    while (*i < d->capacity) {
        uint8_t *e = pd_map_entry(map, d, (*i)++);
        if (((uint32_t *)e)[0] == PD_ENTRY_USED)
            return e + PD_ENTRY_HDR;
    }
    return NULL;
}

/* ---- iteration in sorted order (foreach) ---------------------------------- */

struct pd_sort_ctx {
    const struct pd_mapdesc *d;
    int column; /* 0: insertion order, k+1: key k, -1: the value, -1-f: stat field f */
    int order;  /* +1 ascending, -1 descending */
};
static __thread struct pd_sort_ctx pd_sort;

static int pd_cmp_field(uint32_t type, const uint8_t *a, const uint8_t *b)
{
    if (type == PD_T_STRING)
        return strncmp((const char *)a, (const char *)b, MAXSTRINGLEN);
    int64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    return x < y ? -1 : x > y;
}

static uint32_t pd_key_offset(const struct pd_mapdesc *d, int k)
{
    uint32_t at = 0;
    for (int i = 0; i < k; i++)
        at += d->key_types[i] == PD_T_STRING ? MAXSTRINGLEN : 8;
    return at;
}

static int pd_cmp_entries(const void *pa, const void *pb)
{
    const uint8_t *a = *(uint8_t *const *)pa, *b = *(uint8_t *const *)pb;
    const struct pd_mapdesc *d = pd_sort.d;
    int r = 0;
    if (pd_sort.column > 0) {
        int k = pd_sort.column - 1;
        uint32_t off = PD_ENTRY_HDR + pd_key_offset(d, k);
        r = pd_cmp_field(d->key_types[k], a + off, b + off);
    } else if (pd_sort.column < 0 && d->value_type == PD_T_STAT) {
        /* -1 - field: count, sum, min, max, avg */
        const struct pd_stat *x = (const void *)(a + PD_ENTRY_HDR + d->key_size);
        const struct pd_stat *y = (const void *)(b + PD_ENTRY_HDR + d->key_size);
        int f = -1 - pd_sort.column;
        int64_t vx = f == 0 ? x->count : f == 1 ? x->sum : f == 2 ? x->min : f == 3 ? x->max
                     : (x->count ? x->sum / x->count : 0);
        int64_t vy = f == 0 ? y->count : f == 1 ? y->sum : f == 2 ? y->min : f == 3 ? y->max
                     : (y->count ? y->sum / y->count : 0);
        r = vx < vy ? -1 : vx > vy;
    } else if (pd_sort.column < 0) {
        uint32_t off = PD_ENTRY_HDR + d->key_size;
        r = pd_cmp_field(d->value_type, a + off, b + off);
    }
    if (r == 0) { /* stable: ties keep insertion order */
        uint64_t sa, sb;
        memcpy(&sa, a + 8, 8);
        memcpy(&sb, b + 8, 8);
        return sa < sb ? -1 : sa > sb;
    }
    return r * pd_sort.order;
}

/* Fills `out` (room for d->max_entries pointers) with the used entries'
 * addresses, sorted; returns how many.  Each points at the entry's key blob. */
uint32_t pd_map_sorted(const uint8_t *map, const struct pd_mapdesc *d, uint8_t **out,
                       int column, int order)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->capacity && n < d->max_entries; i++) {
        uint8_t *e = pd_map_entry((uint8_t *)map, d, i);
        if (((uint32_t *)e)[0] == PD_ENTRY_USED)
            out[n++] = e;
    }
    if (n > 1) {
        pd_sort.d = d;
        pd_sort.column = column;
        pd_sort.order = order ? order : 1;
        qsort(out, n, sizeof *out, pd_cmp_entries);
    }
    for (uint32_t i = 0; i < n; i++)
        out[i] += PD_ENTRY_HDR;
    return n;
}

/* ---- statistics ----------------------------------------------------------- */

/* A statistic's add out of line (pd_fast.h has it inline for FAST handlers): the
 * runtime's own adds -- a thread's slot (pd_pstat.c), a keyed statistic (pd_kstat.c),
 * a statistic under the globals lock. */
PD_FAST_FN void pd_stat_add(struct pd_stat *s, int64_t v, const struct pd_statdesc *d)
{
    pd_stat_add_in(s, v, d);
}

/* agg += one for count, sum, min, max and the first `nbuckets` histogram buckets, as
 * stap merges per-CPU copies; an empty agg takes one's min and max. */
void pd_stat_merge(struct pd_stat *agg, const struct pd_stat *one, uint32_t nbuckets)
{
    if (!one->count)
        return;
    if (!agg->count) {
        agg->min = one->min;
        agg->max = one->max;
    }
    agg->count += one->count;
    agg->sum = (int64_t)((uint64_t)agg->sum + (uint64_t)one->sum);
    if (one->min < agg->min)
        agg->min = one->min;
    if (one->max > agg->max)
        agg->max = one->max;
    for (uint32_t b = 0; b < nbuckets; b++)
        agg->hist[b] += one->hist[b];
}

/* @variance(s[, shift]).  A statistic alone is read as stap's _stp_stat_get reads it: the
 * total variance around the exact average (sum << shift) / count, which the running
 * average has drifted from.  An array entry (`entry`) as stap's pmap aggregation copies a
 * single CPU's: the running variance as it is.  Either >> 2 * shift. */
int64_t pd_stat_variance(struct pd_ctx *c, const struct pd_stat *s, int shift, int entry)
{
    if (s->count == 0) {
        pd_error(c, "empty aggregate");
        return 0;
    }
    if (s->count < 2)
        return 0;
    int64_t v = s->variance_s;
    if (!entry) {
        int64_t avg = (int64_t)((uint64_t)s->sum << shift) / s->count;
        int64_t d = s->avg_s - avg;
        uint64_t s1 = (uint64_t)s->count * (uint64_t)d * (uint64_t)d;
        uint64_t s2 = (uint64_t)(s->count - 1) * (uint64_t)s->variance_s;
        v = (int64_t)(s1 + s2) / (s->count - 1);
    }
    return v >> (2 * shift);
}

int64_t pd_stat_get(struct pd_ctx *c, const struct pd_stat *s, int what)
{
    switch (what) {
    case PD_STAT_COUNT:
        return s->count;
    case PD_STAT_SUM:
        return s->sum;
    case PD_STAT_MIN:
    case PD_STAT_MAX:
    case PD_STAT_AVG:
    case PD_STAT_VARIANCE:
        if (s->count == 0) {
            pd_error(c, "empty aggregate");
            return 0;
        }
        if (what == PD_STAT_MIN)
            return s->min;
        if (what == PD_STAT_MAX)
            return s->max;
        if (what == PD_STAT_AVG)
            return s->sum / s->count;
        if (s->count < 2)
            return 0;
        {
            /* _stp_stat_get: total variance around the exact average, which the
             * running average (avg_s) has drifted from */
            int64_t d = s->avg_s - s->sum / s->count;
            uint64_t s1 = (uint64_t)s->count * (uint64_t)d * (uint64_t)d;
            uint64_t s2 = (uint64_t)(s->count - 1) * (uint64_t)s->variance_s;
            return (int64_t)(s1 + s2) / (s->count - 1);
        }
    }
    return 0;
}

static uint32_t pd_hist_buckets(const struct pd_statdesc *d)
{
    uint32_t n = d->hist_log ? PD_HIST_LOG_BUCKETS
                             : (uint32_t)((d->hi - d->lo) / d->step + 3);
    return n > PD_HIST_MAX_BUCKETS ? PD_HIST_MAX_BUCKETS : n;
}

/* print(@hist_*(x)): a record of the buckets, which the launcher draws with
 * pd_hist_draw (pd_launcher_hist_draw) or, under --json, writes as they are.  s is
 * NULL for an array element that does not exist: stap's empty aggregate too. */
void pd_stat_emit_hist(struct pd_ctx *c, const struct pd_stat *s, const struct pd_statdesc *d,
                       uint32_t fmt_id)
{
    if (!s || s->count == 0) {
        pd_error(c, "empty aggregate");
        return;
    }
    uint32_t n = pd_hist_buckets(d);
    pd_rec_open(c, PD_REC_PRINTF, fmt_id, (uint16_t)n);
    for (uint32_t i = 0; i < n; i++)
        pd_rec_i64(c, s->hist[i]);
    pd_rec_close(c);
}

/* sprint(@hist_*(x)): the drawing print() gives, cut to a string's MAXSTRINGLEN - 1
 * bytes as stap cuts it. */
char *pd_stat_sprint_hist(struct pd_ctx *c, char *dst, const struct pd_stat *s,
                          const struct pd_statdesc *d)
{
    dst[0] = 0;
    if (!s || s->count == 0) {
        pd_error(c, "empty aggregate");
        return dst;
    }
    pd_hist_draw(dst, MAXSTRINGLEN, s->hist, pd_hist_buckets(d), d->hist_log, d->lo, d->step,
                 HIST_WIDTH, HIST_ELISION);
    return dst;
}
