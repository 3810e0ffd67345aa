/* AArch64 register context and trap mechanics (see x86_64/regs.h for the
 * interface).  Generated code reads struct pd_regs only through pd_reg() with
 * DWARF register numbers: x0..x30 are 0..30, sp is 31 (what sdt.h operands
 * and launcher/elf/argspec.py use); the pc is kept after them as 32.
 *
 * Trap semantics differ from x86 in three ways (seed 000, patching.md 7.2):
 *   - BRK #0 is 4 bytes (0xd4200000, little-endian in memory);
 *   - BRK leaves the pc ON the instruction, so the site is the reported pc and
 *     the handler must move it (pd_sigtrap resumes at site + nop_len = 4) or
 *     the BRK re-traps forever;
 *   - an instruction written through the data path needs an i-cache flush
 *     before it is fetched (__builtin___clear_cache). */
#ifndef PD_ARCH_REGS_H_
#define PD_ARCH_REGS_H_
#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#define PD_ARCH_ABI PD_ABI_AARCH64
#define PD_ARCH_NAME "aarch64"
#define PD_TRAP_LEN 4
#define PD_NREGS 33 /* DWARF 0..31: x0..x30 sp; then the pc */
#define PD_DWARF_SP 31
#define PD_DWARF_IP 32
#define PD_ARCH_TRAMP_H "arch/aarch64/tramp.h" /* for pd_tramp.h */
#define PD_ARCH_FUNC_H "arch/aarch64/func.h"     /* for pd_func.c */
#define PD_ARCH_UNHOOK_H "arch/aarch64/unhook.h" /* for pd_func.c */
#define PD_ARCH_HOST_H "arch/aarch64/host.h"     /* for pd_internal.h */
#define PD_ARCH_WALK_H "arch/aarch64/walk.h"     /* for pd_usym.c */
#define PD_A64_NOP 0xd503201fu
#define PD_A64_BRK0 0xd4200000u

typedef uint64_t pd_ureg;

struct pd_regs {
    pd_ureg r[PD_NREGS];
    pd_ureg flags; /* pstate (NZCV in bits 28..31) */
};

static inline pd_ureg pd_reg(const struct pd_regs *regs, int dwarfno)
{
    return (unsigned)dwarfno < PD_NREGS ? regs->r[dwarfno] : 0;
}

/* A guru-mode handler's write to a variable in a register (pd_store_arg). */
static inline void pd_set_reg(struct pd_regs *regs, int dwarfno, pd_ureg v)
{
    if ((unsigned)dwarfno < PD_NREGS)
        regs->r[dwarfno] = v;
}

static inline void pd_regs_from_ucontext(struct pd_regs *regs, const ucontext_t *uc)
{
    for (int i = 0; i < 31; i++)
        regs->r[i] = (pd_ureg)uc->uc_mcontext.regs[i];
    regs->r[PD_DWARF_SP] = (pd_ureg)uc->uc_mcontext.sp;
    regs->r[PD_DWARF_IP] = (pd_ureg)uc->uc_mcontext.pc;
    regs->flags = (pd_ureg)uc->uc_mcontext.pstate;
}

static inline uintptr_t pd_uc_get_ip(const ucontext_t *uc)
{
    return (uintptr_t)uc->uc_mcontext.pc;
}

static inline void pd_uc_set_ip(ucontext_t *uc, uintptr_t ip)
{
    uc->uc_mcontext.pc = (unsigned long long)ip;
}

/* BRK reports its own address. */
static inline uintptr_t pd_trap_site_from_ip(uintptr_t ip) { return ip; }

/* One aligned 32-bit store: a concurrently fetching CPU sees the NOP or the
 * BRK, both of which the architecture allows to be patched that way. */
static inline void pd_write_trap(uint8_t *at)
{
    __atomic_store_n((uint32_t *)(void *)at, PD_A64_BRK0, __ATOMIC_RELEASE);
}

/* Whether the len bytes at p are nops: sdt.h emits one `nop` (d503201f). */
static inline int pd_arch_is_nop(const uint8_t *p, unsigned len)
{
    if (len == 0 || len % 4)
        return 0;
    for (unsigned i = 0; i < len; i += 4) {
        uint32_t insn;
        memcpy(&insn, p + i, 4);
        if (insn != PD_A64_NOP)
            return 0;
    }
    return 1;
}

/* A trapped probe's registers back into the context the thread resumes with: the
 * link register a return probe replaced (pd_func.c), what a handler wrote ($var = v in
 * guru mode).  Not sp and pc, which the trap sets itself. */
static inline void pd_regs_to_ucontext(ucontext_t *uc, const struct pd_regs *regs)
{
    for (int i = 0; i < 31; i++)
        uc->uc_mcontext.regs[i] = (unsigned long long)regs->r[i];
}

/* tpidr_el0 is the thread pointer TLS offsets are relative to. */
static inline uintptr_t pd_thread_pointer(void)
{
    uintptr_t tp;
    __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
    return tp;
}

/* The same for PD_FAST_FN code (ordinary code here). */
static inline uintptr_t pd_fast_thread_pointer(void) { return pd_thread_pointer(); }

/* Guarded reads of our own memory.  process_vm_readv(getpid()) is what x86 uses,
 * but under qemu-user it takes the guest's addresses as host ones (it fails, or
 * reads the wrong bytes), so it is used only if a self-test reading a known
 * buffer returns exactly that buffer (real hardware).  Otherwise the bytes go
 * through a pipe: write(2) validates the source (EFAULT for a bad address, also
 * under qemu, which checks guest ranges) and read(2) returns them.  A private
 * pipe per call: no shared state between threads or a forked child. */
#define PD_ARCH_READ_SELF 1
#include <fcntl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int pd_a64_vm_readv_ok = -1; /* -1 not tested yet; racing testers agree */

static inline ssize_t pd_read_self(void *dst, const void *src, size_t n)
{
    if (__atomic_load_n(&pd_a64_vm_readv_ok, __ATOMIC_RELAXED) < 0) {
        volatile uint64_t want = 0x70647964a64a64a6ull; /* on our stack: surely mapped */
        uint64_t got = 0;
        struct iovec l = {&got, sizeof got}, r = {(void *)&want, sizeof want};
        int ok = process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)sizeof got &&
                 got == want;
        __atomic_store_n(&pd_a64_vm_readv_ok, ok, __ATOMIC_RELAXED);
    }
    if (__atomic_load_n(&pd_a64_vm_readv_ok, __ATOMIC_RELAXED)) {
        struct iovec local = {dst, n}, remote = {(void *)src, n};
        return process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    }
    int fds[2];
    if (n > 65536 || pipe2(fds, O_CLOEXEC) != 0) /* pipe capacity: one write fits */
        return -1;
    ssize_t w = write(fds[1], src, n);
    ssize_t r = w > 0 ? read(fds[0], dst, (size_t)w) : -1;
    close(fds[0]);
    close(fds[1]);
    return r;
}

/* dc cvau / dsb ish / ic ivau / dsb ish / isb, honouring CTR_EL0.IDC/DIC. */
static inline void pd_flush_icache(void *start, void *end)
{
    __builtin___clear_cache((char *)start, (char *)end);
}

#endif
