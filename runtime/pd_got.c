/* GOT redirection for a process pydyn -x attached to.
 *
 * A preloaded module interposes the unwinder entry points (pd_unwind.c) and the
 * dlopen family (pd_dlopen.c) by symbol lookup.  A module dlopen'ed into a running
 * process interposes nothing: every object already bound those names to libgcc_s,
 * libstdc++ and libc.  So at attach the GOT entries that the loader filled for
 * them (JUMP_SLOT and GLOB_DAT relocations, RELRO pages made writable for the
 * write) are pointed at this module's definitions, in every loaded object but
 * this one, and in objects loaded later (the dlopen wrapper is one of them).
 * That covers a C++ throw: __cxa_throw calls _Unwind_RaiseException through
 * libstdc++'s GOT, and cleanups (_Unwind_Resume) and catches (__cxa_begin_catch)
 * are called from the program's and libraries' PLTs; calls inside libgcc_s that
 * do not use its GOT need no wrapper (their entry point already had one).
 * The wrappers' real functions are what dlsym finds (pd_next, PD_REAL), never
 * the slot's old value, which under lazy binding is the object's PLT stub.
 *
 * Detach writes every original value back, so the process is byte-identical;
 * an entry whose object has gone, or whose slot no longer holds our address,
 * is left alone and counted.  An object another thread is relocating while we
 * scan (a dlopen in progress at the attach) may have our value overwritten by
 * the loader (counted at the detach) or, under lazy binding, offset by its bias.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pd_runtime.h"

#ifdef PD_ARCH_GOT_H /* an arch whose -x attach redirects GOT entries */
#include PD_ARCH_GOT_H /* PD_R_*, PD_DT_REL*, pd_rel */

/* The names pd_unwind.c and pd_dlopen.c define. */
static const char *const pd_got_names[] = {
    "_Unwind_RaiseException", "_Unwind_Resume_or_Rethrow", "_Unwind_ForcedUnwind",
    "_Unwind_Resume", "__cxa_begin_catch", "_Unwind_Backtrace", "backtrace",
    "sigaltstack", "dlopen", "dlmopen", "dlclose",
};
#define PD_GOT_NNAMES (sizeof pd_got_names / sizeof pd_got_names[0])

struct pd_got_entry {
    uintptr_t slot, orig, ours;
    uintptr_t base;           /* the object's load bias and program headers: its identity */
    const void *phdr;
    uintptr_t ro_lo, ro_hi;   /* the object's RELRO pages (read-only after relocation) */
};

/* Guarded by pd_dlopen.c's pass lock: its passes call the _loaded/_unloaded functions. */
static struct pd_got_entry *pd_got;
static uint32_t pd_got_n, pd_got_cap;
static int pd_got_active;          /* between pd_got_redirect_all and pd_got_restore_all */
static void *pd_got_ours[PD_GOT_NNAMES];
static uintptr_t pd_self_base;
static uint32_t pd_got_failed;     /* entries that could not be redirected */

/* 1 if the slot's page is writable now, 0 if read-only, -1 if unknown: its own value
 * is written back through the kernel, which refuses a read-only page (EFAULT) where
 * a store would fault.  (A lazy resolution racing with it is merely redone.) */
static int pd_got_writable(uintptr_t slot)
{
    uintptr_t v = *(volatile uintptr_t *)slot;
    struct iovec local = {&v, sizeof v}, remote = {(void *)slot, sizeof v};
    if (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof v)
        return 1;
    return errno == EFAULT ? 0 : -1;
}

/* Writes `value` into a GOT slot, making a read-only RELRO page writable for the
 * moment.  A page still writable is left so: an object another thread is loading
 * now has not been protected yet, and the loader would fault on it. */
