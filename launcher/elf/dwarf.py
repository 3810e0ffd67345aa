"""DWARF for function probes: functions with their declaration and
parameters, and where each parameter is at the function's entry.

`get_dwarf(path)` opens the DWARF once per file version, from the binary or its
separate debug file (`debuginfo.py`), with pyelftools, imported only here and
only when a script asks for `NAME@FILE`, `$param`, `$$parms`, `pp()` of a
function or `-l`/`-L` of functions (a cache hit of the module cache never gets
here).  Compilation units are parsed when a lookup needs them (`DwarfInfo`).  Each concrete
`DW_TAG_subprogram` with a `DW_AT_low_pc` becomes a DwarfFunction.

A parameter's location at the entry pc becomes an ArgSpec the runtime already
evaluates (registers are DWARF-numbered in `struct pd_regs`):

- `DW_OP_regN`/`DW_OP_regx` -> the register; `DW_OP_bregN off` -> memory at
  reg+off; `DW_OP_fbreg off` with a `DW_OP_call_frame_cfa` frame base -> memory
  at sp + word + off (the CFA at the entry is the stack pointer above the
  return address);
- from a location list, the entry covering the entry pc;
- any other expression (a computed value, pieces, a deref, an entry value) is
  compiled for the runtime by `dwarf_expr.py`.

A single location expression is only true after the prologue: at -O0 the
parameter's home is a stack slot the prologue has not written yet at the entry
(an `fbreg` below the CFA).  Such a parameter, one without a location
(optimized out) or one whose expression pydyn cannot evaluate, falls back to
the platform ABI when its position is known (x86-64: the Nth integer-class
parameter is in rdi, rsi, rdx, rcx, r8, r9; i386: the stack above the return
address) — `via_abi` says so, and `-L -v` prints it.  Not an i386 int or pointer
that -O0 homes below the CFA: gcc leaves a stack-passed one in the caller's slot, so
that one came in a register (regparm, fastcall) the DWARF does not name.  Otherwise the parameter
has no location and `why` says why; using it is a translate-time error.
"""

from __future__ import annotations

import bisect
import fnmatch
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import TargetError
from .argspec import ArgKind, ArgSpec
from .dwarf_expr import ExprError, Frame, FrameBase, compile_expr, needs_entry

_X86_64_REGS = ("%rax", "%rdx", "%rcx", "%rbx", "%rsi", "%rdi", "%rbp", "%rsp",
                *(f"%r{i}" for i in range(8, 16)), "%rip")
_I386_REGS = ("%eax", "%ecx", "%edx", "%ebx", "%esp", "%ebp", "%esi", "%edi", "%eip")
_A64_REGS = (*(f"x{i}" for i in range(31)), "sp")
_REGS = {"x86_64": _X86_64_REGS, "i386": _I386_REGS, "aarch64": _A64_REGS}
_SP = {"x86_64": 7, "i386": 4, "aarch64": 31}
_WORD = {"x86_64": 8, "i386": 4, "aarch64": 8}
# the CFA minus sp at the entry: x86 calls pushed the return address, aarch64 keeps it in x30
_CFA_AT_ENTRY = {"x86_64": 8, "i386": 4, "aarch64": 0}
_A64_INT_ARGS = 8       # x0-x7
_X86_64_INT_ARGS = (5, 4, 1, 2, 8, 9)   # rdi rsi rdx rcx r8 r9
_QUALIFIERS = {"DW_TAG_const_type": "const", "DW_TAG_volatile_type": "volatile",
               "DW_TAG_restrict_type": "restrict", "DW_TAG_atomic_type": "_Atomic"}
_AGGREGATES = {"DW_TAG_structure_type": "struct", "DW_TAG_union_type": "union",
               "DW_TAG_class_type": "class", "DW_TAG_enumeration_type": "enum"}
_PROLOGUE_FRAME = "in the stack frame the prologue builds"
_NO_FRAME = Frame()   # no frame base, no CFA, not the entry
_DW_ATE_FLOAT, _DW_ATE_SIGNED, _DW_ATE_SIGNED_CHAR = 4, 5, 6


@dataclass(frozen=True)
class DwarfParam:
    name: str
    type_name: str            # as stap prints it: "int", "char const*", "struct pair"
    size: int                 # bytes of the value
    signed: bool
    is_float: bool
    scalar: bool              # an integer, pointer or floating-point value
    location: ArgSpec | None  # where it is at the entry pc
    via_abi: bool = False     # location from the ABI, not from DWARF
    why: str = ""             # no location: why not
    placeholder: str = ""     # `$$parms` of an aggregate, as stap: "{...}", "[...]"
    type_offset: int = -1     # its type's DIE, for the target-variable model


@dataclass(frozen=True)
class DwarfLocal:
    """A variable declared in the function's outermost scope."""

    name: str
    type_name: str
    placeholder: str          # "{...}", "[...]" or ""
    static: bool              # in memory at a fixed address (readable anywhere)
    at_entry: bool = False    # DWARF gives it a location (or a constant) at the entry


@dataclass(frozen=True)
class DwarfFunction:
    name: str
    decl_file: str
    decl_line: int
    low_pc: int
    params: tuple[DwarfParam, ...]
    cu_offset: int = 0        # where its DIE is, for the target-variable model
    die_offset: int = 0
    locals: tuple[DwarfLocal, ...] = ()

    @property
    def where(self) -> str:
        """`add@/src/t.c:12`, as stap names a function probe point."""
        from ..pointnames import canonical
        return canonical(self.name, self.decl_file, self.decl_line)

    def param(self, name: str) -> DwarfParam | None:
        return next((p for p in self.params if p.name == name), None)


