"""Offline patch plans: how the runtime should patch each USDT site.

The launcher decides, the runtime only applies.  For each site, in order:

- ``nop``: the site is a multi-byte nop of >= 5 bytes; a ``jmp rel32`` to a
  per-site stub replaces it in place (nothing is relocated).
- ``displace``: the 1-byte ``nop`` sdt.h emits plus the whole instructions after
  it (>= 5 bytes in all) move into the stub, relocated (RIP-relative operands,
  rel8/rel32 jumps and branches, a final call emulated with its original
  return address, i386 ``get_pc_thunk`` calls turned into immediates).  Only
  where no branch can land inside the overwritten bytes: direct branch and
  call targets of every instruction of the object, code addresses named by
  instructions, relocations (RELA/REL/RELR) and data words (absolute, and
  relative entries of jump tables), and C++ landing pads (read from each
  function's LSDA; a function whose LSDA cannot be read is refused whole).
  objfacts.py finds them once per binary (the instructions that name a site's
  neighbourhood by a byte scan of the whole code, then a decode of those alone).
  Direct branches into the window are retargeted to the stub instead (rel8 ones
  through an island of dead padding); a window that ends in ret/jmp short of 5
  bytes takes the dead padding after it, or jumps (rel8) to an island.
- ``trap``: anything else; the runtime keeps the int3.

No window covers the start of another site of the same run (`prepare` records them:
marks, function entries, statements), and no redirect rewrites a branch inside another
site's window: each site's bytes stay the ones its own plan was made for.

Every plan carries the reason it got its tactic (``pydyn -p2`` prints it).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..elf.functions import FunctionSite
from ..elf.stapsdt import ProbeSite
from .objfacts import ObjectFacts as _Object
from .objfacts import analyse
from .objfacts import cs as _cs
from .objfacts import is_pad as _is_pad

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


# --- object analysis (objfacts.py) ----------------------------------------------------

def prepare(sites: Iterable[ProbeSite]) -> None:
    """Analyse the neighbourhoods of every site (and of every function a `.return`
    site exits) at once: one scan per object, not one per site."""
    pcs: dict[str, list[int]] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    probed: dict[str, set[int]] = {}
    for site in sites:
        if site.machine not in ("x86_64", "i386"):
            continue
        probed.setdefault(site.path, set()).add(site.pc)
        if site.nop_len >= JMP_LEN:
            continue
        pcs.setdefault(site.path, []).append(site.pc)
        if isinstance(site, FunctionSite) and site.is_return and site.func_size > 0:
            spans.setdefault(site.path, []).append(
                (site.func_addr, site.func_addr + site.func_size))
    for path, starts in probed.items():
        try:
            obj = analyse(path)
            obj.probed = starts
            if path in pcs:
                obj.cover_sites(pcs[path], spans.get(path, []))
        except (OSError, Exception):  # noqa: B014, BLE001 - each plan reports it
            pass


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
    # a site's bytes must stay what its own plan (and the runtime's check) expects: a
    # window never covers another site's start (a mark's 1-byte nop takes the next
    # instruction, which a .statement may start at); that site keeps its own plan
    if b in obj.marks or b in obj.probed:
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
        other = _site_over(obj, pc, src, src + size)
        if other is not None:
            raise _Refuse(f"the branch to {b:#x} from {src - 1:#x} is in the bytes of the "
                          f"probe site at {other:#x}")
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


def _site_over(obj: _Object, pc: int, lo: int, hi: int) -> int | None:
    """Another probe site (not `pc`) whose plan may overwrite a byte of [lo, hi), None if
    none: retargeting a branch there would change the bytes that site's plan expects."""
    return min((m for starts in (obj.marks, obj.probed) for m in starts
                if m != pc and lo - MAX_WINDOW < m < hi and _window_end(obj, m) > lo),
               default=None)


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
                or b in obj.probed
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
    obj.ensure_pads(anchor)
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
    obj.ensure_pads(anchor)
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