static int pd_got_write(const struct pd_got_entry *e, uintptr_t value)
{
    int relro = e->slot >= e->ro_lo && e->slot < e->ro_hi;
    int w = pd_got_writable(e->slot);
    if (w == 0 && !relro) {
        errno = EACCES; /* read-only, but not by RELRO: we would not know what to restore */
        return -1;
    }
    int ro = w == 0 || (w < 0 && relro);
    long page = sysconf(_SC_PAGESIZE);
    void *pg = (void *)(e->slot & ~(uintptr_t)(page - 1));
    if (ro && mprotect(pg, (size_t)page, PROT_READ | PROT_WRITE) != 0)
        return -1;
    __atomic_store_n((uintptr_t *)e->slot, value, __ATOMIC_RELEASE);
    if (ro)
        mprotect(pg, (size_t)page, PROT_READ);
    return 0;
}

static int pd_got_known(uintptr_t slot)
{
    for (uint32_t i = 0; i < pd_got_n; i++)
        if (pd_got[i].slot == slot)
            return 1;
    return 0;
}

static void pd_got_add(const struct pd_got_entry *e, const char *obj)
{
    if (pd_got_known(e->slot))
        return;
    if (pd_got_n == pd_got_cap) {
        uint32_t cap = pd_got_cap ? 2 * pd_got_cap : 64;
        struct pd_got_entry *g = realloc(pd_got, cap * sizeof *g);
        if (!g) {
            pd_got_failed++;
            return;
        }
        pd_got = g;
        pd_got_cap = cap;
    }
    if (pd_got_write(e, e->ours) != 0) {
        pd_got_failed++;
        pd_warn("%s: cannot make its GOT entry at 0x%lx writable (%s): an exception or "
                "backtrace through a .return-probed frame may fail there",
                obj, (unsigned long)e->slot, strerror(errno));
        return;
    }
    pd_got[pd_got_n++] = *e;
}

/* d_ptr of a dynamic entry: glibc relocates most of them in memory, not the vdso's. */
static uintptr_t pd_dyn_ptr(uintptr_t v, uintptr_t base) { return v < base ? v + base : v; }

static void pd_got_scan_rels(const ElfW(Dyn) *dyn, uintptr_t base, struct pd_got_entry *tmpl,
                             const char *obj)
{
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    uintptr_t jmprel = 0, rel = 0, strsz = 0;
    size_t jmpsz = 0, relsz = 0;
    long pltrel = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)pd_dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_STRTAB: strtab = (const char *)pd_dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_STRSZ: strsz = d->d_un.d_val; break;
        case DT_JMPREL: jmprel = pd_dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_PLTRELSZ: jmpsz = d->d_un.d_val; break;
        case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
        case PD_DT_REL: rel = pd_dyn_ptr(d->d_un.d_ptr, base); break;
        case PD_DT_RELSZ: relsz = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!symtab || !strtab)
        return;
    const long kind = PD_DT_REL;
    const struct { uintptr_t at; size_t size; } tables[2] = {
        {pltrel == kind ? jmprel : 0, jmpsz}, {rel, relsz}};
    for (int k = 0; k < 2; k++) {
        const pd_rel *r = (const pd_rel *)tables[k].at;
        for (size_t i = 0; r && i < tables[k].size / sizeof *r; i++) {
            unsigned type = (unsigned)PD_R_TYPE(r[i].r_info);
            if (type != PD_R_JUMP_SLOT && type != PD_R_GLOB_DAT)
                continue;
            uint32_t name = symtab[PD_R_SYM(r[i].r_info)].st_name;
            if (!name || name >= strsz)
                continue;
            for (unsigned n = 0; n < PD_GOT_NNAMES; n++) {
                if (!pd_got_ours[n] || strcmp(strtab + name, pd_got_names[n]) != 0)
                    continue;
                tmpl->slot = base + r[i].r_offset;
                tmpl->orig = *(uintptr_t *)tmpl->slot;
                tmpl->ours = (uintptr_t)pd_got_ours[n];
                /* 0: a weak reference left unbound; keep it so (it is tested for) */
                if (tmpl->orig && tmpl->orig != tmpl->ours)
                    pd_got_add(tmpl, obj);
                break;
            }
        }
    }
}

