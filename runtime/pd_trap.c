/* The table of armed sites, and the SIGTRAP handler that runs a trap site's probe (or
 * sends a thread that met a jump being installed to its stub). */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>

#include "pd_internal.h"
#include "pd_tramp.h"

/* ---- traps --------------------------------------------------------------- */

struct pd_armed *pd_armed;
uint32_t pd_armed_cap;
uint32_t pd_narmed;

static struct sigaction pd_prev_sigtrap;

static uint32_t pd_armed_slot(uintptr_t addr)
{
    return (uint32_t)(((uint64_t)addr * 0x9e3779b97f4a7c15ull) >> 32) & (pd_armed_cap - 1);
}

static const struct pd_armed *pd_find_armed(uintptr_t addr)
{
    if (!pd_armed)
        return NULL;
    for (uint32_t k = 0, i = pd_armed_slot(addr); k < pd_armed_cap; k++, i = (i + 1) & (pd_armed_cap - 1)) {
        uintptr_t a = __atomic_load_n(&pd_armed[i].addr, __ATOMIC_ACQUIRE);
        if (a == addr)
            return &pd_armed[i];
        if (a == 0)
            break;
    }
    return NULL;
}

/* Publishes a copy of *e (its addr last); the caller serializes writers. */
struct pd_armed *pd_armed_insert(const struct pd_armed *e)
{
    for (uint32_t k = 0, i = pd_armed_slot(e->addr); k < pd_armed_cap; k++, i = (i + 1) & (pd_armed_cap - 1)) {
        struct pd_armed *a = &pd_armed[i];
        if (a->addr == 0 || a->addr == PD_ARMED_DEAD) {
            struct pd_armed copy = *e;
            copy.addr = a->addr;
            *a = copy;
            __atomic_store_n(&a->addr, e->addr, __ATOMIC_RELEASE);
            pd_narmed++;
            return a;
        }
    }
    return NULL; /* cannot happen: the table has room for every site twice */
}

void pd_armed_remove(struct pd_armed *a)
{
    __atomic_store_n(&a->addr, PD_ARMED_DEAD, __ATOMIC_RELEASE);
    pd_narmed--;
}

static void pd_sigtrap(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    uintptr_t at = pd_trap_site_from_ip(pd_uc_get_ip(uc));
    const struct pd_armed *a = pd_find_armed(at);
    if (!a) {
        /* Not ours: behave as if we were never installed. */
        if (pd_prev_sigtrap.sa_flags & SA_SIGINFO && pd_prev_sigtrap.sa_sigaction) {
            pd_prev_sigtrap.sa_sigaction(sig, si, ucv);
        } else if (pd_prev_sigtrap.sa_handler != SIG_DFL &&
                   pd_prev_sigtrap.sa_handler != SIG_IGN) {
            pd_prev_sigtrap.sa_handler(sig);
        } else if (pd_prev_sigtrap.sa_handler == SIG_DFL) {
            signal(SIGTRAP, SIG_DFL);
            raise(SIGTRAP);
        }
        return;
    }
    if (a->stub) {
        /* The transient int3 of a jump being installed: the stub runs the probe. */
        pd_uc_set_ip(uc, pd_stub_start(a->stub, a->site));
        return;
    }
    struct pd_regs regs;
    pd_regs_from_ucontext(&regs, uc);
    regs.r[PD_DWARF_IP] = (pd_ureg)at;
    if (a->site->nop_len == 0) {
        /* A function entry: the displaced instruction runs from its out-of-line copy. */
        pd_func_fire(&regs, a->site, a->bias);
        pd_regs_to_ucontext(uc, &regs);
        pd_uc_set_ip(uc, a->ool);
        return;
    }
    if (a->site->nshared) /* several probes at this nop */
        pd_func_fire(&regs, a->site, a->bias);
    else
        pd_run(&pd_probes[a->site->probe], a->site, &regs, a->bias);
    pd_regs_to_ucontext(uc, &regs);
    /* The patched instruction is a nop: resuming after it is its emulation. */
    pd_uc_set_ip(uc, at + a->site->nop_len);
}

int pd_install_trap_handler(void)
{
    static int installed; /* a -x process attached again: pd_prev_sigtrap must not become us */
    if (installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pd_sigtrap;
    /* on the thread's pd_altstack.c stack: the site's own sp may be garbage */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    int rc = sigaction(SIGTRAP, &sa, &pd_prev_sigtrap);
    installed = rc == 0;
    return rc;
}
