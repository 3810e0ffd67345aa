/* pd_lock.h -- a lock on one 32-bit word of the shared segment.
 *
 * m64 and m32 processes lock the same word, so this is a plain futex word and
 * never a pthread_mutex_t (whose size and layout differ per ABI):
 *   0                      free
 *   tid                    held by thread tid (tid <= PD_LOCK_TID_MASK)
 *   tid | PD_LOCK_WAITERS  held, and someone may be sleeping on the word
 * The futex calls are the shared (non-_PRIVATE) ones: waiters are in other
 * processes.  A waiter sleeps at most PD_LOCK_WAIT_NS at a time; after each
 * timeout it checks whether the holder thread still exists and takes the lock
 * over if not (a target killed inside a probe must not hang the session).
 *
 * A waiter never waits for ever: it gives up (PD_LOCK_TIMEOUT, the caller skips
 * its work and counts it, as stap skips a probe whose lock it cannot get) once
 * the holder is found stopped (SIGSTOP, a debugger: 'T' or 't' in /proc, after
 * one timed sleep; later waiters that find the word unchanged give up at once)
 * or has held it for STUCK_CONTEXT_MS.  A stopped process must not stall every
 * other process of the session, nor the launcher's `end` and exit report.
 *
 * All syscalls are made with syscall(2), never through libc wrappers such as
 * kill() or open() that a script may be probing, and errno is preserved: the
 * lock runs inside the target's own code.
 *
 * Known limits: a holder TID reused by an unrelated live thread keeps the lock
 * stuck until that thread exits; the liveness check assumes all processes of
 * the session are in one PID namespace.
 */
#ifndef PD_LOCK_H
#define PD_LOCK_H

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pd_arch.h"   /* pd_cpu_relax */
#include "pd_config.h" /* STUCK_CONTEXT_MS, PD_LOCK_WAIT_NS, PD_LOCK_SPINS */

/* Spelled exactly as in the generated pd_shm.h, so both may be included. */
#ifndef PD_LOCK_WAITERS
#define PD_LOCK_WAITERS 0x80000000u
#endif
#ifndef PD_LOCK_TID_MASK
#define PD_LOCK_TID_MASK 0x3fffffffu
#endif

/* pd_lock() / pd_trylock() results. */
#define PD_LOCK_OK 0         /* acquired */
#define PD_LOCK_RECOVERED 1  /* acquired from a dead holder: the data it guards may be torn */
#define PD_LOCK_DEADLOCK (-1) /* this thread already holds it (e.g. a probe hit in a signal
                                 handler); NOT acquired, the caller must skip its work */
#define PD_LOCK_BUSY (-2)    /* pd_trylock(): held by another thread; NOT acquired */
#define PD_LOCK_TIMEOUT (-3) /* pd_lock(): its holder is stopped or held it STUCK_CONTEXT_MS;
                                NOT acquired, the caller skips its work and counts it */

/* The kernel's timeout type for SYS_futex: two longs on i386, x86-64 and
 * aarch64 alike.  glibc's struct timespec is not, once _TIME_BITS=64. */
struct pd_lock_timeout_ {
	long tv_sec;
	long tv_nsec;
};

static inline uint32_t *pd_lock_tid_slot_(void)
{
	static __thread uint32_t tid;
	return &tid;
}

/* fork() copies the parent's cached TID into the child; forget it there. */
static inline void pd_lock_atfork_child_(void)
{
	*pd_lock_tid_slot_() = 0;
}

/* Registers the fork handler.  Call it from the module constructor; pd_lock()
 * also calls it on first use, but pthread_atfork is better kept out of probe
 * context (it is not async-signal-safe). */
static inline void pd_lock_setup(void)
{
	static int registered;
	if (__atomic_exchange_n(&registered, 1, __ATOMIC_ACQ_REL) == 0)
		pthread_atfork(NULL, NULL, pd_lock_atfork_child_);
}

