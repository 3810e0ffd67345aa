/* What the runtime's own units share and generated code never sees: the process's
 * state (pd_runtime.c), the output ring and records (pd_ring.c), running a handler
 * (pd_run.c), the armed-site table and the SIGTRAP handler (pd_trap.c), arming
 * (pd_arm.c), the process registry (pd_registry.c) and the launcher's entry points
 * (pd_launcher.c).
 *
 * Hidden, every one: the units are linked into one module, whose i386 code then
 * calls them directly, without a PLT (and so without a GOT register on the FAST path,
 * tests/test_fast_handlers.py). */
#ifndef PD_INTERNAL_H
#define PD_INTERNAL_H

#include <sys/prctl.h>
#include <sys/types.h>

#include "pd_runtime.h"
#include PD_ARCH_HOST_H /* how the process sees itself: natively or under qemu-user */

#pragma GCC visibility push(hidden)

/* ---- process state (pd_runtime.c) ----------------------------------------- */

extern size_t pd_seg_size;
extern int pd_is_launcher;
extern struct pd_proc *pd_self;  /* this process's registry entry */
/* The FAST path's view of the session: on once mapped and checked, off before the
 * segment goes. */
void pd_fast_env_set(int on);
uint64_t pd_now_ns(void);

static inline int prctl_get_name(char name[17])
{
    name[16] = 0;
    return prctl(PR_GET_NAME, (unsigned long)name, 0, 0, 0);
}

static inline uint8_t *pd_ring_data(void) { return pd_seg + pd_hdr->ring_off; }

/* ---- output ring and records (pd_ring.c) ---------------------------------- */

void pd_futex_wait(volatile uint32_t *word, uint32_t val, long timeout_ns);
void pd_futex_wake(volatile uint32_t *word);
/* Offset in c->out of the record being written (a handler has one context). */
extern __thread uint32_t pd_rec_open_at;
void pd_flush(struct pd_ctx *c);
void pd_emit_text(struct pd_ctx *c, uint16_t kind, const char *msg);

/* ---- built-ins (pd_builtins.c) --------------------------------------------- */

/* Set by exit() in this thread's handler: the request waits until the handler's
 * records are in the ring (pd_run.c's pd_run_finish). */
extern __thread int pd_exit_pending;
extern __thread int pd_raise_pending;   /* raise(): the signal, sent by pd_raise_now */
void pd_raise_now(void);
void pd_request_exit(void);

/* ---- running a handler (pd_run.c) ------------------------------------------ */

void pd_run(const struct pd_probe *p, const struct pd_site *site,
            const struct pd_regs *regs, uintptr_t bias);
#ifndef PD_FAST_MARK_CC /* the arch's cpu.h may pass the arguments in registers */
#define PD_FAST_MARK_CC
#endif
/* What a stub may call for a row whose one probe is FAST and reads registers (the
 * probe is site->probe), with the pd_regs it built. */
PD_FAST_FN void pd_fast_regs(struct pd_regs *regs, const struct pd_site *site, uintptr_t bias);
/* The same for a row whose one probe is FAST and reads no register but sp
 * (PD_PROBE_SP), from a stub that builds no pd_regs. */
PD_FAST_FN void pd_fast_sp(const struct pd_probe *p, const struct pd_site *site, uintptr_t sp,
                           uintptr_t bias);
/* A FAST mark's stub calls it with the probe and &pd_fenv as immediates. */
PD_FAST_FN PD_FAST_MARK_CC void pd_fast_mark(const struct pd_probe *p,
                                              const struct pd_fast_env *env);

/* ---- function probes (pd_func.c) ------------------------------------------- */

/* Called by pd_ret_tramp (arch/) with the registers at a hooked function's return
 * (struct pd_regs on its stack); returns the original return address. */
pd_ureg pd_ret_handler(struct pd_regs *regs);

/* ---- armed sites and traps (pd_trap.c) ------------------------------------- */

struct pd_armed {
    uintptr_t addr;                   /* runtime address of the patched nop */
    uintptr_t bias;
    const struct pd_site *site;
    uint8_t saved[24];                /* original bytes, for disarming (pd_disarm_all) */
    uint8_t saved_len;
    int prot;                         /* the page protection pd_patch restores */
    uintptr_t stub;                   /* trampoline stub, 0 for a trap site */
    uintptr_t ool;                    /* function entry: out-of-line copy the trap resumes in */
};
/* Open-addressing hash on addr, never resized or moved: objects dlopen'ed later are
 * armed (and dlclose'd ones forgotten) while other threads look sites up from the
 * SIGTRAP handler, so an entry is published by its addr store (release) and retired
 * as PD_ARMED_DEAD. */
