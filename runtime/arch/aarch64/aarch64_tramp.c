/* aarch64 trampolines: see tramp.h. */
#define _GNU_SOURCE
#include <elf.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "pd_internal.h"
#include "pd_tramp.h"

/* Read by pd_a64_tramp_common: which vector state to save.  Set before any
 * constructor arms a site (pd_ret_tramp needs it also when only BRKs are armed). */
int pd_xmm_always = 1; /* the stubs and pd_ret_tramp always save the vector state */
int pd_a64_sve;
__attribute__((constructor(101))) static void pd_a64_sve_init(void)
{
    pd_a64_sve = (getauxval(AT_HWCAP) & HWCAP_SVE) != 0;
}

__attribute__((visibility("hidden"), used)) void
pd_a64_tramp_entry(struct pd_regs *regs, const struct pd_site *site, uintptr_t bias)
{
    if (site->nentry + site->nreturn + site->nshared) /* a function entry, or rows sharing */
        pd_func_fire(regs, site, bias);                   /* one address (pd_func.c) */
    else
        pd_run(&pd_probes[site->probe], site, regs, bias);
}

extern const uint8_t pd_a64_stub_tmpl[], pd_a64_stub_branch[], pd_a64_stub_lits[],
    pd_a64_stub_end[], pd_a64_tramp_common[] __attribute__((visibility("hidden")));

/* The frame of pd_a64_tramp_common (aarch64_stub.S): struct pd_regs at 0 (x0..x30, sp,
 * pc, flags = 34 words), fpsr/fpcr at 272; the stub's three saved registers at
 * 288..311, the site's sp at 320. */
_Static_assert(sizeof(struct pd_regs) == 272, "pd_a64_tramp_common's frame");

static int pd_a64_b_reaches(uintptr_t from, uintptr_t to)
{
    int64_t d = (int64_t)(to - from);
    return d >= -(int64_t)0x8000000 && d < (int64_t)0x8000000 && !(d & 3);
}

static uint32_t pd_a64_b(uintptr_t from, uintptr_t to)
{
    return PD_A64_B | ((uint32_t)((int64_t)(to - from) >> 2) & 0x3ffffffu);
}

/* Whether the site's `B` reaches the stub (pd_tramp_prepare checks each site). */
int pd_stub_reaches(uintptr_t site, uintptr_t stub) { return pd_a64_b_reaches(site, stub); }

/* The plan's relocated code at `at` (8-aligned: its literals are) + `b resume`, in at
 * most `room` bytes; returns the length, or -1 if a branch does not reach from there. */
static int pd_a64_put_code(uint8_t *at, size_t room, const struct pd_plan *plan, uintptr_t bias)
{
    if (((uintptr_t)at & 7) || plan->code_len % 4 || plan->code_len + 4u > room)
        return -1;
    memcpy(at, plan->code, plan->code_len);
    for (unsigned i = 0; i < plan->nfixups; i++) {
        const struct pd_fixup *f = &plan->fixups[i];
        uintptr_t t = bias + (uintptr_t)f->target;
        uint32_t w;
        if (f->kind == PD_FIX_B26) { /* B or BL: the opcode bits stay */
            if (!pd_a64_b_reaches((uintptr_t)(at + f->at), t))
                return -1;
            memcpy(&w, at + f->at, 4);
            w = (w & ~0x3ffffffu) | (pd_a64_b((uintptr_t)(at + f->at), t) & 0x3ffffffu);
        } else if (f->kind == PD_FIX_ABS32 || f->kind == PD_FIX_ABS32HI) {
            w = f->kind == PD_FIX_ABS32HI ? (uint32_t)((uint64_t)t >> 32) : (uint32_t)t;
        } else {
            return -1;
        }
        memcpy(at + f->at, &w, 4);
    }
    uintptr_t back = (uintptr_t)(at + plan->code_len), resume = bias + (uintptr_t)plan->resume;
    if (!pd_a64_b_reaches(back, resume))
        return -1;
    uint32_t b = pd_a64_b(back, resume);
    memcpy(at + plan->code_len, &b, 4);
    return (int)plan->code_len + 4;
}

/* Writes the stub for `site` at `at` (PD_STUB_SIZE bytes, 8-aligned); returns its
 * length, or -1 if the way back does not reach.  pd_tramp_prepare flushes the area. */
int pd_write_stub(uint8_t *at, const struct pd_site *site, uintptr_t bias)
{
    size_t n = (size_t)(pd_a64_stub_end - pd_a64_stub_tmpl);
    size_t branch = (size_t)(pd_a64_stub_branch - pd_a64_stub_tmpl);
    size_t lits = (size_t)(pd_a64_stub_lits - pd_a64_stub_tmpl);
    uintptr_t next = bias + (uintptr_t)site->plan.resume; /* a nop: after the site */
    if (n > PD_STUB_SIZE)
        return -1;
    memcpy(at, pd_a64_stub_tmpl, n);
    if (site->plan.tactic == PD_TACTIC_DISPLACE) { /* a function entry: its first instruction */
        int len = pd_a64_put_code(at + n, PD_STUB_SIZE - n, &site->plan, bias);
        if (len < 0)
            return -1;
        next = (uintptr_t)(at + n);
        n += (size_t)len;
    }
    if (!pd_a64_b_reaches((uintptr_t)(at + branch), next))
        return -1;
    uint32_t b = pd_a64_b((uintptr_t)(at + branch), next);
    memcpy(at + branch, &b, 4);
    uint64_t lit[5] = {bias + site->pc, (uint64_t)(uintptr_t)site, bias,
                       (uint64_t)(uintptr_t)pd_a64_tramp_common,
                       (uint64_t)(uintptr_t)pd_a64_tramp_entry};
    memcpy(at + lits, lit, sizeof lit);
    return (int)n;
}

