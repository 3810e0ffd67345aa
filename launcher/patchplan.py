"""Offline patch plans: how the runtime should patch each USDT site (issue 6).

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
  and relative entries of jump tables), and no C++ landing pads in the function.
- ``trap``: anything else; the runtime keeps the int3.

Every plan carries the reason it got its tactic (``pydyn -p2`` prints it).
"""

from __future__ import annotations

import os
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .elf.stapsdt import ProbeSite, iter_stapsdt_notes

JMP_LEN = 5
MAX_WINDOW = 16          # bytes of instructions the runtime's stub reserves for them
MAX_CODE = 64            # bytes of relocated code

TACTICS = ("nop", "displace", "trap")


@dataclass(frozen=True)
class Fixup:
    """A field of the relocated code the runtime fills in once the stub's address is known.

    ``rel32``: target + bias - (code address + anchor); ``abs32``/``abs32hi``: the low/high
    32 bits of target + bias.  ``target`` is a link-time address.
    """

    at: int
    kind: str
    target: int
    anchor: int = 0


@dataclass(frozen=True)
class PatchPlan:
    tactic: str                      # "nop" | "displace" | "trap"
    reason: str
    length: int = 0                  # bytes overwritten at pc (the jmp plus filler)
    orig: bytes = b""                # the bytes expected there (verified at run time)
    code: bytes = b""                # relocated instructions run after the handler
    fixups: tuple[Fixup, ...] = ()
    resume: int = 0                  # link-time address the stub jumps back to

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
    targets: set[int] = field(default_factory=set)
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
_RIP = re.compile(r"\[rip ([+-]) (0x[0-9a-f]+)\]")
_BRANCHES = ("j", "call", "loop", "xbegin")


def _cs(bits: int, detail: bool = False) -> Any:
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if bits == 64
                     else capstone.CS_MODE_32)
    md.detail = detail
    md.skipdata = False
    return md


def _sweep(obj: _Object, lo: int, hi: int, data_refs: set[int]) -> None:
    """Linear sweep: direct branch targets and code addresses named by instructions."""
    md = _cs(obj.bits)
    targets = obj.targets
    for va, data in obj.text:
        pos = 0
        while pos < len(data):
            end = pos
            for addr, size, mnem, ops in md.disasm_lite(data[pos:], va + pos):
                end = addr + size - va
                if "0x" not in ops:
                    continue
                m = _RIP.search(ops)
                if m:
                    disp = int(m.group(2), 16)
                    t = addr + size + (disp if m.group(1) == "+" else -disp)
                    if lo <= t < hi:
                        targets.add(t)
                    else:
                        data_refs.add(t)
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
        for _va, data in blobs:
            n = len(data) // word * word
            for (w,) in struct.iter_unpack(fmt, data[:n]):
                if lo <= w < hi:
                    targets.add(w)
            n4 = len(data) // 4 * 4
            if got is not None and bits == 32:
                for (w,) in struct.iter_unpack("<i", data[:n4]):
                    t = (got + w) & 0xFFFFFFFF
                    if lo <= t < hi:
                        targets.add(t)
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
                    targets.add(t)
        # relocations
        for s in sections:
            if isinstance(s, RelocationSection):
                symtab = None
                if s["sh_link"]:
                    try:
                        symtab = elf.get_section(s["sh_link"])
                    except Exception:
                        symtab = None
                for r in s.iter_relocations():
                    cands = []
                    if r.is_RELA():
                        cands.append(r["r_addend"] & ((1 << bits) - 1))
                    if isinstance(symtab, SymbolTableSection) and r["r_info_sym"]:
                        try:
                            sym = symtab.get_symbol(r["r_info_sym"])
                            cands.append(sym["st_value"] + (r["r_addend"] if r.is_RELA() else 0))
                        except Exception:
                            pass
                    for c in cands:
                        if lo <= c < hi:
                            targets.add(c)
            elif s["sh_type"] == "SHT_RELR":
                try:
                    relr: Any = s
                    for r in relr.iter_relocations():
                        targets.add(r["r_offset"])  # the word there was scanned as data
                except Exception:
                    pass
        # C++ landing pads are entered by the unwinder: refuse functions with an LSDA
        if any(s.name == ".gcc_except_table" for s in sections) and elf.has_dwarf_info():
            try:
                dwarf = elf.get_dwarf_info(follow_links=False)
                if dwarf.has_EH_CFI():
                    for entry in dwarf.EH_CFI_entries():
                        fde: Any = entry
                        if getattr(fde, "lsda_pointer", None) is not None and "initial_location" \
                                in fde.header:
                            start = fde.header["initial_location"]
                            obj.eh_ranges.append((start, start + fde.header["address_range"]))
            except Exception:
                obj.eh_ranges.append((lo, hi))
        del word
    try:
        obj.marks = {n.pc for n in iter_stapsdt_notes(path)}
    except Exception:  # noqa: BLE001 - the notes were read once already by resolve
        obj.marks = set()
    return obj


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
    """The plan of a USDT site, or of a function entry (`nop_len` 0, issue 7)."""
    return plan_function(site) if site.nop_len == 0 else _plan_site(site)


