"""Patch plans for aarch64 USDT sites and function entries.

sdt.h emits one 4-byte ``nop`` (``d503201f``) per site, and ``B stub`` is 4 bytes
too, so the branch replaces exactly that instruction: nothing is relocated, and a
branch that lands on the site executes the ``B`` as it would have the nop, so
no branch-target analysis is needed (contrast the x86 ``displace`` tactic).
The plan is ``nop`` (the same tactic as x86's in-place ``jmp``; ``-v`` counts it
there) unless the site is not that instruction.  Whether the stub is within the
branch's +-128 MiB is only known in the process: the runtime falls back to the
trap (``BRK #0``) when it is not.

A function entry (``plan_function``) is ``displace``: its first instruction (after a
``bti c``, see elf/functions.py) becomes ``B stub``; the stub runs the handler, then
that instruction relocated, then ``B entry+4``.  The same code is the out-of-line copy
a ``BRK`` at the entry resumes in (``trap`` plans carry it too).  Relocation: every
PC-relative form of the base ISA becomes PC-independent code whose absolute
addresses are 64-bit literals (``abs32``/``abs32hi`` fixups, + the load bias) or
``B`` to the original target (``b26``: the runtime checks the +-128 MiB reach):

- ``ADR``/``ADRP xd``: ``ldr xd, =target``;
- ``LDR`` literal (w/x/sw, s/d/q): ``ldr xt|x16, =addr; ldr t, [xt|x16]`` (x16, IP0,
  is free at a function entry: veneers may clobber it), ``PRFM`` literal: a nop;
- ``B``: ``b target``; ``BL``: ``ldr x30, =entry+4; b target``;
- ``B.cond``/``CBZ``/``CBNZ``/``TBZ``/``TBNZ``: the same test branching 8 bytes on to
  ``b target``, else on to ``b entry+4``.

Everything else does not depend on where it runs (``paciasp`` too: in the stub it
signs the link register the handler may have swapped, with the same sp).  ``BRK``,
``HLT`` and undefined words at an entry are refused (trap plan without code: the
function is not armed, which the runtime warns about and counts).
"""

from __future__ import annotations

import struct

from ..elf.reader import open_elf, read_elf_info
from ..elf.stapsdt import ProbeSite
from .x86 import Fixup, PatchPlan, trap

A64_INSN = 4
_NOP = 0xD503201F
_LDR_X_LIT = 0x58000000          # ldr xt, label (imm19 << 5)
_B = 0x14000000
# ldr t, [xn] with a zero offset, by (opc, V) of the literal load
_LDR_BASE = {(0, 0): 0xB9400000, (1, 0): 0xF9400000, (2, 0): 0xB9800000,
             (0, 1): 0xBD400000, (1, 1): 0xFD400000, (2, 1): 0x3DC00000}
_IP0 = 16


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v & (1 << (bits - 1)) else v


def _words(*ws: int) -> bytes:
    return struct.pack(f"<{len(ws)}I", *ws)


def _lit64(at: int, target: int) -> list[Fixup]:
    return [Fixup(at, "abs32", target), Fixup(at + 4, "abs32hi", target)]