static inline uint32_t pd_lock_self(void)
{
	uint32_t *slot = pd_lock_tid_slot_();
	if (__builtin_expect(*slot == 0, 0)) {
		pd_lock_setup();
		*slot = (uint32_t)syscall(SYS_gettid) & PD_LOCK_TID_MASK;
	}
	return *slot;
}

/* What a holder thread is doing, as far as a waiter can tell. */
#define PD_HOLDER_RUNNING 0 /* or anything uncertain */
#define PD_HOLDER_DEAD 1
#define PD_HOLDER_STOPPED 2

/* Thread tid's state.  A killed process whose parent has not reaped it yet still
 * answers kill(0), so a zombie ('Z'/'X' in /proc/TID/stat) counts as dead too;
 * 'T' (stopped) and 't' (stopped by a tracer) as stopped.  Clobbers errno. */
static inline int pd_lock_holder_state_(uint32_t tid)
{
	char path[32] = "/proc/";
	char digits[12];
	char buf[256];
	int i = 6, n = 0;
	long fd, got;

	if (tid == 0)
		return PD_HOLDER_DEAD; /* a held word always names its holder: this one is garbage */
	if (syscall(SYS_kill, (long)tid, 0L) == -1 && errno == ESRCH)
		return PD_HOLDER_DEAD;
	do {
		digits[n++] = (char)('0' + tid % 10);
		tid /= 10;
	} while (tid != 0);
	while (n > 0)
		path[i++] = digits[--n];
	for (const char *s = "/stat"; *s != '\0'; s++)
		path[i++] = *s;
	path[i] = '\0';

	fd = syscall(SYS_openat, (long)AT_FDCWD, path, (long)(O_RDONLY | O_CLOEXEC));
	if (fd < 0) /* reaped since kill(); no /proc at all means unknown */
		return errno == ENOENT ? PD_HOLDER_DEAD : PD_HOLDER_RUNNING;
	got = syscall(SYS_read, fd, buf, (long)sizeof(buf));
	syscall(SYS_close, fd);
	/* "tid (comm) S ...": comm may contain ')', so the state follows the last one. */
	for (long j = got - 1; j >= 0; j--) {
		if (buf[j] != ')')
			continue;
		if (j + 2 >= got)
			return PD_HOLDER_RUNNING;
		if (buf[j + 2] == 'Z' || buf[j + 2] == 'X')
			return PD_HOLDER_DEAD;
		if (buf[j + 2] == 'T' || buf[j + 2] == 't')
			return PD_HOLDER_STOPPED;
		return PD_HOLDER_RUNNING;
	}
	return PD_HOLDER_RUNNING;
}

