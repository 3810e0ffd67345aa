"""Offline patch plans: how the runtime should patch each USDT site.

The launcher decides, the runtime only applies.  For each site, in order:

- ``nop``: the site is a multi-byte nop of >= 5 bytes; a ``jmp rel32`` to a
  per-site stub replaces it in place (nothing is relocated).
- ``displace``: the 1-byte ``nop`` sdt.h emits plus the whole instructions after
  it (>= 5 bytes in all) move into the stub, relocated (RIP-relative operands,
  rel8/rel32 jumps and branches, a final call emulated with its original
  return address, i386 ``get_pc_thunk`` calls turned into immediates).  Only
  where no branch can land inside the overwritten bytes: direct branch and
  call targets of a linear sweep of every executable section, code addresses
  named by instructions, relocations (RELA/REL/RELR) and data words (absolute,
  and relative entries of jump tables), and C++ landing pads (read from each
  function's LSDA; a function whose LSDA cannot be read is refused whole).
  Direct branches into the window are retargeted to the stub instead (rel8 ones
  through an island of dead padding); a window that ends in ret/jmp short of 5
  bytes takes the dead padding after it, or jumps (rel8) to an island.
- ``trap``: anything else; the runtime keeps the int3.

Every plan carries the reason it got its tactic (``pydyn -p2`` prints it).
"""

from __future__ import annotations

import bisect
import os
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..elf.stapsdt import ProbeSite, iter_stapsdt_notes

JMP_LEN = 5
MAX_WINDOW = 16          # bytes of instructions the runtime's stub reserves for them
MAX_CODE = 64            # bytes of relocated code

TACTICS = ("nop", "displace", "trap")


@dataclass(frozen=True)
class Fixup:
    """A field of the relocated code the runtime fills in once the stub's address is known.

    ``rel32``: target + bias - (code address + anchor); ``abs32``/``abs32hi``: the low/high
    32 bits of target + bias; ``b26``: the aarch64 ``B``/``BL`` at ``at`` gets the offset
    to target + bias.  ``target`` is a link-time address.
    """

    at: int
    kind: str
    target: int
    anchor: int = 0


@dataclass(frozen=True)
class Redirect:
    """A direct rel32 branch elsewhere in the object whose target lies inside the window:
    the runtime points it at the relocated copy (`code_off`) of the instruction it reached.

    ``field``: link-time address of the rel32, ``anchor``: the address it is relative to
    (the branch's end), ``orig``: its bytes (verified before the write)."""

    field: int
    anchor: int
    code_off: int
    orig: bytes
    size: int = 4                    # 4: rel32 -> the stub; 1: rel8 -> `hop` or `island`
    island: int = 0                  # 5 dead bytes: `jmp rel32` to the stub
    hop: int = 0                     # 2 dead bytes: `jmp rel8` to the island (0: none)


@dataclass(frozen=True)
class PatchPlan:
    tactic: str                      # "nop" | "displace" | "trap"
    reason: str
    length: int = 0                  # bytes overwritten at pc (the jmp plus filler)
    orig: bytes = b""                # the bytes expected there (verified at run time)
    code: bytes = b""                # relocated instructions run after the handler
    fixups: tuple[Fixup, ...] = ()
    resume: int = 0                  # link-time address the stub jumps back to
    redirects: tuple[Redirect, ...] = ()
    island: int = 0                  # length < 5: pc holds `jmp rel8` to this `jmp rel32`
    hop: int = 0                     # ... or to a `jmp rel8` here that reaches the island
    # (offset in the window, offset in `code`) of each instruction after the first: where
    # the runtime sends a branch of another stub's relocated code that lands inside
    bounds: tuple[tuple[int, int], ...] = ()
    # a function exit's site (plan/returns.py): the bytes of `code` that run before the
    # handler (the instructions of the window before the exit)
    pre: int = 0

    def __str__(self) -> str:
        size = f" {self.length} bytes" if self.length else ""
        return f"{self.tactic}{size}: {self.reason}"


def trap(reason: str) -> PatchPlan:
    return PatchPlan("trap", reason)


# --- object analysis ------------------------------------------------------------------

