"""DWARF for function probes: functions with their declaration and
parameters, and where each parameter is at the function's entry.

`get_dwarf(path)` reads `.debug_info` once per file version (pyelftools, imported
only here and only when a script asks for `NAME@FILE`, `$param`, `$$parms` or
`-L` of functions; a cache hit of the module cache never gets here).  Each
concrete `DW_TAG_subprogram` with a `DW_AT_low_pc` becomes a DwarfFunction.

A parameter's location at the entry pc becomes an ArgSpec the runtime already
evaluates (registers are DWARF-numbered in `struct pd_regs`):

- `DW_OP_regN`/`DW_OP_regx` -> the register; `DW_OP_bregN off` -> memory at
  reg+off; `DW_OP_fbreg off` with a `DW_OP_call_frame_cfa` frame base -> memory
  at sp + word + off (the CFA at the entry is the stack pointer above the
  return address);
- from a location list, the entry covering the entry pc.

A single location expression is only true after the prologue: at -O0 the
parameter's home is a stack slot the prologue has not written yet at the entry
(an `fbreg` below the CFA).  Such a parameter, one without a location
(optimized out) or one whose expression pydyn cannot evaluate, falls back to
the platform ABI when its position is known (x86-64: the Nth integer-class
parameter is in rdi, rsi, rdx, rcx, r8, r9; i386: the stack above the return
address) — `via_abi` says so, and `-L -v` prints it.  Otherwise the parameter
has no location and `why` says why; using it is a translate-time error.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import TargetError
from .argspec import ArgKind, ArgSpec

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


@dataclass(frozen=True)
class DwarfFunction:
    name: str
    decl_file: str
    decl_line: int
    low_pc: int
    params: tuple[DwarfParam, ...]

    @property
    def where(self) -> str:
        """`add@/src/t.c:12`, as stap names a function probe point."""
        return f"{self.name}@{self.decl_file}:{self.decl_line}"

    def param(self, name: str) -> DwarfParam | None:
        return next((p for p in self.params if p.name == name), None)


class DwarfInfo:
    def __init__(self, path: str, machine: str, functions: list[DwarfFunction]) -> None:
        self.path = path
        self.machine = machine
        self.functions = functions
        self.by_pc = {f.low_pc: f for f in functions}

    def match(self, name_pattern: str, file_pattern: str,
              line: int | None = None) -> list[DwarfFunction]:
        """`NAME@FILE[:LINE]`: FILE matches the whole declaration path, its end
        after a '/', or (a glob) its base name."""
        out = []
        for f in self.functions:
            if not fnmatch.fnmatchcase(f.name, name_pattern):
                continue
            if line is not None and f.decl_line != line:
                continue
            path = f.decl_file
            if (fnmatch.fnmatchcase(path, file_pattern) or path.endswith("/" + file_pattern)
                    or fnmatch.fnmatchcase(os.path.basename(path), file_pattern)):
                out.append(f)
        return out


_cache: dict[tuple[str, int, int], DwarfInfo | TargetError] = {}


def no_dwarf(path: str) -> TargetError:
    return TargetError(path, "has no DWARF debug information (.debug_info); "
                             "rebuild it with -g")


def get_dwarf(path: str) -> DwarfInfo:
    """The DWARF functions of the ELF file at `path`; TargetError if it has none."""
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    info = _cache.get(key)
    if info is None:
        try:
            info = _read(path)
        except TargetError as exc:   # remembered too: -L asks once per function
            info = exc
        _cache[key] = info
    if isinstance(info, TargetError):
        raise info
    return info


def function_at(path: str, low_pc: int) -> DwarfFunction | None:
    """The DWARF function entered at `low_pc` (None: no DWARF for it)."""
    try:
        return get_dwarf(path).by_pc.get(low_pc)
    except TargetError:
        return None


def functions_at(path: str, pattern: str) -> tuple[str, set[int]]:
    """`NAME@FILE[:LINE]` -> (NAME, the entry addresses DWARF declares in FILE)."""
    name, _, where = pattern.partition("@")
    file_pattern, _, line = where.rpartition(":") if ":" in where else (where, "", "")
    if line and not line.isdigit():
        raise TargetError(path, f"bad line number '{line}' in '{pattern}'")
    info = get_dwarf(path)
    return name, {f.low_pc for f in info.match(name, file_pattern,
                                               int(line) if line else None)}


def iter_functions(path: str) -> Iterator[DwarfFunction]:
    yield from get_dwarf(path).functions


def _read(path: str) -> DwarfInfo:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as stream:
            elf = ELFFile(stream)
            machine = {"EM_X86_64": "x86_64", "EM_386": "i386",
                       "EM_AARCH64": "aarch64"}.get(elf["e_machine"], elf["e_machine"])
            if not elf.has_dwarf_info() or elf.get_section_by_name(".debug_info") is None:
                raise no_dwarf(path)
            dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
            return DwarfInfo(path, machine, list(_Reader(dwarf, machine).functions()))
    except (ELFError, ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        raise TargetError(path, f"unreadable DWARF: {exc}") from exc


class _Reader:
    def __init__(self, dwarf: Any, machine: str) -> None:
        from elftools.dwarf.dwarf_expr import DWARFExprParser
        from elftools.dwarf.locationlists import LocationParser

        self.dwarf = dwarf
        self.machine = machine
        self.expr = DWARFExprParser(dwarf.structs)
        self.locs = LocationParser(dwarf.location_lists())

    def functions(self) -> Iterator[DwarfFunction]:
        for cu in self.dwarf.iter_CUs():
            files = self._files(cu)
            top = cu.get_top_DIE()
            base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes \
                else 0
            for die in cu.iter_DIEs():
                if die.tag != "DW_TAG_subprogram" or "DW_AT_low_pc" not in die.attributes:
                    continue
                name = _attr(die, "DW_AT_name")
                if name is None:
                    continue
                file_index = _attr(die, "DW_AT_decl_file")
                decl = files.get(file_index, "??") if file_index is not None else "??"
                yield DwarfFunction(name.decode(errors="replace"), decl,
                                    int(_attr(die, "DW_AT_decl_line") or 0),
                                    die.attributes["DW_AT_low_pc"].value,
                                    self._params(cu, die, base))

    def _files(self, cu: Any) -> dict[int, str]:
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
        ret = _strip(_type_die(func))
        # A struct returned in memory takes a hidden first argument.
        hidden = ret is not None and ret.tag in ("DW_TAG_structure_type", "DW_TAG_union_type") \
            and (self.machine == "i386" or _size(ret, word) > 16)
        abi = _AbiCursor(self.machine, word, hidden)
        for child in func.iter_children():
            if child.tag != "DW_TAG_formal_parameter":
                continue
            name = _attr(child, "DW_AT_name")
            tdie = _type_die(child)
            kind = _scalar(tdie, word)
            fallback = abi.next(kind)
            if name is None:
                continue
            size, signed, is_float, scalar = kind
            pname = name.decode(errors="replace")
            p = DwarfParam(pname, type_name(tdie), size, signed, is_float, scalar, None)
            if not scalar:
                params.append(replace(p, why=f"'{p.type_name}' is not a scalar: pydyn "
                                             "reads integers, pointers and floats"))
                continue
            loc, why = self._location(cu, child, low_pc, base, cfa_base, size, signed)
            if loc is not None:
                params.append(replace(p, location=loc))
            elif fallback is not None:
                params.append(replace(p, location=replace(fallback, size=size, signed=signed),
                                      via_abi=True, why=why))
            else:
                params.append(replace(p, why=why if not is_float else
                                      "floating-point parameters live in "
                                      f"{'SIMD' if self.machine == 'aarch64' else 'SSE/x87'} "
                                      "registers, which probes do not save"))
        return tuple(params)

    def _frame_base_is_cfa(self, func: Any) -> bool:
        attr = func.attributes.get("DW_AT_frame_base")
        if attr is None or attr.form != "DW_FORM_exprloc":
            return False
        ops = self.expr.parse_expr(attr.value)
        return len(ops) == 1 and ops[0].op_name == "DW_OP_call_frame_cfa"

    def _location(self, cu: Any, die: Any, pc: int, base: int, cfa_base: bool, size: int,
                  signed: bool) -> tuple[ArgSpec | None, str]:
        from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry

        attr = die.attributes.get("DW_AT_location")
        if attr is None:
            return None, "optimized out (no DW_AT_location)"
        parsed = self.locs.parse_from_attribute(attr, cu["version"], die)
        if isinstance(parsed, list):
            for entry in parsed:
                if isinstance(entry, BaseAddressEntry):
                    base = entry.base_address
                elif isinstance(entry, LocationEntry):
                    lo = entry.begin_offset + (0 if getattr(entry, "is_absolute", False)
                                               else base)
                    hi = entry.end_offset + (0 if getattr(entry, "is_absolute", False)
                                             else base)
                    if lo <= pc < hi:
                        return self._expr(entry.loc_expr, cfa_base, size, signed, True)
            return None, "not available at the entry (location list)"
        return self._expr(parsed.loc_expr, cfa_base, size, signed, False)

    def _expr(self, code: Any, cfa_base: bool, size: int, signed: bool,
              at_entry: bool) -> tuple[ArgSpec | None, str]:
        ops = self.expr.parse_expr(code)
        names = self._reg_names()
        sp, word = _SP.get(self.machine, 7), _WORD.get(self.machine, 8)
        cfa = _CFA_AT_ENTRY.get(self.machine, word)
        if len(ops) != 1:
            return None, "location '" + " ".join(o.op_name for o in ops) + "' not supported"
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
        if n == "DW_OP_fbreg" and cfa_base:
            off = cfa + int(op.args[0])
            if not at_entry and off < cfa:   # below the CFA: the callee's frame
                return None, "in the stack frame the prologue builds, not yet at the entry"
            return ArgSpec(f"{off}({names[sp]})", size, signed, False, ArgKind.MEM,
                           base=sp, disp=off, machine=self.machine), ""
        return None, f"location '{n}' not supported"

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

def _holder(die: Any, name: str) -> Any:
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


def _attr(die: Any, name: str) -> Any:
    holder = _holder(die, name)
    return holder.attributes[name].value if holder is not None else None


def _type_die(die: Any) -> Any:
    holder = _holder(die, "DW_AT_type")
    return holder.get_DIE_from_attribute("DW_AT_type") if holder is not None else None


def _strip(t: Any) -> Any:
    """`t` without typedefs and qualifiers."""
    while t is not None and (t.tag == "DW_TAG_typedef" or t.tag in _QUALIFIERS):
        t = _type_die(t)
    return t


def _size(t: Any, word: int) -> int:
    if t is None:
        return 0
    size = t.attributes.get("DW_AT_byte_size")
    if size is not None:
        return int(size.value)
    return word if t.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type",
                             "DW_TAG_rvalue_reference_type") else 0


def _scalar(tdie: Any, word: int) -> tuple[int, bool, bool, bool]:
    """(size, signed, is_float, scalar) of a parameter's type."""
    t = _strip(tdie)
    if t is None:
        return 0, False, False, False
    size = _size(t, word)
    if t.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type",
                 "DW_TAG_rvalue_reference_type"):
        return size, False, False, True
    if t.tag == "DW_TAG_base_type":
        enc = t.attributes["DW_AT_encoding"].value if "DW_AT_encoding" in t.attributes else 0
        if enc == _DW_ATE_FLOAT:
            return size, True, True, size in (4, 8)
        return size, enc in (_DW_ATE_SIGNED, _DW_ATE_SIGNED_CHAR), False, size in (1, 2, 4, 8)
    if t.tag == "DW_TAG_enumeration_type":
        under = _strip(_type_die(t))
        signed = under is None or _scalar(under, word)[1]
        return size, signed, False, size in (1, 2, 4, 8)
    return size, False, False, False


