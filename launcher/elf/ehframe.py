"""Code ranges from `.eh_frame`: what a stripped binary still says about
its functions.

Every function compiled with unwind tables (the default on x86-64 and i386) has
an FDE giving its start and length, and `strip` keeps `.eh_frame` because
exceptions and backtraces need it.  Only the ranges are read here (CIE
augmentation for the pointer encoding, then each FDE's pc_begin and pc_range),
with a `struct` walk: pyelftools decodes every CFA instruction, which is far
slower on a large library and not needed.  Malformed data ends the walk (the
ranges read so far are kept): a hostile file is never an exception.
"""

from __future__ import annotations

import struct

from .reader import ElfHandle

# DW_EH_PE_* pointer encodings: the low nibble is the format, 0x70 the application
_PE_OMIT = 0xFF
_PE_PCREL = 0x10
_PE_DATAREL = 0x30


class _Bad(Exception):
    """Malformed .eh_frame data: stop reading."""


class _Reader:
    def __init__(self, data: bytes, little: bool, is64: bool) -> None:
        self.data = data
        self.e = "<" if little else ">"
        self.ptr = 8 if is64 else 4

    def fixed(self, pos: int, fmt: str) -> tuple[int, int]:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.data):
            raise _Bad
        return struct.unpack_from(self.e + fmt, self.data, pos)[0], pos + size

    def leb(self, pos: int, signed: bool) -> tuple[int, int]:
        value = shift = 0
        while True:
            if pos >= len(self.data) or shift > 70:
                raise _Bad
            b = self.data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                if signed and b & 0x40:
                    value -= 1 << shift
                return value, pos

    def cstr(self, pos: int) -> tuple[bytes, int]:
        end = self.data.find(b"\0", pos)
        if end < 0:
            raise _Bad
        return self.data[pos:end], end + 1

    def encoded(self, pos: int, enc: int, section_addr: int) -> tuple[int, int]:
        """A DW_EH_PE-encoded value at pos: (value, next pos); pcrel applied."""
        fmt = enc & 0x0F
        start = pos
        if fmt == 0x00:
            value, pos = self.fixed(pos, "Q" if self.ptr == 8 else "I")
        elif fmt in (0x01, 0x09):
            value, pos = self.leb(pos, fmt == 0x09)
        else:
            code = {0x02: "H", 0x03: "I", 0x04: "Q", 0x0A: "h", 0x0B: "i", 0x0C: "q"}.get(fmt)
            if code is None:
                raise _Bad
            value, pos = self.fixed(pos, code)
        if enc & 0x70 == _PE_PCREL:
            value += section_addr + start
        elif enc & 0x70 not in (0, _PE_DATAREL):
            raise _Bad   # textrel/funcrel/aligned: not produced for FDE addresses
        return value & ((1 << (8 * self.ptr)) - 1), pos


def _cie_fde_encoding(r: _Reader, pos: int, end: int, section_addr: int) -> int:
    """The FDE pointer encoding of the CIE whose body starts at pos ('R', else absptr)."""
    version, pos = r.fixed(pos, "B")
    aug, pos = r.cstr(pos)
    if b"eh" in aug:
        pos += r.ptr
    _, pos = r.leb(pos, False)        # code alignment
    _, pos = r.leb(pos, True)         # data alignment
    if version == 1:
        pos += 1                      # return address register
    else:
        _, pos = r.leb(pos, False)
    if not aug.startswith(b"z"):
        return 0
    _, pos = r.leb(pos, False)        # augmentation data length
    for ch in aug[1:]:
        if pos >= end:
            raise _Bad
        if ch == ord("R"):
            return int(r.fixed(pos, "B")[0])
        if ch == ord("L"):
            pos += 1
        elif ch == ord("P"):
            penc, pos = r.fixed(pos, "B")
            _, pos = r.encoded(pos, penc & 0x7F, section_addr)
        elif ch not in (ord("S"), ord("B")):
            raise _Bad
    return 0


def fde_ranges(h: ElfHandle) -> list[tuple[int, int]]:
    """(start, size) of every FDE in `.eh_frame`, link-time addresses, sorted."""
    elf = h.elffile
    sec = elf.get_section_by_name(".eh_frame")
    if sec is None or sec["sh_type"] == "SHT_NOBITS":
        return []
    data = h.read(sec["sh_offset"], sec["sh_size"])
    if data is None:
        return []
    r = _Reader(data, elf.little_endian, elf.elfclass == 64)
    addr = int(sec["sh_addr"])
    encodings: dict[int, int] = {}
    out: set[tuple[int, int]] = set()
    pos = 0
    try:
        while pos + 4 <= len(data):
            length, body = r.fixed(pos, "I")
            if length == 0:           # terminator
                break
            if length == 0xFFFFFFFF:
                length, body = r.fixed(body, "Q")
            end = body + length
            if end > len(data):
                break
            cie_id, after_id = r.fixed(body, "I")
            if cie_id == 0:
                encodings[pos] = _cie_fde_encoding(r, after_id, end, addr)
            else:
                cie = body - cie_id   # relative to the CIE pointer field itself
                if cie not in encodings:   # a CIE after its FDE: unusual, allowed
                    clen, cbody = r.fixed(cie, "I")
                    if clen == 0xFFFFFFFF:
                        clen, cbody = r.fixed(cbody, "Q")
                    encodings[cie] = _cie_fde_encoding(r, cbody + 4, cbody + clen, addr)
                enc = encodings[cie]
                if enc != _PE_OMIT:
                    start, p = r.encoded(after_id, enc, addr)
                    size, _ = r.encoded(p, enc & 0x0F, addr)
                    if size > 0:
                        out.add((start, size))
            pos = end
    except _Bad:
        pass
    return sorted(out)