class DwarfInfo:
    """The DWARF of one binary, read a compilation unit at a time.

    A function is looked up by its entry address: `.debug_aranges` names the CU
    that covers it and only that CU is parsed (libc's debug file has 2,063 CUs
    and 677,692 DIEs: a full walk takes seconds, one CU milliseconds; see
    docs/performance.md).  Without aranges, or for a pc they do not cover, the CUs are
    walked in order until one declares a function there, each remembered."""

    def __init__(self, path: str, debug_path: str, machine: str, dwarf: Any) -> None:
        self.path = path
        self.debug_path = debug_path   # the file the DWARF came from
        self.machine = machine
        self.dwarf = dwarf
        self.reader = _Reader(dwarf, machine, debug_path)
        self._cus: dict[int, dict[int, DwarfFunction]] = {}   # CU offset -> low_pc -> function
        self._aranges: list[tuple[int, int, int]] | None = None   # (start, end, CU)
        self._aranges_read = False
        self._vars: dict[tuple[int, int, bool], tuple[DwarfParam, ...]] = {}
        self._walked = False

    def _cu_functions(self, cu: Any) -> dict[int, DwarfFunction]:
        funcs = self._cus.get(cu.cu_offset)
        if funcs is None:
            funcs = {f.low_pc: f for f in self.reader.cu_functions(cu)}
            self._cus[cu.cu_offset] = funcs
        return funcs

    @property
    def units_read(self) -> int:
        """How many compilation units have been parsed so far."""
        return len(self._cus)

    def function_at(self, pc: int) -> DwarfFunction | None:
        """The function whose entry is `pc`, None if DWARF declares none there."""
        if not self._aranges_read:
            self._aranges_read = True
            self._aranges = _read_aranges(self.dwarf)
        if self._aranges:
            i = bisect.bisect_right(self._aranges, (pc, 1 << 64, 0)) - 1
            off = self._aranges[i][2] if i >= 0 and pc < self._aranges[i][1] else None
            if off is not None:
                hit = self._cu_functions(self.dwarf.get_CU_at(off)).get(pc)
                if hit is not None:
                    return hit
        for funcs in self._all_cus():
            if pc in funcs:
                return funcs[pc]
        return None

    def variables_at(self, func: DwarfFunction, pc: int, inlined_only: bool = False
                     ) -> tuple[DwarfParam, ...]:
        """`func`'s parameters and locals in scope at `pc` inside it, located there
        (`inlined_only`: of the innermost inlined copy holding `pc`, none if none)."""
        key = (func.low_pc, pc, inlined_only)
        hit = self._vars.get(key)
        if hit is None:
            cu = self.dwarf.get_CU_at(func.cu_offset)
            die = self.dwarf.get_DIE_from_refaddr(func.die_offset, cu)
            hit = self.reader.vars_at(cu, die, pc, _cfa_rule(self.path, pc), inlined_only)
            self._vars[key] = hit
        return hit

    def scope_names(self, func: DwarfFunction, pc: int) -> tuple[str, ...]:
        """The variables in scope at `pc` inside `func`, in stap's `$$vars` order."""
        cu = self.dwarf.get_CU_at(func.cu_offset)
        return self.reader.scope_names(cu, self.dwarf.get_DIE_from_refaddr(func.die_offset, cu),
                                       pc)

    def _all_cus(self) -> Iterator[dict[int, DwarfFunction]]:
        if self._walked:
            yield from self._cus.values()
            return
        for cu in self.dwarf.iter_CUs():
            yield self._cu_functions(cu)
        self._walked = True

    @property
    def functions(self) -> list[DwarfFunction]:
        """Every function (walks every CU: for listings, not for lookups)."""
        return [f for funcs in self._all_cus() for f in funcs.values()]

    def match(self, name_pattern: str, file_pattern: str, line: int | None = None,
              candidates: Iterable[int] | None = None) -> list[DwarfFunction]:
        """`NAME@FILE[:LINE]`: FILE matches the whole declaration path, its end
        after a '/', or (a glob) its base name.  `candidates`: the entry
        addresses to look at (the symbol table's matches of NAME), else all."""
        pool = self.functions if candidates is None else \
            [f for f in (self.function_at(pc) for pc in candidates) if f is not None]
        out = []
        for f in pool:
            if not fnmatch.fnmatchcase(f.name, name_pattern):
                continue
            if line is not None and f.decl_line != line:
                continue
            path = f.decl_file
            if (fnmatch.fnmatchcase(path, file_pattern) or path.endswith("/" + file_pattern)
                    or fnmatch.fnmatchcase(os.path.basename(path), file_pattern)):
                out.append(f)
        return out


def _read_aranges(dwarf: Any) -> list[tuple[int, int, int]] | None:
    """`.debug_aranges` as sorted (start, end, CU offset), None if absent.  Read with
    `struct`: pyelftools' parser takes ~10x as long on libc's 18,000 ranges."""
    sec = getattr(dwarf, "debug_aranges_sec", None)
    if sec is None:
        return None
    sec.stream.seek(0)
    data = sec.stream.read()
    e = "<" if dwarf.config.little_endian else ">"
    out: list[tuple[int, int, int]] = []
    off, n = 0, len(data)
    try:
        while off + 4 <= n:
            (length,) = struct.unpack_from(e + "I", data, off)
            hdr = 4
            if length == 0xFFFFFFFF:   # 64-bit DWARF
                (length,) = struct.unpack_from(e + "Q", data, off + 4)
                hdr = 12
            end = off + hdr + length
            if length == 0 or end > n:
                break
            p = off + hdr + 2   # after the version
            (cu,) = struct.unpack_from(e + ("Q" if hdr == 12 else "I"), data, p)
            p += 8 if hdr == 12 else 4
            asize, ssize = data[p], data[p + 1]
            p += 2
            if asize in (4, 8) and ssize == 0:
                tup = 2 * asize   # the tuples are aligned to their size from the set's start
                p = off + ((p - off + tup - 1) // tup) * tup
                fmt = e + ("QQ" if asize == 8 else "II")
                while p + tup <= end:
                    start, size = struct.unpack_from(fmt, data, p)
                    p += tup
                    if start == 0 and size == 0:
                        break
                    if size:
                        out.append((start, start + size, cu))
            off = end
    except (struct.error, IndexError):
        return None   # damaged: the walk over the CUs still finds a function
    out.sort()
    return out


_cache: dict[tuple[str, int, int, str], DwarfInfo | TargetError] = {}
# the open debug files of the DwarfInfos above: pyelftools reads sections lazily
_streams: list[Any] = []


def no_dwarf(path: str) -> TargetError:
    return TargetError(path, "has no DWARF debug information (.debug_info); "
                             "rebuild it with -g")


def get_dwarf(path: str) -> DwarfInfo:
    """The DWARF of the ELF file at `path`, from the file or its separate debug
    file (elf/debuginfo.py); TargetError if there is none."""
    from .debuginfo import search_path

    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size, search_path())
    info = _cache.get(key)
    if info is None:
        try:
            info = _open(path)
        except TargetError as exc:   # remembered too: -L asks once per function
            info = exc
        _cache[key] = info
    if isinstance(info, TargetError):
        raise info
    return info