def type_name(t: Any) -> str:
    """A type as stap spells it: `char const*`, `long int`, `struct pair`."""
    if t is None:
        return "void"
    name = t.attributes.get("DW_AT_name")
    text = name.value.decode(errors="replace") if name is not None else None
    if t.tag in ("DW_TAG_base_type", "DW_TAG_typedef"):
        return text or "?"
    if t.tag in _QUALIFIERS:
        return f"{type_name(_type_die(t))} {_QUALIFIERS[t.tag]}"
    if t.tag == "DW_TAG_pointer_type":
        target = _type_die(t)
        if target is not None and target.tag == "DW_TAG_subroutine_type":
            params = [type_name(_type_die(c)) for c in target.iter_children()
                      if c.tag == "DW_TAG_formal_parameter"]
            return f"{type_name(_type_die(target))} (*)({', '.join(params)})"
        return f"{type_name(target)}*"
    if t.tag in ("DW_TAG_reference_type", "DW_TAG_rvalue_reference_type"):
        return f"{type_name(_type_die(t))}&"
    if t.tag in _AGGREGATES:
        return f"{_AGGREGATES[t.tag]} {text or '{...}'}"
    if t.tag == "DW_TAG_array_type":
        return f"{type_name(_type_die(t))}[]"
    return text or "?"


