"""Inlined copies of functions: `.function("NAME").inline`.

Each `DW_TAG_inlined_subroutine` whose abstract origin is a function NAME matches is
one site, at the copy's entry (`DW_AT_entry_pc`, else its lowest address).  A copy
has no call and no return of its own, so there is no `.return` for it, as in stap.

Only the units that hold an abstract instance of a matching function (a top-level
`DW_TAG_subprogram` with `DW_AT_inline`) are read in full: a copy refers to its
origin within its unit (gcc and clang without LTO), and a full walk of a big
binary's DWARF takes seconds (docs/performance.md).
"""

from __future__ import annotations

import fnmatch
from typing import Any

from ..errors import ScriptError, TargetError
from .functions import FunctionSite, abi_args, get_functions


class InlineCopy:
    """One inlined copy: the function it copies, where it starts, and the function
    (out of line) that holds it."""

    def __init__(self, name: str, entry: int, holder: Any, source: str = "") -> None:
        self.name = name
        self.entry = entry
        self.holder = holder    # functions.Function, or None outside any symbol's extent
        self.source = source    # "FILE:LINE" of the function's declaration ("": none)

    def __str__(self) -> str:
        inside = f" in {self.holder.name}" if self.holder is not None else ""
        return f"{self.name} inlined at {self.entry:#x}{inside}"


def _low_pc(dwarf: Any, cu: Any, die: Any) -> int | None:
    """The entry of an inlined copy: DW_AT_entry_pc (an address, or in DWARF 5 an
    offset from the unit's base), else DW_AT_low_pc, else its first range's start."""
    top = cu.get_top_DIE()
    base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes else 0
    entry = die.attributes.get("DW_AT_entry_pc")
    if entry is not None:
        if entry.form.startswith("DW_FORM_addr"):
            return int(entry.value)
        start = _first_address(dwarf, cu, die, base, default=base)
        return int(entry.value) + (base if start is None else start)
    low = die.attributes.get("DW_AT_low_pc")
    if low is not None:
        return int(low.value)
    return _first_address(dwarf, cu, die, base, default=None)


def _first_address(dwarf: Any, cu: Any, die: Any, base: int, default: int | None
                   ) -> int | None:
    from .dwarf import iter_die_ranges

    low = die.attributes.get("DW_AT_low_pc")
    if low is not None:
        return int(low.value)
    return min((lo for lo, _ in iter_die_ranges(dwarf, cu, die, base)), default=default)


def iter_inline_copies(binary: str, name_pattern: str) -> list[InlineCopy]:
    """Every inlined copy of a function whose name matches the glob `name_pattern`."""
    from .dwarf import decl_source, die_attr, get_dwarf

    info = get_dwarf(binary)
    table = get_functions(binary)
    copies: list[InlineCopy] = []
    seen: set[int] = set()
    try:
        for cu in info.dwarf.iter_CUs():
            origins: dict[int, tuple[str, str]] = {}   # DIE -> (name, declaration)
            files: dict[int, str] | None = None
            for die in cu.get_top_DIE().iter_children():
                if die.tag != "DW_TAG_subprogram" or not die_attr(die, "DW_AT_inline"):
                    continue
                name = die_attr(die, "DW_AT_name")
                if name is not None and fnmatch.fnmatchcase(
                        name.decode(errors="replace"), name_pattern):
                    if files is None:
                        files = info.reader.files(cu)
                    origins[die.offset] = (name.decode(errors="replace"),
                                           decl_source(files, die))
            if not origins:
                continue
            for die in cu.iter_DIEs():
                if die.tag != "DW_TAG_inlined_subroutine" or \
                        "DW_AT_abstract_origin" not in die.attributes:
                    continue
                origin = die.get_DIE_from_attribute("DW_AT_abstract_origin").offset
                if origin not in origins:
                    continue
                entry = _low_pc(info.dwarf, cu, die)
                if entry is None or entry in seen:
                    continue
                seen.add(entry)
                copy_name, decl_at = origins[origin]
                copies.append(InlineCopy(copy_name, entry, table.containing(entry), decl_at))
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        raise TargetError(info.debug_path, f"unreadable DWARF: {exc}") from exc
    return sorted(copies, key=lambda c: c.entry)


def inline_sites(point: Any, binary: str, rest: list[Any]) -> tuple[FunctionSite, ...]:
    """`.function("PATTERN").inline`: a site at each inlined copy's entry."""
    from .demangle import function_name

    pattern = rest[0].arg
    if not isinstance(pattern, str) or not pattern or len(rest) != 2 or \
            rest[1].arg is not None:
        raise ScriptError('inline probes are .function("NAME").inline', point.loc)
    if "@" in pattern:
        raise ScriptError(f'function("{pattern}").inline: NAME@FILE is not supported for '
                          "inlined copies", point.loc, 'use .function("NAME").inline')
    try:
        table = get_functions(binary)
        copies = iter_inline_copies(binary, pattern)
    except TargetError as exc:
        raise ScriptError(f'function("{pattern}").inline: {exc}', point.loc) from exc
    sites = []
    for c in copies:
        if c.holder is None:
            continue
        sites.append(FunctionSite(table.path, "function", function_name(c.name), c.entry, 0,
                                  "", abi_args(table.machine), 0, table.machine,
                                  table.elf_class, False, c.holder.addr, c.holder.size,
                                  source=c.source))
    if not sites:
        raise ScriptError(f'function("{pattern}").inline matches no inlined copy in '
                          f"{binary}", point.loc,
                          "the compiler inlined no call of it (try -O2, or .function "
                          "for its out-of-line copy)")
    return tuple(sites)
