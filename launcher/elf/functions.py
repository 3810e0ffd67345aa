"""Function probe sites: `process("PATH").function("NAME")` and `.return`.

Functions are the defined STT_FUNC symbols of `.symtab` and `.dynsym` (aliases at one
address are one function, named by the first global name, else the first name; a C++
symbol is also its demangled name without the signature, `ns::Foo::bar`, which names the
site), with the size from the symbol or else from the `.eh_frame` FDE starting there;
gcc's `.cold` parts are not functions. A stripped binary keeps `.dynsym` (its exported
functions) and `.eh_frame`: FDE ranges inside no named function are counted
(`FunctionTable.unnamed`, named in the no-match hint) but never probed: they have no
name to match, and some (`.cold` parts) are entered by a jump, where a return probe
would corrupt the stack. The site of a function is its entry address, after an
`endbr64`/`endbr32` if one is there (CET: the jump the runtime installs must not replace
the landing pad indirect calls need).

A FunctionSite is a ProbeSite with `nop_len == 0` (the patched instruction is
not a nop: the runtime executes a relocated copy of it) whose `$argN` are the
platform ABI's integer arguments at entry: x86-64 rdi, rsi, rdx, rcx, r8, r9
(7 and 8 on the stack); i386 `4*N(%esp)`; aarch64 x0-x7.  On aarch64 a `bti c`
landing pad at the entry is skipped as `endbr64` is (the `B` must not replace it);
`paciasp`/`pacibsp` are not skipped: the runtime moves them into the stub, so they
sign the return address the handler may have swapped (plan/aarch64.py) -- except
in an object marked for BTI (its pages are guarded: an indirect call must land on a
landing pad, which paciasp is and `B` is not), where the probe goes after them and a
return probe is refused (the address is signed by then).
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import TargetError
from .argspec import ArgKind, ArgSpec
from .demangle import function_name, is_mangled
from .ehframe import fde_ranges
from .reader import get_elf_info, open_elf, read_elf_info
from .stapsdt import ProbeSite
from .symbols import SymbolTable

ENDBR64 = b"\xf3\x0f\x1e\xfa"
ENDBR32 = b"\xf3\x0f\x1e\xfb"
TABLE_FORMAT = 1  # of the function tables kept per binary (factstore.py)
NARGS = 8        # $arg1..$arg8; DWARF parameters come after them in a site's table
# aarch64 `bti c` / `bti jc` (hint #34 / #38): landing pads of indirect calls
A64_BTI_C = (b"\x5f\x24\x03\xd5", b"\xdf\x24\x03\xd5")
A64_PAC_SP = (b"\x3f\x23\x03\xd5", b"\x7f\x23\x03\xd5")     # paciasp, pacibsp
_NT_GNU_PROPERTY_TYPE_0 = 5
_AARCH64_FEATURE_1_AND, _AARCH64_FEATURE_1_BTI = 0xC0000000, 1
# DWARF register numbers of the x86-64 SysV integer argument registers
_X86_64_ARG_REGS = (5, 4, 1, 2, 8, 9)
_X86_64_NAMES = ("%rdi", "%rsi", "%rdx", "%rcx", "%r8", "%r9")
_I386_ESP = 4
_X86_64_RSP = 7
# gcc's hot/cold split: a .cold part is jumped to, never called (no return address)
_COLD = re.compile(r"\.cold(\.\d+)?$")
# gcc's clones of a function, each called as a function of its own: for constant
# arguments, with arguments removed or split (isra), an outlined part, an LTO-private copy
_CLONE = re.compile(r"(\.(constprop|isra|part|lto_priv)\.\d+)+$")


@dataclass(frozen=True)
class Function:
    name: str
    addr: int        # link-time address of the symbol
    size: int
    entry: int       # where the probe goes: addr, or after endbr


@dataclass(frozen=True)
class FunctionSite(ProbeSite):
    """A function entry (`is_return` False) or the return of the function entered at `pc`."""

    is_return: bool = False
    func_addr: int = 0
    func_size: int = 0
    # `.callee`/`.callees(N)`: the calls the probe covers, each the link-time return
    # addresses up the stack from the entry (innermost first, one per level); empty:
    # every call
    callers: tuple[tuple[int, ...], ...] = ()
    # "FILE:LINE" the site is named by (pointnames.py): `.statement`'s line as the line
    # table names it, a `.label`'s declaration, an inlined copy's function's declaration
    source: str = ""
    label: str = ""   # `.label`: the label's name

    def __str__(self) -> str:
        kind = ".return" if self.is_return else ""
        return (f'process("{self.path}").function("{self.name}"){kind} '
                f'pc={self.pc:#x} (function {self.func_addr:#x}+{self.func_size})')


def abi_args(machine: str) -> tuple[ArgSpec, ...]:
    """$arg1..$arg8 at a function's entry, by the platform ABI (as C longs)."""
    if machine == "x86_64":   # 7 and 8 are above the return address
        return (*(ArgSpec(f"8@{n}", 8, True, False, ArgKind.REG, reg=r, machine=machine)
                  for r, n in zip(_X86_64_ARG_REGS, _X86_64_NAMES, strict=True)),
                *(ArgSpec(f"8@{8 * i}(%rsp)", 8, True, False, ArgKind.MEM, base=_X86_64_RSP,
                          disp=8 * i, machine=machine) for i in (1, 2)))
    if machine == "aarch64":
        return tuple(ArgSpec(f"8@x{i}", 8, True, False, ArgKind.REG, reg=i, machine=machine)
                     for i in range(NARGS))
    if machine == "i386":
        return tuple(ArgSpec(f"-4@{4 * (i + 1)}(%esp)", 4, True, False, ArgKind.MEM,
                             base=_I386_ESP, disp=4 * (i + 1), machine=machine)
                     for i in range(NARGS))
    raise TargetError("", f"function probes are not supported on {machine} yet")


