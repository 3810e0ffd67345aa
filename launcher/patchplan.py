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
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .elf.stapsdt import ProbeSite, iter_stapsdt_notes
from .objfacts import BranchSources, SortedInts

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
    # a function exit's site (retplan.py): the bytes of `code` that run before the
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
    # hard: branches, immediates, relocations, landing pads
    targets: SortedInts = field(default_factory=SortedInts)
    # weak: words of data that fall in the text (a real code pointer is an instruction
    # start, so one landing inside an instruction decoded from the site is no pointer)
    weak: SortedInts = field(default_factory=SortedInts)
    # target -> (field address, 4 or 1) of the direct jmp/jcc/call rel32 and jmp/jcc rel8
    # reaching it: such a branch can be retargeted into the stub (a rel8 one through an
    # island of dead padding), so its target may lie inside the window
    branch_src: BranchSources = field(
        default_factory=lambda: BranchSources(array("q"), array("q"), array("q")))
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


_PADDING = ("nop", "int3")
_SAME_REG = re.compile(r"(\w+), \[?\1\]?")   # i386 gcc pads with `lea 0(%esi),%esi` & co.


def _is_pad(mnem: str, ops: str) -> bool:
    return mnem in _PADDING or (mnem in ("lea", "mov") and bool(_SAME_REG.fullmatch(ops)))


def _cs(bits: int, detail: bool = False) -> Any:
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if bits == 64
                     else capstone.CS_MODE_32)
    md.detail = detail
    md.skipdata = False
    return md


def _sections(elf: Any) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]], int]:
    """(executable sections, allocated data sections, the GOT base or 0) of an ELF file:
    (vaddr, file offset, size) each."""
    text: list[tuple[int, int, int]] = []
    blobs: list[tuple[int, int, int]] = []
    got = 0
    for s in elf.iter_sections():
        if s.name in (".got.plt", ".got") and not got:
            got = s["sh_addr"]
        if s["sh_type"] == "SHT_NOBITS" or not s["sh_addr"]:
            continue
        where = (s["sh_addr"], s["sh_offset"], s["sh_size"])
        if s["sh_flags"] & 0x4:
            text.append(where)
        elif s["sh_flags"] & 0x2 and s["sh_type"] != "SHT_NOTE":
            blobs.append(where)
    return text, blobs, got


