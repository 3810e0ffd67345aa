"""Facts read straight from an ELF file's header and program headers, without
pyelftools: the ELF machine and the GNU build-id.

A warm run (a cache hit, `cache.py`) and choosing how to start a -c program
(`session.emulator_prefix`) need only these; importing pyelftools costs ~50 ms,
which those paths do not pay (tests/test_startup.py checks what a warm run
imports).  Not-ELF, truncated or unreadable files give None, never an exception:
the full parse (`reader.get_elf_info`) reports what is wrong with a target.
"""

from __future__ import annotations

import struct

from .notes import RawNote, iter_raw_notes

EM_X86_64 = 62
EM_AARCH64 = 183
PT_NOTE = 4
NT_GNU_BUILD_ID = 3
# A PT_NOTE segment larger than this is not read for a build-id (real ones are a few
# hundred bytes; the file is not trusted).
MAX_NOTE_SEGMENT = 1 << 20
_ELFMAG = b"\x7fELF"


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
            head = f.read(64)
            if len(head) < 52 or head[:4] != _ELFMAG or head[4] not in (1, 2) \
                    or head[5] not in (1, 2):
                return None
            end = "<" if head[5] == 1 else ">"
            if head[4] == 2:
                if len(head) < 64:
                    return None
                phoff, = struct.unpack_from(end + "Q", head, 32)
                phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
                phdr = struct.Struct(end + "IIQQQQQQ")   # type flags off vaddr paddr filesz ...
            else:
                phoff, = struct.unpack_from(end + "I", head, 28)
                phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
                phdr = struct.Struct(end + "IIIIIIII")   # type off vaddr paddr filesz ...
            if phentsize < phdr.size or not 0 < phnum < 4096:
                return None
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                if len(table) < (i + 1) * phentsize:
                    return None
                ent = phdr.unpack_from(table, i * phentsize)
                if ent[0] != PT_NOTE:
                    continue
                off, size = (ent[2], ent[5]) if head[4] == 2 else (ent[1], ent[4])
                if size > MAX_NOTE_SEGMENT:
                    continue
                f.seek(off)
                for note in iter_raw_notes(f.read(size), end == "<"):
                    if isinstance(note, RawNote) and note.name == b"GNU" \
                            and note.type == NT_GNU_BUILD_ID and note.desc:
                        return note.desc.hex()
    except (OSError, struct.error):
        return None
    return None