class FunctionTable:
    """The functions of one ELF file."""

    def __init__(self, path: str, machine: str, elf_class: int,
                 functions: list[Function]) -> None:
        self.path = path
        self.machine = machine
        self.elf_class = elf_class
        self.functions = functions
        self.unnamed = 0   # .eh_frame ranges that no symbol names (stripped): never probed
        self.signed: set[int] = set()   # aarch64: entries after a paciasp (BTI objects)
        self.ifuncs: dict[str, int] = {}   # IFUNC name -> its resolver (elf/ifunc.py)
        self.exported: set[int] = set()    # addresses .dynsym exports (GLOBAL/WEAK)
        self._by_addr: dict[int, list[Function]] | None = None

    def aliases(self, addr: int) -> list[Function]:
        """Every name of the function at addr."""
        if self._by_addr is None:
            self._by_addr = {}
            for f in self.functions:
                self._by_addr.setdefault(f.addr, []).append(f)
        return self._by_addr.get(addr, [])

    def containing(self, addr: int) -> Function | None:
        """The function (its preferred name) whose extent holds `addr`, None if none."""
        for f in self.functions:
            if f.addr <= addr < f.addr + f.size:
                return self.aliases(f.addr)[0]
        return None

    def match(self, pattern: str) -> list[Function]:
        """The functions `pattern` names, their compiler-made clones with them:
        `walk` matches `walk.constprop.0` (gcc's copy for constant arguments) as stap
        finds it by its DWARF name."""
        return [f for f in self.functions if fnmatch.fnmatchcase(f.name, pattern)
                or ((m := _CLONE.search(f.name)) is not None
                    and fnmatch.fnmatchcase(f.name[:m.start()], pattern))]

    def sites(self, functions: list[Function], is_return: bool) -> tuple[FunctionSite, ...]:
        args = abi_args(self.machine)
        # a site probed by its mangled name is still named as a C++ user reads it, and
        # a clone by the function's own name (stap's from DWARF)
        return tuple(FunctionSite(self.path, "function",
                                  function_name(_CLONE.sub("", f.name)), f.entry, 0,
                                  "", args, 0, self.machine, self.elf_class, is_return,
                                  f.addr, f.size)
                     for f in functions)


_cache: dict[tuple[str, int, int], FunctionTable] = {}


def entry_site(site: FunctionSite) -> FunctionSite:
    """The entry of the function a site inside it (a statement, a label) belongs to,
    where a function probe on it would go (after an endbr/bti)."""
    f = next((f for f in get_functions(site.path).functions if f.addr == site.func_addr),
             None)
    return replace(site, pc=f.entry if f is not None else site.func_addr, is_return=False)


