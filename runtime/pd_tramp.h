/* Trampolines: per-site stubs that replace the trap at sites whose patch plan
 * (launcher/plan/x86.py, in pd_site.plan) says NOP or DISPLACE, and the
 * out-of-line copies a trapped function entry resumes in.
 *
 * pd_tramp.c maps the memory near each object and walks its sites; the arch's own
 * units write the stubs and install the jumps (arch/x86/x86_tramp.c with
 * arch/x86_64/ or arch/i386/, arch/aarch64/aarch64_tramp.c).  PD_ARCH_TRAMP_H (set
 * by the arch's regs.h) names the arch header with PD_TRAMP_REACH, PD_STUB_SIZE and
 * PD_OOL_SIZE. */
#ifndef PD_TRAMP_H
#define PD_TRAMP_H

#include <link.h>
#include <stdint.h>

#include "pd_runtime.h"
#include PD_ARCH_TRAMP_H

#pragma GCC visibility push(hidden)

/* ---- what pd_arm.c and pd_trap.c call (pd_tramp.c) ---- */

/* Maps and writes the stubs of object `o`'s trampoline sites; an array indexed like
 * pd_sites with each stub's address (0: that site keeps the trap), or NULL. */
uintptr_t *pd_tramp_prepare(const struct dl_phdr_info *info, uint32_t o);
/* Per function site of object `o`: its out-of-line copy (0: none), or NULL. */
uintptr_t *pd_ool_prepare(const struct dl_phdr_info *info, uint32_t o);
/* Unmaps the pages of a forgotten site's stub and copy (0: none). */
void pd_tramp_release(uintptr_t stub, uintptr_t ool);

/* ---- what each arch provides ---- */

/* Writes the stub for `site` at `at` (PD_STUB_SIZE bytes): its length, or -1 if a
 * jump or relocated operand does not reach from there. */
int pd_write_stub(uint8_t *at, const struct pd_site *site, uintptr_t bias);
/* Whether the site's jump reaches the stub. */
int pd_stub_reaches(uintptr_t site, uintptr_t stub);
/* Where the site's jump enters its stub. */
uintptr_t pd_stub_start(uintptr_t stub, const struct pd_site *site);
/* The out-of-line copy of a function entry's first instructions at `at`
 * (PD_OOL_SIZE bytes); -1 if it does not reach. */
int pd_write_ool(uint8_t *at, const struct pd_site *site, uintptr_t bias);
/* Replaces the site's patched bytes by the jump to `stub`; 0 or -1. */
int pd_install_jump(uintptr_t addr, unsigned len, int prot, uintptr_t stub);
/* Before object `o`'s stubs turn executable, then after: branches of the object and of
 * its stubs that land inside a stubbed site's window (x86 only: aarch64 plans are one
 * in-place B, which no branch lands inside). */
void pd_tramp_link_area(uintptr_t bias, uint32_t o, uintptr_t *stubs);
void pd_tramp_link_code(const struct dl_phdr_info *info, uint32_t o, uintptr_t *stubs);
/* A -x attach: where a thread stopped at `pc` resumes once the sites are patched (the
 * stub's copy of the instruction when pc is inside a jump's window past its first
 * byte; pc itself otherwise). */
uintptr_t pd_tramp_window_pc(uintptr_t pc);
/* A -x detach: the bytes pd_tramp_link_code rewrote outside the site windows are put
 * back (newest first; *bytes += their count). */
void pd_tramp_unlink_all(uint32_t *bytes);
/* The protection bits beyond PROT_READ/WRITE/EXEC an executable segment of the object
 * has (aarch64: PROT_BTI on guarded pages), which pd_patch keeps. */
int pd_tramp_exec_prot(const struct dl_phdr_info *info);

#pragma GCC visibility pop

#endif