def function_at(path: str, low_pc: int) -> DwarfFunction | None:
    """The DWARF function entered at `low_pc` (None: no DWARF for it)."""
    try:
        return get_dwarf(path).function_at(low_pc)
    except TargetError:
        return None


def functions_at(path: str, pattern: str,
                 candidates: Iterable[int] | None = None) -> tuple[str, set[int]]:
    """`NAME@FILE[:LINE]` -> (NAME, the entry addresses DWARF declares in FILE),
    looking only at `candidates` when given."""
    name, _, where = pattern.partition("@")
    file_pattern, _, line = where.rpartition(":") if ":" in where else (where, "", "")
    if line and not line.isdigit():
        raise TargetError(path, f"bad line number '{line}' in '{pattern}'")
    info = get_dwarf(path)
    return name, {f.low_pc for f in info.match(name, file_pattern,
                                               int(line) if line else None, candidates)}


def iter_functions(path: str) -> Iterator[DwarfFunction]:
    yield from get_dwarf(path).functions


def _open(path: str) -> DwarfInfo:
    from elftools.common.exceptions import ELFError

    from .debuginfo import find_debug_file, no_debug_info
    from .elffile import ElfFile

    lookup = find_debug_file(path)
    if lookup.path is None:
        raise no_debug_info(path, lookup)
    try:
        stream = open(lookup.path, "rb")
    except OSError as exc:
        raise TargetError(lookup.path, exc.strerror or str(exc)) from None
    try:
        elf = ElfFile(stream)
        machine = {"EM_X86_64": "x86_64", "EM_386": "i386",
                   "EM_AARCH64": "aarch64"}.get(elf["e_machine"], elf["e_machine"])
        # a linked file's DWARF needs no relocation (skipping it saves the time of
        # reading every relocation section); an object file's does (@cast's headers)
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=elf["e_type"] == "ET_REL")
    except (ELFError, ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        stream.close()
        raise TargetError(lookup.path, f"unreadable DWARF: {exc}") from exc
    _streams.append(stream)
    return DwarfInfo(path, lookup.path, machine, dwarf)


class _Reader:
    def __init__(self, dwarf: Any, machine: str, path: str) -> None:
        from elftools.dwarf.dwarf_expr import DWARFExprParser
        from elftools.dwarf.locationlists import LocationParser

        self.dwarf = dwarf
        self.machine = machine
        self.path = path
        self.expr = DWARFExprParser(dwarf.structs)
        self.locs = LocationParser(dwarf.location_lists())

    def cu_functions(self, cu: Any) -> Iterator[DwarfFunction]:
        try:
            files = self.files(cu)
            top = cu.get_top_DIE()
            base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes \
                else 0
            for die in cu.iter_DIEs():
                if die.tag != "DW_TAG_subprogram" or "DW_AT_low_pc" not in die.attributes:
                    continue
                name = die_attr(die, "DW_AT_name")
                if name is None:
                    continue
                file_index = die_attr(die, "DW_AT_decl_file")
                decl = files.get(file_index, "??") if file_index is not None else "??"
                yield DwarfFunction(name.decode(errors="replace"), decl,
                                    int(die_attr(die, "DW_AT_decl_line") or 0),
                                    die.attributes["DW_AT_low_pc"].value,
                                    self._params(cu, die, base), cu.cu_offset, die.offset,
                                    self._locals(cu, die, base))
        except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
            raise TargetError(self.path, f"unreadable DWARF in the unit at "
                                         f"{cu.cu_offset:#x}: {exc}") from exc

    def files(self, cu: Any) -> dict[int, str]:
        lp = self.dwarf.line_program_for_CU(cu)
        if lp is None:
            return {}
        top = cu.get_top_DIE()
        comp_dir = top.attributes["DW_AT_comp_dir"].value.decode(errors="replace") \
            if "DW_AT_comp_dir" in top.attributes else ""
        dirs = [d.decode(errors="replace") if isinstance(d, bytes) else str(d)
                for d in lp.header["include_directory"]]
        v5 = lp.header["version"] >= 5
        out: dict[int, str] = {}
        for i, entry in enumerate(lp.header["file_entry"]):
            name = entry.name.decode(errors="replace")
            di = entry.dir_index
            if v5:
                d = dirs[di] if di < len(dirs) else ""
            else:   # DWARF 4: files from 1, directory 0 is the CU's own
                d = comp_dir if di == 0 else dirs[di - 1] if di - 1 < len(dirs) else ""
            if not os.path.isabs(d) and comp_dir:
                d = os.path.join(comp_dir, d)
            out[i if v5 else i + 1] = os.path.normpath(os.path.join(d, name))
        return out

    # -- parameters ------------------------------------------------------------
    def _params(self, cu: Any, func: Any, base: int) -> tuple[DwarfParam, ...]:
        params: list[DwarfParam] = []
        low_pc = func.attributes["DW_AT_low_pc"].value
        cfa_base = self._frame_base_is_cfa(func)
        word = _WORD.get(self.machine, 8)
        ret = strip_type(type_die(func))
        # A struct returned in memory takes a hidden first argument.
        hidden = ret is not None and ret.tag in ("DW_TAG_structure_type", "DW_TAG_union_type") \
            and (self.machine == "i386" or type_size(ret, word) > 16)
        abi = _AbiCursor(self.machine, word, hidden)
        for child in func.iter_children():
            if child.tag != "DW_TAG_formal_parameter":
                continue
            name = die_attr(child, "DW_AT_name")
            tdie = type_die(child)
            kind = _scalar(tdie, word)
            fallback = abi.next(kind)
            if name is None:
                continue
            size, signed, is_float, scalar = kind
            pname = name.decode(errors="replace")
            p = DwarfParam(pname, type_name(tdie), size, signed, is_float, scalar, None,
                           placeholder=_placeholder(tdie),
                           type_offset=tdie.offset if tdie is not None else -1)
            if not scalar and not _by_value(tdie, word):
                params.append(replace(p, why=f"'{p.type_name}' is not a scalar: pydyn "
                                             "reads integers, pointers and floats"))
                continue
            loc, why = self._location(cu, child, low_pc, base, cfa_base, size, signed,
                                      frame=self._frame(cu, func, low_pc, base, None))
            if loc is not None:
                params.append(replace(p, location=loc))
            elif fallback is not None and self.machine == "i386" and size == 4 and \
                    not is_float and why.startswith(_PROLOGUE_FRAME):
                # i386 -O0 keeps a stack-passed int or pointer in the caller's slot (above
                # the CFA; it copies only narrower ones and 8-byte ones into its frame): one
                # homed below it came in a register (regparm, fastcall), which the DWARF
                # does not name and the stack convention would misread
                params.append(replace(p, why="passed in a register (regparm or fastcall) "
                                             "that DWARF does not name at the entry; its "
                                             "home is written by the prologue"))
            elif fallback is not None:
                params.append(replace(p, location=replace(fallback, size=size, signed=signed),
                                      via_abi=True, why=why))
            else:
                params.append(replace(p, why=why if not is_float else
                                      "floating-point parameters live in "
                                      f"{'SIMD' if self.machine == 'aarch64' else 'SSE/x87'} "
                                      "registers, which probes do not save"))
        return tuple(params)

    def _frame(self, cu: Any, func: Any, pc: int, base: int,
               cfa_rule: tuple[int, int] | None) -> Frame:
        """The frame base and the CFA at `pc` as register + offset, where known: the
        CFA from `cfa_rule` inside the function, sp + the call's push at the entry;
        the frame base from `DW_AT_frame_base` (one expression or a location list's
        entry at `pc`) when it is the CFA, a register or a `breg`."""
        low_pc = func.attributes["DW_AT_low_pc"].value
        cfa: FrameBase | None = None
        if cfa_rule is not None:
            cfa = FrameBase(*cfa_rule)
        elif pc == low_pc:
            cfa = FrameBase(_SP.get(self.machine, 7), _CFA_AT_ENTRY.get(self.machine, 8))
        attr = func.attributes.get("DW_AT_frame_base")
        entry = pc == low_pc
        if attr is None:
            return Frame(None, cfa, entry)
        code, _ = self._expr_at(cu, func, attr, pc, base)
        ops = self.expr.parse_expr(code) if code is not None else []
        n = ops[0].op_name if len(ops) == 1 else ""
        fb = cfa if n == "DW_OP_call_frame_cfa" else \
            FrameBase(int(n[10:]), int(ops[0].args[0])) \
            if n.startswith("DW_OP_breg") and n[10:].isdigit() else \
            FrameBase(int(n[9:]), 0) if n.startswith("DW_OP_reg") and n[9:].isdigit() else None
        return Frame(fb, cfa, entry)

    def _frame_base_is_cfa(self, func: Any) -> bool:
        attr = func.attributes.get("DW_AT_frame_base")
        if attr is None or attr.form != "DW_FORM_exprloc":
            return False
        ops = self.expr.parse_expr(attr.value)
        return len(ops) == 1 and ops[0].op_name == "DW_OP_call_frame_cfa"

    def _locals(self, cu: Any, func: Any, base: int) -> tuple[DwarfLocal, ...]:
        """The variables of the function's outermost scope, in DIE order."""
        from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry

        low_pc = func.attributes["DW_AT_low_pc"].value
        out = []
        for c in func.iter_children():
            if c.tag != "DW_TAG_variable":
                continue
            name = die_attr(c, "DW_AT_name")
            if name is None:
                continue
            loc = c.attributes.get("DW_AT_location")
            static = loc is not None and loc.form == "DW_FORM_exprloc" and bool(loc.value) \
                and loc.value[0] == 0x03   # DW_OP_addr
            # stap's -L rule: a constant, one expression, or a list entry at the entry
            at_entry = "DW_AT_const_value" in c.attributes or (
                loc is not None and loc.form == "DW_FORM_exprloc")
            if loc is not None and not at_entry:
                b = base
                for entry in self.locs.parse_from_attribute(loc, cu["version"], c):
                    if isinstance(entry, BaseAddressEntry):
                        b = entry.base_address
                    elif isinstance(entry, LocationEntry):
                        rel = 0 if getattr(entry, "is_absolute", False) else b
                        if entry.begin_offset + rel <= low_pc < entry.end_offset + rel:
                            at_entry = True
                            break
            t = type_die(c)
            out.append(DwarfLocal(name.decode(errors="replace"), type_name(t),
                                  _placeholder(t), static, at_entry))
        return tuple(out)

    # -- variables at a pc inside the function (statement probes) --------------------
    def vars_at(self, cu: Any, func: Any, pc: int, cfa_rule: tuple[int, int] | None,
                inlined_only: bool = False) -> tuple[DwarfParam, ...]:
        """The parameters and the locals in scope at `pc` (innermost scope wins a
        name), each with its location there: a location list's entry covering `pc`,
        or the single expression (an `fbreg` from the CFA rule at `pc`).  Statics
        are left out: they are addressed as globals (dwarf_types.find_variable).
        `inlined_only`: those of the innermost inlined copy holding `pc` alone."""
        top = cu.get_top_DIE()
        base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes \
            else 0
        cfa_base = self._frame_base_is_cfa(func)
        word = _WORD.get(self.machine, 8)
        found: dict[str, DwarfParam] = {}
        frame = self._frame(cu, func, pc, base, cfa_rule)

        def scope(die: Any) -> None:
            for child in die.iter_children():
                # an inlined copy's parameters and locals are in scope inside it
                # (`.function("f").inline`), named through its abstract origin
                if child.tag in ("DW_TAG_lexical_block", "DW_TAG_inlined_subroutine"):
                    if self._contains(cu, child, pc, base):
                        scope(child)
                    continue
                if child.tag not in ("DW_TAG_formal_parameter", "DW_TAG_variable"):
                    continue
                name = die_attr(child, "DW_AT_name")
                loc = child.attributes.get("DW_AT_location")
                if name is None or (loc is not None and loc.form == "DW_FORM_exprloc"
                                    and loc.value and loc.value[0] == 0x03):
                    continue
                tdie = type_die(child)
                size, signed, is_float, scalar = _scalar(tdie, word)
                p = DwarfParam(name.decode(errors="replace"), type_name(tdie), size, signed,
                               is_float, scalar, None, placeholder=_placeholder(tdie),
                               type_offset=tdie.offset if tdie is not None else -1)
                if not scalar and not _by_value(tdie, word):
                    found[p.name] = replace(p, why=f"'{p.type_name}' is not a scalar")
                    continue
                where, why = self._location(cu, child, pc, base, cfa_base, size, signed,
                                            cfa_rule, frame)
                found[p.name] = replace(p, location=where, why=why)
        if inlined_only:
            copy = self._innermost_copy(cu, func, pc, base)
            if copy is None:
                return ()
            func = copy
        scope(func)
        return tuple(found.values())

    def scope_names(self, cu: Any, func: Any, pc: int) -> tuple[str, ...]:
        """The names of the parameters and variables in scope at `pc` in stap's order
        of `$$vars` (its getscopes walk): the innermost lexical block or inlined copy
        holding `pc` first, out to the function, each scope's in DIE order (statics
        too); a shadowed name once, the innermost."""
        top = cu.get_top_DIE()
        base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes \
            else 0
        chain = [func]
        while True:
            inner = next((c for c in chain[-1].iter_children()
                          if c.tag in ("DW_TAG_lexical_block", "DW_TAG_inlined_subroutine")
                          and self._contains(cu, c, pc, base)), None)
            if inner is None:
                break
            chain.append(inner)
        names: dict[str, None] = {}
        for die in reversed(chain):
            for child in die.iter_children():
                if child.tag in ("DW_TAG_formal_parameter", "DW_TAG_variable"):
                    name = die_attr(child, "DW_AT_name")
                    if name is not None:
                        names.setdefault(name.decode(errors="replace"))
        return tuple(names)

    def _innermost_copy(self, cu: Any, die: Any, pc: int, base: int) -> Any:
        """The innermost DW_TAG_inlined_subroutine under `die` that holds `pc`."""
        found = None
        todo = [die]
        while todo:
            for child in todo.pop().iter_children():
                if child.tag in ("DW_TAG_lexical_block", "DW_TAG_inlined_subroutine") \
                        and self._contains(cu, child, pc, base):
                    if child.tag == "DW_TAG_inlined_subroutine":
                        found = child
                    todo.append(child)
                    break
        return found

    def _contains(self, cu: Any, die: Any, pc: int, base: int) -> bool:
        return any(lo <= pc < hi for lo, hi in iter_die_ranges(self.dwarf, cu, die, base))

    def _location(self, cu: Any, die: Any, pc: int, base: int, cfa_base: bool, size: int,
                  signed: bool, cfa_rule: tuple[int, int] | None = None,
                  frame: Frame = _NO_FRAME
                  ) -> tuple[ArgSpec | None, str]:
        attr = die.attributes.get("DW_AT_location")
        const = die.attributes.get("DW_AT_const_value")
        if attr is None and const is not None and isinstance(const.value, int) and size <= 8:
            # a value the compiler folded in (a clone's constant argument, a constant
            # local): the same everywhere in the function
            bits = 8 * size
            value = const.value & ((1 << bits) - 1)
            if signed and value >> (bits - 1):
                value -= 1 << bits
            return ArgSpec(str(value), size, signed, False, ArgKind.CONST, value=value), ""
        if attr is None:
            return None, "optimized out (no DW_AT_location)"
        code, from_list = self._expr_at(cu, die, attr, pc, base)
        if code is None:
            if cfa_rule is not None:
                return None, f"not accessible at this address (pc: {pc:#x})"
            return None, "not available at the entry (location list)"
        return self._expr(code, cfa_base, size, signed, from_list or cfa_rule is not None,
                          cfa_rule, frame, pc)

    def _expr_at(self, cu: Any, die: Any, attr: Any, pc: int, base: int
                 ) -> tuple[Any, bool]:
        """The expression of location attribute `attr` at `pc` (None if a location
        list has no entry there) and whether it came from a location list."""
        from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry

        parsed = self.locs.parse_from_attribute(attr, cu["version"], die)
        if not isinstance(parsed, list):
            return parsed.loc_expr, False
        at_pc = None
        for entry in parsed:
            if isinstance(entry, BaseAddressEntry):
                base = entry.base_address
            elif isinstance(entry, LocationEntry):
                rel = 0 if getattr(entry, "is_absolute", False) else base
                if entry.begin_offset + rel <= pc < entry.end_offset + rel:
                    return entry.loc_expr, True
                if entry.begin_offset == entry.end_offset and entry.begin_offset + rel == pc:
                    # an empty range [pc, pc): gcc's location views place the value
                    # between two views of the instruction at pc, as for the
                    # parameters of a copy inlined there (`.inline` probes it at pc)
                    at_pc = entry.loc_expr if at_pc is None else at_pc
        return at_pc, True

    def _expr(self, code: Any, cfa_base: bool, size: int, signed: bool,
              at_entry: bool, cfa_rule: tuple[int, int] | None = None,
              frame: Frame = _NO_FRAME, pc: int = 0
              ) -> tuple[ArgSpec | None, str]:
        """`at_entry`: the expression is valid at the pc (a location list's entry, or
        any expression inside the function when `cfa_rule` gives the CFA there as
        (DWARF register, offset)); else it is the one expression of the whole
        function, which the entry may precede.  One register or one stack slot is a
        REG or MEM ArgSpec; anything else is compiled (elf/dwarf_expr.py)."""
        ops = self.expr.parse_expr(code)
        names = self._reg_names()
        sp, word = _SP.get(self.machine, 7), _WORD.get(self.machine, 8)
        cfa = _CFA_AT_ENTRY.get(self.machine, word)
        if len(ops) != 1 or not self._simple(ops[0].op_name, cfa_base):
            return self._compiled(ops, size, signed, at_entry, frame, pc)
        op = ops[0]
        n = op.op_name
        reg = int(n[9:]) if n.startswith("DW_OP_reg") and n[9:].isdigit() else \
            int(op.args[0]) if n == "DW_OP_regx" else None
        if reg is not None:
            if reg >= len(names):
                return None, f"in DWARF register {reg}, which probes do not save"
            return ArgSpec(names[reg], size, signed, False, ArgKind.REG, reg=reg,
                           machine=self.machine), ""
        if n.startswith("DW_OP_breg") and n[10:].isdigit():
            base_reg, off = int(n[10:]), int(op.args[0])
            if base_reg >= len(names) or (not at_entry and (base_reg != sp or off < cfa)):
                return None, f"at {off}({names[base_reg] if base_reg < len(names) else '?'})" \
                             ": written by the prologue, not yet at the entry"
            return ArgSpec(f"{off}({names[base_reg]})", size, signed, False, ArgKind.MEM,
                           base=base_reg, disp=off, machine=self.machine), ""
        if n == "DW_OP_fbreg" and cfa_base and cfa_rule is not None:
            creg, coff = cfa_rule
            off = coff + int(op.args[0])
            return ArgSpec(f"{off}({names[creg]})", size, signed, False, ArgKind.MEM,
                           base=creg, disp=off, machine=self.machine), ""
        if n == "DW_OP_fbreg" and cfa_base:
            off = cfa + int(op.args[0])
            if not at_entry and off < cfa:   # below the CFA: the callee's frame
                return None, f"{_PROLOGUE_FRAME}, not yet at the entry"
            return ArgSpec(f"{off}({names[sp]})", size, signed, False, ArgKind.MEM,
                           base=sp, disp=off, machine=self.machine), ""
        return self._compiled(ops, size, signed, at_entry, frame, pc)

    @staticmethod
    def _simple(n: str, cfa_base: bool) -> bool:
        """Whether `_expr` gives the one-operation location `n` a REG or MEM ArgSpec."""
        return n == "DW_OP_regx" or (n.startswith("DW_OP_reg") and n[9:].isdigit()) \
            or (n.startswith("DW_OP_breg") and n[10:].isdigit()) \
            or (n == "DW_OP_fbreg" and cfa_base)

    def _compiled(self, ops: list[Any], size: int, signed: bool, at_entry: bool,
                  frame: Frame, pc: int
                  ) -> tuple[ArgSpec | None, str]:
        """`ops` compiled for the runtime."""
        try:
            spec = compile_expr(ops, machine=self.machine, nregs=len(self._reg_names()),
                                word=_WORD.get(self.machine, 8), size=size, signed=signed,
                                frame_base=frame.base, cfa=frame.cfa, at_entry=frame.entry, pc=pc)
        except ExprError as exc:
            return None, str(exc)
        # The one expression of the whole function may describe a stack slot the
        # prologue has not written yet at the entry.
        if not at_entry and any(op in ("PD_DW_DEREF", "PD_DW_END_MEMORY", "PD_DW_PIECE_MEM")
                                for op, _, _ in spec.ops):
            return None, "in memory the prologue writes, not yet at the entry"
        return spec, ""

    def _reg_names(self) -> tuple[str, ...]:
        return _REGS.get(self.machine, ())


class _AbiCursor:
    """Where the platform ABI puts each parameter at the entry, while it is known."""

    def __init__(self, machine: str, word: int, hidden: bool) -> None:
        self.machine = machine
        self.word = word
        self.ints = 1 if hidden and machine != "aarch64" else 0   # aarch64: in x8
        self.stack = word + (4 if hidden and machine == "i386" else 0)
        self.known = machine in ("x86_64", "i386", "aarch64")

    def next(self, kind: tuple[int, bool, bool, bool]) -> ArgSpec | None:
        size, _signed, is_float, scalar = kind
        if not self.known:
            return None
        if self.machine == "i386":
            at = self.stack
            self.stack += (size + 3) & ~3
            if size == 0:
                self.known = False
                return None
            return ArgSpec(f"{at}(%esp)", size, False, False, ArgKind.MEM, base=4, disp=at,
                           machine="i386")
        if is_float and scalar and size <= 8:
            return None   # an SSE / SIMD register: the integer order goes on
        a64 = self.machine == "aarch64"
        if not scalar or size > 8 or self.ints >= (_A64_INT_ARGS if a64 else
                                                   len(_X86_64_INT_ARGS)):
            self.known = False   # aggregates and stack arguments: not followed
            return None
        reg = self.ints if a64 else _X86_64_INT_ARGS[self.ints]
        self.ints += 1
        return ArgSpec(_REGS[self.machine][reg], size, False, False, ArgKind.REG, reg=reg,
                       machine=self.machine)


# -- types ----------------------------------------------------------------------

def _placeholder(t: Any) -> str:
    """What stap's `$$parms` prints for an aggregate instead of its value."""
    s = strip_type(t)
    if s is not None and s.tag in ("DW_TAG_structure_type", "DW_TAG_union_type",
                                   "DW_TAG_class_type"):
        return "{...}"
    return "[...]" if s is not None and s.tag == "DW_TAG_array_type" else ""


def iter_die_ranges(dwarf: Any, cu: Any, die: Any, base: int) -> Iterator[tuple[int, int]]:
    """The address ranges [lo, hi) a DIE covers: its low/high pc, else its DW_AT_ranges
    list (relative to `base`, the unit's, until a base-address entry); none if neither
    is there or the list is unreadable."""
    lo = die.attributes.get("DW_AT_low_pc")
    hi = die.attributes.get("DW_AT_high_pc")
    if lo is not None and hi is not None:
        yield lo.value, hi.value if hi.form == "DW_FORM_addr" else lo.value + hi.value
        return
    if "DW_AT_ranges" not in die.attributes:
        return
    try:
        ranges = dwarf.range_lists().get_range_list_at_offset(
            die.attributes["DW_AT_ranges"].value, cu=cu)
    except (AttributeError, KeyError, ValueError, TypeError):
        return
    for r in ranges or ():
        if hasattr(r, "begin_offset"):
            rel = 0 if getattr(r, "is_absolute", False) else base
            yield r.begin_offset + rel, r.end_offset + rel
        elif hasattr(r, "base_address"):
            base = r.base_address


def die_holder(die: Any, name: str) -> Any:
    """`die`, or the DIE it is an instance of (inline, declaration), that has `name`."""
    for _ in range(8):
        if name in die.attributes:
            return die
        for link in ("DW_AT_abstract_origin", "DW_AT_specification"):
            if link in die.attributes:
                die = die.get_DIE_from_attribute(link)
                break
        else:
            return None
    return None


def die_attr(die: Any, name: str) -> Any:
    holder = die_holder(die, name)
    return holder.attributes[name].value if holder is not None else None


def decl_source(files: dict[int, str], die: Any) -> str:
    """"FILE:LINE" of a DIE's declaration (DW_AT_decl_file, DW_AT_decl_line), "" if none;
    `files` is its unit's file table (_Reader.files)."""
    index = die_attr(die, "DW_AT_decl_file")
    if index is None:
        return ""
    return f"{files.get(index, '??')}:{die_attr(die, 'DW_AT_decl_line') or 0}"


def type_die(die: Any) -> Any:
    holder = die_holder(die, "DW_AT_type")
    return holder.get_DIE_from_attribute("DW_AT_type") if holder is not None else None


def strip_type(t: Any) -> Any:
    """`t` without typedefs and qualifiers."""
    while t is not None and (t.tag == "DW_TAG_typedef" or t.tag in _QUALIFIERS):
        t = type_die(t)
    return t


def type_size(t: Any, word: int) -> int:
    if t is None:
        return 0
    size = t.attributes.get("DW_AT_byte_size")
    if size is not None:
        return int(size.value)
    return word if t.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type",
                             "DW_TAG_rvalue_reference_type") else 0