def get_functions(path: str) -> FunctionTable:
    """Every probeable function of the ELF file at `path` (TargetError if unreadable):
    computed once per binary (its symbol tables, FDEs and entries: a quarter of a
    second on PostgreSQL, seconds on libjvm) and kept in the facts store."""
    import os

    from ..factstore import binary_key, load_or_compute, store_dir
    from .debuginfo import search_path
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    table = _cache.get(key)
    if table is not None:
        return table
    if store_dir() is None:
        table = _compute_table(path)[0]
    else:
        fkey = binary_key(path, f"function table {TABLE_FORMAT} {search_path()}")
        header, arrays = load_or_compute(fkey, lambda: _table_facts(_compute_table(path)),
                                         _debug_files_unchanged)
        table = _table_of_facts(os.path.realpath(path), header, arrays)
    _cache[key] = table
    return table


def _file_state(path: str) -> str:
    """What a debug-file candidate is now: its size and mtime, or "" if no file."""
    import os
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{st.st_size} {st.st_mtime_ns}" if os.path.isfile(path) else ""


def _debug_files_unchanged(facts: Any) -> bool:
    """A stored table of a stripped binary stays right while the debug-file candidates
    it consulted are as they were (none installed, none replaced)."""
    return all(_file_state(p) == state for p, state in facts[0]["debug_files"])


def _table_facts(computed: tuple[FunctionTable, tuple[str, ...]]) -> Any:
    from array import array
    table, consulted = computed
    fs = table.functions
    return ({"machine": table.machine, "elf_class": table.elf_class,
             "names": [f.name for f in fs], "unnamed": table.unnamed,
             "ifuncs": table.ifuncs, "debug_files": [[p, _file_state(p)] for p in consulted]},
            {"addr": array("q", [f.addr for f in fs]), "size": array("q", [f.size for f in fs]),
             "entry": array("q", [f.entry for f in fs]),
             "exported": array("q", sorted(table.exported)),
             "signed": array("q", sorted(table.signed))})


def _table_of_facts(path: str, header: dict[str, Any], arrays: dict[str, Any]) -> FunctionTable:
    table = FunctionTable(path, header["machine"], header["elf_class"],
                          [Function(n, a, z, e) for n, a, z, e in
                           zip(header["names"], arrays["addr"], arrays["size"], arrays["entry"],
                               strict=True)])
    table.unnamed = header["unnamed"]
    table.ifuncs = {str(k): int(v) for k, v in header["ifuncs"].items()}
    table.exported = set(arrays["exported"])
    table.signed = set(arrays["signed"])
    return table


def _compute_table(path: str) -> tuple[FunctionTable, tuple[str, ...]]:
    """The function table of `path`, and the debug-file candidates consulted for it (a
    stripped binary's static functions are in its debug file's `.symtab`)."""
    consulted: tuple[str, ...] = ()
    with open_elf(path) as h:
        info = read_elf_info(h)
        if info.machine not in ("x86_64", "i386", "aarch64"):
            raise TargetError(info.path, f"function probes are not supported on "
                                         f"{info.machine} yet")
        code = [s for s in info.segments if s.executable]
        bti = info.machine == "aarch64" and _marked_bti(h)
        signed: set[int] = set()
        by_addr: dict[int, list[tuple[str, str, int]]] = {}
        symbols = SymbolTable.from_handle(h)
        symbols._ensure_loaded()   # noqa: SLF001 - one pass over every symbol
        if not any(s["sh_type"] == "SHT_SYMTAB" for s in h.elffile.iter_sections()):
            debug_syms, consulted = _debug_file_functions(path)
            for sym in debug_syms:   # stripped: its debug file's .symtab
                symbols._by_name.setdefault(sym.name, []).append(sym)  # noqa: SLF001
        fdes = fde_ranges(h)
        fde_size = dict(fdes)
        ifuncs: dict[str, int] = {}
        exported = _exported(h)
        for name, syms in symbols._by_name.items():  # noqa: SLF001
            for sym in syms:
                if sym.type == "GNU_IFUNC" and sym.section not in ("ABS", "COMMON"):
                    ifuncs.setdefault(name, sym.value)
                if sym.type != "FUNC" or sym.section in ("ABS", "COMMON") or _COLD.search(name):
                    continue
                # an assembler function without .size: its FDE knows the length
                size = sym.size if sym.size > 0 else fde_size.get(sym.value, 0)
                if size <= 0 or not any(s.contains(sym.value, 1) for s in code):
                    continue
                by_addr.setdefault(sym.value, []).append((name, sym.bind, size))
        functions: list[Function] = []
        for addr in sorted(by_addr):
            names = by_addr[addr]
            names.sort(key=lambda n: (n[1] == "LOCAL", n[0].startswith("_"), n[0]))
            name, _bind, size = names[0]
            entry = addr
            seg = next(s for s in code if s.contains(addr, 1))
            off = seg.file_offset(addr, 4)
            head = h.read(off, 4) if off is not None else None
            skip = ((*A64_BTI_C, *(A64_PAC_SP if bti else ())) if info.machine == "aarch64"
                    else (ENDBR64, ENDBR32))
            if head in skip and size > 4:
                entry = addr + 4
                if head in A64_PAC_SP:
                    signed.add(addr)
            # aliases share the site: each name can be matched; a C++ symbol also by its
            # demangled name, listed first so that a glob names the site by it
            seen: set[str] = set()
            for alias, _b, _s in names:
                for n in (function_name(alias), alias) if is_mangled(alias) else (alias,):
                    if n not in seen:
                        seen.add(n)
                        functions.append(Function(n, addr, size, entry))
    table = FunctionTable(info.path, info.machine, info.elf_class, functions)
    table.unnamed = _unnamed_ranges(fdes, by_addr)
    # an IFUNC's resolver is a function too, but the name means what it resolves to
    table.functions = [f for f in functions if f.name not in ifuncs]
    table.ifuncs = ifuncs
    table.exported = exported
    table.signed = signed
    return table, consulted


