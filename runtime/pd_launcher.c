/* The launcher's entry points (called through cffi, launcher/modffi.py): the m64
 * module dlopen'ed by the launcher maps the segment, runs begin/end/error and timer
 * probes, and drains the output ring. */
#define _GNU_SOURCE

#include "pd_hist.h"
#include "pd_internal.h"

/* ---- launcher entry points (called through cffi) -------------------------- */

PD_EXPORT const struct pd_module_info *pd_launcher_module_info(void) { return &pd_module; }

/* Maps the segment the launcher created and initialised from shmlayout. */
PD_EXPORT int pd_launcher_attach(const char *name)
{
    pd_is_launcher = 1;
    int rc = pd_map_segment(name);
    if (rc != PD_ATTACH_OK)
        pd_unmap();
    else
        pd_fast_env_set(1);
    return rc;
}

PD_EXPORT void pd_launcher_init_globals(void)
{
    if (pd_seg)
        pd_init_globals(pd_seg + pd_hdr->globals_off);
}

/* Runs every probe of one kind (begin, end, error) in the launcher.  As in stap (its
 * begin/end/error probes' session states): the errors beyond MAXERRORS put the
 * session in its error state, in which the `end` probes do not run and the `error`
 * probes do; without it, `end` runs and `error` does not.  The session's stop runs
 * `end`, then `error` (an `end` probe's errors can take it there). */
PD_EXPORT int pd_launcher_run(uint32_t kind)
{
    int ran = 0;
    int error_state = pd_hdr && __atomic_load_n(&pd_hdr->error_count, __ATOMIC_ACQUIRE) >
                                    MAXERRORS;
    if ((kind == PD_PROBE_END && error_state) || (kind == PD_PROBE_ERROR && !error_state))
        return 0;
    for (uint32_t i = 0; i < pd_module.nprobes; i++) {
        /* begin probes after an exit() do not run (stap: no longer STARTING) */
        if (kind == PD_PROBE_BEGIN && pd_hdr && pd_hdr->exit_requested)
            break;
        if (pd_probes[i].kind == kind) {
            pd_run(&pd_probes[i], NULL, NULL, 0);
            ran++;
        }
    }
    return ran;
}

/* Runs one probe by index (timers). */
PD_EXPORT void pd_launcher_run_probe(uint32_t index)
{
    if (index < pd_module.nprobes)
        pd_run(&pd_probes[index], NULL, NULL, 0);
}

/* A probe's point as the script named it, for the exit report; NULL past the last. */
PD_EXPORT const char *pd_launcher_probe_pp(uint32_t index)
{
    return index < pd_module.nprobes ? pd_probes[index].pp : NULL;
}

/* Draws the buckets of a print(@hist_*(x)) record (pd_stat_emit_hist) into buf, with
 * the module's HIST_WIDTH and HIST_ELISION: see pd_hist_draw. */
PD_EXPORT size_t pd_launcher_hist_draw(char *buf, size_t cap, const int64_t *h, uint32_t n,
                                       int log, int64_t start, int64_t interval)
{
    return pd_hist_draw(buf, cap, h, n, log, start, interval, HIST_WIDTH, HIST_ELISION);
}

/* Appends the text of the TEXT record at out+at (len bytes) to the one at out+prev, if
 * both are single-string TEXT records of the same pid: the launcher then writes a
 * whole chunk of printf output at once (PD_FLAG_MERGE_TEXT; the record shrinks). */
static int pd_merge_text(uint8_t *out, uint32_t prev, uint32_t at, uint32_t len)
{
    struct pd_rec a, b;
    memcpy(&a, out + prev, sizeof a);
    memcpy(&b, out + at, sizeof b);
    if (prev == at || a.kind != PD_REC_TEXT || b.kind != PD_REC_TEXT || a.nargs != 1 ||
        b.nargs != 1 || a.pid != b.pid || len < sizeof b + 4)
        return 0;
    uint32_t la, lb;
    memcpy(&la, out + prev + sizeof a, 4);
    memcpy(&lb, out + at + sizeof b, 4);
    if (sizeof b + 4 + lb > len)
        return 0;
    memmove(out + prev + sizeof a + 4 + la, out + at + sizeof b + 4, lb);
    la += lb;
    uint32_t padded = (4 + la + 7) & ~7u;
    memset(out + prev + sizeof a + 4 + la, 0, padded - 4 - la);
    memcpy(out + prev + sizeof a, &la, 4);
    a.len = (uint32_t)sizeof a + padded;
    memcpy(out + prev, &a, sizeof a);
    return 1;
}

/* Copies whole records from the ring into out (at most cap bytes) and frees
 * their space.  Returns the number of bytes copied. */