def _scalar(tdie: Any, word: int) -> tuple[int, bool, bool, bool]:
    """(size, signed, is_float, scalar) of a parameter's type."""
    t = strip_type(tdie)
    if t is None:
        return 0, False, False, False
    size = type_size(t, word)
    if t.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type",
                 "DW_TAG_rvalue_reference_type"):
        return size, False, False, True
    if t.tag == "DW_TAG_base_type":
        enc = t.attributes["DW_AT_encoding"].value if "DW_AT_encoding" in t.attributes else 0
        if enc == _DW_ATE_FLOAT:
            return size, True, True, size in (4, 8)
        return size, enc in (_DW_ATE_SIGNED, _DW_ATE_SIGNED_CHAR), False, size in (1, 2, 4, 8)
    if t.tag == "DW_TAG_enumeration_type":
        under = strip_type(type_die(t))
        signed = under is None or _scalar(under, word)[1]
        return size, signed, False, size in (1, 2, 4, 8)
    return size, False, False, False


def _by_value(tdie: Any, word: int) -> bool:
    """Whether a variable of this type is a struct or union whose members a probe reads
    where its location puts them (registers, pieces, memory: dwarf_expr.narrow)."""
    t = strip_type(tdie)
    return t is not None and t.tag in ("DW_TAG_structure_type", "DW_TAG_union_type",
                                       "DW_TAG_class_type") and type_size(t, word) > 0


