/* Handlers in flight at the session stop: the slow paths of pd_quiesce.h and the
 * launcher's wait (pd_launcher_quiesce).
 *
 * stap waits for every busy context before running `end` (_stp_runtime_context_wait)
 * and, after a second, prints "context[N] stuck: PP" but waits on.  pydyn waits at most
 * STUCK_CONTEXT_MS (-D STUCK_CONTEXT_MS=N, 2000 by default) and then runs `end` anyway:
 * the handlers still running are counted, named where the word says which probe, and
 * reported at exit as an error (their output may be incomplete).
 *
 * A thread's busy word is the pd_tslot at its statistic slot index (pd_pstat.c), which
 * every process of the session takes from the same header bitmap, so the launcher finds
 * all of them in one array; pid and tid are written when the thread takes it, so a word
 * left busy by a thread that died inside a handler (SIGKILL) is not waited for.
 */
#include "pd_runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert(PD_TSLOTS == PD_PSTAT_SLOTS + 1, "a busy word per statistic slot index");

static struct pd_tslot *pd_tslot_at(int k)
{
    return (struct pd_tslot *)(pd_seg + pd_hdr->tslots_off) + k;
}

/* The thread's busy word, taken with its statistic slot (libc: through pd_xmm_call). */
static uintptr_t pd_quiesce_claim(uintptr_t tp, uintptr_t b, uintptr_t c, uintptr_t d)
{
    (void)b, (void)c, (void)d;
    struct pd_fast_tls *t = (struct pd_fast_tls *)tp;
    int saved_errno = errno; /* the FAST path keeps no errno of its own */
    int k = pd_pslot_index();
    if (k > 0) {
        struct pd_tslot *s = pd_tslot_at(k);
        /* raw syscalls: a probed getpid() reached from here would be a nested hit */
        __atomic_store_n(&s->tid, (int32_t)syscall(SYS_gettid), __ATOMIC_RELAXED);
        __atomic_store_n(&s->pid, (int32_t)syscall(SYS_getpid), __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE); /* the owner before any busy store */
        t->inflight = &s->busy;
    } else {
        t->inflight = (uint32_t *)1;
    }
    errno = saved_errno;
    return 0;
}

/* A thread giving its slot back forgets itself as the owner first: once the bit is
 * clear another thread may claim it, and the launcher must not take the old owner,
 * gone by then, for the new one's (pd_launcher_reap_slots). */
void pd_quiesce_disown(int k)
{
    if (!pd_seg || k <= 0)
        return;
    struct pd_tslot *s = pd_tslot_at(k);
    __atomic_store_n(&s->tid, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
}

PD_QUIESCE_SLOW int pd_quiesce_enter_slow(struct pd_fast_tls *t, uint32_t busy,
                                          const uint32_t *state)
{
    if (!t->inflight)
        pd_xmm_call(pd_quiesce_claim, (uintptr_t)t, 0, 0, 0);
    if ((uintptr_t)t->inflight > 1)
        return pd_quiesce_enter_on(t, busy, state);
    /* no word of its own: a locked add, itself a full barrier before the load */
    __atomic_add_fetch(&pd_hdr->inflight_unslotted, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(state, __ATOMIC_SEQ_CST) == PD_SESSION_RUNNING)
        return 1;
    pd_quiesce_leave_slow();
    return 0;
}

PD_QUIESCE_SLOW void pd_quiesce_leave_slow(void)
{
    __atomic_sub_fetch(&pd_hdr->inflight_unslotted, 1, __ATOMIC_RELEASE);
}

static long pd_membarrier(int cmd)
{
    return syscall(SYS_membarrier, cmd, 0, 0);
}

/* MEMBARRIER_CMD_GLOBAL needs no registration but is missing on nohz_full kernels:
 * there the expedited command reaches the processes that registered. */
void pd_quiesce_attach(void)
{
    long cmds = pd_membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds > 0 && !(cmds & MEMBARRIER_CMD_GLOBAL) &&
        (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED))
        pd_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
}

static void pd_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static uint64_t pd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* After STOPPING was stored: every thread that read RUNNING has its busy store
 * visible once this returns. */
static void pd_quiesce_barrier(void)
{
    if (pd_membarrier(MEMBARRIER_CMD_GLOBAL) == 0)
        return;
    pd_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
    /* no barrier for unregistered processes: a store leaves a CPU's store buffer
     * within microseconds, so waiting milliseconds is a barrier in practice */
    pd_sleep_ms(20);
}

/* Whether a process of the session may still run probes: any ALIVE entry, or a full
 * table (processes beyond it run probes unregistered). */
static int pd_session_live(void)
{
    struct pd_proc *tab = (struct pd_proc *)(pd_seg + pd_hdr->proctab_off);
    uint32_t used = 0;
    for (uint32_t i = 0; i < pd_hdr->proctab_count; i++) {
        uint32_t st = __atomic_load_n(&tab[i].state, __ATOMIC_ACQUIRE);
        if (st == PD_PROC_ALIVE)
            return 1;
        used += st != PD_PROC_FREE;
    }
    return used >= pd_hdr->proctab_count;
}

