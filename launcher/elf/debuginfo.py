"""Where the DWARF of a binary lives: in the binary, or in a separate debug file.

Distributions strip their binaries and ship the DWARF apart (Debian's `-dbgsym`
and `libc6-dbg`, Fedora's `-debuginfo`).  A stripped binary names its debug
file in two ways, and `find_debug_file` tries both, as gdb and elfutils do:

- by build-id: `ROOT/.build-id/xx/yyyy.debug` for each absolute ROOT of the
  search path (`/usr/lib/debug`); the file is taken only if its own build-id is
  the binary's;
- by `.gnu_debuglink` (a file name and the CRC-32 of that file): the name in
  the binary's directory, in its `.debug/` subdirectory, and under each
  absolute ROOT followed by the binary's directory
  (`/usr/lib/debug/usr/bin/prog.debug`); the file is taken only if its CRC
  matches (and, when both have one, its build-id is the binary's).

The search path is SystemTap's `SYSTEMTAP_DEBUGINFO_PATH` (elfutils' syntax:
':'-separated; an empty entry is the binary's directory, a relative one a
subdirectory of it, an absolute one a root; a leading '+' checks CRCs, which is
the default, '-' skips the check), default `+:.debug:/usr/lib/debug`.  Tests
point it at a directory of their own.

A candidate that exists but does not match is remembered, so "no DWARF" can say
which file was rejected and why instead of only that nothing was found.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import NamedTuple

from ..errors import TargetError

DEFAULT_PATH = "+:.debug:/usr/lib/debug"
_NT_GNU_BUILD_ID = 3


class DebugLink(NamedTuple):
    name: str
    crc: int


class Lookup(NamedTuple):
    """What the search found: the file with the DWARF (None: nothing usable) and
    the candidates it tried that exist but were rejected, with why."""

    path: str | None
    rejected: tuple[str, ...] = ()
    tried: tuple[str, ...] = ()


def search_path() -> str:
    return os.environ.get("SYSTEMTAP_DEBUGINFO_PATH", DEFAULT_PATH)


def _sections(path: str) -> tuple[bool, str | None, DebugLink | None]:
    """(has .debug_info with contents, hex build-id, debug link) of the ELF at `path`."""
    from elftools.common.exceptions import ELFError

    from .elffile import ElfFile

    try:
        with open(path, "rb") as stream:
            elf = ElfFile(stream)
            has_info = False
            build_id: str | None = None
            link: DebugLink | None = None
            for sec in elf.iter_sections():
                name = sec.name
                if name in (".debug_info", ".zdebug_info"):
                    has_info = sec["sh_type"] != "SHT_NOBITS" and sec["sh_size"] > 0
                elif name == ".gnu_debuglink" and sec["sh_type"] != "SHT_NOBITS":
                    link = _parse_debuglink(sec.data(), elf.little_endian)
                elif sec["sh_type"] == "SHT_NOTE" and build_id is None:
                    build_id = _build_id(sec.data(), elf.little_endian)
            return has_info, build_id, link
    except (ELFError, OSError, ValueError, struct.error):
        return False, None, None


def _parse_debuglink(data: bytes, little_endian: bool) -> DebugLink | None:
    end = data.find(b"\0")
    if end <= 0:
        return None
    crc_at = (end + 4) & ~3
    if crc_at + 4 > len(data):
        return None
    (crc,) = struct.unpack_from("<I" if little_endian else ">I", data, crc_at)
    name = data[:end].decode(errors="replace")
    return DebugLink(name, crc) if "/" not in name else None


def _build_id(data: bytes, little_endian: bool) -> str | None:
    from .notes import RawNote, iter_raw_notes

    for note in iter_raw_notes(data, little_endian):
        if isinstance(note, RawNote) and note.name == b"GNU" and note.type == _NT_GNU_BUILD_ID:
            return note.desc.hex()
    return None


def file_crc(path: str) -> int:
    """The CRC-32 `.gnu_debuglink` records (zlib's polynomial), of the whole file."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc & 0xFFFFFFFF


def find_debug_file(path: str, search: str | None = None) -> Lookup:
    """The file holding `path`'s DWARF: `path` itself when it has `.debug_info`,
    else its separate debug file (see the module docstring)."""
    has_info, build_id, link = _sections(path)
    if has_info:
        return Lookup(path)
    spec = search_path() if search is None else search
    check_default = True
    if spec[:1] in "+-" and spec:
        check_default = spec[0] == "+"
        spec = spec[1:]
    entries: list[tuple[str, bool]] = []
    for entry in spec.split(":"):
        check = check_default
        if entry[:1] in ("+", "-") and entry:
            check = entry[0] == "+"
            entry = entry[1:]
        entries.append((entry, check))
    real = os.path.realpath(path)
    bindir = os.path.dirname(real)
    rejected: list[str] = []
    tried: list[str] = []

    if build_id and len(build_id) > 2:
        for root, _check in entries:
            if not root.startswith("/"):
                continue
            cand = os.path.join(root, ".build-id", build_id[:2], build_id[2:] + ".debug")
            tried.append(cand)
            if not os.path.isfile(cand):
                continue
            c_info, c_id, _ = _sections(cand)
            if c_id != build_id:
                rejected.append(f"{cand}: build-id {c_id or 'none'}, not {build_id}")
            elif not c_info:
                rejected.append(f"{cand}: has no .debug_info")
            else:
                return Lookup(cand, tuple(rejected), tuple(tried))

    if link is not None:
        for entry, check in entries:
            if entry.startswith("/"):
                where = os.path.join(entry, bindir.lstrip("/"))
            elif entry:
                where = os.path.join(bindir, entry)
            else:
                where = bindir
            cand = os.path.join(where, link.name)
            tried.append(cand)
            if not os.path.isfile(cand) or os.path.realpath(cand) == real:
                continue
            c_info, c_id, _ = _sections(cand)
            if check and (crc := file_crc(cand)) != link.crc:
                rejected.append(f"{cand}: CRC {crc:08x}, the debug link wants {link.crc:08x}")
            elif build_id and c_id and c_id != build_id:
                rejected.append(f"{cand}: build-id {c_id}, not {build_id}")
            elif not c_info:
                rejected.append(f"{cand}: has no .debug_info")
            else:
                return Lookup(cand, tuple(rejected), tuple(tried))
    return Lookup(None, tuple(rejected), tuple(tried))


def no_debug_info(path: str, lookup: Lookup) -> TargetError:
    """The error for a binary without usable DWARF, naming what was tried."""
    reason = "has no DWARF debug information (.debug_info); rebuild it with -g"
    if lookup.rejected:
        reason += "; debug files rejected: " + "; ".join(lookup.rejected)
    elif lookup.tried:
        reason += (", or install its debug file (looked for " + ", ".join(lookup.tried[:4])
                   + (", ..." if len(lookup.tried) > 4 else "")
                   + "; SYSTEMTAP_DEBUGINFO_PATH sets where)")
    return TargetError(path, reason)
