"""Statement probe sites: `process("PATH").statement("FUNC@FILE:LINE")`,
`"*@FILE:LINE"`, ranges `"FUNC@FILE:N-M"`, and `.statement(ADDRESS).absolute`.

A line becomes the addresses where the DWARF line table starts a statement
(`is_stmt`) of that line in FILE: the lowest of them in each function (a loop
head has several; stap probes the first), inside a function whose name matches
FUNC.  FILE matches as in `NAME@FILE` function probes (the whole path, its end
after a '/', or a glob of the base name).  A statement site is a FunctionSite
whose pc lies inside the function: the runtime patches it like a function entry
(the displaced instructions run out of line; a branch target inside the window
makes it a trap), and `$var` there is any parameter or local in scope at that
pc, read where DWARF says it is there (dwarf.site_params).
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any

from ..errors import ScriptError, TargetError
from .functions import FunctionSite, FunctionTable, abi_args, get_functions

EVERY_LINE = (1, 1 << 31)


def _parse(spec: str) -> tuple[str, str, int, int]:
    """`FUNC@FILE:N[-M]` -> (FUNC, FILE, N, M); `:*` is every line (EVERY_LINE), as
    stap's `"FUNC@*:*"` (whythefail.stp, linetimes.stp)."""
    func, at, where = spec.partition("@")
    file, colon, lines = where.rpartition(":")
    if not at or not colon or not file:
        raise ValueError("a statement is FUNC@FILE:LINE (or :N-M, :*), or an address")
    if lines == "*":
        return (func or "*", file, *EVERY_LINE)
    lo, dash, hi = lines.partition("-")
    if not lo.isdigit() or (dash and not hi.isdigit()):
        raise ValueError(f"bad line number '{lines}'")
    first, last = int(lo), int(hi) if dash else int(lo)
    if last < first:
        raise ValueError(f"empty line range '{lines}'")
    return func or "*", file, first, last


def _file_matches(path: str, pattern: str) -> bool:
    return (fnmatch.fnmatchcase(path, pattern) or path.endswith("/" + pattern)
            or fnmatch.fnmatchcase(os.path.basename(path), pattern))


def line_addresses(binary: str, file_pattern: str, first: int, last: int,
                   functions: list[int] | None = None) -> list[tuple[int, int, str]]:
    """(address, line, file) of every statement start of lines first..last in FILE; with
    `functions` (their addresses), only in the units that define them (a libc has
    thousands of line programs)."""
    from .dwarf import get_dwarf

    info = get_dwarf(binary)
    reader = info.reader
    out: list[tuple[int, int, str]] = []
    units = None
    if functions is not None:
        found = (info.function_at(a) for a in functions)
        units = {f.cu_offset for f in found if f is not None}
    for cu in (info.dwarf.iter_CUs() if units is None else
               (info.dwarf.get_CU_at(off) for off in sorted(units))):
        files = reader.files(cu)
        wanted = {i for i, path in files.items() if _file_matches(path, file_pattern)}
        if not wanted:
            continue
        lp = info.dwarf.line_program_for_CU(cu)
        for entry in lp.get_entries() if lp is not None else ():
            st: Any = entry.state
            if st is None or st.end_sequence or not st.is_stmt:
                continue
            if st.file in wanted and first <= st.line <= last:
                out.append((st.address, st.line, files[st.file]))
    return out


def statement_sites(point: Any, binary: str, rest: list[Any]) -> tuple[FunctionSite, ...]:
    """The sites of `.statement("...")` / `.statement(ADDR).absolute` in `binary`."""
    arg = rest[0].arg
    tail = [c.name for c in rest[1:]]
    table = _table(point, binary)
    if isinstance(arg, int):
        if tail != ["absolute"]:
            raise ScriptError("statement(ADDRESS) needs .absolute: the address is a "
                              "link-time address in the binary", point.loc)
        f = table.containing(arg)
        if f is None:
            raise ScriptError(f"statement({arg:#x}): no function of {binary} contains "
                              "this address", point.loc)
        return (_site(table, f, arg),)
    if not isinstance(arg, str) or tail:
        raise ScriptError('statement takes "FUNC@FILE:LINE" (or :N-M) or an address with '
                          ".absolute", point.loc)
    try:
        func_pattern, file_pattern, first, last = _parse(arg)
    except ValueError as exc:
        raise ScriptError(f'statement("{arg}"): {exc}', point.loc) from None
    named = None if func_pattern == "*" else [f.addr for f in table.match(func_pattern)]
    try:
        rows = line_addresses(binary, file_pattern, first, last, named)
    except TargetError as exc:
        raise ScriptError(f'statement("{arg}"): {exc}', point.loc) from exc
    best: dict[tuple[int, int, str], int] = {}   # (function, line, file) -> lowest address
    funcs = {}
    for addr, line, file in rows:
        f = table.containing(addr)
        if f is None or not fnmatch.fnmatchcase(f.name, func_pattern):
            continue
        funcs[f.addr] = f
        key = (f.addr, line, file)
        best[key] = min(best.get(key, addr), addr)
    if not best:
        raise ScriptError(f'statement("{arg}") matches no statement in {binary}', point.loc,
                          "the line has no code (a comment, a declaration), or FUNC does "
                          "not contain it")
    return tuple(_site(table, funcs[fa], addr, f"{file}:{line}")
                 for (fa, line, file), addr in sorted(best.items()))