def type_name(t: Any) -> str:
    """A type as stap spells it (dwarf_wrappers.cxx's dwarf_type_name): `char const*`,
    `long int`, `struct pair`, `struct {...}`, `int (*) (int, char)`, `va_list`."""
    sub: list[Any] = []   # the subroutine type a function pointer's modifiers wrap
    text = _type_text(t, sub)
    if not sub:
        return text
    params = []
    for c in sub[0].iter_children():
        if c.tag == "DW_TAG_unspecified_parameters":
            params.append("...")
        elif c.tag == "DW_TAG_formal_parameter":
            params.append(type_name(type_die(c)))
    return f"{type_name(type_die(sub[0]))} ({text}) ({', '.join(params) or 'void'})"


def _type_text(t: Any, sub: list[Any]) -> str:
    """`t` spelled from its innermost type out; a subroutine type is left in `sub` for
    type_name to put its modifiers between the return and the parameter types."""
    if t is None:
        return "void"
    if t.tag == "DW_TAG_subroutine_type":
        sub.append(t)
        return ""
    name = t.attributes.get("DW_AT_name")
    text = name.value.decode(errors="replace") if name is not None else None
    if t.tag in ("DW_TAG_base_type", "DW_TAG_typedef"):
        return text or "?"
    if t.tag in _AGGREGATES:
        return f"{_AGGREGATES[t.tag]} {text or '{...}'}"
    inner = type_die(t)
    if t.tag == "DW_TAG_pointer_type" and inner is not None and \
            inner.tag == "DW_TAG_structure_type" and \
            die_attr(inner, "DW_AT_name") == b"__va_list_tag":
        return "va_list"   # the builtin, as stap and gcc name it
    under = _type_text(inner, sub)
    if t.tag in _QUALIFIERS:
        # a const on a reference is redundant
        redundant = t.tag == "DW_TAG_const_type" and inner is not None and inner.tag in (
            "DW_TAG_reference_type", "DW_TAG_rvalue_reference_type")
        return under if redundant else f"{under} {_QUALIFIERS[t.tag]}"
    suffix = {"DW_TAG_pointer_type": "*", "DW_TAG_reference_type": "&",
              "DW_TAG_rvalue_reference_type": "&&", "DW_TAG_array_type": "[]"}.get(t.tag)
    if suffix is None:
        return text or "?"
    return under + suffix