def _exported(h: Any) -> set[int]:
    """The addresses of the functions `.dynsym` exports (GLOBAL or WEAK, default or
    protected visibility)."""
    from .symbols import decode_symbols

    elf = h.elffile
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None:
        return set()
    sections = list(elf.iter_sections())
    link = dynsym["sh_link"]
    syms = h.read(dynsym["sh_offset"], dynsym["sh_size"])
    strs = h.read(sections[link]["sh_offset"], sections[link]["sh_size"]) \
        if 0 <= link < len(sections) else None
    if syms is None or strs is None:
        return set()
    return {s.value for s in decode_symbols(syms, strs, [s.name for s in sections],
                                            elf.elfclass == 64, elf.little_endian)
            if s.type in ("FUNC", "GNU_IFUNC") and s.bind in ("GLOBAL", "WEAK")}


def _debug_file_functions(path: str) -> tuple[list[Any], tuple[str, ...]]:
    """The STT_FUNC symbols of the separate debug file of a stripped binary (its
    `.symtab` names the static functions, libc's `__strlen_evex` among them), and the
    candidate files looked at."""
    from .debuginfo import find_debug_file

    found = find_debug_file(path)
    debug = found.path
    if debug is None or debug == path:
        return [], found.tried
    try:
        with open_elf(debug) as dh:
            table = SymbolTable.from_handle(dh)
            return [s for s in table.all_symbols() if s.type == "FUNC"], found.tried
    except TargetError:
        return [], found.tried


def _marked_bti(h: Any) -> bool:
    """Whether the object's GNU property note asks for BTI (guarded pages)."""
    from .notes import RawNote, iter_raw_notes
    sec = h.get_section_bytes(".note.gnu.property")
    for note in iter_raw_notes(sec[1]) if sec else ():
        if not isinstance(note, RawNote) or note.name != b"GNU" or \
                note.type != _NT_GNU_PROPERTY_TYPE_0:
            continue
        d, off = note.desc, 0
        while off + 8 <= len(d):
            kind, size = int.from_bytes(d[off:off + 4], "little"), \
                int.from_bytes(d[off + 4:off + 8], "little")
            if kind == _AARCH64_FEATURE_1_AND and size >= 4:
                return bool(int.from_bytes(d[off + 8:off + 12], "little") &
                            _AARCH64_FEATURE_1_BTI)
            off += 8 + ((size + 7) & ~7)
    return False


def _unnamed_ranges(fdes: list[tuple[int, int]],
                    by_addr: dict[int, list[tuple[str, str, int]]]) -> int:
    """How many FDE ranges start inside no named function."""
    named = sorted((a, a + names[0][2]) for a, names in by_addr.items())
    starts = [lo for lo, _ in named]
    count = 0
    for start, _size in fdes:
        i = bisect.bisect_right(starts, start) - 1
        if i < 0 or start >= named[i][1]:
            count += 1
    return count


def unique_by_entry(functions: list[Function]) -> list[Function]:
    """One function per entry address (a glob matching two aliases probes it once)."""
    seen: dict[int, Function] = {}
    for f in functions:
        seen.setdefault(f.entry, f)
    return list(seen.values())


# They save their return address to come back through it later (setjmp, getcontext:
# a later longjmp/setcontext would "return" into pd_ret_tramp with no frame left), or
# return twice on one stack (vfork: the child's return pops the parent's frame).
_OWN_RETURN = re.compile(
    r"_*(sig)?setjmp|_*(get|swap)context|_*(libc_)?vfork|__x86\.get_pc_thunk.*")


