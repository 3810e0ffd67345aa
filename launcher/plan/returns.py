"""How a function's `.return` probes are reached: patched exits or the
return-address hijack.

*Exits* (x86-64, i386): every way out of the function -- `ret`, `ret imm16`, a tail
call (a direct `jmp` to another function's entry or a PLT slot, a `jmp` through a
RIP-relative GOT slot) -- becomes a probe site whose stub runs the return probes with
the registers at that instruction, then the instruction itself.  The window of such a
site may start a few whole instructions before the exit (`pop %rbp; ret` is 2 bytes, a
jmp needs 5): the stub runs those first (`PatchPlan.pre` bytes of its relocated code),
then the handler, then the exit; a branch elsewhere that lands on the exit itself is
sent to the handler.  Nothing is pushed, no return address changes: recursion,
longjmp, C++ exceptions and backtraces through the frame are the program's own.

*Hijack* (pd_func.c): the entry swaps the return address for pd_ret_tramp.  Chosen,
with the reason, when the function has an indirect jump that is not a jump table into
itself, a jump or branch out of it that is no function entry (a `.cold` part), a
conditional tail call, an exit that the displace machinery cannot patch (or whose
window would overlap the entry's but for a `ret` that ends it), no exit at all,
`-D PD_RETURN_HIJACK=1`, and on aarch64.  `@entry` values work either way: the entry
pushes them keyed by the return-address slot (launcher/entry.py), which an exit's
registers name as well as the hijack's.  The runtime also keeps
the hijack when the process is attached with `-x` (a thread may already be inside the
function), with `--probe-mode=trap`, and when any exit's stub cannot be written.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..elf.functions import FunctionSite
from .x86 import (
    MAX_WINDOW,
    PatchPlan,
    _plan_site,
    _release,
    _window_end,
    analyse,
    plan_function,
)

EXIT_WINDOW_BACK = 6        # instructions before an exit its window may start at


@dataclass(frozen=True)
class Exit:
    addr: int                # the exit instruction
    kind: str                # "ret" | "tail call"
    site: FunctionSite       # pc: where its window starts
    plan: PatchPlan
    # the `ret` that ends the entry's own window (a function too small for two patches):
    # no patch of its own, the entry's stub jumps to this exit's stub for it
    in_entry: bool = False


@dataclass(frozen=True)
class ReturnPlan:
    mechanism: str           # "exits" | "hijack"
    reason: str
    exits: tuple[Exit, ...] = ()

    def __str__(self) -> str:
        if self.mechanism == "hijack":
            return f"hijack: {self.reason}"
        where = ", ".join(f"{e.kind} at {e.addr:#x}"
                          + (" in the entry's window" if e.in_entry else "") for e in self.exits)
        return f"exits patched ({len(self.exits)}: {where})"


def hijack(reason: str) -> ReturnPlan:
    return ReturnPlan("hijack", reason)


@dataclass
class _Image:
    """What the exit analysis reads besides the code: function starts, PLT ranges, data."""

    starts: set[int]
    cold: dict[str, list[tuple[int, int]]]   # function name -> its gcc .cold parts
    plt: list[tuple[int, int]]
    data: list[tuple[int, bytes]]
    got: int

    def word(self, addr: int, size: int) -> int | None:
        for va, d in self.data:
            if va <= addr and addr + size <= va + len(d):
                return int.from_bytes(d[addr - va:addr - va + size], "little", signed=size == 4)
        return None


@lru_cache(maxsize=16)
def _image_cached(path: str, mtime: int, size: int) -> _Image:
    from elftools.elf.sections import SymbolTableSection

    from ..elf.elffile import ElfFile

    img = _Image(set(), {}, [], [], 0)
    with open(path, "rb") as f:
        elf = ElfFile(f)
        for s in elf.iter_sections():
            if s.name in (".plt", ".plt.sec", ".plt.got"):
                img.plt.append((s["sh_addr"], s["sh_addr"] + s["sh_size"]))
            if s.name == ".got.plt" or (s.name == ".got" and not img.got):
                img.got = s["sh_addr"]
            if s["sh_flags"] & 0x2 and s["sh_type"] not in ("SHT_NOBITS", "SHT_NOTE") \
                    and s["sh_addr"]:
                img.data.append((s["sh_addr"], s.data()))
            if isinstance(s, SymbolTableSection):
                for sym in s.iter_symbols():
                    # a .cold part is jumped to and may jump back: not a tail call
                    if sym["st_info"]["type"] != "STT_FUNC" or not sym["st_value"]:
                        continue
                    if ".cold" in sym.name:
                        img.cold.setdefault(sym.name.split(".cold")[0], []).append(
                            (sym["st_value"], sym["st_value"] + sym["st_size"]))
                    else:
                        img.starts.add(sym["st_value"])
    return img


def _image(path: str) -> _Image:
    st = os.stat(path)
    return _image_cached(path, st.st_mtime_ns, st.st_size)


class _Fallback(Exception):
    pass


def plan_returns(site: FunctionSite, func_addr: int, func_size: int, *,
                 return_value: bool = False,
                 forced: bool = False, mark_at_entry: bool = False) -> ReturnPlan:
    """The return mechanism of the function at [func_addr, +func_size) whose entry site
    is `site` (an x86-64 or i386 one: plan/__init__.py chooses by machine)."""
    if forced:
        return hijack("-D PD_RETURN_HIJACK=1")
    if mark_at_entry:
        return hijack("a mark is at the entry: the one row there runs its probes too")
    if func_size <= 0:
        return hijack("the function's size is unknown")
    try:
        obj = analyse(site.path)
        img = _image(site.path)
    except (OSError, Exception) as exc:  # noqa: B014 - pyelftools raises many kinds
        return hijack(f"cannot analyse the object: {exc}")
    if obj.error:
        return hijack(obj.error)
    # gcc's hot/cold split: the .cold part is the same function (jumped to, it may
    # return or jump back)
    ranges = [(func_addr, func_addr + func_size), *img.cold.get(site.name, [])]
    obj.cover_sites([site.pc], ranges)   # what every exit's window may ask, in one scan
    try:
        found = [e for lo, hi in ranges for e in _find_exits(obj, img, lo, hi, ranges)]
        if not found:
            raise _Fallback("no exit found (the function never returns?)")
        tail = next((a for a, kind, _i, _k in found if kind == "tail call"), None)
        if tail is not None and return_value:
            raise _Fallback(f"a probe reads $return and the tail call at {tail:#x} leaves "
                            "the return value to the callee")
        entry = plan_function(site)
        ent_lo, ent_hi = site.pc, site.pc + max(entry.length, 1)
        exits = tuple(_in_entry_exit(site, entry, addr, insns[i])
                      if ent_lo <= addr < ent_hi and kind == "ret" else
                      _plan_exit(obj, site, addr, kind, insns, i, (ent_lo, ent_hi))
                      for addr, kind, insns, i in found)
    except _Fallback as exc:
        return hijack(str(exc))
    return ReturnPlan("exits", "every exit is patched", exits)


def _inside(t: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= t < hi for lo, hi in ranges)


def _find_exits(obj: Any, img: _Image, lo: int, hi: int, ranges: list[tuple[int, int]],
                ) -> list[tuple[int, str, list[Any], int]]:
    """(address, kind, the instructions of [lo, hi), index) of each exit in [lo, hi), a
    part of the function made of `ranges`."""
    from capstone import x86

    from .x86 import _cs
    md = _cs(obj.bits, detail=True)
    insns = list(md.disasm(obj.read(lo, hi - lo), lo))
    end = insns[-1].address + insns[-1].size if insns else lo
    if end < hi:
        raise _Fallback(f"undecodable bytes at {end:#x} inside the function")
    out: list[tuple[int, str, list[Any], int]] = []
    for i, insn in enumerate(insns):
        mnem = insn.mnemonic.split()[-1]
        ops = insn.operands
        if mnem == "ret":
            out.append((insn.address, "ret", insns, i))
        elif mnem == "jmp" or (mnem.startswith("j") and len(ops) == 1 and
                               ops[0].type == x86.X86_OP_IMM):
            if ops[0].type == x86.X86_OP_IMM:
                t = ops[0].imm & ((1 << obj.bits) - 1)
                if _inside(t, ranges):
                    continue
                if mnem != "jmp":
                    raise _Fallback(f"conditional jump out of the function at {insn.address:#x}")
                if t not in img.starts and not any(a <= t < b for a, b in img.plt):
                    raise _Fallback(f"jmp at {insn.address:#x} leaves the function for "
                                    f"{t:#x}, which is no function entry (a .cold part?)")
                out.append((insn.address, "tail call", insns, i))
            elif ops[0].type == x86.X86_OP_MEM and ops[0].mem.base == x86.X86_REG_RIP:
                out.append((insn.address, "tail call", insns, i))   # through a GOT slot
            elif not _jump_table(obj, img, insns, i, ranges):
                raise _Fallback(f"indirect jmp at {insn.address:#x} is not a jump table "
                                "into the function")
        elif mnem.startswith(("loop", "jcxz", "jecxz", "jrcxz")):
            t = ops[0].imm & ((1 << obj.bits) - 1)
            if not _inside(t, ranges):
                raise _Fallback(f"{mnem} at {insn.address:#x} leaves the function")
    return out


def _jump_table(obj: Any, img: _Image, insns: list[Any], i: int,
                ranges: list[tuple[int, int]]) -> bool:
    """Whether the indirect jmp insns[i] goes through a table whose first entry lands in
    the function: `jmp *D(,%idx,W)` (absolute entries), or `add %base,%reg; jmp *%reg` after a
    load from the table (x86-64: base from `lea D(%rip)`, entries relative to D; i386
    PIC: base the GOT, entries relative to it)."""
    from capstone import x86
    op = insns[i].operands[0]
    word = obj.bits // 8
    if op.type == x86.X86_OP_MEM:
        if op.mem.base or not op.mem.index:
            return False
        e = img.word(op.mem.disp & ((1 << obj.bits) - 1), word)
        return e is not None and _inside(e & ((1 << obj.bits) - 1), ranges)
    if op.type != x86.X86_OP_REG or i == 0:
        return False
    add = insns[i - 1]
    aops = add.operands
    if add.mnemonic != "add" or len(aops) != 2 or aops[0].type != x86.X86_OP_REG or \
            aops[0].reg != op.reg:
        return False
    if aops[1].type == x86.X86_OP_MEM and obj.bits == 32 and img.got:
        m = aops[1].mem      # i386 PIC: `add D(%got,%idx,4),%got; jmp *%got`
        if m.base != op.reg or not m.index:
            return False
        e = img.word((img.got + m.disp) & 0xFFFFFFFF, 4)
        return e is not None and _inside((img.got + e) & 0xFFFFFFFF, ranges)
    if aops[1].type != x86.X86_OP_REG:
        return False
    base = aops[1].reg
    for prev in reversed(insns[max(0, i - 12):i - 1]):
        pops = prev.operands
        if len(pops) != 2 or pops[1].type != x86.X86_OP_MEM:
            continue
        m = pops[1].mem
        if obj.bits == 64 and prev.mnemonic == "lea" and pops[0].reg == base and \
                m.base == x86.X86_REG_RIP:
            table = prev.address + prev.size + m.disp
            e = img.word(table, 4)
            return e is not None and _inside(table + e, ranges)
        if obj.bits == 32 and prev.mnemonic == "mov" and m.base == base and m.index and \
                img.got:
            e = img.word((img.got + m.disp) & 0xFFFFFFFF, 4)
            return e is not None and _inside((img.got + e) & 0xFFFFFFFF, ranges)
    return False


def _in_entry_exit(site: FunctionSite, entry: PatchPlan, addr: int, insn: Any) -> Exit:
    """The `ret` at `addr` inside the entry's window: relocation ends a window at its
    first `ret`, so it is the last instruction of the entry's relocated code.  The entry's
    stub then jumps to this exit's stub (its plan: that `ret`, nothing patched), which
    runs the return probes with the registers at the `ret` and returns.  Needs the entry's
    own stub: with no entry probe it is a bare one (the window's code and that jump, no
    handler: translate/tables.py); with a trap the runtime keeps the hijack."""
    raw = bytes(insn.bytes)
    if entry.tactic != "displace" or not entry.code.endswith(raw) or \
            addr + len(raw) > entry.resume:
        raise _Fallback(f"the ret at {addr:#x} is too close to the entry's patch")
    plan = PatchPlan("displace", "the ret ending the entry's window: the entry's stub "
                     "jumps here for it", 0, b"", raw, (), addr + len(raw))
    return Exit(addr, "ret", dataclasses.replace(site, pc=addr, nop_len=0), plan, True)


def _plan_exit(obj: Any, site: FunctionSite, addr: int, kind: str, insns: list[Any], i: int,
               entry: tuple[int, int]) -> Exit:
    """The exit insns[i] at `addr` patched: a window of whole instructions that starts at
    it or a few before and ends with it (and dead padding after it, or an island)."""
    end = addr + insns[i].size
    why = ""
    for j in range(i, max(i - EXIT_WINDOW_BACK, 0) - 1, -1):
        start = insns[j].address
        if end - start > MAX_WINDOW or (j < i and insns[j].mnemonic.split()[-1] in
                                         ("ret", "jmp")):
            break
        if start < entry[1] and entry[0] < end:
            raise _Fallback(f"the {kind} at {addr:#x} is too close to the entry's patch")
        if obj.claimed.get(start, (start,))[0] != start:
            break       # padding (or a window) another plan took: not a window's first byte
        at = dataclasses.replace(site, pc=start, nop_len=0)
        plan = _plan_site(at, until=end)
        if plan.tactic != "displace":
            why = plan.reason
            continue
        if plan.resume < end:       # the window filled up before the exit
            _release(obj, start)
            break
        if start < entry[1] and entry[0] < plan.resume:
            _release(obj, start)
            raise _Fallback(f"the {kind} at {addr:#x} is too close to the entry's patch")
        mark = next((m for m in sorted(obj.marks | obj.probed) if m != entry[0] and
                     m < plan.resume and _window_end(obj, m) > start), None)
        if mark is not None:     # that site's own plan may take these bytes
            _release(obj, start)
            what = "mark" if mark in obj.marks else "probe site"
            raise _Fallback(f"the {kind} at {addr:#x} is too close to the {what} at {mark:#x}")
        pre = dict(plan.bounds).get(addr - start, 0)
        for b in range(start, addr + 1):     # no other plan may take these bytes
            obj.claimed.setdefault(b, (start, -3))
        reason = plan.reason + (f"; the handler runs after {addr - start} byte(s) of it"
                                if pre else "")
        return Exit(addr, kind, at, dataclasses.replace(plan, reason=reason, pre=pre))
    raise _Fallback(f"the {kind} at {addr:#x} cannot be patched"
                    + (f" ({why})" if why else ""))


def describe_returns(rp: ReturnPlan) -> str:
    """`pydyn -p2`: how a function's returns are reached, each exit's plan on a line of
    its own."""
    if rp.mechanism == "hijack":
        return str(rp)
    return "\n".join([f"{rp} (the hijack instead if a probe reads $return at a tail "
                      "call, under -x or --probe-mode=trap)",
                      *(f"      exit {e.kind} at {e.addr:#x}: {e.plan}" for e in rp.exits)])
