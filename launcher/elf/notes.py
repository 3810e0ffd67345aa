"""Raw ELF note records (Elf32_Nhdr / Elf64_Nhdr: both use 4-byte fields).

Decoded with `struct` straight from the section or segment bytes: pyelftools
mislabels some note types (NT_STAPSDT = 3 reads as NT_GNU_BUILD_ID) and is slow
on sections with thousands of notes.  Notes come from files we do not trust, so
every length is checked against the buffer and a bad one ends the walk with an
error record instead of an exception.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

_HEADER_SIZE = 12
# Sanity cap on one note's name: real ones are a few bytes ("GNU", "stapsdt").
_MAX_NAME = 256


class RawNote(NamedTuple):   # not dataclasses: see shmlayout/layout.py
    """One note record; `offset` is where its header starts in the buffer."""

    offset: int
    name: bytes       # without the terminating NUL
    type: int
    desc: bytes

    def __str__(self) -> str:
        name = self.name.decode("ascii", "replace")
        return f"note {name!r} type {self.type} at +{self.offset:#x} ({len(self.desc)} bytes)"


class BadNote(NamedTuple):
    """A note header that cannot be walked past (truncated or oversized)."""

    offset: int
    reason: str

    def __str__(self) -> str:
        return f"bad note at +{self.offset:#x}: {self.reason}"


def iter_note_spans(data: bytes | memoryview, little_endian: bool = True,
                    ) -> Iterator[tuple[int, bytes, int, int, int] | BadNote]:
    """Like iter_raw_notes but yields (offset, name, type, desc_start, desc_end), no copies."""
    header = struct.Struct("<III" if little_endian else ">III")
    unpack_from = header.unpack_from
    end = len(data)
    off = 0
    while off < end:
        if end - off < _HEADER_SIZE:
            # Trailing padding shorter than a header is harmless; anything else is not.
            if any(data[off:end]):
                yield BadNote(off, "truncated note header")
            return
        namesz, descsz, ntype = unpack_from(data, off)
        name_off = off + _HEADER_SIZE
        desc_off = (name_off + namesz + 3) & ~3
        if namesz > _MAX_NAME or desc_off + descsz > end:
            yield BadNote(off, f"note size out of bounds (namesz {namesz}, descsz {descsz})")
            return
        name = bytes(data[name_off:name_off + namesz]).rstrip(b"\0")
        yield off, name, ntype, desc_off, desc_off + descsz
        off = (desc_off + descsz + 3) & ~3


def iter_raw_notes(data: bytes | memoryview, little_endian: bool = True,
                   ) -> Iterator[RawNote | BadNote]:
    """Walk the note records in `data`; a BadNote is always the last item yielded."""
    for item in iter_note_spans(data, little_endian):
        if isinstance(item, BadNote):
            yield item
            return
        off, name, ntype, start, end = item
        yield RawNote(off, name, ntype, bytes(data[start:end]))
