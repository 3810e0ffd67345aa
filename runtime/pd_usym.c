/* usymname(), usymdata(), ubacktrace(), print_ubacktrace().
 *
 * Names and unwind rules come from tables the launcher computed for each probed
 * object (launcher/elf/unwind.py: function symbols and the .eh_frame CFA rules,
 * as pd_unwind_tables[], emitted only when a script uses these functions), so
 * nothing here parses ELF.  The walk starts from the probe's register context:
 * per frame, CFA = sp or fp + offset, the return address is the word below the
 * CFA (aarch64: where the row says x30 went, else x30 itself in the first frame;
 * its PAC signature stripped), a saved frame pointer is read back; every read goes through pd_read_self
 * (a bad stack is the end of the backtrace, never a fault).  A return address
 * that is pd_ret_tramp (a hooked frame above) is replaced by the real one from
 * the shadow stack.  The walk stops at a pc outside every probed object (that
 * address is still reported), at a rule it cannot follow, or after
 * PD_MAXBACKTRACE frames.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "pd_runtime.h"

extern const struct pd_unwind pd_unwind_tables[] __attribute__((weak));
extern const uint32_t pd_unwind_ntables __attribute__((weak));

#include PD_ARCH_WALK_H /* PD_DWARF_FP, PD_LEAF_CFA, pd_walk_ra */

/* The object (pd_objects index) whose code contains addr, and its load bias. */
static const struct pd_unwind *pd_unwind_for(uintptr_t addr, uintptr_t *bias)
{
    if (!&pd_unwind_ntables)
        return NULL;
    for (uint32_t o = 0; o < pd_unwind_ntables; o++) {
        const struct pd_unwind *u = &pd_unwind_tables[o];
        uintptr_t b;
        if (pd_object_bias(o, &b) && addr - b >= u->lo && addr - b < u->hi) {
            *bias = b;
            return u;
        }
    }
    return NULL;
}

/* 1 + the index of the last of n records (stride bytes, each starting with its uint64
 * address, sorted) whose address is <= key; 0 if none. */
