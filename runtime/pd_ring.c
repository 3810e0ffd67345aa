/* The output ring, and the records a handler writes into it (shmlayout describes
 * their encoding). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pd_internal.h"
#include "pd_lock.h"

/* ---- output ring ------------------------------------------------------------
 * A byte stream of records; positions are free-running u32 (atomic on every
 * ABI).  Producers append under ring_lock; the launcher is the only consumer.
 * Lossless: a producer that finds the ring full waits for space. */

static int pd_launcher_alive(void)
{
    pid_t lp = pd_hdr->launcher_pid;
    return lp <= 0 || kill(lp, 0) == 0 || errno != ESRCH;
}

void pd_futex_wait(volatile uint32_t *word, uint32_t val, long timeout_ns)
{
    struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
    syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

void pd_futex_wake(volatile uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void pd_ring_copy_in(uint32_t pos, const uint8_t *src, uint32_t len)
{
    uint32_t size = pd_hdr->ring_size, at = pos & (size - 1);
    uint32_t first = len < size - at ? len : size - at;
    memcpy(pd_ring_data() + at, src, first);
    memcpy(pd_ring_data(), src + first, len - first);
}

/* Returns 0, or -1 if the launcher is gone (the bytes are then discarded and
 * this process's probes go inert). */
static int pd_ring_write(const uint8_t *buf, uint32_t len)
{
    uint32_t size = pd_hdr->ring_size;
    if (len > size)
        return -1;
    for (;;) {
        int rc = pd_lock(&pd_hdr->ring_lock);
        if (rc == PD_LOCK_DEADLOCK)
            return -1;
        if (rc == PD_LOCK_TIMEOUT) { /* a writer stopped in here: these records are lost */
            __atomic_add_fetch(&pd_hdr->skipped_count, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&pd_hdr->lock_timeouts, 1, __ATOMIC_RELAXED);
            return -1;
        }
        if (rc == PD_LOCK_RECOVERED)
            __atomic_add_fetch(&pd_hdr->lock_recoveries, 1, __ATOMIC_RELAXED);
        uint32_t tail = pd_hdr->ring_tail;
        uint32_t head = __atomic_load_n(&pd_hdr->ring_head, __ATOMIC_ACQUIRE);
        if (size - (tail - head) >= len) {
            pd_ring_copy_in(tail, buf, len);
            __atomic_store_n(&pd_hdr->ring_tail, tail + len, __ATOMIC_RELEASE);
            pd_unlock(&pd_hdr->ring_lock);
            /* seq_cst with the flags load: against the consumer's setting of
             * PD_FLAG_DRAIN_IDLE then reading the ring, one of the two sees the other */
            __atomic_add_fetch(&pd_hdr->ring_data_seq, 1, __ATOMIC_SEQ_CST);
            /* Batched wake-ups: a sleeping consumer is woken once the ring is an eighth
             * full; below that its wait times out (pd_launcher_idle, ~10 ms) -- a wake
             * per record (a syscall) would cost more than the record.  A consumer asleep
             * on a ring idle for a while (PD_FLAG_DRAIN_IDLE) is woken by the first
             * record, once: it polls no idle ring. */
            uint32_t fl = __atomic_load_n(&pd_hdr->flags, __ATOMIC_SEQ_CST);
            if (PD_UNLIKELY(fl & (PD_FLAG_DRAIN_WAITS | PD_FLAG_DRAIN_IDLE))) {
                if (fl & PD_FLAG_DRAIN_IDLE) {
                    if (__atomic_fetch_and(&pd_hdr->flags, ~(uint32_t)PD_FLAG_DRAIN_IDLE,
                                           __ATOMIC_SEQ_CST) & PD_FLAG_DRAIN_IDLE)
                        pd_futex_wake(&pd_hdr->ring_data_seq);
                } else if (tail + len - head >= size / 8)
                    pd_futex_wake(&pd_hdr->ring_data_seq);
            }
            return 0;
        }
        uint32_t seq = __atomic_load_n(&pd_hdr->ring_space_seq, __ATOMIC_ACQUIRE);
        __atomic_add_fetch(&pd_hdr->ring_waiters, 1, __ATOMIC_RELAXED);
        pd_unlock(&pd_hdr->ring_lock);
        pd_futex_wake(&pd_hdr->ring_data_seq); /* the consumer may be asleep */
        pd_futex_wait(&pd_hdr->ring_space_seq, seq, 20 * 1000 * 1000);
        __atomic_sub_fetch(&pd_hdr->ring_waiters, 1, __ATOMIC_RELAXED);
        if (!pd_launcher_alive()) {
            __atomic_store_n(&pd_hdr->session_state, PD_SESSION_STOPPED, __ATOMIC_RELEASE);
            return -1;
        }
    }
}

/* ---- records ------------------------------------------------------------- */

__thread uint32_t pd_rec_open_at;

void pd_flush(struct pd_ctx *c)
{
    if (c->outlen && pd_seg)
        pd_ring_write(c->out, c->outlen);
    c->outlen = 0;
}

static int pd_out_reserve(struct pd_ctx *c, uint32_t n)
{
    if (c->outlen + n <= sizeof c->out)
        return 1;
    /* Flush the complete records before the open one, then retry. */
    uint32_t open = pd_rec_open_at;
    if (open > 0) {
        if (pd_seg)
            pd_ring_write(c->out, open);
        memmove(c->out, c->out + open, c->outlen - open);
        c->outlen -= open;
        pd_rec_open_at = 0;
    }
    if (c->outlen + n <= sizeof c->out)
        return 1;
    pd_error(c, "output record larger than %u bytes", (unsigned)sizeof c->out);
    return 0;
}

void pd_rec_open(struct pd_ctx *c, uint16_t kind, uint32_t fmt_id, uint16_t nargs)
{
    if (!pd_out_reserve(c, sizeof(struct pd_rec)))
        return;
    pd_rec_open_at = c->outlen;
    struct pd_rec rec;
    memset(&rec, 0, sizeof rec);
    rec.kind = kind;
    rec.nargs = nargs;
    rec.fmt_id = fmt_id;
    rec.pid = pd_self ? pd_self->pid : (int32_t)getpid(); /* getpid() is a syscall a record */
    memcpy(c->out + c->outlen, &rec, sizeof rec);
    c->outlen += sizeof rec;
}

void pd_rec_i64(struct pd_ctx *c, int64_t v)
{
    if (!pd_out_reserve(c, 8))
        return;
    memcpy(c->out + c->outlen, &v, 8);
    c->outlen += 8;
}

static void pd_rec_strn(struct pd_ctx *c, const char *s, size_t max);

void pd_rec_str(struct pd_ctx *c, const char *s) { pd_rec_strn(c, s, MAXSTRINGLEN); }

static void pd_rec_strn(struct pd_ctx *c, const char *s, size_t max)
{
    uint32_t len = (uint32_t)strnlen(s, max);
    uint32_t padded = (4 + len + 7) & ~7u;
    if (!pd_out_reserve(c, padded))
        return;
    uint8_t *p = c->out + c->outlen;
    memcpy(p, &len, 4);
    memcpy(p + 4, s, len);
    memset(p + 4 + len, 0, padded - 4 - len);
    c->outlen += padded;
}

void pd_rec_close(struct pd_ctx *c)
{
    if (c->error) { /* an error aborts the statement: its record is dropped */
        c->outlen = pd_rec_open_at;
        return;
    }
    uint32_t len = c->outlen - pd_rec_open_at;
    memcpy(c->out + pd_rec_open_at, &len, 4); /* pd_rec.len is the first field */
    pd_rec_open_at = c->outlen;
}

void pd_emit_text(struct pd_ctx *c, uint16_t kind, const char *msg)
{
    pd_rec_open(c, kind, 0, 1);
    pd_rec_strn(c, msg, 1024); /* messages are not script strings: no MAXSTRINGLEN cut */
    pd_rec_close(c);
}

void pd_action(struct pd_ctx *c, const char *where)
{
    PD_ACTION(c, where);
}

void pd_error(struct pd_ctx *c, const char *fmt, ...)
{
    if (c->error)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->errtrail[0] = 0;
    c->error = 1;
}

void pd_error_caller(struct pd_ctx *c, const char *caller)
{
    if (!caller)
        return;
    size_t at = strnlen(c->errtrail, sizeof c->errtrail);
    snprintf(c->errtrail + at, sizeof c->errtrail - at, " (called from %s)", caller);
}