# -- what the translator asks of a function site ----------------------------------

def site_function(path: str, func_addr: int) -> DwarfFunction:
    """The DWARF of the function a site enters; TargetError naming the binary if none."""
    func = get_dwarf(path).by_pc.get(func_addr)
    if func is None:
        raise TargetError(path, f"no DWARF for the function at {func_addr:#x} "
                                "(built without -g?)")
    return func


def readable_param(path: str, func_addr: int, name: str) -> DwarfParam:
    """Parameter `name` of the function at `func_addr`, if probes can read it at the
    entry; TargetError (binary, function and parameter named) if not."""
    func = site_function(path, func_addr)
    p = func.param(name)
    if p is None:
        have = " ".join(f"${q.name}" for q in func.params) or "none"
        raise TargetError(path, f"function {func.where} has no parameter '{name}' "
                                f"(parameters: {have})")
    if p.location is None:
        raise TargetError(path, f"parameter '{name}' of {func.where} cannot be read at "
                                f"the entry: {p.why}")
    return p


UNUSED_ARG = ArgSpec("unused", 8, False, False, ArgKind.CONST)   # a slot never read


def param_locations(path: str, func_addr: int) -> dict[str, ArgSpec]:
    """Where each readable parameter of the function entered at `func_addr` is at the
    entry, by name (the first of a name)."""
    func = function_at(path, func_addr)
    out: dict[str, ArgSpec] = {}
    for p in func.params if func is not None else ():
        if p.location is not None:
            out.setdefault(p.name, p.location)
    return out