def relocate(w: int, pc: int) -> tuple[bytes, list[Fixup], str]:
    """(code, fixups, what it is) running the instruction `w` at `pc` from anywhere; the
    code falls through to the runtime's `b pc+4`.  ValueError: it cannot run elsewhere."""
    resume = pc + A64_INSN
    if (w & 0x7C000000) == 0x14000000:                       # B / BL imm26
        target = pc + 4 * _sext(w & 0x3FFFFFF, 26)
        if w & 0x80000000:
            return (_words(_LDR_X_LIT | (2 << 5) | 30, _B, 0, 0),
                    [Fixup(4, "b26", target), *_lit64(8, resume)], "bl")
        return _words(_B), [Fixup(0, "b26", target)], "b"
    if (w & 0xFF000000) == 0x54000000 or (w & 0x7C000000) == 0x34000000:
        # B.cond / CBZ / CBNZ imm19, TBZ / TBNZ imm14: taken -> +8 (`b target`)
        tb = (w & 0x7E000000) == 0x36000000
        bits, mask = (14, 0x3FFF) if tb else (19, 0x7FFFF)
        target = pc + 4 * _sext((w >> 5) & mask, bits)
        near = (w & ~(mask << 5)) | (2 << 5)
        return (_words(near, _B | 2, _B), [Fixup(8, "b26", target)],
                "test and branch" if tb else "conditional branch")
    if (w & 0x1F000000) == 0x10000000:                       # ADR / ADRP
        rd = w & 31
        imm = _sext((((w >> 5) & 0x7FFFF) << 2) | ((w >> 29) & 3), 21)
        page = bool(w & 0x80000000)
        target = (pc & ~0xFFF) + (imm << 12) if page else pc + imm
        if rd == 31:   # xzr: no effect
            return _words(_NOP), [], "adr to xzr"
        return (_words(_LDR_X_LIT | (2 << 5) | rd, _B | 3, 0, 0), _lit64(8, target),
                "adrp" if page else "adr")
    if (w & 0x3B000000) == 0x18000000:                       # LDR (literal)
        opc, vec, rt = w >> 30, (w >> 26) & 1, w & 31
        addr = pc + 4 * _sext((w >> 5) & 0x7FFFF, 19)
        if opc == 3:
            if vec:
                raise ValueError(f"unallocated literal load {w:#010x}")
            return _words(_NOP), [], "prfm literal, a hint: dropped"
        base = rt if not vec and rt != 31 else _IP0
        return (_words(_LDR_X_LIT | (4 << 5) | base, _LDR_BASE[opc, vec] | (base << 5) | rt,
                       _B | 4, _NOP, 0, 0), _lit64(16, addr), "ldr literal")
    if (w & 0xFF000000) == 0xD4000000 and (w >> 21) & 7 in (1, 2):   # BRK, HLT
        raise ValueError(f"a breakpoint ({w:#010x}) is there already")
    if (w >> 25) & 0xF == 0:                                  # the unallocated/SME group
        raise ValueError(f"{w:#010x} is no instruction of the base ISA")
    return _words(w), [], "position-independent"


def _read_insn(path: str, pc: int) -> int | None:
    with open_elf(path) as h:
        for seg in read_elf_info(h).segments:
            off = seg.file_offset(pc, A64_INSN) if seg.executable else None
            if off is not None:
                raw = h.read(off, A64_INSN)
                return int.from_bytes(raw, "little") if raw and len(raw) == 4 else None
    return None


def plan_function(site: ProbeSite) -> PatchPlan:
    """The plan of an aarch64 function entry (see the module docstring)."""
    if site.pc % A64_INSN:
        return trap(f"entry {site.pc:#x} is not {A64_INSN}-byte aligned")
    try:
        w = _read_insn(site.path, site.pc)
    except Exception as exc:  # noqa: BLE001 - pyelftools raises many kinds
        return trap(f"cannot read the entry: {exc}")
    if w is None:
        return trap("the entry is not in the file's executable segments")
    try:
        code, fixups, what = relocate(w, site.pc)
    except ValueError as exc:
        return trap(f"the first instruction cannot run out of line: {exc}")
    return PatchPlan("displace", f"first instruction ({what}) relocated into the stub, "
                     "B to the stub in place (+-128 MiB)", A64_INSN, _words(w), code,
                     tuple(fixups), site.pc + A64_INSN)


def plan_site(site: ProbeSite) -> PatchPlan:
    """The plan of an aarch64 site (``site.nop_len`` is 4 once resolve accepted its nop)."""
    if site.nop_len == 0:   # a function entry (`pydyn -p2` asks here for every site)
        return plan_function(site)
    if site.nop_len != A64_INSN:
        return trap(f"not a {A64_INSN}-byte nop")
    if site.pc % A64_INSN:
        return trap(f"site {site.pc:#x} is not {A64_INSN}-byte aligned")
    return PatchPlan("nop", "4-byte nop at the site: B to the stub in place (+-128 MiB)",
                     A64_INSN, b"", b"", (), site.pc + A64_INSN)
