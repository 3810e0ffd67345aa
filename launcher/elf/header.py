"""Facts read straight from an ELF file's header and program headers by a small
`struct` walk, without pyelftools: the machine, the program headers the kernel reads
to run a program, and the GNU build-id.

A warm run (a cache hit, `cache.py`), checking a -c target and choosing how to start
it (`session.py`) need only these; importing pyelftools costs ~50 ms, which those
paths do not pay (tests/test_startup.py checks what a warm run imports).  A file
damaged beyond its program headers (its section headers, say) reads fine, as the
kernel runs it.  Not-ELF, truncated or unreadable files give None, never an
exception: the full parse (`reader.get_elf_info`) reports what is wrong with a target.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, NamedTuple

from .notes import RawNote, iter_raw_notes

EM_X86_64 = 62
EM_AARCH64 = 183
NT_GNU_BUILD_ID = 3
# A PT_NOTE segment larger than this is not read for a build-id (real ones are a few
# hundred bytes; the file is not trusted).
MAX_NOTE_SEGMENT = 1 << 20
_ELFMAG = b"\x7fELF"
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
        if len(head) < 52 or head[:4] != _ELFMAG or head[4] not in (1, 2) \
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


def get_machine(path: str) -> int | None:
    """e_machine of an ELF file from its first 20 bytes (no full parse), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != _ELFMAG:
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def get_build_id(path: str) -> str | None:
    """The GNU build-id of an ELF file from its PT_NOTE segments only; None if none/not ELF."""
    try:
        with open(path, "rb") as f:
            headers = read_program_headers(f)
            if headers is None:
                return None
            for seg in headers.segments:
                if seg.type != PT_NOTE or seg.filesz > MAX_NOTE_SEGMENT:
                    continue
                f.seek(seg.offset)
                for note in iter_raw_notes(f.read(seg.filesz), headers.little_endian):
                    if isinstance(note, RawNote) and note.name == b"GNU" \
                            and note.type == NT_GNU_BUILD_ID and note.desc:
                        return note.desc.hex()
    except OSError:
        return None
    return None
