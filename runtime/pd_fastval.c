/* What FAST handlers read and feed beyond counter adds: arguments, the return value,
 * statistics (their common case is inline: pd_fast.h) and keyed adds
 * (launcher/translate/fast.py decides which handlers use them).  They run before the
 * vector registers are saved, so this unit is general-regs-only; what may fault, claim
 * or lock goes through pd_fast_slow (pd_run.c) by pd_xmm_call, on a whole context. */
#define _GNU_SOURCE

#include "pd_internal.h"

PD_FAST_UNIT

#define PD_PAGE 4096u /* the smallest page: a word in sp's page is as mapped as sp's */

static uintptr_t pd_fetch_arg_full(struct pd_ctx *full, uintptr_t index, uintptr_t out)
{
    *(int64_t *)out = full->regs ? pd_fetch_arg(full, (unsigned)index)
                                 : (pd_error(full, "probe argument %u not available here",
                                             (unsigned)index + 1), 0);
    return 0;
}

/* $argN / a DWARF parameter.  A register, a constant, or a word on the stack of a
 * function entry or exit within the page of its sp (the `call` wrote the return address
 * at sp, so that page is mapped) is read here; anything else by pd_fetch_arg, whose
 * reads are fault-safe. */
int64_t pd_fast_arg(struct pd_ctx *c, unsigned index)
{
    const struct pd_site *site = c->site;
    const struct pd_regs *regs = c->regs;
    if (PD_LIKELY(regs && site && index < site->nargs)) {
        const struct pd_argdesc *a = &site->args[index];
        if (a->kind == PD_ARG_REG && (unsigned)a->reg < PD_NREGS)
            return pd_extend((uint64_t)regs->r[a->reg] >> a->shift, a->size, a->is_signed);
        if (a->kind == PD_ARG_CONST)
            return a->rel ? (int64_t)((uint64_t)a->value + c->bias) : a->value;
        if (a->kind == PD_ARG_MEM && a->reg == PD_DWARF_SP && a->index < 0 && !a->rel &&
            a->seg == PD_SEG_NONE && site->nop_len == 0 && a->value >= 0 &&
            a->value < (int64_t)PD_PAGE) {
            uintptr_t sp = (uintptr_t)regs->r[PD_DWARF_SP];
            uintptr_t at = sp + (uintptr_t)a->value;
            if ((at + a->size - 1) / PD_PAGE == sp / PD_PAGE && at >= sp) {
                uint64_t raw;
                switch (a->size) {
                case 1: raw = *(const volatile uint8_t *)at; break;
                case 2: raw = *(const volatile uint16_t *)at; break;
                case 4: raw = *(const volatile uint32_t *)at; break;
                default: raw = *(const volatile uint64_t *)at; break;
                }
                return pd_extend(raw, a->size, a->is_signed);
            }
        }
    }
    int64_t v = 0;
    pd_xmm_call(pd_fast_slow, (uintptr_t)c, (uintptr_t)pd_fetch_arg_full, index, (uintptr_t)&v);
    return v;
}

static uintptr_t pd_func_return_full(struct pd_ctx *full, uintptr_t out, uintptr_t b)
{
    (void)b;
    *(int64_t *)out = pd_func_return(full);
    return 0;
}

/* $return: rax / eax as a C long (pd_func_return). */
int64_t pd_fast_return(struct pd_ctx *c)
{
    if (PD_LIKELY(c->regs != NULL))
        return (int64_t)(intptr_t)c->regs->r[0];
    int64_t v = 0;
    pd_xmm_call(pd_fast_slow, (uintptr_t)c, (uintptr_t)pd_func_return_full, (uintptr_t)&v, 0);
    return v;
}

struct pd_fast_add {
    uint8_t *area;
    const void *desc;
    const uint8_t *key;
    int64_t v;
};

static uintptr_t pd_pstat_add_full(struct pd_ctx *full, uintptr_t args, uintptr_t b)
{
    (void)b;
    const struct pd_fast_add *x = (const struct pd_fast_add *)args;
    pd_pstat_add(full, x->area, x->v, x->desc);
    return 0;
}

/* `s <<< v` of a thread with no slot yet (claimed here) or none free (slot 0, under its
 * lock); pd_fast.h adds to a slot the thread has. */
void pd_fast_pstat_add_slow(struct pd_ctx *c, uint8_t *area, int64_t v, const struct pd_statdesc *d)
{
    struct pd_fast_add x = {area, d, NULL, v};
    pd_xmm_call(pd_fast_slow, (uintptr_t)c, (uintptr_t)pd_pstat_add_full, (uintptr_t)&x, 0);
}

static uintptr_t pd_kstat_add_full(struct pd_ctx *full, uintptr_t args, uintptr_t b)
{
    (void)b;
    const struct pd_fast_add *x = (const struct pd_fast_add *)args;
    pd_kstat_add(full, x->area, x->desc, x->key, x->v);
    return 0;
}

/* `s[k] <<< v`, `c[k] += v`: the thread's own table (pd_kstat.c), which hashes, may
 * grow and takes its slot's lock: with the vector registers saved. */
void pd_fast_kstat_add(struct pd_ctx *c, uint8_t *area, const struct pd_kstatdesc *kd,
                       const uint8_t *key, int64_t v)
{
    struct pd_fast_add x = {area, kd, key, v};
    pd_xmm_call(pd_fast_slow, (uintptr_t)c, (uintptr_t)pd_kstat_add_full, (uintptr_t)&x, 0);
}

