/* Arming: every probe site of the loaded objects becomes a trap or a jump to its
 * trampoline (pd_tramp.c), objects loaded later too; and disarming, for objects
 * unloaded and for a -x detach. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd_internal.h"
#include "pd_tramp.h"

uint8_t *pd_obj_armed;
uintptr_t *pd_obj_bias;
uint8_t *pd_site_off;

/* ---- arming -------------------------------------------------------------- */

void pd_warn(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (pd_seg) {
        struct pd_ctx *c = __builtin_alloca(sizeof(struct pd_ctx));
        c->outlen = 0;
        c->error = 0;
        pd_rec_open_at = 0;
        pd_emit_text(c, PD_REC_WARNING, msg);
        pd_flush(c);
    } else {
        fprintf(stderr, "pydyn: WARNING: %s\n", msg);
    }
}

/* Under -x a write is recorded rather than made while pd_patch_deferred is set
 * (pd_attach_live): arming may wait for a lock a stopped thread holds, and the other
 * threads then run meanwhile; a thread preempted past the first byte of a window
 * would run the bytes written behind it.  pd_patch_commit makes the writes in their
 * order once the launcher has stopped every thread again. */
int pd_patch_deferred;
struct pd_patch_rec {
    uintptr_t addr;
    int prot;
    uint8_t len, bytes[32];
};
static struct pd_patch_rec *pd_patch_recs;
static uint32_t pd_patch_nrecs, pd_patch_caprecs;

static int pd_patch_record(uintptr_t addr, unsigned len, int prot, void (*write)(uint8_t *))
{
    if (len > sizeof pd_patch_recs->bytes) {
        pd_warn("cannot record a write of %u bytes at 0x%lx", len, (unsigned long)addr);
        return -1;
    }
    if (pd_patch_nrecs == pd_patch_caprecs) {
        uint32_t cap = pd_patch_caprecs ? 2 * pd_patch_caprecs : 64;
        struct pd_patch_rec *r = realloc(pd_patch_recs, cap * sizeof *r);
        if (!r) {
            pd_warn("cannot record a write at 0x%lx: out of memory", (unsigned long)addr);
            return -1;
        }
        pd_patch_recs = r;
        pd_patch_caprecs = cap;
    }
    struct pd_patch_rec *r = &pd_patch_recs[pd_patch_nrecs++];
    r->addr = addr;
    r->prot = prot;
    r->len = (uint8_t)len;
    memcpy(r->bytes, (const void *)addr, len);
    write(r->bytes); /* every write function writes its whole [0, len) */
    return 0;
}

static const struct pd_patch_rec *pd_commit_rec;
static void pd_write_rec(uint8_t *at) { memcpy(at, pd_commit_rec->bytes, pd_commit_rec->len); }

static int pd_patch_now(uintptr_t addr, unsigned len, int prot_after, void (*write)(uint8_t *));

uint32_t pd_patch_commit(int apply)
{
    uint32_t failed = 0;
    pd_patch_deferred = 0;
    for (uint32_t i = 0; apply && i < pd_patch_nrecs; i++) {
        pd_commit_rec = &pd_patch_recs[i];
        failed += pd_patch_now(pd_commit_rec->addr, pd_commit_rec->len, pd_commit_rec->prot,
                               pd_write_rec) != 0;
    }
    free(pd_patch_recs);
    pd_patch_recs = NULL;
    pd_patch_nrecs = pd_patch_caprecs = 0;
    return failed;
}

/* mprotect exactly the pages the instruction spans: the page after may not be
 * mapped at all (ENOMEM), which is a layout accident, not a failure to report.
 * Deferred, the pages are still made writable and back, so that a page that cannot be
 * written is found (and its site left unarmed) as when writing at once. */
int pd_patch(uintptr_t addr, unsigned len, int prot_after, void (*write)(uint8_t *))
{
    if (!pd_patch_deferred)
        return pd_patch_now(addr, len, prot_after, write);
    return pd_patch_now(addr, len, prot_after, NULL) != 0
               ? -1 : pd_patch_record(addr, len, prot_after, write);
}

static int pd_patch_now(uintptr_t addr, unsigned len, int prot_after, void (*write)(uint8_t *))
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t first = addr & ~(uintptr_t)(page - 1);
    uintptr_t last = (addr + len - 1) & ~(uintptr_t)(page - 1);
    size_t span = last - first + (size_t)page;
    /* other bits of prot_after (aarch64 PROT_BTI) are kept while writing too */
    int extra = prot_after & ~(PROT_READ | PROT_WRITE | PROT_EXEC);
    if (mprotect((void *)first, span, PROT_READ | PROT_WRITE | PROT_EXEC | extra) != 0) {
        pd_warn("cannot make 0x%lx writable (%lu bytes from page 0x%lx): %s",
                (unsigned long)addr, (unsigned long)span, (unsigned long)first,
                strerror(errno));
        return -1;
    }
    if (write) {
        write((uint8_t *)addr);
        pd_flush_icache((void *)addr, (void *)(addr + len));
    }
    mprotect((void *)first, span, prot_after);
    return 0;
}

