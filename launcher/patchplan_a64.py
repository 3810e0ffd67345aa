"""Patch plans for aarch64 USDT sites (issue 8).

sdt.h emits one 4-byte ``nop`` (``d503201f``) per site, and ``B stub`` is 4 bytes
too, so the branch replaces exactly that instruction: nothing is relocated, and a
branch that lands on the site executes the ``B`` as it would have the nop, so
no branch-target analysis is needed (contrast the x86 ``displace`` tactic).
The plan is ``nop`` (the same tactic as x86's in-place ``jmp``; ``-v`` counts it
there) unless the site is not that instruction.  Whether the stub is within the
branch's +-128 MiB is only known in the process: the runtime falls back to the
trap (``BRK #0``) when it is not.
"""

from __future__ import annotations

from .elf.stapsdt import ProbeSite
from .patchplan import PatchPlan, trap

A64_INSN = 4


def plan_site(site: ProbeSite) -> PatchPlan:
    """The plan of an aarch64 site (``site.nop_len`` is 4 once resolve accepted its nop)."""
    if site.nop_len != A64_INSN:
        return trap(f"not a {A64_INSN}-byte nop (function entries are not planned on aarch64)")
    if site.pc % A64_INSN:
        return trap(f"site {site.pc:#x} is not {A64_INSN}-byte aligned")
    return PatchPlan("nop", "4-byte nop at the site: B to the stub in place (+-128 MiB)",
                     A64_INSN, b"", b"", (), site.pc + A64_INSN)