# -- what the translator asks of a function site ----------------------------------

def site_function(path: str, func_addr: int) -> DwarfFunction:
    """The DWARF of the function a site enters; TargetError naming the binary if none."""
    func = get_dwarf(path).function_at(func_addr)
    if func is None:
        raise TargetError(path, f"no DWARF for the function at {func_addr:#x} "
                                "(built without -g?)")
    return func


def readable_param(path: str, func_addr: int, name: str, pc: int | None = None
                   ) -> DwarfParam:
    """Parameter (or, inside the function, local) `name` at the site, if probes can
    read it there; TargetError (binary, function and variable named) if not."""
    func = site_function(path, func_addr)
    params = site_params(path, func_addr, pc)
    p = next((q for q in params if q.name == name), None)
    inside = params is not func.params
    if p is None:
        have = " ".join(f"${q.name}" for q in params) or "none"
        what = "variable" if inside else "parameter"
        raise TargetError(path, f"function {func.where} has no {what} '{name}' "
                                + (f"at {pc:#x} " if inside and pc is not None else "")
                                + f"({what}s: {have})")
    if not p.scalar:
        raise TargetError(path, f"'{p.type_name}' is being accessed instead of a member "
                                f"of {'variable' if inside else 'parameter'} '{name}'")
    if p.location is None:
        where = f"at {pc:#x}" if inside and pc is not None else "at the entry"
        raise TargetError(path, f"{'variable' if inside else 'parameter'} '{name}' of "
                                f"{func.where} cannot be read {where}: {p.why}")
    return p