def _relocation_targets(elf: Any, lo: int, hi: int) -> set[int]:
    """Code addresses named by relocations (RELA addends, symbol values + addends, RELR
    offsets), read with `struct` (pyelftools parses each entry, ~25 us apiece)."""
    bits = elf.elfclass
    mask = (1 << bits) - 1
    e = "<" if elf.little_endian else ">"
    out: set[int] = set()
    symvals: dict[int, list[int]] = {}

    def values(index: int) -> list[int]:
        if index not in symvals:
            vals: list[int] = []
            try:
                sec = elf.get_section(index)
                if sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                    raw = sec.data()
                    if bits == 64:
                        vals = [v for _n, _i, _o, _s, v, _z in
                                struct.iter_unpack(e + "IBBHQQ", raw[:len(raw) // 24 * 24])]
                    else:
                        vals = [v for _n, v, _z, _i, _o, _s in
                                struct.iter_unpack(e + "IIIBBH", raw[:len(raw) // 16 * 16])]
            except Exception:  # noqa: BLE001 - a malformed link: no symbol values
                vals = []
            symvals[index] = vals
        return symvals[index]

    for s in elf.iter_sections():
        kind = s["sh_type"]
        if kind in ("SHT_RELA", "SHT_REL"):
            rela = kind == "SHT_RELA"
            size = (24 if rela else 16) if bits == 64 else (12 if rela else 8)
            raw = s.data()
            fmt = e + ("QQq" if rela else "QQ") if bits == 64 else e + ("IIi" if rela else "II")
            syms = values(s["sh_link"]) if s["sh_link"] else []
            for ent in struct.iter_unpack(fmt, raw[:len(raw) // size * size]):
                info = ent[1]
                addend = ent[2] if rela else 0
                sym = info >> 32 if bits == 64 else info >> 8
                if rela:
                    c = addend & mask
                    if lo <= c < hi:
                        out.add(c)
                if sym and sym < len(syms):
                    c = syms[sym] + addend
                    if lo <= c < hi:
                        out.add(c)
        elif kind == "SHT_RELR":
            word = bits // 8
            raw = s.data()
            base = 0
            for (w,) in struct.iter_unpack(e + ("Q" if bits == 64 else "I"),
                                           raw[:len(raw) // word * word]):
                if not w & 1:
                    out.add(w)      # the word there was scanned as data
                    base = w + word
                else:
                    for i in range(bits - 1):
                        if (w >> (i + 1)) & 1:
                            out.add(base + i * word)
                    base += (bits - 1) * word
    return out


def _compute(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The object's facts (objfacts.py): a JSON-able header and int64 arrays."""
    from array import array

    from elftools.elf.elffile import ELFFile

    from .objfacts import run_sweep

    with open(path, "rb") as f:
        elf = ELFFile(f)
        bits = elf.elfclass
        machine = "x86_64" if elf["e_machine"] == "EM_X86_64" else "i386"
        header: dict[str, Any] = {"bits": bits, "machine": machine, "error": "",
                                  "eh_ranges": [], "marks": []}
        text, blobs, got = _sections(elf)
        header["text"] = text
        if not text:
            header["error"] = "no executable sections"
            return header, {}
        lo = min(va for va, _o, _n in text)
        hi = max(va + n for va, _o, n in text)
        targets, weak, src, pads = run_sweep(path, bits, lo, hi, got if bits == 32 else 0,
                                             text, blobs)
        extra = _relocation_targets(elf, lo, hi)
        # C++ landing pads are entered by the unwinder: each is a target; a function
        # whose LSDA cannot be read is refused whole
        landing: set[int] = set()
        gcc_except = elf.get_section_by_name(".gcc_except_table")
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
                            found = _landing_pads(table, fde.lsda_pointer, start, bits)
                            if found is None:
                                header["eh_ranges"].append(
                                    (start, start + fde.header["address_range"]))
                            else:
                                landing.update(found)
            except Exception:  # noqa: BLE001 - pyelftools raises many kinds
                header["eh_ranges"].append((lo, hi))
        if extra or landing:
            targets = array("q", sorted(set(targets) | extra | landing))
    try:
        header["marks"] = sorted({n.pc for n in iter_stapsdt_notes(path)})
    except Exception:  # noqa: BLE001 - the notes were read once already by resolve
        header["marks"] = []
    return header, {"targets": targets, "weak": weak, "src": src, "pads": pads,
                    "landing": array("q", sorted(landing))}


def _analyse(path: str) -> _Object:
    from .objfacts import load_or_compute

    header, arrays = load_or_compute(path, lambda: _compute(path))
    obj = _Object(header["bits"], header["machine"], [])
    obj.error = header["error"]
    if obj.error:
        return obj
    with open(path, "rb") as f:
        for va, off, size in header["text"]:
            f.seek(off)
            obj.text.append((va, f.read(size)))
    src = arrays["src"]
    obj.targets = SortedInts(arrays["targets"])
    obj.weak = SortedInts(arrays["weak"])
    obj.branch_src = BranchSources(src[0::3], src[1::3], src[2::3])
    pads = arrays["pads"]
    obj.pads = list(zip(pads[0::2], pads[1::2], strict=True))
    obj.landing_pads = set(arrays["landing"])
    obj.eh_ranges = [(lo, hi) for lo, hi in header["eh_ranges"]]
    obj.marks = set(header["marks"])
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
    """The plan of a USDT site, or of a function entry (`nop_len` 0, issue 7)."""
    return plan_function(site) if site.nop_len == 0 else _plan_site(site)


def _plan_site(site: ProbeSite, until: int = 0) -> PatchPlan:
    """`until`: a link-time address the window must reach (a function exit's, retplan.py)."""
    if site.machine == "aarch64":
        from .patchplan_a64 import plan_site as plan_a64  # imports this module
        return plan_a64(site)
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
    """A function entry (issue 7): `displace` as for marks, else `trap` whose `code` is the
    first instruction relocated -- the runtime runs that copy out of line after the
    handler (the entry is not a nop: resuming in place would skip it).  A trap plan
    without code cannot be armed."""
    if site.machine == "aarch64":
        from .patchplan_a64 import plan_function as plan_a64  # imports this module
        return plan_a64(site)
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