int pd_object_matches(const char *path, const char *loaded_name)
{
    char resolved[PATH_MAX];
    const char *name = loaded_name;
    if (!name || !name[0]) {
        ssize_t n = readlink("/proc/self/exe", resolved, sizeof resolved - 1);
        if (n <= 0)
            return 0;
        resolved[n] = 0;
    } else if (!realpath(name, resolved)) {
        return 0;
    }
    return pd_arch_same_file(resolved, path);
}

int pd_segment_prot(const struct dl_phdr_info *info, uintptr_t vaddr)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && vaddr >= ph->p_vaddr && vaddr < ph->p_vaddr + ph->p_memsz)
            return ((ph->p_flags & PF_R) ? PROT_READ : 0) |
                   ((ph->p_flags & PF_W) ? PROT_WRITE : 0) |
                   ((ph->p_flags & PF_X) ? pd_tramp_exec_prot(info) : 0) |
                   ((ph->p_flags & PF_X) ? PROT_EXEC : 0);
    }
    return -1;
}

/* Adds 1 or -1 to the semaphore of an armed row and of every row it runs for its
 * address (pd_site.shared); returns how many semaphores it changed. */
static uint32_t pd_site_semas(const struct pd_site *site, uintptr_t bias, int delta)
{
    uint32_t n = 0;
    for (unsigned i = 0; i < (site->nshared ? site->nshared : 1u); i++) {
        const struct pd_site *r = site->nshared ? &pd_sites[site->shared[i]] : site;
        if (!r->sema)
            continue;
        uint16_t *sema = (uint16_t *)(bias + (uintptr_t)r->sema);
        if (delta > 0)
            __atomic_add_fetch(sema, 1, __ATOMIC_RELAXED);
        else
            __atomic_sub_fetch(sema, 1, __ATOMIC_RELAXED);
        n++;
    }
    return n;
}

/* The armed site whose patch wrote into [addr, addr + len), NULL if none: a site whose
 * bytes are not what its plan expects names it (the planner keeps the windows of one
 * run's sites apart: this names the culprit should that ever fail) */
static const struct pd_armed *pd_armed_over(uintptr_t addr, unsigned len)
{
    for (uint32_t i = 0; pd_armed && i < pd_armed_cap; i++) {
        const struct pd_armed *a = &pd_armed[i];
        uintptr_t at = __atomic_load_n(&a->addr, __ATOMIC_ACQUIRE);
        unsigned wrote = a->stub ? a->site->plan.len : PD_TRAP_LEN;
        if (at > PD_ARMED_DEAD && at < addr + len && addr < at + wrote)
            return a;
    }
    return NULL;
}

/* Warns that site `site` at `addr` (link-time `pc`) is not armed, why, and counts it
 * skipped; `why` gives way to the site whose patch overwrote [addr, addr + len) if one
 * did (len 0: the bytes are not the reason). */
static void pd_arm_refused(const struct pd_site *site, uint32_t o, uintptr_t addr, unsigned len,
                           const char *why)
{
    const struct pd_armed *by = pd_armed_over(addr, len);
    char what[160], other[200] = "";
    if (site->nop_len == 0)
        snprintf(what, sizeof what, "function %s", site->name);
    else
        snprintf(what, sizeof what, "probe %s:%s", site->provider, site->name);
    if (by)
        snprintf(other, sizeof other, "its bytes were overwritten by the patch of %s%s%s at 0x%lx",
                 by->site->nop_len ? by->site->provider : "",
                 by->site->nop_len ? ":" : "function ", by->site->name,
                 (unsigned long)by->site->pc);
    pd_warn("%s: %s at 0x%lx: %s; not armed", pd_objects[o].path, what,
            (unsigned long)site->pc, by ? other : why);
    if (pd_self)
        pd_self->sites_failed++;
    __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
}

