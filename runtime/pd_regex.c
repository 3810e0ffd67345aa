/* Regex sub-matches: matched(n), matched_str() and ngroups() after `s =~ "re"`, as
 * stap's tapset/regex.stp defines them.  The `=~` itself is decided by the pattern's
 * DFA (launcher/translate/regex.py); in a script that reads sub-matches it also leaves
 * the handler's struct pd_match a copy of the string, and the groups are found only
 * when matched() first asks, in two steps:
 *
 * - the span: the leftmost-longest match, by the pattern's anchored DFA tried at each
 *   start in turn (the first start with a match, its longest end);
 * - the groups: POSIX's rule that each subpattern, left to right, matches the longest
 *   string it can while the whole still matches that span.  A backtracking search
 *   over the pattern's tree (struct pd_re_node): a node followed by the rest of its
 *   chain tries its own extents longest first; a repetition's iterations likewise,
 *   each one non-empty once the minimum count is met (a repetition with nothing to
 *   match takes one empty iteration where its body can, as glibc does); an
 *   alternation takes its first alternative that fits; a group inside a repetition
 *   reports its last iteration.
 *
 * The search runs on the handler's stack in fixed arrays with a step budget
 * (PD_RE_STEPS, PD_RE_FRAMES, PD_RE_TRAIL: pd_config.h): a pattern whose search needs
 * more is an error of the handler, counted and reported, never a hang or an overflow.
 * Group values set on a path that later fails are taken back through a trail. */
#define _GNU_SOURCE
#include <stdio.h>

#include "pd_runtime.h"

#if MAXSTRINGLEN < 65535
typedef uint16_t re_pos; /* a byte offset in the string */
#else
typedef int32_t re_pos;
#endif

enum { F_CHAIN, F_ONE, F_REP };

/* One pending call of the search: a chain over [i, j] (trying its first compound
 * node's extent `cur`), one node over [i, j], or a repetition's iterations from i
 * (`count` done, the next one's extent `cur`).  `mark`: the trail when the current
 * try began. */
struct re_frame {
    re_pos i, j, cur;
    int16_t node;
    uint8_t kind, stage;
    uint16_t count, mark;
};

struct re_undo {
    uint16_t g2;
    re_pos start, end;
};

struct re_run {
    const struct pd_re_prog *p;
    const uint8_t *s;
    int32_t len;
    int32_t *caps;
    int64_t steps;
    const char *over;   /* the limit a failed search hit */
    int sp, tn;
    int memo;           /* failed[] in use (cleared): the search is no longer short */
    struct re_frame f[PD_RE_FRAMES];
    struct re_undo t[PD_RE_TRAIL];
    uint64_t failed[PD_RE_MEMO];
};

void pd_re_attempt(struct pd_ctx *c, const struct pd_re_prog *p, const char *s, int64_t matched)
{
    struct pd_match *m = c->match;
    m->prog = p;
    m->result = matched != 0;
    m->solved = 0;
    if (matched) {
        size_t n = strnlen(s, MAXSTRINGLEN - 1);
        memcpy(m->str, s, n);
        m->str[n] = 0;
        m->len = (int32_t)n;
    }
}

/* The leftmost-longest match: 1 and its [*b, *e), or -1 over the step budget. */
static int re_span(struct re_run *r, int32_t *b, int32_t *e)
{
    const struct pd_re_prog *p = r->p;
    for (int32_t start = 0; start <= r->len; start++) {
        unsigned st = start ? p->later : 0;
        int32_t best = -1;
        for (int32_t k = start;; k++) {
            uint8_t fl = p->flags[st];
            if (fl & 4)
                break;
            if ((fl & 1) || (k == r->len && (fl & 2)))
                best = k;
            if (k == r->len)
                break;
            if (++r->steps > PD_RE_STEPS) {
                r->over = "PD_RE_STEPS";
                return -1;
            }
            st = p->next[st][r->s[k]];
        }
        if (best >= 0) {
            *b = start;
            *e = best;
            return 1;
        }
    }
    return 0;
}

static int re_fits(uint16_t lo, uint16_t hi, int32_t n)
{
    return n >= lo && (hi == PD_RE_INF || n <= hi);
}

static int re_in(const uint8_t *set, uint8_t b)
{
    return (set[b >> 3] >> (b & 7)) & 1;
}

/* A chain's compound node n at i, the chain ending at j: its longest and shortest
 * extents that leave the rest of the chain a length it can match. */