@dataclass
class _Object:
    bits: int
    machine: str
    text: list[tuple[int, bytes]]            # executable sections: (vaddr, bytes)
    targets: set[int] = field(default_factory=set)   # hard: branches, immediates, relocs
    # weak: words of data that fall in the text (a real code pointer is an instruction
    # start, so one landing inside an instruction decoded from the site is no pointer)
    weak: set[int] = field(default_factory=set)
    # target -> (field address, 4 or 1) of the direct jmp/jcc/call rel32 and jmp/jcc rel8
    # reaching it: such a branch can be retargeted into the stub (a rel8 one through an
    # island of dead padding), so its target may lie inside the window
    branch_src: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    claimed: dict[int, tuple[int, int]] = field(default_factory=dict)  # byte -> owner
    # runs of >= 2 padding bytes (nop/int3) after an instruction that does not fall
    # through, in address order, as the sweep decoded them: (start, length)
    pads: list[tuple[int, int]] = field(default_factory=list)
    landing_pads: set[int] = field(default_factory=set)   # C++, from the LSDAs (in targets)
    eh_ranges: list[tuple[int, int]] = field(default_factory=list)   # FDEs with an LSDA
    marks: set[int] = field(default_factory=set)   # every USDT site of the object
    error: str = ""

    def read(self, addr: int, n: int) -> bytes:
        for va, data in self.text:
            if va <= addr < va + len(data):
                return data[addr - va:addr - va + n]
        return b""

    def in_text(self, addr: int) -> bool:
        return any(va <= addr < va + len(data) for va, data in self.text)


_HEX = re.compile(r"0x[0-9a-f]+")
_RIP = re.compile(r"\[rip(?: ([+-]) (0x[0-9a-f]+|[0-9]+))?\]")  # capstone: decimal below 10
_BRANCHES = ("j", "call", "loop", "xbegin")
_PADDING = ("nop", "int3")
_SAME_REG = re.compile(r"(\w+), \[?\1\]?")   # i386 gcc pads with `lea 0(%esi),%esi` & co.


def _is_pad(mnem: str, ops: str) -> bool:
    return mnem in _PADDING or (mnem in ("lea", "mov") and bool(_SAME_REG.fullmatch(ops)))
_NO_FALLTHROUGH = ("jmp", "ret", "ud2", "hlt", "int3")


def _cs(bits: int, detail: bool = False) -> Any:
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if bits == 64
                     else capstone.CS_MODE_32)
    md.detail = detail
    md.skipdata = False
    return md


def _branch_field(data: bytes, at: int, size: int) -> tuple[int, int] | None:
    """(offset, size) of the displacement of a direct `jmp/call rel32`, `jcc rel32`,
    `jmp rel8` or `jcc rel8` of `size` bytes at data[at:]; None for another form (loop)."""
    if size >= 5:
        op = data[at + size - 5]
        if op in (0xE8, 0xE9) or (size >= 6 and data[at + size - 6] == 0x0F and
                                  0x80 <= op <= 0x8F):
            return size - 4, 4
    op = data[at + size - 2]
    if 2 <= size <= 3 and (op == 0xEB or 0x70 <= op <= 0x7F):
        return size - 1, 1
    return None


def _sweep(obj: _Object, lo: int, hi: int, data_refs: set[int]) -> None:
    """Linear sweep: direct branch targets and code addresses named by instructions."""
    md = _cs(obj.bits)
    targets = obj.targets
    pads = obj.pads
    for va, data in obj.text:
        pos = 0
        while pos < len(data):
            end = pos
            dead = False
            run = (0, 0)
            for addr, size, mnem, ops in md.disasm_lite(data[pos:], va + pos):
                end = addr + size - va
                if (dead or run[1]) and _is_pad(mnem, ops):
                    run = (run[0] or addr, run[1] + size)
                    continue
                if run[1] >= 2:
                    pads.append(run)
                run = (0, 0)
                dead = mnem.split()[-1] in _NO_FALLTHROUGH
                if "0x" not in ops and "rip" not in ops:
                    continue
                m = _RIP.search(ops)
                if m:
                    disp = int(m.group(2), 0) if m.group(2) else 0
                    t = addr + size + (disp if m.group(1) == "+" else -disp)
                    if lo <= t < hi:
                        targets.add(t)
                    else:
                        data_refs.add(t)
                    continue
                if mnem.startswith(_BRANCHES) and _HEX.fullmatch(ops):
                    fld = _branch_field(data, addr - va, size)
                    if fld is not None:
                        obj.branch_src.setdefault(int(ops, 16), []).append(
                            (addr + fld[0], fld[1]))
                        continue
                for h in _HEX.findall(ops):
                    t = int(h, 16)
                    if lo <= t < hi:
                        targets.add(t)
                    elif mnem.startswith(_BRANCHES):
                        targets.add(t)
                    else:
                        data_refs.add(t)
            # capstone stops at an undecodable byte: resume after it (data in code)
            pos = max(end, pos) + (1 if end <= pos or end < len(data) else 0)