static int pd_got_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    if (info->dlpi_addr == pd_self_base)
        return 0; /* our own calls go to the real functions */
    const ElfW(Dyn) *dyn = NULL;
    struct pd_got_entry tmpl = {.base = info->dlpi_addr, .phdr = info->dlpi_phdr};
    long page = sysconf(_SC_PAGESIZE);
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) { /* as ld.so's _dl_protect_relro rounds it */
            tmpl.ro_lo = (info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)(page - 1);
            tmpl.ro_hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(uintptr_t)(page - 1);
        }
    }
    if (dyn)
        pd_got_scan_rels(dyn, info->dlpi_addr, &tmpl,
                         info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "the executable");
    return 0;
}

/* At attach: this module's definitions of the names, then every object's GOT. */
void pd_got_redirect_all(void)
{
    Dl_info self;
    struct link_map *lm = NULL;
    if (!dladdr1((void *)pd_got_redirect_all, &self, (void **)&lm, RTLD_DL_LINKMAP) || !lm) {
        pd_warn("cannot find this module's link map: exceptions and backtraces through "
                ".return-probed frames are not handled in this process");
        return;
    }
    void *ours[PD_GOT_NNAMES]; /* asked before the lock: the loader's lock is never taken inside it */
    for (unsigned n = 0; n < PD_GOT_NNAMES; n++)
        ours[n] = dlsym(lm, pd_got_names[n]); /* a link map is a handle: ours first */
    int taken = pd_dl_tables_lock();
    pd_self_base = lm->l_addr;
    memcpy(pd_got_ours, ours, sizeof ours);
    pd_got_active = 1;
    dl_iterate_phdr(pd_got_object, NULL);
    pd_dl_tables_unlock(taken);
}

/* After a dlopen: the GOTs of objects that were not there before. */
void pd_got_redirect_loaded(void)
{
    if (pd_got_active)
        dl_iterate_phdr(pd_got_object, NULL);
}

struct pd_got_live {
    uintptr_t base;
    const void *phdr;
    int found;
};

static int pd_got_find(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct pd_got_live *l = data;
    l->found = info->dlpi_addr == l->base && (const void *)info->dlpi_phdr == l->phdr;
    return l->found;
}

static int pd_got_loaded(const struct pd_got_entry *e)
{
    struct pd_got_live l = {e->base, e->phdr, 0};
    dl_iterate_phdr(pd_got_find, &l);
    return l.found;
}

/* After a dlclose: forget the entries of objects that have gone. */
void pd_got_forget_unloaded(void)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < pd_got_n; i++)
        if (pd_got_loaded(&pd_got[i]))
            pd_got[k++] = pd_got[i];
    pd_got_n = k;
}

/* At detach: every original value back.  counts[0] += entries restored, counts[1] +=
 * entries not redirected at attach or left as they are now. */
void pd_got_restore_all(uint32_t counts[2])
{
    int taken = pd_dl_tables_lock();
    uint32_t left = pd_got_failed;
    for (uint32_t i = pd_got_n; i-- > 0;) {
        const struct pd_got_entry *e = &pd_got[i];
        if (pd_got_loaded(e) && *(uintptr_t *)e->slot == e->ours && pd_got_write(e, e->orig) == 0)
            counts[0]++;
        else
            left++;
    }
    counts[1] += left;
    free(pd_got);
    pd_got = NULL;
    pd_got_n = pd_got_cap = pd_got_failed = 0;
    pd_got_active = 0;
    pd_dl_tables_unlock(taken);
}

#else /* no return hooks on this arch: nothing to unwind through */
void pd_got_redirect_all(void) {}
void pd_got_redirect_loaded(void) {}
void pd_got_forget_unloaded(void) {}
void pd_got_restore_all(uint32_t counts[2]) { (void)counts; }
#endif