static int32_t re_ext_hi(const struct pd_re_node *nd, int n, int32_t i, int32_t j)
{
    int k = nd[n].next;
    int32_t hi = j - (k < 0 ? 0 : nd[k].rmin);
    if (nd[n].max != PD_RE_INF && i + nd[n].max < hi)
        hi = i + nd[n].max;
    return hi;
}

static int32_t re_ext_lo(const struct pd_re_node *nd, int n, int32_t i, int32_t j)
{
    int k = nd[n].next;
    int32_t lo = i + nd[n].min;
    uint16_t rest = k < 0 ? 0 : nd[k].rmax;
    if (rest != PD_RE_INF && j - rest > lo)
        lo = j - rest;
    return lo;
}

/* A repetition's next iteration at i, the repetition ending at j: its extents. */
static int32_t re_iter_hi(const struct pd_re_node *nd, const struct pd_re_node *x, int32_t i,
                          int32_t j)
{
    uint16_t most = x->child < 0 ? 0 : nd[x->child].rmax;
    return most != PD_RE_INF && i + most < j ? i + most : j;
}

static int32_t re_iter_lo(const struct pd_re_node *nd, const struct pd_re_node *x, int32_t i,
                          unsigned count)
{
    int32_t least = x->child < 0 ? 0 : nd[x->child].rmin;
    if (count >= x->lo && least < 1)
        least = 1; /* past the minimum, an empty iteration changes nothing */
    return i + least;
}

static int re_set(struct re_run *r, unsigned g, int32_t i, int32_t j)
{
    if (r->tn == PD_RE_TRAIL) {
        r->over = "PD_RE_TRAIL";
        return 0;
    }
    struct re_undo *u = &r->t[r->tn++];
    u->g2 = (uint16_t)(2 * g);
    u->start = (re_pos)r->caps[2 * g];
    u->end = (re_pos)r->caps[2 * g + 1];
    r->caps[2 * g] = i;
    r->caps[2 * g + 1] = j;
    return 1;
}

static void re_undo(struct re_run *r, int mark)
{
    while (r->tn > mark) {
        struct re_undo *u = &r->t[--r->tn];
        /* an unset value (-1) comes back as -1 through re_pos's wrap-around */
        r->caps[u->g2] = u->start == (re_pos)-1 ? -1 : u->start;
        r->caps[u->g2 + 1] = u->end == (re_pos)-1 ? -1 : u->end;
    }
}

/* Whether a chain from node n over [i, j), or a repetition's iterations from i after
 * `count`, can match is the same each time the search asks: the failed ones are kept
 * (a direct-mapped cache, lossy: a miss only searches again), which keeps nested
 * repetitions from taking exponential time. */
static uint64_t re_key(const struct re_frame *f, const struct pd_re_node *x)
{
    unsigned count = 0;
    if (f->kind == F_REP) /* past its lower bound an unbounded repetition's count is moot */
        count = x->hi == PD_RE_INF && f->count > x->lo ? x->lo : f->count;
    return 1ull << 62 | (uint64_t)(f->kind == F_REP) << 63 | (uint64_t)(f->node & 0x3fff) << 48 |
           (uint64_t)(count & 0xff) << 40 | (uint64_t)(f->i & 0xfffff) << 20 |
           (uint64_t)(f->j & 0xfffff);
}

static uint64_t *re_slot(struct re_run *r, uint64_t key)
{
    return &r->failed[(key * 0x9E3779B97F4A7C15ull) >> 32 & (PD_RE_MEMO - 1)];
}

static int re_known_failed(struct re_run *r, const struct re_frame *f, const struct pd_re_node *x)
{
    uint64_t key = re_key(f, x);
    return r->memo && *re_slot(r, key) == key;
}

/* Most searches end in a few dozen steps: the cache is cleared and used only once one
 * has taken RE_MEMO_AFTER. */
#define RE_MEMO_AFTER 256

#define RE_PUSH(K, N, I, J)                                  \
    do {                                                     \
        if (r->sp == PD_RE_FRAMES) {                         \
            r->over = "PD_RE_FRAMES";                        \
            return -1;                                       \
        }                                                    \
        struct re_frame *nf_ = &r->f[r->sp++];               \
        nf_->kind = (K);                                     \
        nf_->node = (int16_t)(N);                            \
        nf_->i = (re_pos)(I);                                \
        nf_->j = (re_pos)(J);                                \
        nf_->stage = 0;                                      \
        nf_->count = 0;                                      \
    } while (0)