static inline uint64_t pd_lock_now_ms_(void)
{
	struct pd_lock_timeout_ ts = { 0, 0 };
	syscall(SYS_clock_gettime, (long)CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The last held value of a word whose holder was found stopped (per object file:
 * a hint only): a waiter finding the same value asks /proc at once, without a sleep. */
static uint32_t pd_lock_stopped_word_;

static inline int pd_lock_slow_(volatile uint32_t *w, uint32_t self)
{
	int saved_errno = errno;
	int rc = PD_LOCK_OK;
	uint32_t v, expected;

	for (int spin = 0; spin < PD_LOCK_SPINS; spin++) {
		v = __atomic_load_n(w, __ATOMIC_RELAXED);
		if ((v & PD_LOCK_TID_MASK) == self) {
			rc = PD_LOCK_DEADLOCK;
			goto out;
		}
		expected = 0;
		if (v == 0 && __atomic_compare_exchange_n(w, &expected, self, 0, __ATOMIC_ACQUIRE,
		                                          __ATOMIC_RELAXED))
			goto out;
		pd_cpu_relax();
	}
	uint64_t start = 0;
	for (;;) {
		v = __atomic_load_n(w, __ATOMIC_RELAXED);
		if (v == 0) {
			/* Others may still sleep on the word: take it marked contended
			 * so our unlock wakes the next one. */
			expected = 0;
			if (__atomic_compare_exchange_n(w, &expected, self | PD_LOCK_WAITERS, 0,
			                                __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
				goto out;
			continue;
		}
		if ((v & PD_LOCK_TID_MASK) == self) {
			rc = PD_LOCK_DEADLOCK;
			goto out;
		}
		if ((v | PD_LOCK_WAITERS) == __atomic_load_n(&pd_lock_stopped_word_, __ATOMIC_RELAXED) &&
		    pd_lock_holder_state_(v & PD_LOCK_TID_MASK) == PD_HOLDER_STOPPED) {
			rc = PD_LOCK_TIMEOUT;
			goto out;
		}
		if (!(v & PD_LOCK_WAITERS)) {
			expected = v;
			if (!__atomic_compare_exchange_n(w, &expected, v | PD_LOCK_WAITERS, 0,
			                                 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
				continue;
			v |= PD_LOCK_WAITERS;
		}
		if (start == 0)
			start = pd_lock_now_ms_() + 1; /* never 0 */
		struct pd_lock_timeout_ ts = { 0, PD_LOCK_WAIT_NS };
		long r = syscall(SYS_futex, w, (long)FUTEX_WAIT, (long)v, &ts, NULL, 0L);
		if (r == -1 && errno == ETIMEDOUT && __atomic_load_n(w, __ATOMIC_RELAXED) == v) {
			int holder = pd_lock_holder_state_(v & PD_LOCK_TID_MASK);
			if (holder == PD_HOLDER_DEAD) {
				expected = v;
				if (__atomic_compare_exchange_n(w, &expected, self | PD_LOCK_WAITERS, 0,
				                                __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
					rc = PD_LOCK_RECOVERED;
					goto out;
				}
			} else if (holder == PD_HOLDER_STOPPED) {
				__atomic_store_n(&pd_lock_stopped_word_, v, __ATOMIC_RELAXED);
				rc = PD_LOCK_TIMEOUT;
				goto out;
			}
		}
		if (pd_lock_now_ms_() + 1 - start >= STUCK_CONTEXT_MS) {
			rc = PD_LOCK_TIMEOUT;
			goto out;
		}
	}
out:
	errno = saved_errno;
	return rc;
}

/* Acquire; returns PD_LOCK_OK, PD_LOCK_RECOVERED (count it in
 * pd_header.lock_recoveries), PD_LOCK_DEADLOCK or PD_LOCK_TIMEOUT (not acquired). */
static inline int pd_lock(volatile uint32_t *w)
{
	uint32_t self = pd_lock_self();
	uint32_t expected = 0;
	if (__builtin_expect(__atomic_compare_exchange_n(w, &expected, self, 0, __ATOMIC_ACQUIRE,
	                                                 __ATOMIC_RELAXED), 1))
		return PD_LOCK_OK;
	return pd_lock_slow_(w, self);
}

/* Acquire only if free: PD_LOCK_OK, PD_LOCK_BUSY or PD_LOCK_DEADLOCK.  Never
 * sleeps and never recovers a dead holder's lock. */
static inline int pd_trylock(volatile uint32_t *w)
{
	uint32_t self = pd_lock_self();
	uint32_t expected = 0;
	if (__atomic_compare_exchange_n(w, &expected, self, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return PD_LOCK_OK;
	return (expected & PD_LOCK_TID_MASK) == self ? PD_LOCK_DEADLOCK : PD_LOCK_BUSY;
}

static inline void pd_unlock(volatile uint32_t *w)
{
	uint32_t old = __atomic_exchange_n(w, 0, __ATOMIC_RELEASE);
	if (old & PD_LOCK_WAITERS) {
		int saved_errno = errno;
		syscall(SYS_futex, w, (long)FUTEX_WAKE, 1L, NULL, NULL, 0L);
		errno = saved_errno;
	}
}

#endif /* PD_LOCK_H */