UNUSED_ARG = ArgSpec("unused", 8, False, False, ArgKind.CONST)   # a slot never read

# A site this far past the function's address is inside it (a statement probe), not
# at its entry: an entry is the address itself or after a 4-byte endbr/bti, and no
# line of a function starts within its first 4 bytes but the first.
_ENTRY_SLACK = 4


def _cfa_rule(path: str, pc: int) -> tuple[int, int] | None:
    """The CFA at `pc` as (DWARF register, offset), from `.eh_frame` (elf/unwind.py)."""
    import bisect

    from .unwind import KIND_FP, KIND_SP, SP_FP_RA, unwind_table

    try:
        table = unwind_table(path)
    except TargetError:
        return None
    i = bisect.bisect_right(table.rows, (pc, 99, 0, 0, 0)) - 1
    if i < 0:
        return None
    _, kind, cfa_off, _, _ = table.rows[i]
    sp, fp, _ = SP_FP_RA.get(get_dwarf(path).machine, (-1, -1, -1))
    if kind == KIND_SP:
        return sp, cfa_off
    return (fp, cfa_off) if kind == KIND_FP else None


def site_params(path: str, func_addr: int, pc: int | None = None) -> tuple[DwarfParam, ...]:
    """What `$name` can be at a site: the parameters at the entry, or (a statement
    inside the function) the parameters and locals in scope there."""
    func = site_function(path, func_addr)
    if pc is None:
        return func.params
    if pc - func_addr <= _ENTRY_SLACK:
        # at the entry: by the calling convention, unless an inlined copy starts
        # there (`.inline`), whose variables its DWARF locates
        copy = get_dwarf(path).variables_at(func, pc, inlined_only=True)
        return copy + tuple(p for p in func.params
                            if all(p.name != q.name for q in copy)) if copy else func.params
    return get_dwarf(path).variables_at(func, pc)


def entry_frame(path: str, func_addr: int, pc: int, names: frozenset[str] | None
                ) -> tuple[int, int] | None:
    """At a site inside a function where a variable among `names` (None: any) is read
    from a register's value at the function's entry (`DW_OP_entry_value`): the CFA there
    as (DWARF register, offset), which finds the values a hidden entry probe kept for the
    call (launcher/entry.py); None where no such variable is read."""
    try:
        params = site_params(path, func_addr, pc)
    except TargetError:
        return None
    if params is site_function(path, func_addr).params:
        return None   # at the entry the registers themselves are read
    if not any(needs_entry(p.location) and (names is None or p.name in names)
               for p in params):
        return None
    return _cfa_rule(path, pc)


def param_locations(path: str, func_addr: int, pc: int | None = None) -> dict[str, ArgSpec]:
    """Where each readable parameter (and, inside the function, local) is at the site,
    by name (the first of a name)."""
    try:
        params = site_params(path, func_addr, pc)
    except TargetError:
        return {}
    out: dict[str, ArgSpec] = {}
    for p in params:
        if p.location is not None:
            out.setdefault(p.name, p.location)
    return out