/* The groups of the pattern's chain over exactly [i0, j0): 1 found, 0 none, -1 a
 * limit hit. */
static int re_solve(struct re_run *r, int32_t i0, int32_t j0)
{
    const struct pd_re_node *nd = r->p->nodes;
    int rv = 0;
    r->sp = r->tn = 0;
    RE_PUSH(F_CHAIN, r->p->root, i0, j0);
    while (r->sp) {
        if (++r->steps > PD_RE_STEPS) {
            r->over = "PD_RE_STEPS";
            return -1;
        }
        if (!r->memo && r->steps > RE_MEMO_AFTER) {
            memset(r->failed, 0, sizeof r->failed);
            r->memo = 1;
        }
        struct re_frame *f = &r->f[r->sp - 1];
        const struct pd_re_node *x = f->node >= 0 ? &nd[f->node] : NULL;
        switch (f->kind) {
        case F_CHAIN:
            if (f->stage == 0) {
                /* single bytes and anchors need no choice: walk them */
                int n = f->node;
                int32_t i = f->i, j = f->j;
                for (;;) {
                    if (n < 0) {
                        rv = i == j;
                        goto pop;
                    }
                    x = &nd[n];
                    if (!re_fits(x->rmin, x->rmax, j - i)) {
                        rv = 0;
                        goto pop;
                    }
                    if (x->op == PD_RE_SET && i < j && re_in(r->p->sets[x->arg], r->s[i]))
                        i++;
                    else if (!(x->op == PD_RE_BOL && i == 0) &&
                             !(x->op == PD_RE_EOL && i == r->len)) {
                        if (x->op == PD_RE_SET || x->op == PD_RE_BOL || x->op == PD_RE_EOL) {
                            rv = 0;
                            goto pop;
                        }
                        break;
                    }
                    n = x->next;
                }
                f->node = (int16_t)n;
                f->i = (re_pos)i;
                int32_t hi = re_ext_hi(nd, n, i, j);
                if (hi < re_ext_lo(nd, n, i, j) || re_known_failed(r, f, x)) {
                    rv = 0;
                    goto pop;
                }
                f->cur = (re_pos)hi;
                f->mark = (uint16_t)r->tn;
                f->stage = 1;
                RE_PUSH(F_ONE, n, i, hi);
                continue;
            }
            if (f->stage == 1) { /* the node over [i, cur): now the rest over [cur, j) */
                if (rv) {
                    f->stage = 2;
                    RE_PUSH(F_CHAIN, x->next, f->cur, f->j);
                    continue;
                }
            } else if (rv) {
                goto pop;
            }
            re_undo(r, f->mark);
            if (f->cur > re_ext_lo(nd, f->node, f->i, f->j)) {
                f->cur--;
                f->stage = 1;
                RE_PUSH(F_ONE, f->node, f->i, f->cur);
                continue;
            }
            rv = 0;
            goto pop;
        case F_ONE:
            if (x->op == PD_RE_GROUP) {
                if (f->stage == 0) {
                    f->stage = 1;
                    RE_PUSH(F_CHAIN, x->child, f->i, f->j);
                    continue;
                }
                if (rv && !re_set(r, x->arg, f->i, f->j))
                    return -1;
                goto pop;
            }
            if (x->op == PD_RE_ALT) {
                if (f->stage == 0) {
                    f->stage = 1;
                    f->cur = 0;
                } else if (rv) {
                    goto pop;
                } else {
                    f->cur++;
                }
                if (f->cur >= x->child) {
                    rv = 0;
                    goto pop;
                }
                RE_PUSH(F_CHAIN, r->p->alts[x->arg + f->cur], f->i, f->j);
                continue;
            }
            /* PD_RE_REP: over one byte set (`.*`, `[a-z]+`), a check of each byte */
            if (x->child >= 0 && nd[x->child].op == PD_RE_SET && nd[x->child].next < 0) {
                const uint8_t *set = r->p->sets[nd[x->child].arg];
                rv = re_fits(x->lo, x->hi, f->j - f->i);
                for (int32_t k = f->i; rv && k < f->j; k++)
                    rv = re_in(set, r->s[k]);
                goto pop;
            }
            f->kind = F_REP;
            f->count = 0;
            f->stage = 0;
            continue;
        case F_REP:
            if (f->stage == 3) { /* the empty iteration below, taken or not */
                rv = 1;
                goto pop;
            }
            if (f->stage == 0) {
                if (f->i == f->j && f->count >= x->lo) {
                    /* nothing left: a body that can match the empty string matches it
                     * once, setting its groups, as glibc does ("(a*)*" on "b": \1 is
                     * (0,0)); then, or else, no more iterations */
                    if (f->count == 0 && (x->child < 0 || nd[x->child].rmin == 0)) {
                        f->stage = 3;
                        RE_PUSH(F_CHAIN, x->child, f->i, f->i);
                        continue;
                    }
                    rv = 1;
                    goto pop;
                }
                if (x->hi != PD_RE_INF && f->count >= x->hi) {
                    rv = 0;
                    goto pop;
                }
                int32_t hi = re_iter_hi(nd, x, f->i, f->j);
                if (hi < re_iter_lo(nd, x, f->i, f->count) || re_known_failed(r, f, x)) {
                    rv = 0;
                    goto pop;
                }
                f->cur = (re_pos)hi;
                f->mark = (uint16_t)r->tn;
                f->stage = 1;
                RE_PUSH(F_CHAIN, x->child, f->i, hi);
                continue;
            }
            if (f->stage == 1) { /* this iteration fits [i, cur): the others [cur, j) */
                if (rv) {
                    unsigned count = f->count < 0xFFFF ? f->count + 1u : f->count;
                    f->stage = 2;
                    RE_PUSH(F_REP, f->node, f->cur, f->j);
                    r->f[r->sp - 1].count = (uint16_t)count;
                    continue;
                }
            } else if (rv) {
                goto pop;
            }
            re_undo(r, f->mark);
            if (f->cur > re_iter_lo(nd, x, f->i, f->count)) {
                f->cur--;
                f->stage = 1;
                RE_PUSH(F_CHAIN, x->child, f->i, f->cur);
                continue;
            }
            rv = 0;
            goto pop;
        }
    pop:
        if (!rv && r->memo && f->stage && (f->kind == F_CHAIN || f->kind == F_REP)) {
            uint64_t key = re_key(f, &nd[f->node]);
            *re_slot(r, key) = key;
        }
        r->sp--;
    }
    return rv;
}

