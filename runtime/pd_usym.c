/* usymname(), usymdata(), umodname(), ustack(), ucallers(), ubacktrace(),
 * print_ubacktrace(), sprint_ubacktrace(), print_usyms(), sprint_usyms().
 *
 * Names and unwind rules come from tables the launcher computed for each probed
 * object and each object named by -d or found by --ldd (launcher/elf/unwind.py:
 * function symbols and the .eh_frame CFA rules, as pd_unwind_tables[], emitted only
 * when a script uses these functions), so nothing here parses ELF.  A probed object's
 * load bias is the one its arming found; another's is looked up among the loaded
 * objects (dl_iterate_phdr) and kept until the next dlopen or dlclose.  An address in
 * a loaded object that has no table still has a module, as stap's vma tracker gives
 * one: its path, and its offset in the segment that maps it.  The walk starts from the probe's register context:
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
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_internal.h"

extern const struct pd_unwind pd_unwind_tables[] __attribute__((weak));
extern const uint32_t pd_unwind_ntables __attribute__((weak));
/* per table of an object with no probe: its load bias, and 1 loaded, 2 not (0: unknown) */
extern uintptr_t pd_unwind_bias[] __attribute__((weak));
extern uint8_t pd_unwind_state[] __attribute__((weak));

#include PD_ARCH_WALK_H /* PD_DWARF_FP, PD_LEAF_CFA, pd_walk_ra */

/* dl_iterate_phdr's counts of objects loaded and unloaded: the biases found for objects
 * with no probe hold while they do not change. */
static unsigned long long pd_ugen[2] = {~0ull, ~0ull};

static int pd_gen_of(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long *g = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        g[0] = info->dlpi_adds;
        g[1] = info->dlpi_subs;
    }
    return 1;
}

struct pd_ufind {
    const char *path;
    uintptr_t bias;
};

static int pd_find_loaded(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct pd_ufind *f = data;
    if (!pd_object_matches(f->path, info->dlpi_name))
        return 0;
    f->bias = (uintptr_t)info->dlpi_addr;
    return 1;
}

