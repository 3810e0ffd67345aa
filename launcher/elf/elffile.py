"""pyelftools' ELFFile as pydyn opens it, and what pyelftools raises on corrupt input.

Its own module so that importing the ELF helpers (reader.py) does not import
pyelftools (~50 ms): a new script on a binary seen before reads what it needs of
the binary from the facts store (factstore.py) and never opens it with pyelftools.
"""

from __future__ import annotations

import struct
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section

# What pyelftools (and its bundled construct) and struct raise on corrupt input.
PARSE_ERRORS = (ELFError, ConstructError, struct.error, UnicodeDecodeError)


class ElfFile(ELFFile):
    """pyelftools' ELFFile, each section made once and hash tables left unparsed.

    pyelftools makes a new section object at every `get_section` (`iter_sections` and
    `get_section_by_name` included) and parses a `.gnu.hash`/`.hash` table in full when
    it makes its section: ~20 ms on PostgreSQL's binary, each time.  pydyn looks
    symbols up in its own tables (symbols.py), never through those, so they stay plain
    sections of bytes."""

    def __init__(self, stream: Any, stream_loader: Any = None) -> None:
        self._sections: dict[int, Section] = {}
        super().__init__(stream, stream_loader)

    def get_section(self, n: int, type: Any = None) -> Section:  # noqa: A002 - pyelftools' name
        sec = self._sections.get(n)
        if sec is None:
            sec = self._sections[n] = super().get_section(n)
        if type and sec["sh_type"] not in type:
            raise ELFError(f"Unexpected section type {sec['sh_type']}, expected {type}")
        return sec

    def _make_section(self, section_header: Any) -> Section:
        if section_header["sh_type"] in ("SHT_GNU_HASH", "SHT_HASH"):
            return Section(section_header, self._get_section_name(section_header), self)
        return super()._make_section(section_header)