def _analyse(path: str) -> _Object:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection
    from elftools.elf.sections import SymbolTableSection

    with open(path, "rb") as f:
        elf = ELFFile(f)
        bits = elf.elfclass
        machine = "x86_64" if elf["e_machine"] == "EM_X86_64" else "i386"
        obj = _Object(bits, machine, [])
        sections = list(elf.iter_sections())
        for s in sections:
            if s["sh_flags"] & 0x4 and s["sh_type"] != "SHT_NOBITS" and s["sh_addr"]:
                obj.text.append((s["sh_addr"], s.data()))
        if not obj.text:
            obj.error = "no executable sections"
            return obj
        lo = min(va for va, _ in obj.text)
        hi = max(va + len(d) for va, d in obj.text)
        word = 8 if bits == 64 else 4
        fmt = "<Q" if bits == 64 else "<I"
        data_refs: set[int] = set()
        _sweep(obj, lo, hi, data_refs)
        targets = obj.targets
        # data: absolute code pointers and jump-table entries
        got = None
        for s in sections:
            if s.name in (".got.plt", ".got") and got is None:
                got = s["sh_addr"]
        blobs: list[tuple[int, bytes]] = []
        for s in sections:
            if (s["sh_flags"] & 0x2) and not (s["sh_flags"] & 0x4) and \
                    s["sh_type"] not in ("SHT_NOBITS", "SHT_NOTE") and s["sh_addr"]:
                blobs.append((s["sh_addr"], s.data()))
        weak = obj.weak
        for _va, data in blobs:
            n = len(data) // word * word
            for (w,) in struct.iter_unpack(fmt, data[:n]):
                if lo <= w < hi:
                    weak.add(w)
            n4 = len(data) // 4 * 4
            if got is not None and bits == 32:
                for (w,) in struct.iter_unpack("<i", data[:n4]):
                    t = (got + w) & 0xFFFFFFFF
                    if lo <= t < hi:
                        weak.add(t)
        # jump tables relative to their own start (x86-64 PIC): lea tbl(%rip) in the sweep
        for va, data in blobs:
            for ref in data_refs:
                off = ref - va
                if not 0 <= off < len(data):
                    continue
                for k in range(4096):
                    o = off + 4 * k
                    if o + 4 > len(data):
                        break
                    (e,) = struct.unpack_from("<i", data, o)
                    t = (ref + e) & ((1 << bits) - 1)
                    if not lo <= t < hi:
                        break
                    weak.add(t)
        # relocations
        for s in sections:
            if isinstance(s, RelocationSection):
                # A relocation that cannot be read may name a branch target: every
                # displaced window of the object would be a guess, so none is made.
                try:
                    symtab = elf.get_section(s["sh_link"]) if s["sh_link"] else None
                    for r in s.iter_relocations():
                        cands = []
                        if r.is_RELA():
                            cands.append(r["r_addend"] & ((1 << bits) - 1))
                        if isinstance(symtab, SymbolTableSection) and r["r_info_sym"]:
                            sym = symtab.get_symbol(r["r_info_sym"])
                            cands.append(sym["st_value"] + (r["r_addend"] if r.is_RELA() else 0))
                        for c in cands:
                            if lo <= c < hi:
                                targets.add(c)
                except Exception as exc:  # noqa: BLE001 - pyelftools raises many kinds
                    obj.error = f"cannot read the relocations of {s.name}: {exc}"
            elif s["sh_type"] == "SHT_RELR":
                try:
                    relr: Any = s
                    for r in relr.iter_relocations():
                        targets.add(r["r_offset"])  # the word there was scanned as data
                except Exception as exc:  # noqa: BLE001 - pyelftools raises many kinds
                    obj.error = f"cannot read the relocations of {s.name}: {exc}"
        # C++ landing pads are entered by the unwinder: each is a target; a function
        # whose LSDA cannot be read is refused whole
        gcc_except = next((s for s in sections if s.name == ".gcc_except_table"), None)
        if gcc_except is not None and elf.has_dwarf_info():
            table = (gcc_except["sh_addr"], gcc_except.data())
            try:
                dwarf = elf.get_dwarf_info(follow_links=False)
                if dwarf.has_EH_CFI():
                    for entry in dwarf.EH_CFI_entries():
                        fde: Any = entry
                        if getattr(fde, "lsda_pointer", None) is not None and "initial_location" \
                                in fde.header:
                            start = fde.header["initial_location"]
                            pads = _landing_pads(table, fde.lsda_pointer, start, bits)
                            if pads is None:
                                obj.eh_ranges.append((start, start + fde.header["address_range"]))
                            else:
                                obj.landing_pads.update(pads)
                                targets.update(pads)
            except Exception:
                obj.eh_ranges.append((lo, hi))
        del word
    try:
        obj.marks = {n.pc for n in iter_stapsdt_notes(path)}
    except Exception:  # noqa: BLE001 - the notes were read once already by resolve
        obj.marks = set()
    return obj