def _plan_site(site: ProbeSite) -> PatchPlan:
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
    length = 0
    insns = list(md.disasm(window, pc))
    try:
        for k, insn in enumerate(insns):
            if insn.address != pc + length:
                break
            nxt = length + insn.size
            last = nxt >= JMP_LEN
            for b in range(max(pc + 1, insn.address), pc + nxt):
                if b in obj.targets:
                    raise _Refuse(f"branch target at {b:#x} inside the bytes a jmp would "
                                  "overwrite")
                if b in obj.marks:
                    raise _Refuse(f"another probe site at {b:#x} inside the bytes a jmp "
                                  "would overwrite")
            ends = _relocate(obj, insn, code, fixups, last)
            length = nxt
            if ends or length >= JMP_LEN:
                break
            del k
        else:
            raise _Refuse("ran out of decodable instructions")
        if length < JMP_LEN:
            raise _Refuse(f"only {length} bytes before control leaves the window")
        if length > MAX_WINDOW or len(code) > MAX_CODE:
            raise _Refuse("displaced instructions too long")
        if not obj.in_text(pc + length - 1):
            raise _Refuse("window leaves the section")
    except _Refuse as exc:
        return trap(str(exc))
    names = " ".join(i.mnemonic for i in insns if i.address < pc + length)
    return PatchPlan("displace", f"displaced {length} bytes ({names}); no branch lands inside",
                     length, obj.read(pc, length), bytes(code), tuple(fixups), pc + length)


def plan_function(site: ProbeSite) -> PatchPlan:
    """A function entry (issue 7): `displace` as for marks, else `trap` whose `code` is the
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
_FIXUP_C = {"rel32": "PD_FIX_REL32", "abs32": "PD_FIX_ABS32", "abs32hi": "PD_FIX_ABS32HI"}


def _bytes_c(b: bytes) -> str:
    return "{" + ", ".join(f"{x:#04x}" for x in b) + "}" if b else "{0}"


def plan_c(plan: PatchPlan, n: int, c_string: Callable[[str], str]) -> tuple[list[str], str]:
    """(C declarations, the `struct pd_plan` initializer) for site row `n`."""
    decls = [f"static const uint8_t plan_orig_{n}[] = {_bytes_c(plan.orig)};",
             f"static const uint8_t plan_code_{n}[] = {_bytes_c(plan.code)};",
             f"static const struct pd_fixup plan_fix_{n}[] = {{"
             + (", ".join(f"{{{f.target:#x}, {f.at}, {f.anchor}, {_FIXUP_C[f.kind]}}}"
                          for f in plan.fixups) or "{0}") + "};"]
    init = (f"{{plan_orig_{n}, plan_code_{n}, plan_fix_{n}, {c_string(str(plan))}, "
            f"{plan.resume:#x}, {_TACTIC_C[plan.tactic]}, {plan.length}, {len(plan.code)}, "
            f"{len(plan.fixups)}}}")
    return decls, init