static uint32_t pd_last_le(const void *base, uint32_t n, size_t stride, uint64_t key)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        uint64_t at;
        memcpy(&at, (const char *)base + (size_t)mid * stride, sizeof at);
        if (at <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const struct pd_usym *pd_usym_in(const struct pd_usym *syms, uint32_t n, uint64_t off)
{
    uint32_t i = pd_last_le(syms, n, sizeof *syms, off);
    if (i == 0 || off >= syms[i - 1].addr + syms[i - 1].size)
        return NULL;
    return &syms[i - 1];
}

static const struct pd_usym *pd_usym_find(const struct pd_unwind *u, uint64_t off)
{
    return pd_usym_in(u->syms, u->nsyms, off);
}

static const struct pd_cfarow *pd_cfa_find(const struct pd_unwind *u, uint64_t off)
{
    uint32_t i = pd_last_le(u->rows, u->nrows, sizeof *u->rows, off);
    return i ? &u->rows[i - 1] : NULL;
}

/* "name+0xoff/0xsize [path]" into dst (cap bytes), or "0xaddr" for unknown code. */
static void pd_describe(char *dst, size_t cap, uintptr_t addr, int symbol_only)
{
    uintptr_t bias;
    const struct pd_unwind *u = pd_unwind_for(addr, &bias);
    const struct pd_usym *s = u ? pd_usym_find(u, addr - bias) : NULL;
    if (!s)
        snprintf(dst, cap, "0x%lx", (unsigned long)addr);
    else if (symbol_only)
        snprintf(dst, cap, "%s", s->name);
    else
        snprintf(dst, cap, "%s+0x%lx/0x%lx [%s]", s->name,
                 (unsigned long)(addr - bias - s->addr), (unsigned long)s->size,
                 pd_objects[u - pd_unwind_tables].path);
}

char *pd_usymname(struct pd_ctx *c, char *dst, int64_t addr)
{
    (void)c;
    pd_describe(dst, MAXSTRINGLEN, (uintptr_t)addr, 1);
    return dst;
}

/* stap's usymdata: "name+0xoff/0xsize [path]" for an address in a data object (or a
 * function) of a probed object, "0xaddr [path+0xoff/0xsize]" elsewhere in its loaded
 * segments (offset and size from the object's first loaded byte), else "0xaddr". */
char *pd_usymdata(struct pd_ctx *c, char *dst, int64_t addr)
{
    (void)c;
    uintptr_t a = (uintptr_t)addr, bias;
    for (uint32_t o = 0; &pd_unwind_ntables && o < pd_unwind_ntables; o++) {
        const struct pd_unwind *u = &pd_unwind_tables[o];
        if (!u->data || !pd_object_bias(o, &bias))
            continue;
        uint64_t off = (uint64_t)(a - bias);
        if (off < u->mlo || off >= u->mhi)
            continue;
        const struct pd_usym *s = pd_usym_in(u->data, u->ndata, off);
        if (!s)
            s = pd_usym_find(u, off);
        if (s)
            snprintf(dst, MAXSTRINGLEN, "%s+0x%lx/0x%lx [%s]", s->name,
                     (unsigned long)(off - s->addr), (unsigned long)s->size, pd_objects[o].path);
        else
            snprintf(dst, MAXSTRINGLEN, "0x%lx [%s+0x%lx/0x%lx]", (unsigned long)a,
                     pd_objects[o].path, (unsigned long)(off - u->mlo),
                     (unsigned long)(u->mhi - u->mlo));
        return dst;
    }
    snprintf(dst, MAXSTRINGLEN, "0x%lx", (unsigned long)a);
    return dst;
}

/* Fills pcs with the frames' pcs from the probe's context; returns how many. */
static unsigned pd_walk(const struct pd_regs *regs, uintptr_t *pcs, unsigned max)
{
    unsigned n = 0;
#if defined(PD_DWARF_FP)
    uintptr_t pc = (uintptr_t)regs->r[PD_DWARF_IP], sp = (uintptr_t)regs->r[PD_DWARF_SP];
    uintptr_t fp = (uintptr_t)regs->r[PD_DWARF_FP];
    while (n < max) {
        pcs[n++] = pc;
        uintptr_t bias;
        const struct pd_unwind *u = pd_unwind_for(pc - (n > 1), &bias);
        /* a return address's own row is looked up at pc-1: the call may end its FDE */
        const struct pd_cfarow *r = u ? pd_cfa_find(u, pc - (n > 1) - bias) : NULL;
        if (!r || r->kind > 1)
            break;
        uintptr_t cfa = (r->kind == 0 ? sp : fp) + (uintptr_t)(intptr_t)r->cfa_off;
        uintptr_t ra = 0, saved_fp = fp;
        if (!pd_walk_ra(regs, r, cfa, n, &ra))
            break;
        if (r->fp_off && pd_read_self(&saved_fp, (const void *)(cfa + (intptr_t)r->fp_off),
                                      sizeof saved_fp) != (ssize_t)sizeof saved_fp)
            break;
        if (ra == pd_ret_tramp_addr())
            ra = pd_shadow_ret(cfa - sizeof ra);
        if (!ra || cfa < sp || (cfa == sp && !(PD_LEAF_CFA && n == 1)))
            break;
        pc = ra;
        sp = cfa;
        fp = saved_fp;
    }
#else
    (void)regs;
    (void)pcs;
    (void)max;
#endif
    return n;
}

char *pd_ubacktrace(struct pd_ctx *c, char *dst)
{
    dst[0] = 0;
    if (!c->regs)
        return dst;
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned n = pd_walk(c->regs, pcs, PD_MAXBACKTRACE);
    size_t len = 0;
    for (unsigned i = 0; i < n && len < MAXSTRINGLEN; i++) {
        int w = snprintf(dst + len, MAXSTRINGLEN - len, "%s0x%lx", i ? " " : "",
                         (unsigned long)pcs[i]);
        if (w < 0 || (size_t)w >= MAXSTRINGLEN - len) {
            dst[len] = 0; /* whole addresses only */
            break;
        }
        len += (size_t)w;
    }
    return dst;
}

/* One output record per frame: " 0xADDR : NAME+0xOFF/0xSIZE [PATH]" (fmt_id: "%s\n"). */
void pd_print_ubacktrace(struct pd_ctx *c, uint32_t fmt_id)
{
    if (!c->regs)
        return;
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned n = pd_walk(c->regs, pcs, PD_MAXBACKTRACE);
    for (unsigned i = 0; i < n; i++) {
        char what[MAXSTRINGLEN], line[MAXSTRINGLEN + 32];
        pd_describe(what, sizeof what, pcs[i], 0);
        if (strncmp(what, "0x", 2) == 0)
            snprintf(line, sizeof line, " 0x%lx", (unsigned long)pcs[i]);
        else
            snprintf(line, sizeof line, " 0x%lx : %s", (unsigned long)pcs[i], what);
        pd_rec_open(c, PD_REC_PRINTF, fmt_id, 1);
        pd_rec_str(c, line);
        pd_rec_close(c);
    }
}
