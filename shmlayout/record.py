"""Encoding of output-ring records (see the layout.py docstring for the rules).

The runtime writes records in C; this is the Python side of the same rules,
used by the launcher to read them (and by tests to produce them).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

from .layout import REC
from .view import Buffer, LayoutError

REC_HEADER_SIZE: Final = REC.sizeof
_HDR: Final = struct.Struct("<IHHIi")
_I64: Final = struct.Struct("<q")
_U32: Final = struct.Struct("<I")

assert _HDR.size == REC_HEADER_SIZE
assert [m.offset for m in REC.members] == [0, 4, 6, 8, 12]


def string_arg_size(n: int) -> int:
    """Bytes a string argument of n bytes occupies: u32 length + bytes, padded to 8."""
    return (n + 11) & ~7


class RecordHeader(NamedTuple):   # not a dataclass: see layout.py
    len: int
    kind: int
    nargs: int
    fmt_id: int
    pid: int


def encode_args(args: Sequence[int | bytes]) -> bytes:
    out = bytearray()
    for a in args:
        if isinstance(a, bytes):
            out += _U32.pack(len(a)) + a + bytes(string_arg_size(len(a)) - 4 - len(a))
        else:
            out += _I64.pack(a)
    return bytes(out)


def pack_record(kind: int, fmt_id: int, pid: int, args: Sequence[int | bytes] = ()) -> bytes:
    payload = encode_args(args)
    return _HDR.pack(REC_HEADER_SIZE + len(payload), kind, len(args), fmt_id, pid) + payload


def unpack_header(buf: Buffer | bytes, offset: int = 0) -> RecordHeader:
    length, kind, nargs, fmt_id, pid = _HDR.unpack_from(buf, offset)
    return RecordHeader(length, kind, nargs, fmt_id, pid)


def decode_args(buf: Buffer | bytes, offset: int, end: int, kinds: str) -> list[int | bytes]:
    """Decode the arguments in buf[offset:end]; kinds has 'i' (i64) or 's' (string) per arg."""
    out: list[int | bytes] = []
    at = offset
    for k in kinds:
        if k == "i":
            if at + 8 > end:
                raise LayoutError("record too short for an integer argument")
            out.append(_I64.unpack_from(buf, at)[0])
            at += 8
        elif k == "s":
            if at + 4 > end:
                raise LayoutError("record too short for a string argument")
            n = _U32.unpack_from(buf, at)[0]
            if at + string_arg_size(n) > end:
                raise LayoutError(f"string argument of {n} bytes overruns the record")
            out.append(bytes(buf[at + 4:at + 4 + n]))
            at += string_arg_size(n)
        else:
            raise ValueError(f"argument kind {k!r} is neither 'i' nor 's'")
    return out
