"""What `ubacktrace()`, `usymname()` and `usymdata()` need of a probed object,
computed offline so the runtime never parses ELF: its function names,
a compact table of `.eh_frame` CFA rules and, for `usymdata` only, its data
symbols (sized STT_OBJECT) and the extent of its PT_LOAD segments.

A row is `(pc, kind, cfa_off, fp_off, ra_off)`: from `pc` on, the frame's CFA
is the stack pointer (kind 0) or the frame pointer (kind 1) plus `cfa_off`; the
caller's frame pointer was saved at CFA + `fp_off` (0: not saved, it is still in
the register); the return address is at CFA - word size on x86, and on aarch64
at CFA + `ra_off` (0: still in x30, as at a function's entry).  Kind 2 means "no
rule the walker can follow" (a DWARF expression, an undefined return address
as in `_start`, the end of an FDE): the walk stops there.  These are the rules
gcc emits for ordinary x86-64, i386 and aarch64 code; signal frames and hand-written
CFI with expressions end the backtrace rather than guess.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import TargetError
from .functions import get_functions
from .reader import get_elf_info, open_elf
from .symbols import Symbol, get_symbol_table

SP_FP_RA = {"x86_64": (7, 6, 16), "i386": (4, 5, 8), "aarch64": (31, 29, 30)}  # DWARF numbers
KIND_SP, KIND_FP, KIND_STOP = 0, 1, 2
Row = tuple[int, int, int, int, int]            # (pc, kind, cfa_off, fp_off, ra_off)


@dataclass(frozen=True)
class UnwindTable:
    symbols: list[tuple[int, int, str]]         # (addr, size, name), by addr
    rows: list[Row]                             # by pc
    lo: int                                     # link-time extent of the code described
    hi: int


_cache: dict[str, UnwindTable] = {}
# The stored tables' layout and rules: a change to either must change this (another key).
UNWIND_FORMAT = 1


def unwind_table(path: str) -> UnwindTable:
    """Names and CFA rows of the ELF file at `path` (TargetError if unreadable).

    Decoding every FDE of a large program takes seconds (postgres: ~17,000 FDEs, libjvm
    many more), so the table is kept per binary (its build-id) in the facts store
    (factstore.py), and a new script on the same binary reads it back."""
    if path in _cache:
        return _cache[path]
    from ..factstore import binary_key, load_or_compute
    header, arrays = load_or_compute(binary_key(path, f"unwind table {UNWIND_FORMAT}"),
                                     lambda: _encode(_compute(path)))
    names = header["names"]
    symbols = list(zip(arrays["sym_addr"], arrays["sym_size"], names, strict=True))
    rows = list(zip(*(arrays[f"row_{f}"] for f in ROW_FIELDS), strict=True))
    table = UnwindTable(symbols, rows, header["lo"], header["hi"])
    _cache[path] = table
    return table


ROW_FIELDS = ("pc", "kind", "cfa", "fp", "ra")


def _encode(t: UnwindTable) -> tuple[dict[str, Any], dict[str, array[int]]]:
    """The table as the facts store keeps it: the names in the header, numbers in arrays."""
    arrays = {"sym_addr": array("q", (a for a, _s, _n in t.symbols)),
              "sym_size": array("q", (s for _a, s, _n in t.symbols))}
    for i, f in enumerate(ROW_FIELDS):
        arrays[f"row_{f}"] = array("q", (r[i] for r in t.rows))
    return {"names": [n for _a, _s, n in t.symbols], "lo": t.lo, "hi": t.hi}, arrays


def _compute(path: str) -> UnwindTable:
    from elftools.common.exceptions import DWARFError, ELFError
    from elftools.dwarf.callframe import FDE
    funcs = get_functions(path)
    first: dict[int, tuple[int, int, str]] = {}
    for f in funcs.functions:   # the preferred name of each address comes first
        first.setdefault(f.addr, (f.addr, f.size, f.name))
    symbols = sorted(first.values())
    # other arches have no walker: names only, a backtrace is its first pc
    sp, fp, ra = SP_FP_RA.get(funcs.machine, (-1, -1, -1))
    rows: list[Row] = []
    try:
        with open_elf(path) as h:
            dwarf = (h.elffile.get_dwarf_info()
                     if sp >= 0 and h.elffile.has_dwarf_info() else None)
            entries = dwarf.EH_CFI_entries() if dwarf is not None and dwarf.has_EH_CFI() else []
            for fde in entries:
                if not isinstance(fde, FDE):
                    continue
                start = fde.header["initial_location"]
                end = start + fde.header["address_range"]
                try:
                    decoded = fde.get_decoded().table
                except (ValueError, KeyError, DWARFError):
                    # an opcode pyelftools does not decode (DW_CFA_GNU_args_size, i386):
                    # backtraces stop in this function rather than guess
                    decoded = [{"pc": start, "cfa": None}]
                for row in decoded:
                    rows.append((row["pc"], *_rule(row, sp, fp, ra)))
                rows.append((end, KIND_STOP, 0, 0, 0))
    except (ELFError, ValueError, KeyError, IndexError) as exc:
        raise TargetError(path, f"cannot read its .eh_frame: {exc}") from exc
    rows = _compact(sorted(rows))
    extent = [a for a, _s, _n in symbols] + [a + s for a, s, _n in symbols]
    extent += [r[0] for r in rows]
    return UnwindTable(symbols, rows, min(extent, default=0), max(extent, default=0))


OFF_LIMIT = 1 << 15     # fp_off and ra_off are int16_t in struct pd_cfarow


def _rule(row: dict, sp: int, fp: int, ra: int) -> tuple[int, int, int, int]:
    cfa = row["cfa"]
    rar = row.get(ra)
    if cfa is None or cfa.expr is not None or cfa.reg not in (sp, fp) or (
            rar is not None and rar.type != "OFFSET"):
        return KIND_STOP, 0, 0, 0
    fpr = row.get(fp)
    fp_off = fpr.arg if fpr is not None and fpr.type == "OFFSET" else 0
    ra_off = rar.arg if rar is not None else 0
    if max(abs(fp_off), abs(ra_off)) >= OFF_LIMIT:
        return KIND_STOP, 0, 0, 0
    return (KIND_SP if cfa.reg == sp else KIND_FP), cfa.offset, fp_off, ra_off


def _compact(rows: list[Row]) -> list[Row]:
    """One row per pc (a later FDE starting where one ends wins), repeats dropped."""
    by_pc: dict[int, Row] = {}
    for r in rows:
        if r[0] not in by_pc or by_pc[r[0]][1] == KIND_STOP:
            by_pc[r[0]] = r
    out: list[Row] = []
    for pc in sorted(by_pc):
        r = by_pc[pc]
        if out and out[-1][1:] == r[1:]:
            continue
        out.append(r)
    return out


@dataclass(frozen=True)
class DataTable:
    symbols: list[tuple[int, int, str]]         # (addr, size, name), by addr
    lo: int                                     # link-time extent of the PT_LOAD segments
    hi: int


def _preference(sym: Symbol) -> tuple[bool, int, str]:
    """Among names of one address: global before local, `environ` before `__environ`."""
    return sym.bind == "LOCAL", len(sym.name) - len(sym.name.lstrip("_")), sym.name


def data_table(path: str) -> DataTable:
    """The sized data objects of the ELF file at `path` and its extent in memory."""
    best: dict[int, Symbol] = {}
    for sym in get_symbol_table(path).all_symbols():
        if sym.type != "OBJECT" or sym.size <= 0 or sym.section in ("ABS", "COMMON"):
            continue
        have = best.get(sym.value)
        if have is None or _preference(sym) < _preference(have):
            best[sym.value] = sym
    symbols = sorted((s.value, s.size, s.name) for s in best.values())
    segments = get_elf_info(path).segments
    lo = min((seg.vaddr for seg in segments), default=0)
    hi = max((seg.end for seg in segments), default=0)
    return DataTable(symbols, lo, hi)


def unwind_c(objects: dict[str, int], c_string: object, data: bool = False,
             abis: dict[str, str] | None = None,
             extra: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The generated C of the tables, `pd_unwind_tables[]`: one per probed object
    (`objects`: path -> pd_objects row, `abis`: path -> its PD_ABI_* name), then one per
    object of `extra` ((path, PD_ABI_* name): -d and --ldd objects with no probe, whose
    load biases the runtime finds itself); with `data`, each object's data symbols and
    extent too (usymdata)."""
    quote = c_string if callable(c_string) else repr
    out: list[str] = []
    rows_c: list[str] = []

    def usyms(name: str, symbols: list[tuple[int, int, str]]) -> None:
        syms = ", ".join(f"{{{a:#x}, {s}, {quote(n)}}}" for a, s, n in symbols)
        out.append(f"static const struct pd_usym {name}[] = {{{syms or '{0}'}}};")

    tables = [(path, (abis or {}).get(path, "0"), oi)
              for path, oi in sorted(objects.items(), key=lambda kv: kv[1])]
    tables += [(path, abi, -1) for path, abi in extra if path not in objects]
    for ti, (path, abi, oi) in enumerate(tables):
        t = unwind_table(path)
        usyms(f"pd_usyms_{ti}", t.symbols)
        cfa = ", ".join(f"{{{pc:#x}, {off}, {k}, {fpo}, {rao}}}"
                        for pc, k, off, fpo, rao in t.rows)
        out.append(f"static const struct pd_cfarow pd_cfa_{ti}[] = {{{cfa or '{0}'}}};")
        extra_c = ".data = NULL"
        if data:
            d = data_table(path)
            usyms(f"pd_udata_{ti}", d.symbols)
            extra_c = (f".data = pd_udata_{ti}, .ndata = {len(d.symbols)}, "
                       f".mlo = {d.lo:#x}, .mhi = {d.hi:#x}")
        rows_c.append(f"    {{.syms = pd_usyms_{ti}, .nsyms = {len(t.symbols)}, "
                      f".rows = pd_cfa_{ti}, .nrows = {len(t.rows)}, .lo = {t.lo:#x}, "
                      f".hi = {t.hi:#x}, {extra_c}, .path = {quote(path)}, .abi = {abi}, "
                      f".object = {oi}}},")
    out.append("const struct pd_unwind pd_unwind_tables[] = {")
    out.extend(rows_c or ["    {0},"])
    out.append("};")
    out.append(f"const uint32_t pd_unwind_ntables = {len(rows_c)};")
    n = max(len(rows_c), 1)
    out.append(f"uintptr_t pd_unwind_bias[{n}];")
    out.append(f"uint8_t pd_unwind_state[{n}];")
    return out