static int pd_arm_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    for (uint32_t o = 0; o < pd_module.nobjects; o++) {
        if (pd_obj_armed[o] || pd_objects[o].abi != PD_ARCH_ABI ||
            !pd_object_matches(pd_objects[o].path, info->dlpi_name))
            continue;
        pd_obj_armed[o] = 1;
        pd_obj_bias[o] = (uintptr_t)info->dlpi_addr;
        if (pd_hdr && o < 64) /* for the launcher's exit report */
            __atomic_fetch_or(o < 32 ? &pd_hdr->objects_loaded_lo : &pd_hdr->objects_loaded_hi,
                              1u << (o % 32), __ATOMIC_RELAXED);
        uintptr_t *stubs = pd_tramp_prepare(info, o);
        if (!stubs) /* traps only: every function keeps the return-address hijack */
            pd_ret_choose(o, NULL, pd_site_off);
        uintptr_t *ool = pd_ool_prepare(info, o); /* function entries */
        for (uint32_t s = 0; s < pd_module.nsites; s++) {
            const struct pd_site *site = &pd_sites[s];
            /* a shared row is armed with the row that runs it (pd_site.shared) */
            if (site->object != o || pd_site_off[s] || (site->fx & PD_FX_SHARED))
                continue;
            if ((site->fx & PD_FX_IN_ENTRY) && stubs && stubs[s])
                continue; /* nothing to patch: the entry's stub leads to its stub */
            if ((site->fx & PD_FX_EXIT) && !(stubs && stubs[s])) {
                /* its stub was refused after the choice (a branch into its window): a trap
                 * there would run the handler before the exit's own instructions */
                pd_warn("%s: function %s: the exit at window 0x%lx could not be linked; its "
                        "returns are not probed", pd_objects[o].path, site->name,
                        (unsigned long)site->pc);
                if (pd_self)
                    pd_self->sites_failed++;
                __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
                continue;
            }
            uintptr_t addr = (uintptr_t)info->dlpi_addr + (uintptr_t)site->pc;
            int prot = pd_segment_prot(info, (uintptr_t)site->pc);
            if (site->nop_len == 0) { /* a function entry: the plan's bytes, and a way to run them */
                if (prot < 0 || !(prot & PROT_EXEC) || !ool || !ool[s] ||
                    memcmp((const void *)addr, site->plan.orig, site->plan.len) != 0) {
                    int exec = prot >= 0 && (prot & PROT_EXEC), out = ool && ool[s];
                    pd_arm_refused(site, o, addr, exec && out ? site->plan.len : 0,
                                   !exec ? "not in executable memory"
                                   : !out ? "its first instruction cannot run out of line"
                                          : "not the instructions the plan was made for");
                    continue;
                }
            } else if (prot < 0 || !(prot & PROT_EXEC) || !pd_arch_is_nop((const uint8_t *)addr, site->nop_len)) {
                int exec = prot >= 0 && (prot & PROT_EXEC);
                pd_arm_refused(site, o, addr, exec ? site->nop_len : 0,
                               exec ? "not a nop in memory" : "not in executable memory");
                continue;
            }
            struct pd_armed e = {.addr = addr, .bias = (uintptr_t)info->dlpi_addr, .site = site,
                                 .stub = stubs ? stubs[s] : 0, .ool = ool ? ool[s] : 0};
            /* every byte a trap or jump may overwrite (nop_len is 0 at a function entry) */
            unsigned save = site->plan.len > site->nop_len ? site->plan.len : site->nop_len;
            e.saved_len = (uint8_t)(save < PD_TRAP_LEN ? PD_TRAP_LEN
                                    : save > sizeof e.saved ? sizeof e.saved : save);
            e.prot = prot;
            memcpy(e.saved, (const void *)addr, e.saved_len);
            /* published before the first int3 is written: a thread may hit it at once */
            struct pd_armed *a = pd_armed_insert(&e);
            if (!a)
                continue;
            /* a short window jumps to its island (the stub's entry word) */
            if (a->stub && pd_install_jump(addr, site->plan.len, prot, site->plan.len < 5 ? a->stub
                                           : pd_stub_start(a->stub, site)) != 0) {
                /* a stub that must run (an exit's, an entry's leading to its in-entry
                 * exit): its int3 keeps sending threads to it (pd_sigtrap), never traps */
                if (!pd_stub_leads_on(s))
                    a->stub = 0;
                else if (pd_patch(addr, PD_TRAP_LEN, prot, pd_write_trap) != 0)
                    a->stub = 0; /* nothing written: the exit is not armed below */
            }
            /* an exit or a bare entry without its stub has nothing to run */
            if (!a->stub && (site->fx & (PD_FX_EXIT | PD_FX_BARE))) {
                pd_armed_remove(a);
                if (pd_self)
                    pd_self->sites_failed++;
                __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
                continue;
            }
            if (!a->stub && pd_patch(addr, PD_TRAP_LEN, prot, pd_write_trap) != 0) {
                pd_armed_remove(a);
                if (pd_self)
                    pd_self->sites_failed++;
                continue;
            }
            pd_site_semas(site, (uintptr_t)info->dlpi_addr, 1);
            if (pd_self)
                pd_self->sites_armed++;
        }
        free(stubs);
        free(ool);
    }
    return 0;
}

