/* Build-time defaults of the runtime and of generated code, each defined once here:
 * `pydyn -D NAME=N` (launcher/cli.py's list) passes -DNAME=N to every unit, which
 * wins over the default.  Preprocessor lines only: the .S units include it too. */
#ifndef PD_CONFIG_H
#define PD_CONFIG_H

/* ---- stap's limits (per handler run) ---- */
#ifndef MAXACTION
#define MAXACTION 1000 /* statements */
#endif
/* begin, end and error handlers run where nothing waits on them: stap gives them ten
 * times the budget (its runtime_defines.h) */
#ifndef MAXACTION_INTERRUPTIBLE
#define MAXACTION_INTERRUPTIBLE (MAXACTION * 10)
#endif
/* --skip-badvars (a script may read it with @const("STP_SKIP_BADVARS")) */
#ifndef STP_SKIP_BADVARS
#define STP_SKIP_BADVARS 0
#endif
#ifndef MAXERRORS
#define MAXERRORS 0 /* errors before the session exits */
#endif
#ifndef MAXSTRINGLEN
#define MAXSTRINGLEN 512
#endif
#ifndef MAXNESTING
#define MAXNESTING 10 /* script function call depth */
#endif
#ifndef PD_MAXBACKTRACE
#define PD_MAXBACKTRACE 20 /* stap's MAXBACKTRACE: frames of ubacktrace() */
#endif
/* stap's histogram drawing (pd_hist.c): the bar of the largest bucket, and the zero
 * rows kept either side of the data (negative: none left out) */
#ifndef HIST_WIDTH
#define HIST_WIDTH 50
#endif
#ifndef HIST_ELISION
#define HIST_ELISION 2
#endif
#ifndef PD_OUTBUF_SIZE
#define PD_OUTBUF_SIZE 8192 /* a handler's records, written to the ring when it ends */
#endif
/* The sub-match search of matched() (pd_regex.c): its steps, its backtracking frames
 * (14 bytes each on the handler's stack: about one per iteration of a repetition) and
 * the group values it may have to take back (6 bytes each: one per group an iteration
 * sets), with the failures it remembers: about 18 KiB of stack with the default
 * MAXSTRINGLEN.  A search that needs more is an error of the handler. */
#ifndef PD_RE_STEPS
#define PD_RE_STEPS 200000
#endif
#ifndef PD_RE_FRAMES
#define PD_RE_FRAMES (MAXSTRINGLEN + 64)
#endif
#ifndef PD_RE_TRAIL
#define PD_RE_TRAIL (2 * MAXSTRINGLEN)
#endif
#ifndef PD_RE_MEMO
#define PD_RE_MEMO 512 /* the searches known to fail (8 bytes each; a power of two) */
#endif
/* How long the launcher's stop waits for handlers still running (pd_quiesce.c), and the
 * longest wait for a segment lock before the waiter gives up (pd_lock.h). */
#ifndef STUCK_CONTEXT_MS
#define STUCK_CONTEXT_MS 2000
#endif
/* A segment lock's waiter (pd_lock.h): busy polls before it sleeps (critical sections
 * are short), then futex sleeps of PD_LOCK_WAIT_NS, each also the dead-holder check
 * period. */
#ifndef PD_LOCK_SPINS
#define PD_LOCK_SPINS 100
#endif
#ifndef PD_LOCK_WAIT_NS
#define PD_LOCK_WAIT_NS 10000000L
#endif

/* ---- how probes are reached ---- */
/* 1: every site traps (as --probe-mode=trap), compiled in. */
#ifndef PD_FORCE_TRAPS
#define PD_FORCE_TRAPS 0
#endif
/* 0: the x86 stubs save no vector register even under pd_xmm_always (-x), and
 * pd_ret_tramp only the return-value ones. */
#ifndef PD_TRAMP_SAVE_XMM
#define PD_TRAMP_SAVE_XMM 1
#endif
/* 0: stubs and pd_ret_tramp run the probes' C on the target's stack, below its red
 * zone, instead of the thread's private stack (pd_pstack.c). */
#ifndef PD_PRIVATE_STACK
#define PD_PRIVATE_STACK 1
#endif

#endif
