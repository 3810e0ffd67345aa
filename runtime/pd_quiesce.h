/* Handlers in flight at the session stop (pd_quiesce.c); included by pd_runtime.h.
 *
 * A handler whose thread read session_state == RUNNING just before the launcher stored
 * STOPPING may still be running when `end` runs: its output would reach the ring after
 * the last drain and its updates land after `end` read the globals.  So each thread
 * that runs probes owns a word in the segment (pd_tslot.busy, at its statistic slot
 * index) and, once its reentrancy guard is taken, stores to it with a plain store
 * BEFORE checking the state, then clears it with a release store when the handler's
 * records are in the ring.  The launcher stores STOPPING, issues membarrier(GLOBAL) --
 * every running thread executes a full barrier, so a thread either saw STOPPING or its
 * store is visible -- then polls the words until they are clear (pd_launcher_quiesce).
 * No atomic read-modify-write and no fence on a probe hit.  Threads without a slot
 * (beyond 64) count themselves in pd_header.inflight_unslotted, atomically.
 */
#ifndef PD_QUIESCE_H
#define PD_QUIESCE_H

/* What a FAST handler stores in its busy word; pd_run stores PD_BUSY_PROBE + its
 * probe's index, so a stuck handler can be named. */
#define PD_BUSY_FAST 1u
#define PD_BUSY_PROBE 2u

/* The busy word not claimed yet (NULL) or none to have (1): claims, or counts the
 * handler in the header; same contract as pd_quiesce_enter_on.  Hidden: an i386 call
 * through the PLT would need the GOT in %ebx on the FAST path. */
#define PD_QUIESCE_SLOW PD_FAST_FN __attribute__((visibility("hidden"), cold))
PD_QUIESCE_SLOW int pd_quiesce_enter_slow(struct pd_fast_tls *t, uint32_t busy,
                                          const uint32_t *state);
PD_QUIESCE_SLOW void pd_quiesce_leave_slow(void);
void pd_quiesce_attach(void); /* a process joins the session (membarrier set-up) */
void pd_quiesce_disown(int k); /* slot k given back: no owner (pd_launcher_reap_slots) */

/* Before a handler runs (the thread's guard taken): 1 if the session state word
 * (`state`: pd_hdr->session_state, or pd_fenv.state, which also says inert) is RUNNING
 * and the launcher will wait for the matching pd_quiesce_leave; 0: do not run it. */
static inline PD_FAST_FN int pd_quiesce_enter_on(struct pd_fast_tls *t, uint32_t busy,
                                                 const uint32_t *state)
{
    uint32_t *w = t->inflight;
    if (PD_UNLIKELY((uintptr_t)w <= 1))
        return pd_quiesce_enter_slow(t, busy, state);
    /* Two volatile accesses: the compiler keeps their order (a compiler barrier would
     * also make it reload every global after it); the CPU's store-load reordering is
     * what the launcher's membarrier takes care of. */
    *(volatile uint32_t *)w = busy;
    if (PD_LIKELY(*(const volatile uint32_t *)state == PD_SESSION_RUNNING))
        return 1;
    __atomic_store_n(w, 0, __ATOMIC_RELEASE);
    return 0;
}

static inline PD_FAST_FN int pd_quiesce_enter(struct pd_fast_tls *t, uint32_t busy)
{
    return pd_quiesce_enter_on(t, busy, &pd_hdr->session_state);
}

/* After the handler's records are in the ring (and its updates done). */
static inline PD_FAST_FN void pd_quiesce_leave(struct pd_fast_tls *t)
{
    uint32_t *w = t->inflight;
    if (PD_LIKELY((uintptr_t)w > 1))
        __atomic_store_n(w, 0, __ATOMIC_RELEASE);
    else
        pd_quiesce_leave_slow();
}

#endif
