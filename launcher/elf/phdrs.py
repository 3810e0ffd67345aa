"""An ELF file's header and program headers by a small `struct` walk.

What the kernel reads to run a program, and all the module cache needs for a
build-id: no section header, no pyelftools (whose import alone costs a warm run
~50 ms), and a file damaged beyond its program headers reads fine.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, NamedTuple

PT_INTERP = 3
PT_NOTE = 4
_MAX_PHNUM = 4096


class Segment(NamedTuple):
    type: int
    offset: int
    filesz: int


class ProgramHeaders(NamedTuple):
    elf_class: int      # 32 | 64
    little_endian: bool
    elf_type: int       # e_type: 2 EXEC, 3 DYN
    machine: int        # e_machine
    segments: tuple[Segment, ...]


def read_program_headers(f: BinaryIO) -> ProgramHeaders | None:
    """The headers of the ELF file open as `f`, or None if it is none or they are damaged."""
    try:
        f.seek(0)
        head = f.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) \
                or head[5] not in (1, 2):
            return None
        end = "<" if head[5] == 1 else ">"
        is64 = head[4] == 2
        if is64:
            if len(head) < 64:
                return None
            phoff, = struct.unpack_from(end + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
            phdr = struct.Struct(end + "IIQQQQQQ")   # type flags off vaddr paddr filesz ...
        else:
            phoff, = struct.unpack_from(end + "I", head, 28)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
            phdr = struct.Struct(end + "IIIIIIII")   # type off vaddr paddr filesz ...
        if phentsize < phdr.size or not 0 < phnum < _MAX_PHNUM:
            return None
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        if len(table) < phentsize * phnum:
            return None
        segments = []
        for i in range(phnum):
            ent = phdr.unpack_from(table, i * phentsize)
            off, size = (ent[2], ent[5]) if is64 else (ent[1], ent[4])
            segments.append(Segment(ent[0], off, size))
        e_type, machine = struct.unpack_from(end + "HH", head, 16)
    except (OSError, struct.error):
        return None
    return ProgramHeaders(64 if is64 else 32, end == "<", e_type, machine, tuple(segments))
