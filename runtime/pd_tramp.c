/* Trampolines, arch-neutral part (pd_tramp.h): memory for stubs and out-of-line
 * copies within reach of each object, and the walk over an object's sites that has the
 * arch write them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pd_internal.h"
#include "pd_tramp.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* ---- trampoline memory ---------------------------------------------------- */

#if PD_TRAMP_REACH
/* /proc/self/maps read with read(2) and parsed here, a mapping's start and end at a
 * time: stdio and sscanf would run libc's memcpy, memchr, strlen, ... while the
 * program's probes on them may already be armed. */
struct pd_maps {
    int fd;
    size_t len, at;
    char buf[4096];
};

static int pd_maps_getc(struct pd_maps *m)
{
    if (m->at == m->len) {
        ssize_t n = read(m->fd, m->buf, sizeof m->buf);
        if (n <= 0)
            return -1;
        m->len = (size_t)n;
        m->at = 0;
    }
    return (unsigned char)m->buf[m->at++];
}

/* Hex digits up to `end` (consumed) into *v; 0 if anything else comes first (a newline
 * is left for the caller). */
static int pd_maps_hex(struct pd_maps *m, unsigned long *v, int end)
{
    int ch, digits = 0;
    for (*v = 0; (ch = pd_maps_getc(m)) != end; digits++) {
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) {
            if (ch == '\n')
                m->at--;
            return 0;
        }
        *v = *v << 4 | (unsigned long)d;
    }
    return digits > 0;
}

/* The next mapping's start and end: 1; 0 for a line not so shaped; -1 at the end. */
static int pd_maps_next(struct pd_maps *m, unsigned long *start, unsigned long *end)
{
    int ok = pd_maps_hex(m, start, '-') && pd_maps_hex(m, end, ' ');
    for (;;) { /* the rest of the line */
        int ch = pd_maps_getc(m);
        if (ch == '\n')
            return ok;
        if (ch < 0)
            return ok ? 1 : -1;
    }
}
#endif

/* Maps `size` bytes RW within PD_TRAMP_REACH of every address in [lo, hi): the free
 * gap nearest the object in /proc/self/maps (MAP_FIXED_NOREPLACE); anywhere where
 * the arch's jumps reach everything (PD_TRAMP_REACH 0: i386). */
static uint8_t *pd_map_near(uintptr_t lo, uintptr_t hi, size_t size)
{
#if PD_TRAMP_REACH
    const uintptr_t reach = PD_TRAMP_REACH;
    struct pd_maps maps = {open("/proc/self/maps", O_RDONLY | O_CLOEXEC), 0, 0, {0}};
    if (maps.fd < 0)
        return NULL;
    uintptr_t best = 0, best_dist = UINTPTR_MAX, prev_end = 0x10000;
    long page = sysconf(_SC_PAGESIZE);
    for (;;) {
        unsigned long s = 0, en = 0;
        int got = pd_maps_next(&maps, &s, &en);
        if (got == 0)
            continue;
        int more = got > 0;
        if (!more)
            s = 0x7ffffffff000UL; /* the gap after the last mapping */
        if (s > prev_end && s - prev_end >= size) {
            /* the end of the gap nearest the object */
            uintptr_t cand = prev_end >= hi ? prev_end : ((uintptr_t)s - size) & ~(uintptr_t)(page - 1);
            if (cand >= prev_end && cand + size <= s) {
                uintptr_t far_lo = cand < lo ? lo - cand : cand + size - lo;
                uintptr_t far_hi = cand < hi ? hi - cand : cand + size - hi;
                uintptr_t dist = far_lo > far_hi ? far_lo : far_hi;
                if (dist < reach && dist < best_dist) {
                    best = cand;
                    best_dist = dist;
                }
            }
        }
        if (!more)
            break;
        if (en > prev_end)
            prev_end = en;
    }
    close(maps.fd);
    if (!best)
        return NULL;
    void *m = mmap((void *)best, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    if ((uintptr_t)m != best) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        munmap(m, size);
        return NULL;
    }
    return m;
#else
    (void)lo;
    (void)hi;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
#endif
}

/* `bytes` (rounded up to pages, returned in *size) of RX-able memory within
 * reach of every PT_LOAD segment of the object, or NULL. */
static uint8_t *pd_map_near_object(const struct dl_phdr_info *info, size_t bytes,
                                   size_t *size)
{
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo)
            lo = a;
        if (a + ph->p_memsz > hi)
            hi = a + ph->p_memsz;
    }
    long page = sysconf(_SC_PAGESIZE);
    *size = (bytes + (size_t)page - 1) & ~(size_t)(page - 1);
    return pd_map_near(lo, hi, *size);
}

/* Maps and writes the stubs of object `o`'s trampoline sites; returns an array
 * indexed like pd_sites with each stub's address (0: that site keeps the trap), or
 * NULL.  The stubs are executable before any site jumps to them. */
