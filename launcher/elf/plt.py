"""`process("PATH").plt("NAME")`: the PLT stubs through which the binary calls
NAME in another object (globs allowed; `$$name` is the callee's name); `.return`:
where that call returns to the caller (the stub jumps to the callee, whose return
is the call's).

Each 16-byte stub of `.plt.sec` (IBT layouts) or else `.plt` is decoded: its
indirect jump names the GOT slot it goes through (x86-64 `jmp *disp(%rip)`,
after an `endbr64` and a `bnd` prefix in `.plt.sec`; i386 `jmp *disp(%ebx)` in
PIC code, `jmp *abs` otherwise), and the JUMP_SLOT relocation of that slot names
the function.  The site is the stub (after an `endbr`), patched as a function
entry is; `.plt.got` (non-lazy slots) is decoded the same way (8-byte stubs).
"""

from __future__ import annotations

import fnmatch
import struct
from typing import Any

from ..errors import ScriptError, TargetError
from .functions import ENDBR32, ENDBR64, FunctionSite, abi_args
from .reader import open_elf, read_elf_info


def plt_entries(path: str) -> list[tuple[str, int, int]]:
    """(callee name, stub address, stub size) of every PLT stub of the ELF file."""
    with open_elf(path) as h:
        info = read_elf_info(h)
        elf = h.elffile
        slots: dict[int, str] = {}
        for name in (".rela.plt", ".rel.plt"):
            sec: Any = elf.get_section_by_name(name)
            if sec is None:
                continue
            symtab: Any = elf.get_section(sec["sh_link"])
            for rel in sec.iter_relocations():
                sym = symtab.get_symbol(rel["r_info_sym"])
                if sym is not None and sym.name:
                    slots[rel["r_offset"]] = sym.name
        gotplt = elf.get_section_by_name(".got.plt")
        ebx = gotplt["sh_addr"] if gotplt is not None else 0
        out: list[tuple[str, int, int]] = []
        names = [".plt.sec" if elf.get_section_by_name(".plt.sec") is not None else ".plt",
                 ".plt.got"]
        for secname in names:
            sec = elf.get_section_by_name(secname)
            if sec is None or sec["sh_type"] == "SHT_NOBITS":
                continue
            data, base = sec.data(), sec["sh_addr"]
            step = 8 if secname == ".plt.got" else 16
            for off in range(0, len(data) - step + 1, step):
                slot = _slot(data[off:off + step], base + off, info.machine, ebx)
                if slot is not None and slot in slots:
                    out.append((slots[slot], base + off, step))
        return out


def _slot(stub: bytes, addr: int, machine: str, ebx: int) -> int | None:
    """The GOT slot the stub at `addr` jumps through, None if it is no jump stub."""
    i = 4 if stub[:4] in (ENDBR64, ENDBR32) else 0
    if stub[i:i + 1] == b"\xf2":   # bnd
        i += 1
    if stub[i:i + 1] != b"\xff" or i + 6 > len(stub):
        return None
    modrm = stub[i + 1]
    (disp,) = struct.unpack_from("<i", stub, i + 2)
    if machine == "x86_64" and modrm == 0x25:
        return addr + i + 6 + disp
    if machine == "i386" and modrm == 0xA3:
        return (ebx + disp) & 0xFFFFFFFF
    if machine == "i386" and modrm == 0x25:
        return disp & 0xFFFFFFFF
    return None


def plt_sites(point: Any, binary: str, rest: list[Any]) -> tuple[FunctionSite, ...]:
    pattern = rest[0].arg if rest[0].arg is not None else "*"
    is_return = len(rest) == 2 and rest[1].name == "return" and rest[1].arg is None
    if not isinstance(pattern, str) or (len(rest) != 1 and not is_return):
        raise ScriptError('plt takes a name or glob: .plt("NAME"), .plt("NAME").return',
                          point.loc)
    try:
        entries = plt_entries(binary)
        with open_elf(binary) as h:
            info = read_elf_info(h)
            sites = []
            for name, addr, size in entries:
                callee = name.split("@")[0]
                if not fnmatch.fnmatchcase(callee, pattern):
                    continue
                seg = next((s for s in info.segments if s.contains(addr, 4)), None)
                off = seg.file_offset(addr, 4) if seg is not None else None
                head = h.read(off, 4) if off is not None else None
                entry = addr + 4 if head in (ENDBR64, ENDBR32) else addr
                sites.append(FunctionSite(info.path, "function", callee, entry, 0, "",
                                          abi_args(info.machine), 0, info.machine,
                                          info.elf_class, is_return, addr, size))
    except TargetError as exc:
        raise ScriptError(str(exc), point.loc) from exc
    if not sites:
        raise ScriptError(f'plt("{pattern}") matches no PLT entry of {binary}', point.loc,
                          "the binary calls no such function through its PLT")
    return tuple(sites)