/* The groups of the handler's last match, into m->caps: 0 after an error. */
static int re_groups(struct pd_ctx *c, struct pd_match *m)
{
    struct re_run r;
    int32_t b = 0, e = 0;
    r.p = m->prog;
    r.s = (const uint8_t *)m->str;
    r.len = m->len;
    r.caps = m->caps;
    r.steps = 0;
    r.over = NULL;
    r.memo = 0;
    for (unsigned k = 0; k < 2u * m->prog->ngroups; k++)
        m->caps[k] = -1;
    int rc = re_span(&r, &b, &e);
    if (rc > 0)
        rc = re_solve(&r, b, e);
    if (rc < 0) {
        pd_error(c, "regex sub-match search over its limit %s (-D%s=N raises it)", r.over,
                 r.over);
        return 0;
    }
    if (rc == 0) { /* the DFA matched: the search disagreeing is a translator bug */
        pd_error(c, "BUG: regex sub-match search found no match");
        return 0;
    }
    m->caps[0] = b;
    m->caps[1] = e;
    m->solved = 1;
    return 1;
}

char *pd_re_matched(struct pd_ctx *c, char *dst, int64_t n)
{
    struct pd_match *m = c->match;
    dst[0] = 0;
    /* stap's messages (tapset/regex.stp), the nonexistent group's first */
    if (!m->prog || n < 0 || n >= m->prog->ngroups) {
        pd_error(c, "Attempted to get nonexistent subexpression %lld", (long long)n);
        return dst;
    }
    if (!m->result) {
        pd_error(c, "Attempted to get subexpression %lld from failed match", (long long)n);
        return dst;
    }
    if (!m->solved && !re_groups(c, m))
        return dst;
    int32_t b = m->caps[2 * n], e = m->caps[2 * n + 1];
    if (b >= 0 && e >= b) { /* else the group took no part: "" */
        memcpy(dst, m->str + b, (size_t)(e - b));
        dst[e - b] = 0;
    }
    return dst;
}

int64_t pd_re_ngroups(struct pd_ctx *c)
{
    struct pd_match *m = c->match;
    if (!m->prog || !m->result) {
        pd_error(c, "Attempted to get subexpression count from failed match");
        return 0;
    }
    return m->prog->ngroups;
}
