"""Symbols of one ELF file, for resolving symbolic USDT operands.

`sym(%rip)`, `sym@GOTOFF(%ebx)` and `%fs:sym@tpoff` name a symbol the linker
has already resolved inside the instruction stream but not in the note text, so
pydyn looks it up here.  Both .symtab and .dynsym are read (a stripped binary
keeps only .dynsym), decoded with `struct` (pyelftools builds an object per
symbol, far too slow for a 100k-symbol .symtab) and only on the first lookup.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .reader import ElfHandle, open_elf

_STT = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE", 5: "COMMON",
        6: "TLS", 10: "GNU_IFUNC"}
_STB = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "GNU_UNIQUE"}
_SHN_UNDEF = 0
_SHN_LORESERVE = 0xFF00
_SHN_SPECIAL = {0xFFF1: "ABS", 0xFFF2: "COMMON", 0xFFFF: "XINDEX"}


@dataclass(frozen=True)
class Symbol:
    """One defined symbol: st_value is a link-time vaddr (a TLS offset for type TLS)."""

    name: str
    value: int
    size: int
    type: str      # 'OBJECT' | 'FUNC' | 'TLS' | 'NOTYPE' | ...
    bind: str      # 'LOCAL' | 'GLOBAL' | 'WEAK' | ...
    section: str   # section name, or 'ABS' | 'COMMON'

    def __str__(self) -> str:
        return (f"{self.name} = {self.value:#x} ({self.bind} {self.type}, "
                f"{self.size} bytes, {self.section})")


class SymbolTable:
    """Name → defined symbol, merged from .symtab and .dynsym."""

    def __init__(self, loader: Callable[[], Iterable[Symbol]],
                 got_address: int | None = None) -> None:
        self._loader: Callable[[], Iterable[Symbol]] | None = loader
        self._by_name: dict[str, list[Symbol]] = {}
        self._got_address = got_address

    @classmethod
    def from_symbols(cls, symbols: Iterable[Symbol],
                     got_address: int | None = None) -> SymbolTable:
        items = list(symbols)
        return cls(lambda: items, got_address)

    @classmethod
    def from_handle(cls, h: ElfHandle) -> SymbolTable:
        """A table over an open file, decoded lazily: look up only inside `open_elf`."""
        elf = h.elffile
        little = elf.little_endian
        is64 = elf.elfclass == 64
        sections = list(elf.iter_sections())
        names = [s.name for s in sections]
        tables = []
        for sec in sections:
            if sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
                link = sec["sh_link"]
                if 0 <= link < len(sections):
                    strtab = sections[link]
                    tables.append((sec["sh_offset"], sec["sh_size"],
                                   strtab["sh_offset"], strtab["sh_size"]))

        def load() -> list[Symbol]:
            out: list[Symbol] = []
            for sym_off, sym_size, str_off, str_size in tables:
                syms = h.read(sym_off, sym_size)
                strs = h.read(str_off, str_size)
                if syms is not None and strs is not None:
                    out.extend(decode_symbols(syms, strs, names, is64, little))
            return out

        got = None
        gotplt = elf.get_section_by_name(".got.plt")
        if gotplt is not None:
            got = gotplt["sh_addr"]
        return cls(load, got)

    def _ensure_loaded(self) -> None:
        if self._loader is None:
            return
        loader, self._loader = self._loader, None
        for sym in loader():
            self._by_name.setdefault(sym.name, []).append(sym)

    def get_symbols(self, name: str) -> tuple[Symbol, ...]:
        """Every distinct definition of `name` (a static may be defined in several files)."""
        self._ensure_loaded()
        seen: dict[tuple[int, str], Symbol] = {}
        for sym in self._by_name.get(name, ()):
            seen.setdefault((sym.value, sym.type), sym)
        return tuple(seen.values())

    def get_symbol(self, name: str) -> Symbol | None:
        """The definition of `name`, or None if undefined or ambiguous.

        Ambiguous means several definitions at different addresses (file-local
        statics of the same name): the note text does not say which one it
        meant, and guessing would read the wrong variable.
        """
        syms = self.get_symbols(name)
        return syms[0] if len(syms) == 1 else None

    def all_symbols(self) -> Iterable[Symbol]:
        """Every defined symbol of both tables (a name in both comes twice)."""
        self._ensure_loaded()
        for syms in self._by_name.values():
            yield from syms

    def get_got_address(self) -> int | None:
        """Address the i386 PIC register points at (`_GLOBAL_OFFSET_TABLE_`, else .got.plt)."""
        sym = self.get_symbol("_GLOBAL_OFFSET_TABLE_")
        if sym is not None:
            return sym.value
        return self._got_address

    def __len__(self) -> int:
        self._ensure_loaded()
        return sum(len(v) for v in self._by_name.values())

    def __str__(self) -> str:
        return f"SymbolTable({len(self)} symbols)"


def decode_symbols(syms: bytes, strs: bytes, section_names: list[str], is64: bool,
                    little: bool) -> Iterable[Symbol]:
    e = "<" if little else ">"
    if is64:
        st = struct.Struct(e + "IBBHQQ")     # name info other shndx value size
    else:
        st = struct.Struct(e + "IIIBBH")     # name value size info other shndx
    usable = len(syms) - len(syms) % st.size
    for fields in st.iter_unpack(memoryview(syms)[:usable]):
        if is64:
            st_name, info, _other, shndx, value, size = fields
        else:
            st_name, value, size, info, _other, shndx = fields
        if shndx == _SHN_UNDEF or st_name == 0 or st_name >= len(strs):
            continue
        end = strs.find(b"\0", st_name)
        if end < 0:
            continue
        name = strs[st_name:end].decode("utf-8", "replace")
        if shndx >= _SHN_LORESERVE:
            section = _SHN_SPECIAL.get(shndx, f"shn {shndx:#x}")
        elif shndx < len(section_names):
            section = section_names[shndx]
        else:
            section = f"section {shndx}"
        yield Symbol(name, value, size, _STT.get(info & 0xF, str(info & 0xF)),
                     _STB.get(info >> 4, str(info >> 4)), section)


def get_symbol_table(path: str) -> SymbolTable:
    """The symbol table of the file at `path`, fully decoded (TargetError if unreadable)."""
    with open_elf(path) as h:
        table = SymbolTable.from_handle(h)
        table._ensure_loaded()
    return table


def get_default_symbols(path: str, names: set[str]) -> dict[str, int]:
    """Values of the default-version (`name@@VER`, or unversioned) definitions of `names`
    in .dynsym: i386 glibc also defines an older, different dlopen@GLIBC_2.0."""
    out: dict[str, int] = {}
    with open_elf(path) as h:
        dynsym, dynstr = h.get_section_bytes(".dynsym"), h.get_section_bytes(".dynstr")
        versym = h.get_section_bytes(".gnu.version")
        if dynsym is None or dynstr is None:
            return out
        is64 = h.elffile.elfclass == 64
        entry = struct.Struct("<IBBHQQ" if is64 else "<IIIBBH")
        strs = dynstr[1]
        for i, f in enumerate(entry.iter_unpack(dynsym[1][:len(dynsym[1]) // entry.size
                                                          * entry.size])):
            st_name, value, shndx = (f[0], f[4], f[3]) if is64 else (f[0], f[1], f[5])
            if shndx == 0 or not st_name:
                continue
            name = strs[st_name:strs.find(b"\0", st_name)].decode(errors="replace")
            if name not in names:
                continue
            hidden = versym is not None and len(versym[1]) >= 2 * i + 2 and \
                struct.unpack_from("<H", versym[1], 2 * i)[0] & 0x8000
            if not hidden:
                out[name] = value
    return out