def _landing_pads(table: tuple[int, bytes], lsda: int, func: int, bits: int) -> list[int] | None:
    """The landing pads of the LSDA at `lsda` (in .gcc_except_table, `table` = (address,
    bytes)) of the function at `func`; None if its encodings are not the plain ones gcc
    and clang emit."""
    base, data = table
    pos = lsda - base

    def uleb() -> int:
        nonlocal pos
        v = shift = 0
        while True:
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    def enc(e: int) -> int | None:
        nonlocal pos
        if e == 0x01:                       # DW_EH_PE_uleb128
            return uleb()
        size = {0x02: 2, 0x03: 4, 0x04: 8, 0x00: bits // 8}.get(e)
        if size is None:
            return None
        v = int.from_bytes(data[pos:pos + size], "little")
        pos += size
        return v

    try:
        if not 0 <= pos < len(data):
            return None
        lp_enc = data[pos]
        pos += 1
        lpstart = func
        if lp_enc != 0xFF:
            v = enc(lp_enc)
            if v is None:
                return None
            lpstart = v
        tt_enc = data[pos]
        pos += 1
        if tt_enc != 0xFF:
            uleb()
        cs_enc = data[pos]
        pos += 1
        end = uleb() + pos
        pads = []
        while pos < end:
            fields = [enc(cs_enc), enc(cs_enc), enc(cs_enc)]
            if None in fields:
                return None
            uleb()                          # action
            if fields[2]:
                pads.append(lpstart + int(fields[2] or 0))
        return pads
    except IndexError:
        return None


@lru_cache(maxsize=32)
def _analyse_cached(path: str, mtime: int, size: int) -> _Object:
    return _analyse(path)


def analyse(path: str) -> _Object:
    st = os.stat(path)
    return _analyse_cached(path, st.st_mtime_ns, st.st_size)


# --- relocation -----------------------------------------------------------------------

class _Refuse(Exception):
    pass


def _opcode_at(b: bytes) -> int:
    """Index of the opcode after legacy/REX prefixes."""
    i = 0
    while i < len(b) and b[i] in (0x66, 0x67, 0xF2, 0xF3, 0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65):
        i += 1
    if i < len(b) and 0x40 <= b[i] <= 0x4F and len(b) > i + 1:
        i += 1
    return i


def _thunk_register(obj: _Object, target: int) -> int | None:
    """i386 `__x86.get_pc_thunk.REG`: `8b (reg<<3|4) 24 c3` -> REG."""
    b = obj.read(target, 4)
    if len(b) == 4 and b[0] == 0x8B and b[2] == 0x24 and b[3] == 0xC3 and b[1] & 7 == 4 \
            and b[1] >> 6 == 0:
        return (b[1] >> 3) & 7
    return None


def _relocate(obj: _Object, insn: Any, code: bytearray, fixups: list[Fixup],
              last: bool) -> bool:
    """Append `insn` relocated; True if it ends the window (control does not fall through)."""
    import capstone
    from capstone import x86

    a, size, raw = insn.address, insn.size, bytes(insn.bytes)
    groups = set(insn.groups)
    mnem = insn.mnemonic
    if capstone.CS_GRP_RET in groups and mnem.split()[-1] == "ret":
        code += raw              # position-independent; control does not fall through
        return True
    if groups & {capstone.CS_GRP_RET, capstone.CS_GRP_INT, capstone.CS_GRP_IRET} or \
            mnem in ("syscall", "sysenter", "hlt", "ud2", "xbegin", "xabort", "int3") or \
            mnem.startswith(("loop", "jcxz", "jecxz", "jrcxz")):
        raise _Refuse(f"{mnem} at {a:#x} cannot be displaced")
    ops = insn.operands
    rel = capstone.CS_GRP_BRANCH_RELATIVE in groups
    if rel:
        target = ops[0].imm & ((1 << obj.bits) - 1)
        if mnem == "call":
            reg = _thunk_register(obj, target) if obj.bits == 32 else None
            if reg is not None:      # mov $next, %reg
                code.append(0xB8 + reg)
                fixups.append(Fixup(len(code), "abs32", a + size))
                code += b"\0\0\0\0"
                return False
            if target == a + size:
                raise _Refuse(f"call-next-pop idiom at {a:#x}")
            if not last:
                raise _Refuse(f"call at {a:#x} is not the last displaced instruction")
            if obj.bits == 64:   # lea -8(%rsp),%rsp; movl $lo,(%rsp); movl $hi,4(%rsp)
                code += bytes.fromhex("488d6424f8c70424")
                fixups.append(Fixup(len(code), "abs32", a + size))
                code += b"\0\0\0\0" + bytes.fromhex("c7442404")
                fixups.append(Fixup(len(code), "abs32hi", a + size))
                code += b"\0\0\0\0"
            else:                # push $ret
                code.append(0x68)
                fixups.append(Fixup(len(code), "abs32", a + size))
                code += b"\0\0\0\0"
            code.append(0xE9)
            fixups.append(Fixup(len(code), "rel32", target, len(code) + 4))
            code += b"\0\0\0\0"
            return True
        i = _opcode_at(raw)
        op = raw[i]
        if mnem == "jmp":
            code.append(0xE9)
            ends = True
        elif 0x70 <= op <= 0x7F:
            code += bytes((0x0F, 0x80 | (op & 0xF)))
            ends = False
        elif op == 0x0F and 0x80 <= raw[i + 1] <= 0x8F:
            code += bytes((0x0F, raw[i + 1]))
            ends = False
        else:
            raise _Refuse(f"{mnem} at {a:#x} is not relocatable")
        fixups.append(Fixup(len(code), "rel32", target, len(code) + 4))
        code += b"\0\0\0\0"
        return ends
    if capstone.CS_GRP_CALL in groups:
        raise _Refuse(f"indirect call at {a:#x} cannot be displaced")
    riprel = [o for o in ops if o.type == x86.X86_OP_MEM and o.mem.base == x86.X86_REG_RIP]
    start = len(code)
    code += raw
    if riprel:
        if insn.disp_size != 4:
            raise _Refuse(f"RIP-relative operand at {a:#x} without disp32")
        target = a + size + riprel[0].mem.disp
        fixups.append(Fixup(start + insn.disp_offset, "rel32", target, start + size))
    return mnem.endswith("jmp")


def plan_site(site: ProbeSite) -> PatchPlan:
    """The plan of a USDT site, or of a function entry (`nop_len` 0)."""
    return plan_function(site) if site.nop_len == 0 else _plan_site(site)


def _plan_site(site: ProbeSite, until: int = 0) -> PatchPlan:
    """`until`: a link-time address the window must reach (a function exit's, plan/returns.py)."""
    if site.machine not in ("x86_64", "i386"):
        return trap(f"trampolines are not implemented on {site.machine}")
    if site.nop_len >= JMP_LEN:
        return PatchPlan("nop", f"{site.nop_len}-byte nop at the site: jmp rel32 in place",
                         site.nop_len, b"", b"", (), site.pc + site.nop_len)
    try:
        obj = analyse(site.path)
    except (OSError, Exception) as exc:  # noqa: B014 - pyelftools raises many kinds
        return trap(f"cannot analyse the object: {exc}")
    if obj.error:
        return trap(obj.error)
    pc = site.pc
    for lo, hi in obj.eh_ranges:
        if lo <= pc < hi:
            return trap("function has C++ exception landing pads (not analysed)")
    window = obj.read(pc, MAX_WINDOW + 15)
    md = _cs(obj.bits, detail=True)
    code = bytearray()
    fixups: list[Fixup] = []
    redirects: list[Redirect] = []
    bounds: list[tuple[int, int]] = []
    length = 0
    padded = 0
    island = hop = 0
    insns = list(md.disasm(window, pc))
    try:
        for insn in insns:
            if insn.address != pc + length:
                break
            nxt = length + insn.size
            for b in range(max(pc + 1, insn.address), pc + nxt):
                _check_byte(obj, pc, b, b == insn.address, len(code), redirects)
            if length:
                bounds.append((length, len(code)))
            ends = _relocate(obj, insn, code, fixups, nxt >= JMP_LEN)
            length = nxt
            if ends and length < JMP_LEN:
                padded = _dead_padding(obj, insns, pc, length)
                if not padded and length >= 2:   # jmp rel8 to an island, jmp rel32 there
                    island, hop = _island(obj, pc + 2, (pc, -1))
                    if not island:
                        raise _Refuse(f"only {length} bytes before control leaves the "
                                      "window and no dead padding within rel8 reach")
                length += padded
            if ends or (length >= JMP_LEN and pc + length >= until):
                break
        else:
            raise _Refuse("ran out of decodable instructions")
        if length < JMP_LEN and not island:
            raise _Refuse(f"only {length} bytes before control leaves the window")
        if length > MAX_WINDOW or len(code) > MAX_CODE:
            raise _Refuse("displaced instructions too long")
        if not obj.in_text(pc + length - 1):
            raise _Refuse("window leaves the section")
    except _Refuse as exc:
        _release(obj, pc)
        return trap(str(exc))
    for b in range(pc + length - padded, pc + length):
        obj.claimed[b] = (pc, -2)
    names = " ".join(i.mnemonic for i in insns if i.address < pc + length - padded)
    how = "no branch lands inside"
    if redirects:
        how = f"{len(redirects)} branch(es) into it retargeted to the stub"
    if padded:
        how += f", {padded} dead padding byte(s) after it overwritten"
    if island:
        how += f", jmp rel8 to a jmp rel32 in dead padding at {island:#x}"
        if hop:
            how += f" (through a jmp rel8 at {hop:#x})"
    return PatchPlan("displace", f"displaced {length} bytes ({names}); {how}", length,
                     obj.read(pc, length), bytes(code), tuple(fixups), pc + length,
                     tuple(redirects), island, hop, tuple(bounds))


def _check_byte(obj: _Object, pc: int, b: int, boundary: bool, code_off: int,
                redirects: list[Redirect]) -> None:
    """Refuse unless nothing can reach byte `b` of the window of site `pc` other than
    direct branches that the runtime can retarget (appended to `redirects`; `code_off` is
    where the instruction starting at `b` lands in the relocated code)."""
    if b in obj.marks:
        raise _Refuse(f"another probe site at {b:#x} inside the bytes a jmp would overwrite")
    if b in obj.targets or (boundary and b in obj.weak) or obj.claimed.get(b, (pc,))[0] != pc:
        raise _Refuse(f"branch target at {b:#x} inside the bytes a jmp would overwrite")
    sources = obj.branch_src.get(b)
    if not sources:
        return
    if not boundary:
        raise _Refuse(f"a branch lands inside the instruction at {b:#x}")
    for src, size in sources:
        # from another site's window: if that site is patched too, the runtime points its
        # stub's relocated copy here instead (and leaves the original alone)
        if src + size > pc and src - 3 < _window_end(obj, pc):
            raise _Refuse(f"a branch inside the window lands at {b:#x}")
        orig = obj.read(src, size)
        if len(orig) != size:
            raise _Refuse(f"branch to {b:#x} from outside the code")
        isl = hop = 0
        if size == 1:
            isl, hop = _island(obj, src + 1, (pc, len(redirects)))
            if not isl:
                raise _Refuse(f"branch target at {b:#x} (a rel8 branch from {src - 1:#x}, "
                              "no dead padding within its reach)")
        redirects.append(Redirect(src, src + size, code_off, orig, size, isl, hop))


def _window_end(obj: _Object, m: int) -> int:
    """The most a plan for the site at `m` overwrites: whole instructions up to 5 bytes."""
    end = m
    for _a, size, _mn, _ops in _cs(obj.bits).disasm_lite(obj.read(m, MAX_WINDOW + 15), m):
        end += size
        if end - m >= JMP_LEN:
            break
    return max(end, m + JMP_LEN)


def _unreached(obj: _Object, b: int, owner: tuple[int, int]) -> bool:
    return not (b in obj.targets or b in obj.weak or b in obj.branch_src or b in obj.marks
                or obj.claimed.get(b, owner) != owner)


def _dead_padding(obj: _Object, insns: list[Any], pc: int, length: int) -> int:
    """Bytes of padding (nop/int3 runs, e.g. before the next aligned function) right after
    an instruction that does not fall through, that nothing reaches: overwriting them
    completes the jmp.  0 if fewer than the jmp needs."""
    need = JMP_LEN - length
    at = pc + length
    for insn in insns:
        if insn.address < at:
            continue
        if insn.address != at or not _is_pad(insn.mnemonic, insn.op_str):
            return 0
        for b in range(insn.address, insn.address + insn.size):
            if not _unreached(obj, b, (pc, -2)):
                return 0
        at += insn.size
        if at - (pc + length) >= need:
            return need
    return 0


def _island(obj: _Object, anchor: int, owner: tuple[int, int]) -> tuple[int, int]:
    """(island, hop): 5 bytes of dead padding (after an instruction that does not fall
    through, reached by nothing) for a `jmp rel32`, within rel8 reach of `anchor` or of
    a 2-byte `jmp rel8` hop in other dead padding (hop 0: none); claimed for `owner`.
    (0, 0) if there is none."""
    mine = [b for b, who in obj.claimed.items() if who == owner]
    if mine:     # planned before (the launcher may plan a site twice)
        return mine[0], (mine[JMP_LEN] if len(mine) > JMP_LEN else 0)
    isl = _free_pad(obj, anchor, JMP_LEN, owner)
    if isl:
        return isl, 0
    i = bisect.bisect_left(obj.pads, (anchor - 128 - 256,))
    for start, n in obj.pads[i:]:
        if start > anchor + 127:
            break
        for hop in range(max(start, anchor - 128), min(start + n - 2, anchor + 125) + 1):
            if _unreached(obj, hop, owner) and _unreached(obj, hop + 1, owner):
                isl = _free_pad(obj, hop + 2, JMP_LEN, owner, exclude=hop)
                if isl:
                    obj.claimed[hop] = obj.claimed[hop + 1] = owner
                    return isl, hop
    return 0, 0


def _free_pad(obj: _Object, anchor: int, n: int, owner: tuple[int, int],
              exclude: int = -1) -> int:
    """`n` unclaimed dead padding bytes within rel8 reach of `anchor`, claimed; 0 if none."""
    i = bisect.bisect_left(obj.pads, (anchor - 128 - 256,))
    for start, size in obj.pads[i:]:
        if start > anchor + 127:
            break
        for at in range(max(start, anchor - 128), min(start + size - n, anchor + 127 - n + 1) + 1):
            if exclude - n < at < exclude + 2:
                continue
            if all(_unreached(obj, b, owner) for b in range(at, at + n)):
                for b in range(at, at + n):
                    obj.claimed[b] = owner
                return at
    return 0


def _release(obj: _Object, pc: int) -> None:
    """Give back what a refused plan of site `pc` claimed."""
    for b in [b for b, (owner, _k) in obj.claimed.items() if owner == pc]:
        del obj.claimed[b]


def plan_function(site: ProbeSite) -> PatchPlan:
    """A function entry: `displace` as for marks, else `trap` whose `code` is the
    first instruction relocated -- the runtime runs that copy out of line after the
    handler (the entry is not a nop: resuming in place would skip it).  A trap plan
    without code cannot be armed."""
    plan = _plan_site(site)
    if plan.tactic == "displace":
        return plan
    try:
        obj = analyse(site.path)
    except (OSError, Exception) as exc:  # noqa: B014 - pyelftools raises many kinds
        return trap(f"{plan.reason}; cannot analyse the object: {exc}")
    insn = next(iter(_cs(obj.bits, detail=True).disasm(obj.read(site.pc, 15), site.pc)), None)
    if insn is None:
        return trap(f"{plan.reason}; no instruction decodes at the entry")
    code = bytearray()
    fixups: list[Fixup] = []
    try:
        _relocate(obj, insn, code, fixups, True)
    except _Refuse as exc:
        return trap(f"{plan.reason}; the entry cannot run out of line: {exc}")
    return PatchPlan("trap", f"{plan.reason}; {insn.mnemonic} runs out of line", insn.size,
                     obj.read(site.pc, insn.size), bytes(code), tuple(fixups),
                     site.pc + insn.size)


def coverage(plans: Iterable[PatchPlan]) -> str:
    """`sites: TOTAL total, TRAP trap, N nop, M displace` for `pydyn -v`."""
    counts = Counter(p.tactic for p in plans)
    total = sum(counts.values())
    rest = ", ".join(f"{counts[t]} {t}" for t in TACTICS if t != "trap" and counts[t])
    return f"sites: {total} total, {counts['trap']} trap" + (f", {rest}" if rest else "")


_TACTIC_C = {"trap": "PD_TACTIC_TRAP", "nop": "PD_TACTIC_NOP", "displace": "PD_TACTIC_DISPLACE"}
_FIXUP_C = {"rel32": "PD_FIX_REL32", "abs32": "PD_FIX_ABS32", "abs32hi": "PD_FIX_ABS32HI",
            "b26": "PD_FIX_B26"}


def _bytes_c(b: bytes) -> str:
    return "{" + ", ".join(f"{x:#04x}" for x in b) + "}" if b else "{0}"


def plan_c(plan: PatchPlan, n: int, c_string: Callable[[str], str]) -> tuple[list[str], str]:
    """(C declarations, the `struct pd_plan` initializer) for site row `n`."""
    decls = [f"static const uint8_t plan_orig_{n}[] = {_bytes_c(plan.orig)};",
             f"static const uint8_t plan_code_{n}[] = {_bytes_c(plan.code)};",
             f"static const struct pd_fixup plan_fix_{n}[] = {{"
             + (", ".join(f"{{{f.target:#x}, {f.at}, {f.anchor}, {_FIXUP_C[f.kind]}}}"
                          for f in plan.fixups) or "{0}") + "};"]
    decls += [f"static const struct pd_redirect plan_redir_{n}[] = {{"
              + (", ".join(f"{{{r.field:#x}, {r.anchor:#x}, {r.island:#x}, {r.hop:#x}, "
                           f"{r.code_off}, {r.size}, {_bytes_c(r.orig)}}}"
                           for r in plan.redirects) or "{0}") + "};",
              f"static const uint8_t plan_bounds_{n}[] = "
              f"{_bytes_c(bytes(x for pair in plan.bounds for x in pair))};"]
    init = (f"{{plan_orig_{n}, plan_code_{n}, plan_fix_{n}, {c_string(str(plan))}, "
            f"{plan.resume:#x}, {_TACTIC_C[plan.tactic]}, {plan.length}, {len(plan.code)}, "
            f"{len(plan.fixups)}, plan_redir_{n}, plan_bounds_{n}, {plan.island:#x}, "
            f"{plan.hop:#x}, {len(plan.redirects)}, {len(plan.bounds)}, {plan.pre}}}")
    return decls, init