/* A thread that died inside a handler leaves its word busy: gone, or a zombie. */
static int pd_thread_alive(int32_t pid, int32_t tid)
{
    if (pid <= 0 || tid <= 0)
        return 1;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT && errno != ESRCH;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *e = strrchr(buf, ')'); /* comm may hold anything; the state follows ") " */
    return !(e && e[1] == ' ' && (e[2] == 'Z' || e[2] == 'X'));
}

/* Handlers running now; with `names`, the probe points of those the word names. */
static uint32_t pd_inflight(char *names, size_t cap)
{
    uint32_t n = __atomic_load_n(&pd_hdr->inflight_unslotted, __ATOMIC_ACQUIRE);
    uint32_t named[PD_TSLOTS], nnamed = 0; /* each probe point once */
    size_t len = 0;
    for (int k = 1; k < PD_TSLOTS; k++) {
        struct pd_tslot *s = pd_tslot_at(k);
        uint32_t b = __atomic_load_n(&s->busy, __ATOMIC_ACQUIRE);
        if (!b || !pd_thread_alive(__atomic_load_n(&s->pid, __ATOMIC_RELAXED),
                                   __atomic_load_n(&s->tid, __ATOMIC_RELAXED)))
            continue;
        n++;
        if (!names || b < PD_BUSY_PROBE || b - PD_BUSY_PROBE >= pd_module.nprobes)
            continue;
        uint32_t i = 0;
        while (i < nnamed && named[i] != b)
            i++;
        if (i < nnamed)
            continue;
        named[nnamed++] = b;
        int w = snprintf(names + len, cap - len, "%s%s", len ? ", " : "",
                         PD_PROBE_NAME(&pd_probes[b - PD_BUSY_PROBE]));
        if (w > 0)
            len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
    }
    return n;
}

/* Called by the launcher while the session runs: gives back the statistic slots (and
 * with them the counter blocks, keyed tables and busy words at the same index) of
 * threads that are gone without giving theirs back -- a process's main thread never
 * runs pthread's key destructors (pd_pstat.c), a killed one runs nothing -- so a long
 * session of short processes does not leave later threads on the shared fallback.
 * What a slot holds stays and is merged as ever; its next owner adds to it.  The owner
 * is zeroed before the bit is cleared: a new owner writes its own only just after
 * claiming, and an owner of 0 is never taken for dead.  Returns the slots given back. */
PD_EXPORT uint32_t pd_launcher_reap_slots(void)
{
    if (!pd_seg)
        return 0;
    uint32_t freed = 0;
    uint64_t bits = __atomic_load_n(&pd_hdr->stat_slots, __ATOMIC_ACQUIRE);
    for (int k = 1; k <= PD_PSTAT_SLOTS; k++) {
        if (!(bits & ((uint64_t)1 << (k - 1))))
            continue;
        struct pd_tslot *s = pd_tslot_at(k);
        int32_t tid = __atomic_load_n(&s->tid, __ATOMIC_ACQUIRE);
        int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
        /* tgkill: the thread of that process, not another one that got its number */
        if (tid <= 0 || pid <= 0 || syscall(SYS_tgkill, (long)pid, (long)tid, 0L) == 0 ||
            errno != ESRCH)
            continue;
        pd_quiesce_disown(k);
        __atomic_store_n(&s->busy, 0, __ATOMIC_RELAXED);
        __atomic_fetch_and(&pd_hdr->stat_slots, ~((uint64_t)1 << (k - 1)), __ATOMIC_RELEASE);
        freed++;
    }
    return freed;
}

/* Called by the launcher after it stored STOPPING and before it runs `end`: waits
 * until no handler that saw RUNNING is still running, at most STUCK_CONTEXT_MS.
 * Returns how many still are; then `msg` (cap bytes) says so, for the exit report. */
PD_EXPORT uint32_t pd_launcher_quiesce(char *msg, uint32_t cap)
{
    if (cap)
        msg[0] = 0;
    if (!pd_seg || !pd_session_live())
        return 0; /* every target exited (the usual end): no barrier needed */
    pd_quiesce_barrier();
    uint64_t start = pd_now_ms();
    uint32_t n;
    while ((n = pd_inflight(NULL, 0)) && pd_now_ms() - start < STUCK_CONTEXT_MS)
        pd_sleep_ms(1);
    if (!n || cap < 2)
        return n;
    char names[256] = "";
    if (!(n = pd_inflight(names, sizeof names)))
        return 0;
    snprintf(msg, cap,
             "%u probe handler(s) still running %u ms after the session stopped%s%s%s: "
             "their output may be incomplete (-D STUCK_CONTEXT_MS=N waits longer)",
             n, (unsigned)STUCK_CONTEXT_MS, *names ? " (" : "", names, *names ? ")" : "");
    return n;
}