/* A function entry on the BRK path resumes in this copy of its first instruction. */
int pd_write_ool(uint8_t *at, const struct pd_site *site, uintptr_t bias)
{
    if (!site->plan.code_len)
        return -1;
    return pd_a64_put_code(at, PD_OOL_SIZE, &site->plan, bias) < 0 ? -1 : 0;
}

/* Whether the loader mapped the object's code with PROT_BTI (guarded pages: an
 * indirect branch must land on a landing pad): its GNU property note asks for BTI
 * and the CPU has it.  pd_patch's mprotect must keep the flag, or patching a site
 * would silently drop the object's branch protection for that page. */
static int pd_a64_guarded(const struct dl_phdr_info *info)
{
    if (!(getauxval(AT_HWCAP2) & HWCAP2_BTI))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_GNU_PROPERTY || ph->p_memsz < 16)
            continue;
        const uint32_t *n = (const uint32_t *)(info->dlpi_addr + ph->p_vaddr);
        if (n[0] != 4 || n[2] != NT_GNU_PROPERTY_TYPE_0 || memcmp(&n[3], "GNU", 4) != 0 ||
            16 + (uint64_t)n[1] > ph->p_memsz)
            return 0;
        const uint8_t *d = (const uint8_t *)&n[4], *end = d + n[1];
        while (d + 8 <= end) { /* pr_type, pr_datasz, data padded to 8 */
            uint32_t type, size, bits;
            memcpy(&type, d, 4);
            memcpy(&size, d + 4, 4);
            if (type == GNU_PROPERTY_AARCH64_FEATURE_1_AND && size >= 4 && d + 12 <= end) {
                memcpy(&bits, d + 8, 4);
                return (bits & GNU_PROPERTY_AARCH64_FEATURE_1_BTI) != 0;
            }
            d += 8 + (((uint64_t)size + 7) & ~(uint64_t)7);
        }
    }
    return 0;
}

static uint32_t pd_a64_patch_insn; /* what pd_a64_write_b stores (constructor time) */
static void pd_a64_write_b(uint8_t *at)
{
    __atomic_store_n((uint32_t *)(void *)at, pd_a64_patch_insn, __ATOMIC_RELEASE);
}

/* The nop becomes `B stub` in one store: a concurrently executing thread runs
 * either the nop or the branch. */
int pd_install_jump(uintptr_t addr, unsigned len, int prot, uintptr_t stub)
{
    if (len != 4 || !pd_a64_b_reaches(addr, stub))
        return -1;
    pd_a64_patch_insn = pd_a64_b(addr, stub);
    return pd_patch(addr, 4, prot, pd_a64_write_b);
}

/* No exit sites here (plan/returns.py): the stub's start. */
uintptr_t pd_stub_start(uintptr_t stub, const struct pd_site *site)
{
    (void)site;
    return stub;
}

/* Plans are one in-place B: no branch lands inside a window, no islands, nothing to
 * link or to put back. */
void pd_tramp_link_area(uintptr_t bias, uint32_t o, uintptr_t *stubs)
{
    (void)bias;
    (void)o;
    (void)stubs;
}

void pd_tramp_link_code(const struct dl_phdr_info *info, uint32_t o, uintptr_t *stubs)
{
    (void)info;
    (void)o;
    (void)stubs;
}

void pd_tramp_unlink_all(uint32_t *bytes) { (void)bytes; }

/* Guarded pages stay guarded. */
/* A site is one B that replaces one instruction: no window has an instruction past its
 * first byte. */
uintptr_t pd_tramp_window_pc(uintptr_t pc)
{
    return pc;
}

int pd_tramp_exec_prot(const struct dl_phdr_info *info)
{
    return pd_a64_guarded(info) ? PROT_BTI : 0;
}

/* pd_ret_tramp (aarch64_stub.S) is a stub whose C entry runs the return probes and
 * hands back the original return address in x30. */
static void pd_a64_ret_entry(struct pd_regs *regs, const struct pd_site *site, uintptr_t bias)
{
    (void)site;
    (void)bias;
    regs->r[30] = pd_ret_handler(regs);
}

/* {pc, site, bias, common, C entry}, as in a stub: pc is pd_ret_handler's to fill in */
__attribute__((visibility("hidden"), used)) const uintptr_t pd_a64_ret_lits[5] = {
    0, 0, 0, (uintptr_t)pd_a64_tramp_common, (uintptr_t)pd_a64_ret_entry};

/* The stubs save the vector registers themselves: nothing to keep around fn. */
uintptr_t pd_xmm_call(pd_saved_fn fn, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d)
{
    return fn(a, b, c, d);
}