PD_EXPORT uint32_t pd_launcher_drain(uint8_t *out, uint32_t cap)
{
    if (!pd_seg)
        return 0;
    int merge = (__atomic_load_n(&pd_hdr->flags, __ATOMIC_RELAXED) & PD_FLAG_MERGE_TEXT) != 0;
    uint32_t text_at = 0;
    uint32_t size = pd_hdr->ring_size;
    uint32_t head = pd_hdr->ring_head;
    uint32_t tail = __atomic_load_n(&pd_hdr->ring_tail, __ATOMIC_ACQUIRE);
    uint32_t done = 0;
    while (head != tail) {
        uint32_t len;
        uint32_t at = head & (size - 1);
        uint8_t lenbuf[4];
        for (int i = 0; i < 4; i++)
            lenbuf[i] = pd_ring_data()[(at + (uint32_t)i) & (size - 1)];
        memcpy(&len, lenbuf, 4);
        if (len < sizeof(struct pd_rec) || len > tail - head)
            break; /* cannot happen with a committed record; never read garbage */
        if (done + len > cap)
            break;
        uint32_t first = len < size - at ? len : size - at;
        memcpy(out + done, pd_ring_data() + at, first);
        memcpy(out + done + first, pd_ring_data(), len - first);
        head += len;
        if (merge && pd_merge_text(out, text_at, done, len))
            done = text_at + ((const struct pd_rec *)(out + text_at))->len;
        else {
            text_at = done;
            done += len;
        }
    }
    if (done) {
        __atomic_store_n(&pd_hdr->ring_head, head, __ATOMIC_RELEASE);
        __atomic_add_fetch(&pd_hdr->ring_space_seq, 1, __ATOMIC_RELEASE);
        if (__atomic_load_n(&pd_hdr->ring_waiters, __ATOMIC_RELAXED))
            pd_futex_wake(&pd_hdr->ring_space_seq);
    }
    return done;
}

/* Sleeps until a producer commits a record or timeout_ms passes. */
PD_EXPORT void pd_launcher_wait(uint32_t timeout_ms)
{
    if (!pd_seg)
        return;
    uint32_t seq = __atomic_load_n(&pd_hdr->ring_data_seq, __ATOMIC_ACQUIRE);
    if (pd_hdr->ring_head != __atomic_load_n(&pd_hdr->ring_tail, __ATOMIC_ACQUIRE))
        return;
    __atomic_or_fetch(&pd_hdr->flags, PD_FLAG_DRAIN_WAITS, __ATOMIC_SEQ_CST);
    pd_futex_wait(&pd_hdr->ring_data_seq, seq, (long)timeout_ms * 1000000L);
    __atomic_and_fetch(&pd_hdr->flags, ~(uint32_t)PD_FLAG_DRAIN_WAITS, __ATOMIC_SEQ_CST);
}

/* Set by pd_launcher_wake: the session stops, the drain thread waits no more. */
static volatile int pd_drain_stopping;

/* The drain thread's sleep while the ring stays empty: returns once a record is in
 * the ring, exit() is requested, pd_launcher_wake() is called or max_ms pass.  With
 * poll_ms, the ring is looked at every poll_ms (producers wake a consumer in bulk
 * only, pd_ring.c): a stream of records is drained in batches.  With 0, for a ring
 * idle a while, PD_FLAG_DRAIN_IDLE asks the next record's producer to wake it: no
 * wake-up at all while nothing is printed.  Either way the launcher's Python, which
 * costs far more a wake-up than this loop, runs only when there is something to do --
 * the launcher shares the CPUs with the traced programs. */
PD_EXPORT void pd_launcher_idle(uint32_t poll_ms, uint32_t max_ms)
{
    if (!pd_seg)
        return;
    uint32_t step = poll_ms ? poll_ms : max_ms;   /* idle: the stop and exit() wake it */
    uint32_t bits = PD_FLAG_DRAIN_WAITS | (poll_ms ? 0 : PD_FLAG_DRAIN_IDLE);
    uint32_t asked = __atomic_load_n(&pd_hdr->exit_requested, __ATOMIC_ACQUIRE);
    for (uint32_t waited = 0; waited < max_ms && !pd_drain_stopping; waited += step) {
        /* the flag set, then the ring read: against pd_ring_write's commit, then flags
         * read, so a record is either seen here or wakes the wait */
        __atomic_or_fetch(&pd_hdr->flags, bits, __ATOMIC_SEQ_CST);
        uint32_t seq = __atomic_load_n(&pd_hdr->ring_data_seq, __ATOMIC_SEQ_CST);
        if (pd_hdr->ring_head != __atomic_load_n(&pd_hdr->ring_tail, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&pd_hdr->exit_requested, __ATOMIC_ACQUIRE) != asked)
            break;
        pd_futex_wait(&pd_hdr->ring_data_seq, seq, (long)step * 1000000L);
    }
    __atomic_and_fetch(&pd_hdr->flags, ~(uint32_t)(PD_FLAG_DRAIN_WAITS | PD_FLAG_DRAIN_IDLE),
                       __ATOMIC_SEQ_CST);
}

/* Ends a pd_launcher_wait() or pd_launcher_idle() at once, and every later one: the
 * launcher's drain thread, when the session stops (else the join waits out the
 * timeout, ~50 ms of every run). */
PD_EXPORT void pd_launcher_wake(void)
{
    if (!pd_seg)
        return;
    pd_drain_stopping = 1;
    __atomic_add_fetch(&pd_hdr->ring_data_seq, 1, __ATOMIC_RELEASE);
    pd_futex_wake(&pd_hdr->ring_data_seq);
}

PD_EXPORT void pd_launcher_detach(void) { pd_unmap(); }