def _table(point: Any, binary: str) -> FunctionTable:
    try:
        return get_functions(binary)
    except TargetError as exc:
        raise ScriptError(str(exc), point.loc) from exc


def _site(table: FunctionTable, f: Any, pc: int, source: str = "",
          label: str = "") -> FunctionSite:
    from .demangle import function_name

    pc = max(pc, f.entry)   # a line at the very entry: after an endbr, as a function probe
    return FunctionSite(table.path, "function", function_name(f.name), pc, 0, "",
                        abi_args(table.machine), 0, table.machine, table.elf_class, False,
                        f.addr, f.size, source=source, label=label)


def label_sites(point: Any, binary: str, rest: list[Any]) -> tuple[FunctionSite, ...]:
    """`.function("FUNC").label("NAME")`: the address of each C label NAME (a glob)
    in the functions FUNC matches, from their DWARF `DW_TAG_label`s."""
    from .dwarf import decl_source, die_attr, get_dwarf

    func_pattern, label = rest[0].arg, rest[1].arg
    if not isinstance(func_pattern, str) or not isinstance(label, str) or len(rest) != 2:
        raise ScriptError('label probes are .function("FUNC").label("NAME")', point.loc)
    table = _table(point, binary)
    try:
        info = get_dwarf(binary)
    except TargetError as exc:
        raise ScriptError(f'label("{label}"): {exc}', point.loc) from exc
    sites: list[FunctionSite] = []
    unplaced: list[str] = []
    seen: set[int] = set()
    for f in table.match(func_pattern):
        func = info.function_at(f.addr)
        if func is None or f.addr in seen:
            continue
        seen.add(f.addr)
        cu = info.dwarf.get_CU_at(func.cu_offset)
        files = info.reader.files(cu)
        todo = [info.dwarf.get_DIE_from_refaddr(func.die_offset, cu)]
        while todo:
            for child in todo.pop().iter_children():
                if child.tag == "DW_TAG_lexical_block":
                    todo.append(child)
                    continue
                if child.tag != "DW_TAG_label":
                    continue
                name = die_attr(child, "DW_AT_name")
                if name is None or not fnmatch.fnmatchcase(name.decode(errors="replace"),
                                                           label):
                    continue
                low = child.attributes.get("DW_AT_low_pc")
                if low is None:
                    unplaced.append(f"{name.decode(errors='replace')} in {func.name}")
                    continue
                # named by the label's declaration, as stap names a label's probe
                sites.append(_site(table, table.aliases(f.addr)[0], int(low.value),
                                   decl_source(files, child), name.decode(errors="replace")))
    if not sites:
        why = (f"label(s) {', '.join(unplaced)} have no address (optimized out)"
               if unplaced else None)
        raise ScriptError(f'function("{func_pattern}").label("{label}") matches no label '
                          f"in {binary}", point.loc, why)
    return tuple(sites)


def line_at(binary: str, pc: int) -> tuple[str, int] | None:
    """(file, line) of the statement the line table starts at `pc`, None if none."""
    from .dwarf import get_dwarf

    info = get_dwarf(binary)
    func = info.function_at(next((f.addr for f in get_functions(binary).functions
                                  if f.addr <= pc < f.addr + f.size), -1))
    if func is None:
        return None
    cu = info.dwarf.get_CU_at(func.cu_offset)
    files = info.reader.files(cu)
    lp = info.dwarf.line_program_for_CU(cu)
    for entry in lp.get_entries() if lp is not None else ():
        st: Any = entry.state
        if st is not None and not st.end_sequence and st.is_stmt and st.address == pc:
            return files.get(st.file, "??"), st.line
    return None