def _never_returns_here(table: FunctionTable, f: Function, entry_point: int) -> str | None:
    """Why a return probe on `f` would break the program, or None."""
    if f.addr == entry_point:
        return "is the ELF entry point (entered without a return address)"
    if any(_OWN_RETURN.fullmatch(g.name) for g in table.aliases(f.addr)):
        return "reads its own return address (or returns twice)"
    if f.addr in table.signed:
        return ("signs its return address (paciasp) before the probe, which must follow "
                "it in an object marked for BTI")
    return None


def function_sites(point: Any, binary: str, rest: list[Any]) -> tuple[FunctionSite, ...]:
    """The sites of `.function("PATTERN")[.call|.return]` in `binary` (ScriptError if none)."""
    import difflib

    from ..errors import ScriptError
    pattern = rest[0].arg
    if not isinstance(pattern, str) or not pattern:
        raise ScriptError("function() takes a name or glob string", point.loc)
    tail = [c.name for c in rest[1:]]
    exported = "exported" in tail   # stap: only what the dynamic symbol table exports
    tail = [t for t in tail if t != "exported"]
    if tail not in ([], ["call"], ["return"]) or any(c.arg is not None for c in rest[1:]):
        raise ScriptError(f"unsupported function probe point component(s) "
                          f"'.{'.'.join(tail)}'", point.loc,
                          "supported: .function(\"NAME\"), .call, .return, .exported, "
                          ".inline (no .return: an inlined copy has none)")
    is_return = tail == ["return"]
    try:
        table = get_functions(binary)
    except TargetError as exc:
        raise ScriptError(str(exc), point.loc) from exc
    name_pattern, at_pcs = pattern, None
    if "@" in pattern:   # NAME@FILE[:LINE]: the functions DWARF declares there
        from .dwarf import functions_at
        try:
            name_pattern = pattern.partition("@")[0]
            _, at_pcs = functions_at(binary, pattern,
                                     {f.addr for f in table.match(name_pattern)})
        except TargetError as exc:
            raise ScriptError(f"function(\"{pattern}\"): {exc}", point.loc) from exc
    found = unique_by_entry([f for f in table.match(name_pattern) + _ifunc_targets(
                                 point, table, binary, name_pattern, pattern)
                             if (at_pcs is None or f.addr in at_pcs)
                             and (not exported or f.addr in table.exported)])
    if is_return:
        entry_point = _entry_point(binary)
        kept = []
        for f in found:
            why = _never_returns_here(table, f, entry_point)
            if why is None:
                kept.append(f)
            elif not any(c in pattern for c in "*?["):
                raise ScriptError(f"function(\"{f.name}\").return: {f.name} {why}", point.loc)
        found = kept
    if not found:
        names = sorted({f.name for f in table.functions})
        close = difflib.get_close_matches(pattern, names, n=3)
        hint = (f"did you mean {', '.join(close)}?" if close else
                f"{binary} is stripped: its .eh_frame lists {table.unnamed} functions without "
                "a name, which cannot be probed by name" if table.unnamed and not names else
                f"{binary} has no function symbols (stripped?)" if not names else None)
        raise ScriptError(f"function(\"{pattern}\") matches no function in {binary}",
                          point.loc, hint)
    return table.sites(found, is_return)


def _ifunc_targets(point: Any, table: FunctionTable, binary: str, name_pattern: str,
                   pattern: str) -> list[Function]:
    """The implementations the loader selects for the IFUNCs `name_pattern` names
    (elf/ifunc.py), each named by its own symbol.  An IFUNC that cannot be resolved
    here is an error when named exactly, skipped by a glob."""
    from ..errors import ScriptError

    out = []
    for name in sorted(n for n in table.ifuncs if fnmatch.fnmatchcase(n, name_pattern)):
        from .ifunc import selected_implementation  # ctypes: only for an IFUNC
        addr, why = selected_implementation(binary, name)
        impl = table.aliases(addr)[:1] if addr is not None else []
        if not impl:
            if any(c in pattern for c in "*?["):
                continue
            raise ScriptError(f"function(\"{pattern}\"): cannot probe {name}: "
                              + (why or f"its implementation at {addr:#x} is no function of "
                                        f"{binary}"), point.loc)
        out.extend(impl)
    return out


def _entry_point(path: str) -> int:
    return get_elf_info(path).entry
