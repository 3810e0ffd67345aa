/* aarch64 trampolines: the 4-byte `nop` of a USDT site whose plan is
 * NOP (launcher/plan/aarch64.py) becomes `B stub`, one aligned 32-bit store
 * (B and NOP are both in the architecture's list of instructions that may be
 * modified while another core executes them), then the i-cache flush
 * pd_patch does.  B reaches +-128 MiB, so the stubs live in memory mapped near
 * the object (pd_map_near with PD_TRAMP_REACH).
 *
 * pd_tramp_prepare (pd_tramp.c) maps the area and calls pd_write_stub
 * (aarch64_tramp.c) per site.  A stub is a copy of pd_a64_stub_tmpl (below):
 *     sub sp,#32; save x16 x17 x30; adr x16, literals; ldr x17, =common; blr x17;
 *     restore x16 x17 x30; add sp,#32; b site+4;
 *     literals {site pc, site, bias, common, C entry}
 * and pd_a64_tramp_common (one copy, in this module) saves x0-x30, sp, nzcv,
 * fpsr/fpcr and the vector state into the same struct pd_regs the BRK trap fills
 * (pc = the site, sp = the site's), calls the C entry (pd_a64_tramp_entry: pd_run,
 * or pd_func_fire at a function entry) on the current stack (Linux
 * has no red zone on aarch64; the site's sp is 16-aligned as AAPCS64 requires,
 * sp-relative accesses fault otherwise, and every frame here keeps it so) and
 * restores; x30 comes back from regs->r[30], which a function entry's return probe
 * replaces with pd_ret_tramp (pd_func.c).  A function entry's stub (plan DISPLACE)
 * branches from the `b site+4` slot to the plan's relocated first instruction
 * after the literals, then `b entry+4`; the same code is the out-of-line copy a BRK
 * at the entry resumes in (pd_write_ool).  pd_ret_tramp (aarch64_tramp.c) is a
 * stub of the same shape whose C entry runs the return probes.
 * Vector state: q0-q31, or with SVE (HWCAP_SVE) z0-z31, p0-p15 and ffr -- a
 * NEON write in the handler's libc calls zeroes a z register's upper bits, and
 * the compiler may keep live values in any of them at an asm statement. */
#ifndef PD_ARCH_TRAMP_H_
#define PD_ARCH_TRAMP_H_

#define PD_TRAMP_REACH (0x8000000u - 0x10000u) /* B's +-128 MiB, less a margin */
#define PD_STUB_SIZE 128 /* pd_a64_stub_tmpl: 40 bytes + 40 of literals, then <= 28 of code */
#define PD_OOL_SIZE 32   /* a function entry's relocated code (<= 24) + `b entry+4` */
#define PD_A64_B 0x14000000u

#endif