extern struct pd_armed *pd_armed;
extern uint32_t pd_armed_cap;         /* a power of two > 2 * nsites */
extern uint32_t pd_narmed;
#define PD_ARMED_DEAD ((uintptr_t)1)
struct pd_armed *pd_armed_insert(const struct pd_armed *e);
void pd_armed_remove(struct pd_armed *a);
int pd_install_trap_handler(void);

/* ---- arming (pd_arm.c) ----------------------------------------------------- */

/* Per pd_objects entry: armed in this process, and at which load bias. */
extern uint8_t *pd_obj_armed;
extern uintptr_t *pd_obj_bias;
extern uint8_t *pd_site_off; /* 1: a row pd_ret_choose did not choose, never armed */
/* A value of `size` bytes read raw, widened to 64 bits (general registers only: the
 * FAST path's argument reads use it too). */
static inline PD_FAST_FN int64_t pd_extend(uint64_t raw, unsigned size, int is_signed)
{
    if (size >= 8)
        return (int64_t)raw;
    unsigned bits = size * 8;
    uint64_t mask = (1ull << bits) - 1;
    raw &= mask;
    if (is_signed && (raw >> (bits - 1)))
        raw |= ~mask;
    return (int64_t)raw;
}
/* The entry row (PD_FX_ALT) whose stub jumps to PD_FX_IN_ENTRY exit row s, or -1. */
long pd_in_entry_row(uint32_t s);
/* Whether row s's stub must be run, not a trap in its place: an exit's (its handler runs
 * after the window's first instructions) or an entry's whose window ends with its
 * PD_FX_IN_ENTRY exit (the return probes run in that exit's stub). */
int pd_stub_leads_on(uint32_t s);
/* mprotect, write(addr), flush the icache, mprotect back to prot_after; 0 or -1. */
int pd_patch(uintptr_t addr, unsigned len, int prot_after, void (*write)(uint8_t *));
/* 1 (pd_attach_live): pd_patch records its writes; pd_patch_commit makes them in order
 * (or, with apply 0, drops them) and returns how many failed. */
extern int pd_patch_deferred;
uint32_t pd_patch_commit(int apply);
int pd_object_matches(const char *path, const char *loaded_name);
void pd_arm_all(void);
struct dl_phdr_info;
/* The page protection of the object's segment holding vaddr, or -1. */
int pd_segment_prot(const struct dl_phdr_info *info, uintptr_t vaddr);

/* ---- attaching and the process registry (pd_registry.c) -------------------- */

/* launcher/session.py and attach.py name them */
enum { PD_ATTACH_OK = 0, PD_ATTACH_NOSHM = -1, PD_ATTACH_BADSEG = -2, PD_ATTACH_MISMATCH = -3,
       PD_ATTACH_EMULATOR = -4, PD_ATTACH_ENDED = -5, PD_ATTACH_ALREADY = -6 };
int pd_map_segment(const char *name);
void pd_unmap(void);
/* The image is about to be replaced by an exec (pd_follow.c): its process.end probes. */
void pd_process_exec(void);
/* A fatal signal `sig` ends the process (pd_sigend.c): its process.end probes, its entry
 * marked KILLED. */
void pd_process_killed(int sig);
/* This process's wait reaped `pid`, which ended as `state` (KILLED by signal `status`,
 * or EXITED with it) (pd_sigend.c): noted in its entry if it ended without its
 * process.end probes. */
void pd_process_reaped(pid_t pid, uint32_t state, int status);

/* ---- register names and argument registers (arch/<arch>/<arch>_regnames.c) -------- */

/* A name register()/u_register() knows: DWARF register `reg` (or PD_RN_*), `bits` wide
 * from bit `shift` (ah: 8 bits from bit 8). */
enum { PD_RN_FLAGS = -1, PD_RN_ORIG = -2, PD_RN_CS = -3, PD_RN_SS = -4, PD_RN_DS = -5,
       PD_RN_ES = -6, PD_RN_FS = -7, PD_RN_GS = -8 };
struct pd_regname {
    const char *name;
    int8_t reg;
    uint8_t bits;
    uint8_t shift;
};

#pragma GCC visibility pop

#endif