void pd_arm_all(void)
{
    if (!pd_module.nsites)
        return;
    uint32_t cap = 4;
    while (cap <= 2 * pd_module.nsites)
        cap *= 2;
    pd_obj_armed = calloc(pd_module.nobjects + 1, 1);
    pd_obj_bias = calloc(pd_module.nobjects + 1, sizeof *pd_obj_bias);
    pd_site_off = calloc(pd_module.nsites, 1);
    struct pd_armed *table = calloc(cap, sizeof *table);
    if (!table || !pd_obj_armed || !pd_obj_bias || !pd_site_off)
        return;
    if (pd_install_trap_handler() != 0) {
        pd_warn("cannot install the SIGTRAP handler: %s", strerror(errno));
        return;
    }
    pd_armed_cap = cap;
    pd_armed = table;
    dl_iterate_phdr(pd_arm_object, NULL);
}

int pd_object_bias(uint32_t o, uintptr_t *bias)
{
    if (!pd_obj_armed || o >= pd_module.nobjects || !pd_obj_armed[o])
        return 0;
    *bias = pd_obj_bias[o];
    return 1;
}

/* @var("g", "PATH") in a script function, where no probe site gives the load bias: that
 * of PATH (a realpath, as pd_objects holds them) in this process; the handler's error if
 * the session arms no such object here. */
int64_t pd_object_bias_of(struct pd_ctx *c, const char *path, const char *where)
{
    uintptr_t bias = 0;
    for (uint32_t o = 0; o < pd_module.nobjects; o++)
        if (strcmp(pd_objects[o].path, path) == 0 && pd_object_bias(o, &bias))
            return (int64_t)bias;
    c->where = where;
    pd_error(c, "@var: %s is not loaded in this process", path);
    return 0;
}

/* In a pass after a dlopen or dlclose (pd_dlopen.c, one pass at a time): arms the objects that
 * are new since the last pass. */
void pd_arm_loaded(void)
{
    if (pd_armed && pd_session_running())
        dl_iterate_phdr(pd_arm_object, NULL);
}

static int pd_find_bias(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    return (uintptr_t)info->dlpi_addr == *(uintptr_t *)data;
}

/* In the same passes: forgets the sites of armed objects that are no longer loaded
 * (their memory is gone: nothing is read or restored there) and frees their stubs. */
void pd_disarm_unloaded(void)
{
    if (!pd_armed)
        return;
    for (uint32_t o = 0; o < pd_module.nobjects; o++) {
        uintptr_t bias = pd_obj_bias[o];
        if (!pd_obj_armed[o] || bias == 0 || dl_iterate_phdr(pd_find_bias, &bias))
            continue;
        pd_obj_armed[o] = 0;
        for (uint32_t i = 0; i < pd_armed_cap; i++) {
            struct pd_armed *a = &pd_armed[i];
            if (a->addr <= PD_ARMED_DEAD || a->site->object != o)
                continue;
            uintptr_t stub = a->stub, ool = a->ool;
            pd_armed_remove(a);
            if (pd_self)
                pd_self->sites_armed--;
            pd_tramp_release(stub, ool);
        }
    }
}

/* Detaching from a -x process: puts back every byte arming changed (int3 first, so a
 * thread never runs a torn instruction, then the tail, then the first byte) and undoes
 * the semaphore increments.  pd_armed, the stubs and out-of-line copies stay: a thread
 * stopped inside a stub, or with a SIGTRAP from a site still pending, finds them and
 * resumes correctly.  Returns the sites restored; adds to *bytes and *semas. */
static const uint8_t *pd_restore_src;
static unsigned pd_restore_n;
static void pd_write_restore(uint8_t *at) { memcpy(at, pd_restore_src, pd_restore_n); }

uint32_t pd_disarm_all(uint32_t *bytes, uint32_t *semas)
{
    uint32_t sites = 0;
    for (uint32_t i = 0; pd_armed && i < pd_armed_cap; i++) {
        struct pd_armed *a = &pd_armed[i];
        if (a->addr <= PD_ARMED_DEAD)
            continue;
        unsigned len = a->stub ? a->site->plan.len : PD_TRAP_LEN;
        if (len > a->saved_len)
            len = a->saved_len;
        if (len > PD_TRAP_LEN && pd_patch(a->addr, PD_TRAP_LEN, a->prot, pd_write_trap) == 0) {
            pd_restore_src = a->saved + PD_TRAP_LEN;
            pd_restore_n = len - PD_TRAP_LEN;
            pd_patch(a->addr + PD_TRAP_LEN, pd_restore_n, a->prot, pd_write_restore);
            len = PD_TRAP_LEN;
            *bytes += pd_restore_n;
        }
        pd_restore_src = a->saved;
        pd_restore_n = len;
        if (pd_patch(a->addr, len, a->prot, pd_write_restore) != 0)
            continue;
        *bytes += len;
        sites++;
        *semas += pd_site_semas(a->site, a->bias, -1);
    }
    pd_tramp_unlink_all(bytes); /* then the branches and islands that led into stubs */
    return sites;
}