/* Once per entry point: the biases of the tables' objects that have no probe. */
static void pd_unwind_refresh(void)
{
    if (!&pd_unwind_ntables || !pd_unwind_state)
        return;
    unsigned long long g[2] = {0, 0};
    dl_iterate_phdr(pd_gen_of, g);
    if (__atomic_load_n(&pd_ugen[0], __ATOMIC_ACQUIRE) == g[0] &&
        __atomic_load_n(&pd_ugen[1], __ATOMIC_ACQUIRE) == g[1])
        return;
    for (uint32_t t = 0; t < pd_unwind_ntables; t++) {
        const struct pd_unwind *u = &pd_unwind_tables[t];
        if (u->object >= 0 || u->abi != PD_ARCH_ABI)
            continue;
        struct pd_ufind f = {u->path, 0};
        int found = dl_iterate_phdr(pd_find_loaded, &f);
        __atomic_store_n(&pd_unwind_bias[t], f.bias, __ATOMIC_RELAXED);
        __atomic_store_n(&pd_unwind_state[t], found ? 1 : 2, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&pd_ugen[0], g[0], __ATOMIC_RELEASE);
    __atomic_store_n(&pd_ugen[1], g[1], __ATOMIC_RELEASE);
}

/* Whether table t's object is loaded in this process, and its load bias. */
static int pd_table_bias(uint32_t t, uintptr_t *bias)
{
    const struct pd_unwind *u = &pd_unwind_tables[t];
    if (u->object >= 0)
        return pd_object_bias((uint32_t)u->object, bias);
    if (u->abi != PD_ARCH_ABI || !pd_unwind_state ||
        __atomic_load_n(&pd_unwind_state[t], __ATOMIC_ACQUIRE) != 1)
        return 0;
    *bias = __atomic_load_n(&pd_unwind_bias[t], __ATOMIC_RELAXED);
    return 1;
}

/* The table whose code contains addr, and its object's load bias. */
static const struct pd_unwind *pd_unwind_for(uintptr_t addr, uintptr_t *bias)
{
    if (!&pd_unwind_ntables)
        return NULL;
    for (uint32_t t = 0; t < pd_unwind_ntables; t++) {
        const struct pd_unwind *u = &pd_unwind_tables[t];
        uintptr_t b;
        if (pd_table_bias(t, &b) && addr - b >= u->lo && addr - b < u->hi) {
            *bias = b;
            return u;
        }
    }
    return NULL;
}

/* The loaded object one of whose PT_LOAD segments maps addr: its path (dst, cap
 * bytes), and the page-aligned extent of that segment.  stap's umodname() and the
 * module of an address its tables do not describe. */
struct pd_umod {
    uintptr_t addr;
    char *dst;
    size_t cap;
    uintptr_t lo, hi;
};

static int pd_umod_of(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct pd_umod *m = data;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = ((uintptr_t)info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
        uintptr_t hi = ((uintptr_t)info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) &
                       ~(page - 1);
        if (ph->p_type != PT_LOAD || m->addr < lo || m->addr >= hi)
            continue;
        char resolved[PATH_MAX];
        const char *name = info->dlpi_name;
        if (!name || !name[0]) { /* the program itself */
            ssize_t n = readlink("/proc/self/exe", resolved, sizeof resolved - 1);
            resolved[n > 0 ? n : 0] = 0;
            name = resolved;
        } else if (realpath(name, resolved)) {
            name = resolved;
        }
        /* the launcher's path of a file it has a table of (a qemu-user guest names
         * sysroot libraries by guest paths) */
        for (uint32_t t = 0; &pd_unwind_ntables && t < pd_unwind_ntables; t++)
            if (pd_arch_same_file(name, pd_unwind_tables[t].path)) {
                name = pd_unwind_tables[t].path;
                break;
            }
        snprintf(m->dst, m->cap, "%s", name);
        m->lo = lo;
        m->hi = hi;
        return 1;
    }
    return 0;
}

static int pd_umod_find(uintptr_t addr, char *dst, size_t cap, uintptr_t *lo, uintptr_t *hi)
{
    struct pd_umod m = {addr, dst, cap, 0, 0};
    if (!dl_iterate_phdr(pd_umod_of, &m) || !dst[0])
        return 0;
    *lo = m.lo;
    *hi = m.hi;
    return 1;
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

/* What is known of an address: its symbol (name NULL: none) and its module (mod NULL:
 * none), the offset in the module and its size when there is no symbol. */
struct pd_where {
    const char *name;
    uint64_t off, size;
    const char *mod;
    uint64_t moff, msize;
    char buf[MAXSTRINGLEN]; /* a module path found among the loaded objects */
};

/* `data`: usymdata's lookup, the data objects of a table's object before its functions,
 * and its module extent from its first loaded byte (elf/unwind.py's data_table). */
static void pd_lookup(uintptr_t a, int data, struct pd_where *w)
{
    w->name = w->mod = NULL;
    w->off = w->size = w->moff = w->msize = 0;
    uintptr_t bias;
    for (uint32_t t = 0; data && &pd_unwind_ntables && t < pd_unwind_ntables; t++) {
        const struct pd_unwind *u = &pd_unwind_tables[t];
        if (!u->data || !pd_table_bias(t, &bias))
            continue;
        uint64_t off = (uint64_t)(a - bias);
        if (off < u->mlo || off >= u->mhi)
            continue;
        const struct pd_usym *s = pd_usym_in(u->data, u->ndata, off);
        if (!s)
            s = pd_usym_find(u, off);
        w->mod = u->path;
        if (s) {
            w->name = s->name;
            w->off = off - s->addr;
            w->size = s->size;
        } else {
            w->moff = off - u->mlo;
            w->msize = u->mhi - u->mlo;
        }
        return;
    }
    const struct pd_unwind *u = pd_unwind_for(a, &bias);
    const struct pd_usym *s = u ? pd_usym_find(u, a - bias) : NULL;
    if (s) {
        w->name = s->name;
        w->off = a - bias - s->addr;
        w->size = s->size;
        w->mod = u->path;
        return;
    }
    uintptr_t lo, hi;
    if (pd_umod_find(a, w->buf, sizeof w->buf, &lo, &hi)) {
        w->mod = w->buf;
        w->moff = a - lo;
        w->msize = hi - lo;
    }
}

static const char *pd_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* One address as stap's _stp_snprint_addr writes it: SYMBOL (usymname), DATA
 * (usymdata), FULL (a print_ubacktrace line), SIMPLE (a sprint_ubacktrace line). */
enum pd_symfmt { PD_SYM_SYMBOL, PD_SYM_DATA, PD_SYM_FULL, PD_SYM_SIMPLE, PD_SYM_BRIEF };

static int pd_snprint_addr(char *dst, size_t cap, uintptr_t a, enum pd_symfmt how)
{
    struct pd_where w;
    pd_lookup(a, how == PD_SYM_DATA, &w);
    unsigned long addr = (unsigned long)a, off = (unsigned long)w.off;
    unsigned long size = (unsigned long)w.size, moff = (unsigned long)w.moff;
    unsigned long msize = (unsigned long)w.msize;
    switch (how) {
    case PD_SYM_SYMBOL:
        if (w.name)
            return snprintf(dst, cap, "%s", w.name);
        break;
    case PD_SYM_DATA:
        if (w.name)
            return snprintf(dst, cap, "%s+0x%lx/0x%lx [%s]", w.name, off, size, w.mod);
        if (w.mod)
            return snprintf(dst, cap, "0x%lx [%s+0x%lx/0x%lx]", addr, w.mod, moff, msize);
        break;
    case PD_SYM_FULL:
        if (w.name)
            return snprintf(dst, cap, " 0x%lx : %s+0x%lx/0x%lx [%s]\n", addr, w.name, off,
                            size, w.mod);
        if (w.mod)
            return snprintf(dst, cap, " 0x%lx [%s+0x%lx/0x%lx]\n", addr, w.mod, moff, msize);
        return snprintf(dst, cap, " 0x%lx\n", addr);
    case PD_SYM_BRIEF:
        if (w.name)
            return snprintf(dst, cap, "%s+0x%lx\n", w.name, off);
        return snprintf(dst, cap, "0x%lx\n", addr);
    case PD_SYM_SIMPLE:
        if (w.name)
            return snprintf(dst, cap, "%s+0x%lx [%s]\n", w.name, off, pd_basename(w.mod));
        if (w.mod)
            return snprintf(dst, cap, "0x%lx [%s+0x%lx]\n", addr, pd_basename(w.mod), moff);
        return snprintf(dst, cap, "0x%lx\n", addr);
    }
    return snprintf(dst, cap, "0x%lx", addr);
}

char *pd_usymname(struct pd_ctx *c, char *dst, int64_t addr)
{
    (void)c;
    pd_unwind_refresh();
    pd_snprint_addr(dst, MAXSTRINGLEN, (uintptr_t)addr, PD_SYM_SYMBOL);
    return dst;
}

/* stap's usymdata: "name+0xoff/0xsize [path]" for an address in a data object or a
 * function, "0xaddr [path+0xoff/0xsize]" elsewhere in a loaded object, else "0xaddr". */
char *pd_usymdata(struct pd_ctx *c, char *dst, int64_t addr)
{
    (void)c;
    pd_unwind_refresh();
    pd_snprint_addr(dst, MAXSTRINGLEN, (uintptr_t)addr, PD_SYM_DATA);
    return dst;
}

/* stap's umodname: the path of the loaded object that maps addr, else "<unknown>" and
 * the error "module cannot be found". */
char *pd_umodname(struct pd_ctx *c, char *dst, int64_t addr)
{
    uintptr_t lo, hi;
    dst[0] = 0;
    if (!pd_umod_find((uintptr_t)addr, dst, MAXSTRINGLEN, &lo, &hi)) {
        strcpy(dst, "<unknown>");
        pd_error(c, "module cannot be found");
    }
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

/* The frames' pcs from the probe's context (0 without one). */
static unsigned pd_frames(struct pd_ctx *c, uintptr_t *pcs)
{
    if (!c->regs)
        return 0;
    pd_unwind_refresh();
    return pd_walk(c->regs, pcs, PD_MAXBACKTRACE);
}

char *pd_ubacktrace(struct pd_ctx *c, char *dst)
{
    dst[0] = 0;
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned n = pd_frames(c, pcs);
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

static void pd_unwind_error(struct pd_ctx *c, int64_t n)
{
    pd_error(c, "reached end of stack before unwinding to level %lld", (long long)n);
}

/* stap's ustack(n): the pc of frame n (0: the probe's). */
int64_t pd_ustack(struct pd_ctx *c, int64_t n)
{
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned depth = pd_frames(c, pcs);
    if (n < 0 || (uint64_t)n >= depth) {
        pd_unwind_error(c, n);
        return 0;
    }
    return (int64_t)pcs[n];
}

/* The pc of frame n, 0 where the stack ends before it: a `.callees(N)` probe's test of
 * the calls up the stack, which is no error when it fails. */
int64_t pd_ustack_or_zero(struct pd_ctx *c, int64_t n)
{
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned depth = pd_frames(c, pcs);
    return n >= 0 && (uint64_t)n < depth ? (int64_t)pcs[n] : 0;
}

/* stap's ucallers(n): frames 0..n as "0x.." words (n -1: every frame); an error if the
 * stack ends before frame n; whole words within MAXSTRINGLEN. */
char *pd_ucallers(struct pd_ctx *c, char *dst, int64_t n)
{
    dst[0] = 0;
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned depth = pd_frames(c, pcs);
    size_t len = 0;
    for (int64_t i = 0; i <= n || n == -1; i++) {
        if ((uint64_t)i >= depth) {
            if (n != -1)
                pd_unwind_error(c, n);
            break;
        }
        char word[32];
        int w = snprintf(word, sizeof word, "%s0x%lx", i ? " " : "", (unsigned long)pcs[i]);
        if (len + (size_t)w >= MAXSTRINGLEN)
            break;
        memcpy(dst + len, word, (size_t)w + 1);
        len += (size_t)w;
    }
    return dst;
}

/* One output record per frame, " 0xADDR : NAME+0xOFF/0xSIZE [PATH]" (fmt_id: "%s"), or
 * with `brief` (print_ubacktrace_brief) "NAME+0xOFF", "0xADDR" without a symbol;
 * "<no user backtrace at PP>" without a register context, as stap has it. */
void pd_print_ubacktrace(struct pd_ctx *c, uint32_t fmt_id, int brief)
{
    if (!c->regs) {
        char line[MAXSTRINGLEN];
        snprintf(line, sizeof line, "<no user backtrace at %s>\n", c->probe->pp);
        pd_rec_open(c, PD_REC_PRINTF, fmt_id, 1);
        pd_rec_str(c, line);
        pd_rec_close(c);
        return;
    }
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned n = pd_frames(c, pcs);
    for (unsigned i = 0; i < n; i++) {
        char line[MAXSTRINGLEN];
        pd_snprint_addr(line, sizeof line, pcs[i], brief ? PD_SYM_BRIEF : PD_SYM_FULL);
        pd_rec_open(c, PD_REC_PRINTF, fmt_id, 1);
        pd_rec_str(c, line);
        pd_rec_close(c);
    }
}

/* stap's sprint_ubacktrace: "name+0xoff [basename]" lines, cut at MAXSTRINGLEN - 1
 * bytes; "<no user backtrace at PP>" without a register context. */
char *pd_sprint_ubacktrace(struct pd_ctx *c, char *dst)
{
    dst[0] = 0;
    if (!c->regs) {
        snprintf(dst, MAXSTRINGLEN, "<no user backtrace at %s>\n", c->probe->pp);
        return dst;
    }
    uintptr_t pcs[PD_MAXBACKTRACE];
    unsigned n = pd_frames(c, pcs);
    size_t len = 0;
    for (unsigned i = 0; i < n && len + 1 < MAXSTRINGLEN; i++) {
        int w = pd_snprint_addr(dst + len, MAXSTRINGLEN - len, pcs[i], PD_SYM_SIMPLE);
        if (w < 0)
            break;
        len += (size_t)w < MAXSTRINGLEN - len ? (size_t)w : MAXSTRINGLEN - 1 - len;
    }
    return dst;
}

/* The next space-separated word of *p into word (cap bytes); 0 at the end. */
static int pd_next_word(const char **p, char *word, size_t cap)
{
    const char *s = *p;
    while (*s == ' ')
        s++;
    size_t n = strcspn(s, " ");
    if (!n)
        return 0;
    snprintf(word, cap, "%.*s", (int)n, s);
    *p = s + n;
    return 1;
}

/* stap's print_usyms(stk): " WORD : usymdata(WORD)" a line, WORD as given (fmt_id: "%s"). */
void pd_print_usyms(struct pd_ctx *c, uint32_t fmt_id, const char *stk)
{
    char word[MAXSTRINGLEN], what[MAXSTRINGLEN], line[2 * MAXSTRINGLEN + 8];
    pd_unwind_refresh();
    for (const char *p = stk; pd_next_word(&p, word, sizeof word);) {
        pd_snprint_addr(what, sizeof what, (uintptr_t)strtoull(word, NULL, 16), PD_SYM_DATA);
        snprintf(line, sizeof line, " %s : %s\n", word, what);
        pd_rec_open(c, PD_REC_PRINTF, fmt_id, 1);
        pd_rec_str(c, line);
        pd_rec_close(c);
    }
}

/* stap's sprint_usyms(stk): those lines joined, whole lines within MAXSTRINGLEN. */
char *pd_sprint_usyms(struct pd_ctx *c, char *dst, const char *stk)
{
    (void)c;
    char word[MAXSTRINGLEN], what[MAXSTRINGLEN], line[2 * MAXSTRINGLEN + 8];
    /* stk may be dst's own buffer: read all of it before writing */
    char in[MAXSTRINGLEN];
    snprintf(in, sizeof in, "%s", stk);
    size_t len = 0;
    dst[0] = 0;
    pd_unwind_refresh();
    for (const char *p = in; pd_next_word(&p, word, sizeof word);) {
        pd_snprint_addr(what, sizeof what, (uintptr_t)strtoull(word, NULL, 16), PD_SYM_DATA);
        int w = snprintf(line, sizeof line, " %s : %s\n", word, what);
        if (w < 0 || len + (size_t)w > MAXSTRINGLEN - 1)
            break;
        memcpy(dst + len, line, (size_t)w + 1);
        len += (size_t)w;
    }
    return dst;
}
