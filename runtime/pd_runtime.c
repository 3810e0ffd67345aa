/* pydyn runtime: linked into every probe module, for every ABI.
 *
 * In a traced process the module is preloaded; its constructor attaches to
 * the session's segment (named in PYDYN_SHM), checks that the segment was
 * made for the same source checksum, registers the process, finds its probe
 * sites in the loaded objects and arms them.  In the launcher the same
 * (m64) module is dlopen'ed by cffi and driven through the pd_launcher_*
 * entry points: begin/end probes and draining the output ring.
 *
 * This unit holds the process's state; the rest is split by concern (pd_internal.h
 * says what they share): pd_ring.c (output ring, records), pd_builtins.c (context
 * built-ins), pd_run.c (running a handler), pd_trap.c (armed sites, SIGTRAP),
 * pd_arm.c (arming), pd_tramp.c (trampolines), pd_registry.c (joining a session, the
 * process registry), pd_launcher.c (the launcher's entry points).
 */
#define _GNU_SOURCE
#include <time.h>

#include "pd_internal.h"

/* ---- process state ------------------------------------------------------- */

uint8_t *pd_seg;                      /* the mapped segment, NULL when inert */
struct pd_header *pd_hdr;
size_t pd_seg_size;
int pd_is_launcher;
int pd_inert;                         /* detached from a -x process: every entry is a no-op */
struct pd_proc *pd_self;              /* this process's registry entry */

__thread struct pd_fast_tls pd_in_handler; /* reentrancy guard (signal inside a handler) */

static const uint32_t pd_no_session; /* 0: not PD_SESSION_RUNNING */
struct pd_fast_env pd_fenv = {&pd_no_session, NULL, 0, 0, NULL, 0};

/* The FAST path's view of the session (pd_fast_globals): on once mapped and checked
 * (the launcher writes maxaction before any process joins), off before the segment goes. */
void pd_fast_env_set(int on)
{
    if (!on) {
        __atomic_store_n(&pd_fenv.state, &pd_no_session, __ATOMIC_RELEASE);
        return;
    }
    pd_fenv.globals = pd_seg + pd_hdr->globals_off;
    pd_fenv.maxaction = pd_hdr->maxaction ? pd_hdr->maxaction : MAXACTION;
    /* static TLS (preloaded, not the launcher's or -x's dlopen): one offset for every thread */
    pd_fenv.tls_off = pd_is_launcher || pd_xmm_always
        ? 0 : (intptr_t)((uintptr_t)&pd_in_handler - pd_thread_pointer());
    __atomic_store_n(&pd_fenv.epoch, pd_fenv.epoch + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&pd_fenv.state, &pd_hdr->session_state, __ATOMIC_RELEASE);
}

uint64_t pd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
