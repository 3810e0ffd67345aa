/* gettimeofday_ns(), local_clock_ns() and the other clocks: as SystemTap's kernel
 * runtime keeps time (its time.c), the CPU's cycle counter since an anchor taken from
 * the clock, times the cycle's length.  The anchor is per thread and is taken again,
 * by clock_gettime, once it is PD_CLOCK_SPAN_NS old, so a step of the clock shows within
 * that; the cycle's length is measured over the process's life (from its first anchor,
 * which a fork's child keeps), so the interpolation's error stays at a few ns.  Used
 * only where the kernel itself keeps time by that counter (its clocksource), which makes
 * it synchronised across CPUs and constant in rate; elsewhere every read is a
 * clock_gettime.  Each thread's reads never go back (a new anchor may be a few ns
 * behind the old one's last read), except that a realtime clock set back shows.  A
 * read through the anchor (pd_fast.h) costs a cycle count, a multiply and no libc call,
 * so a FAST handler makes it in place without saving the vector registers; taking an
 * anchor is libc's code, through pd_xmm_call. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pd_internal.h"

#define PD_CLOCK_SPAN_NS 1000000      /* an anchor serves 1 ms */
#define PD_CLOCK_BASELINE_NS 2000000  /* the cycle's length is measured over 2 ms at least */
#ifndef PD_CLOCK_READ_NS /* -D: under valgrind, where clock_gettime takes microseconds */
#define PD_CLOCK_READ_NS 500          /* an anchor whose reads took longer is not kept */
#endif

static int64_t pd_clock_read(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#ifdef PD_ARCH_CYCLES_CLOCKSOURCE
/* The process's first anchor: the baseline of the cycle's length.  state: 0 not yet,
 * 1 being written, 2 set, 3 the counter is not the kernel's clocksource.  mult: the
 * cycle's length the last anchor found; one that differs from it by more than 1/1024
 * (the counter stopped or was reset while the clock went on: a suspend) starts the
 * baseline again. */
static struct {
    uint32_t state;
    uint64_t cyc;
    int64_t mono;
    uint64_t mult;
} pd_clock_origin;

static int pd_clock_source_is_cycles(void)
{
    char buf[64] = {0};
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    static const char want[] = PD_ARCH_CYCLES_CLOCKSOURCE "\n";
    return n == (ssize_t)(sizeof want - 1) && memcmp(buf, want, sizeof want - 1) == 0;
}

/* Both clocks and the cycle count they were read at, into the thread's anchor once
 * the baseline is long enough. */
static void pd_clock_anchor(struct pd_clock_anchor *a)
{
    uint32_t st = __atomic_load_n(&pd_clock_origin.state, __ATOMIC_ACQUIRE);
    if (st == 0) {
        uint32_t zero = 0;
        if (!pd_clock_source_is_cycles()) {
            __atomic_store_n(&pd_clock_origin.state, 3, __ATOMIC_RELEASE);
            return;
        }
        if (__atomic_compare_exchange_n(&pd_clock_origin.state, &zero, 1, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            st = 1; /* this thread writes the origin below */
        else
            return;
    } else if (st != 2)
        return;
    uint64_t c0 = pd_cycles();
    int64_t mono = pd_clock_read(CLOCK_MONOTONIC);
    uint64_t c1 = pd_cycles();
    int64_t real = pd_clock_read(CLOCK_REALTIME);
    uint64_t c2 = pd_cycles();
    if (st == 1) {
        pd_clock_origin.cyc = c0 + (c1 - c0) / 2;
        pd_clock_origin.mono = mono;
        __atomic_store_n(&pd_clock_origin.state, 2, __ATOMIC_RELEASE);
        return;
    }
    int64_t base = mono - pd_clock_origin.mono;
    uint64_t cycles = c0 + (c1 - c0) / 2 - pd_clock_origin.cyc;
    if (base < PD_CLOCK_BASELINE_NS || (int64_t)cycles <= 0)
        return;
    double ns_per_cycle = (double)base / (double)cycles;
    /* preempted between the reads, or a counter that moves oddly: no anchor this time */
    if ((double)(c2 - c0) * ns_per_cycle > PD_CLOCK_READ_NS)
        return;
    uint64_t mult = (uint64_t)(ns_per_cycle * 4294967296.0);
    uint64_t ref = __atomic_load_n(&pd_clock_origin.mult, __ATOMIC_RELAXED);
    if (ref && (mult > ref + ref / 1024 || mult < ref - ref / 1024)) {
        uint32_t set = 2;
        __atomic_store_n(&pd_clock_origin.mult, 0, __ATOMIC_RELAXED);
        __atomic_compare_exchange_n(&pd_clock_origin.state, &set, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
        a->span = 0;
        return;
    }
    __atomic_store_n(&pd_clock_origin.mult, mult, __ATOMIC_RELAXED);
    uint64_t at = c0 + (c1 - c0) / 2;
    a->cyc = at;
    a->ns[0] = mono;
    /* realtime was read half-way from c1 to c2: brought back to `at` */
    a->ns[1] = real - (int64_t)((((c1 + (c2 - c1) / 2) - at) * mult) >> 32);
    a->mult = mult;
    /* pd_clock_interp multiplies the cycles since `at` as a 32-bit number */
    double span = (double)PD_CLOCK_SPAN_NS / ns_per_cycle;
    a->span = span < (double)UINT32_MAX ? (uint64_t)span : UINT32_MAX;
}
#endif

static int64_t pd_clock_slow(struct pd_clock_anchor *a, int realtime)
{
    int saved_errno = errno;
#ifdef PD_ARCH_CYCLES_CLOCKSOURCE
    pd_clock_anchor(a);
    int64_t v = pd_clock_interp(a, realtime);
    if (v < 0)
#endif
        v = pd_clock_read(realtime ? CLOCK_REALTIME : CLOCK_MONOTONIC);
    errno = saved_errno;
    return v;
}

int64_t pd_gettime_ns(int clock_realtime)
{
    int rt = clock_realtime != 0;
    struct pd_clock_anchor *a = &pd_fast_tls()->clock;
    int64_t v = pd_clock_interp(a, rt);
    return pd_clock_forward(a, rt, v >= 0 ? v : pd_clock_slow(a, rt));
}

static uintptr_t pd_clock_saved(uintptr_t anchor, uintptr_t realtime, uintptr_t out, uintptr_t d)
{
    (void)d;
    *(int64_t *)out = pd_clock_slow((struct pd_clock_anchor *)anchor, (int)realtime);
    return 0;
}

PD_FAST_FN int64_t pd_fast_gettime_slow(struct pd_clock_anchor *a, int realtime)
{
    int64_t v;
    pd_xmm_call(pd_clock_saved, (uintptr_t)a, (uintptr_t)realtime, (uintptr_t)&v, 0);
    return pd_clock_forward(a, realtime, v);
}