uintptr_t *pd_tramp_prepare(const struct dl_phdr_info *info, uint32_t o)
{
    const char *mode = getenv("PYDYN_PROBE_MODE"); /* pydyn --probe-mode=trap */
    if (PD_FORCE_TRAPS || (mode && strcmp(mode, "trap") == 0))
        return NULL;
    uint32_t n = 0;
    for (uint32_t s = 0; s < pd_module.nsites; s++)
        n += pd_sites[s].object == o && pd_sites[s].plan.tactic != PD_TACTIC_TRAP;
    if (!n)
        return NULL;
    size_t size;
    uint8_t *area = pd_map_near_object(info, (size_t)n * PD_STUB_SIZE, &size);
    if (!area) {
        pd_warn("no memory for trampolines within reach of %s; using traps",
                pd_objects[o].path);
        return NULL;
    }
    uintptr_t *stubs = calloc(pd_module.nsites, sizeof *stubs);
    if (!stubs) {
        munmap(area, size);
        return NULL;
    }
    uint8_t *at = area;
    for (uint32_t s = 0; s < pd_module.nsites; s++) {
        const struct pd_site *site = &pd_sites[s];
        const struct pd_plan *plan = &site->plan;
        if (site->object != o || plan->tactic == PD_TACTIC_TRAP || (site->fx & PD_FX_SHARED))
            continue; /* (a shared row is run by the one armed at its address) */
        uintptr_t addr = (uintptr_t)info->dlpi_addr + (uintptr_t)site->pc;
        if (plan->tactic == PD_TACTIC_DISPLACE && memcmp((const void *)addr, plan->orig, plan->len))
            continue; /* not the bytes the plan was made for: the trap is always safe */
        if (plan->tactic == PD_TACTIC_NOP && plan->len != site->nop_len)
            continue;
        if (pd_write_stub(at, site, (uintptr_t)info->dlpi_addr) < 0)
            continue;
        if (!pd_stub_reaches(addr, (uintptr_t)at))
            continue;
        stubs[s] = (uintptr_t)at;
        at += PD_STUB_SIZE;
    }
    pd_ret_choose(o, stubs, pd_site_off); /* exits or the hijack: before any linking */
    pd_tramp_link_area((uintptr_t)info->dlpi_addr, o, stubs);
    if (mprotect(area, size, PROT_READ | PROT_EXEC) != 0) {
        free(stubs);
        munmap(area, size);
        return NULL;
    }
    pd_flush_icache(area, at); /* written through the data path (aarch64) */
    pd_tramp_link_code(info, o, stubs);
    /* an entry stub refused after the choice takes its in-window exit with it: that exit
     * is then reported as not linked (pd_arm_object) */
    for (uint32_t s = 0; s < pd_module.nsites; s++)
        if (stubs[s] && (pd_sites[s].fx & PD_FX_IN_ENTRY) && !stubs[pd_in_entry_row(s)])
            stubs[s] = 0;
    return stubs;
}


/* Per function site of object `o`: the address of its out-of-line copy (0: none, the
 * site cannot be trapped), indexed like pd_sites; NULL if the object has none. */
uintptr_t *pd_ool_prepare(const struct dl_phdr_info *info, uint32_t o)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < pd_module.nsites; s++)
        n += pd_sites[s].object == o && pd_sites[s].nop_len == 0 && pd_sites[s].plan.code_len;
    if (!n)
        return NULL;
    size_t size;
    uint8_t *area = pd_map_near_object(info, (size_t)n * PD_OOL_SIZE, &size);
    uintptr_t *ool = area ? calloc(pd_module.nsites, sizeof *ool) : NULL;
    if (!ool) {
        if (area)
            munmap(area, size);
        pd_warn("no memory for function entry copies within reach of %s", pd_objects[o].path);
        return NULL;
    }
    uint8_t *at = area;
    for (uint32_t s = 0; s < pd_module.nsites; s++) {
        const struct pd_site *site = &pd_sites[s];
        if (site->object != o || site->nop_len != 0 || !site->plan.code_len)
            continue;
        if (pd_write_ool(at, site, (uintptr_t)info->dlpi_addr) != 0)
            continue;
        ool[s] = (uintptr_t)at;
        at += PD_OOL_SIZE;
    }
    if (mprotect(area, size, PROT_READ | PROT_EXEC) != 0) {
        free(ool);
        munmap(area, size);
        return NULL;
    }
    pd_flush_icache(area, at); /* written through the data path (aarch64) */
    return ool;
}

/* A site forgotten with its unloaded object (pd_disarm_unloaded): the pages its stub
 * and out-of-line copy span (areas are per object, so nothing else lives there). */
void pd_tramp_release(uintptr_t stub, uintptr_t ool)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t code[2] = {stub, ool};
    size_t len[2] = {PD_STUB_SIZE, PD_OOL_SIZE};
    for (int k = 0; k < 2; k++)
        if (code[k] && len[k]) {
            uintptr_t first = code[k] & ~(uintptr_t)(page - 1);
            munmap((void *)first, code[k] + len[k] - first);
        }
}
