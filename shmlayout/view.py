"""Python access to the shared segment, driven by the same definition as pd_shm.h.

An integer field is stored with one store of its width (a memoryview cast), never
through ``struct.pack_into``: that one zero-fills its destination before it writes,
so a probe module reading the word meanwhile could see 0 (a state word would read
PD_PROC_FREE, and another process would claim the entry).  Aligned stores of 1-8
bytes are single-copy atomic on x86 and aarch64.  Read-modify-write sequences are not
atomic: use them for set-up, for fields nothing else writes at the time, and for
reading counters where a torn value does not matter.
"""

from __future__ import annotations

import mmap
import struct
import time
from typing import Any, Final, NamedTuple, TypeAlias

from .layout import (
    HEADER,
    PD_CHECKSUM_LEN,
    PD_LAYOUT_VERSION,
    PD_MAGIC,
    PD_PROC_FREE,
    PD_SESSION_STARTING,
    PD_TSLOTS,
    PROC,
    TSLOT,
    Struct,
    align_up,
)

Buffer: TypeAlias = "memoryview | bytearray | mmap.mmap"

AREA_ALIGN: Final = 64  # a cache line: areas written by different processes don't share one
PAGE_SIZE: Final = 4096
RING_ALIGN: Final = PAGE_SIZE  # the ring can be mapped or dumped on its own
RING_MIN_SIZE: Final = 4096
RING_MAX_SIZE: Final = 1 << 31  # u32 free-running positions must tell full from empty


class LayoutError(ValueError):
    """A segment (or a request for one) that does not match the layout."""


class _Access(NamedTuple):   # not a dataclass: see layout.py
    offset: int
    codec: struct.Struct | None  # None for byte arrays
    size: int
    native: str     # the memoryview format of one store of an integer field ("" for bytes)


_ACCESSORS: dict[int, tuple[Struct, dict[str, _Access]]] = {}


def _accessors(s: Struct) -> dict[str, _Access]:
    # By identity: hashing a frozen Struct walks every member (~8 us), and a scan of
    # the process table builds 256 views.
    known = _ACCESSORS.get(id(s))
    if known is not None and known[0] is s:
        return known[1]
    out: dict[str, _Access] = {}
    for m in s.members:
        if m.is_pad:
            continue
        f = m.field
        codec = None if f.is_bytes else struct.Struct("<" + f.scalar.fmt)
        out[m.name] = _Access(m.offset, codec, f.size, "" if f.is_bytes else f.scalar.fmt)
    _ACCESSORS[id(s)] = (s, out)
    return out


class StructView:
    """Attribute access to one struct instance inside a buffer.

    Integer fields read and write as ``int``; byte arrays as ``bytes`` (a
    shorter value is zero-filled, a longer one is an error).  Padding and
    reserved members are not accessible.
    """

    __slots__ = ("_struct", "_buf", "_offset", "_acc")

    def __init__(self, struct_: Struct, buf: Buffer, offset: int) -> None:
        if offset < 0 or offset + struct_.sizeof > len(buf):
            raise LayoutError(
                f"{struct_.name} at {offset} ({struct_.sizeof} bytes) "
                f"outside a buffer of {len(buf)} bytes"
            )
        object.__setattr__(self, "_struct", struct_)
        object.__setattr__(self, "_buf", buf)
        object.__setattr__(self, "_offset", offset)
        object.__setattr__(self, "_acc", _accessors(struct_))

    @property
    def struct(self) -> Struct:
        return self._struct

    @property
    def offset(self) -> int:
        return self._offset

    def _access(self, name: str) -> _Access:
        try:
            return self._acc[name]
        except KeyError:
            raise AttributeError(f"{self._struct.name} has no field {name!r}") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # slots not set yet (copy/pickle) or padding: never a field
            raise AttributeError(name)
        a = self._access(name)
        at = self._offset + a.offset
        if a.codec is None:
            return bytes(self._buf[at:at + a.size])
        return a.codec.unpack_from(self._buf, at)[0]

    def __setattr__(self, name: str, value: Any) -> None:
        a = self._access(name)
        at = self._offset + a.offset
        if a.codec is None:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"{self._struct.name}.{name} takes bytes")
            data = bytes(value)
            if len(data) > a.size:
                raise ValueError(f"{self._struct.name}.{name}: {len(data)} bytes > {a.size}")
            self._buf[at:at + a.size] = data + bytes(a.size - len(data))
            return
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{self._struct.name}.{name} takes an int")
        try:
            a.codec.pack(value)     # the range check, with struct's message
        except struct.error as e:
            raise ValueError(f"{self._struct.name}.{name} = {value}: {e}") from None
        # (mypy knows cast's formats only as literals; this one is from layout.TYPES.
        # The views go with `del`: an mmap with a view left on it cannot be closed.)
        word = memoryview(self._buf)[at:at + a.size].cast(a.native)  # type: ignore[call-overload]
        word[0] = value
        del word

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._acc))

    def as_dict(self) -> dict[str, int | bytes]:
        return {name: getattr(self, name) for name in self._acc}

    def __repr__(self) -> str:
        return f"<StructView {self._struct.name} @{self._offset}>"


class SegmentPlan(NamedTuple):
    """Where each area of a segment goes; all offsets from the segment start."""

    proctab_off: int
    globals_off: int
    ring_off: int
    segment_size: int
    tslots_off: int = 0


def plan_segment(proctab_count: int, globals_size: int, ring_size: int) -> SegmentPlan:
    """Place the areas: in-handler words, proctab and globals 64-aligned, the ring
    page-aligned.

    The segment size is a whole number of pages, as ftruncate/mmap want.
    """
    if proctab_count < 1:
        raise LayoutError("proctab_count must be at least 1")
    if globals_size < 0:
        raise LayoutError("globals_size must not be negative")
    if ring_size & (ring_size - 1) or not RING_MIN_SIZE <= ring_size <= RING_MAX_SIZE:
        raise LayoutError(
            f"ring_size {ring_size} must be a power of two in [{RING_MIN_SIZE}, {RING_MAX_SIZE}]"
        )
    tslots_off = align_up(HEADER.sizeof, AREA_ALIGN)
    proctab_off = align_up(tslots_off + PD_TSLOTS * TSLOT.sizeof, AREA_ALIGN)
    globals_off = align_up(proctab_off + proctab_count * PROC.sizeof, AREA_ALIGN)
    ring_off = align_up(globals_off + globals_size, RING_ALIGN)
    segment_size = align_up(ring_off + ring_size, PAGE_SIZE)
    return SegmentPlan(proctab_off, globals_off, ring_off, segment_size, tslots_off)


class SegmentView:
    """The whole segment: ``.header`` and ``.proc(i)``."""

    __slots__ = ("_buf", "header")

    def __init__(self, buf: Buffer) -> None:
        self._buf = buf
        self.header = StructView(HEADER, buf, 0)

    @property
    def buffer(self) -> Buffer:
        return self._buf

    def proc(self, i: int) -> StructView:
        h = self.header
        if not 0 <= i < h.proctab_count:
            raise IndexError(f"proc {i} outside a table of {h.proctab_count}")
        return StructView(PROC, self._buf, h.proctab_off + i * h.proc_entry_size)

    def procs(self) -> list[StructView]:
        return [self.proc(i) for i in range(self.header.proctab_count)]

    def used_procs(self) -> list[tuple[int, StructView]]:
        """(index, view) of the entries not PD_PROC_FREE; free ones get no view built
        (the launcher scans the 256-entry table a few times per session)."""
        h = self.header
        state = _accessors(PROC)["state"]
        assert state.codec is not None
        base, size = h.proctab_off, h.proc_entry_size
        return [(i, StructView(PROC, self._buf, base + i * size))
                for i in range(h.proctab_count)
                if state.codec.unpack_from(self._buf, base + i * size + state.offset)[0]
                != PD_PROC_FREE]

    def check(self) -> None:
        """Raise LayoutError unless the buffer holds a complete segment of this layout."""
        h = self.header
        if h.magic != PD_MAGIC:
            raise LayoutError(f"bad magic {h.magic:#x}")
        if h.layout_version != PD_LAYOUT_VERSION:
            raise LayoutError(f"layout version {h.layout_version}, expected {PD_LAYOUT_VERSION}")
        if h.header_size != HEADER.sizeof or h.proc_entry_size != PROC.sizeof:
            raise LayoutError("header or proc entry size differs from this layout")
        if h.segment_size > len(self._buf):
            raise LayoutError(f"segment_size {h.segment_size} > mapped {len(self._buf)} bytes")
        plan = plan_segment(h.proctab_count, h.globals_size, h.ring_size)
        got = SegmentPlan(h.proctab_off, h.globals_off, h.ring_off, h.segment_size,
                          h.tslots_off)
        if got != plan:
            raise LayoutError(f"segment areas {got} differ from the plan {plan}")


def init_header(
    view: SegmentView,
    *,
    checksum: bytes,
    proctab_count: int,
    globals_size: int,
    ring_size: int,
    launcher_pid: int,
    maxaction: int = 0,
    flags: int = 0,
    start_ns: int | None = None,
    fresh: bool = False,
) -> SegmentPlan:
    """Zero everything before the ring and write a complete header.

    ``fresh``: the buffer is a newly created segment, zero already, so the globals
    area is not written (per-thread statistic tables are large and mostly untouched:
    writing them would commit every page).

    ``magic`` is written last so a reader never accepts a half-written header.
    ``start_ns`` defaults to time.monotonic_ns() (CLOCK_MONOTONIC, like the runtime).
    """
    if len(checksum) != PD_CHECKSUM_LEN:
        raise LayoutError(f"checksum must be {PD_CHECKSUM_LEN} bytes, got {len(checksum)}")
    plan = plan_segment(proctab_count, globals_size, ring_size)
    buf = view.buffer
    if len(buf) < plan.segment_size:
        raise LayoutError(f"buffer of {len(buf)} bytes, segment needs {plan.segment_size}")
    end = plan.globals_off if fresh else plan.ring_off
    buf[0:end] = bytes(end)
    h = view.header
    h.layout_version = PD_LAYOUT_VERSION
    h.header_size = HEADER.sizeof
    h.checksum = checksum
    h.segment_size = plan.segment_size
    h.tslots_off = plan.tslots_off
    h.proctab_off = plan.proctab_off
    h.proctab_count = proctab_count
    h.proc_entry_size = PROC.sizeof
    h.globals_off = plan.globals_off
    h.globals_size = globals_size
    h.ring_off = plan.ring_off
    h.ring_size = ring_size
    h.session_state = PD_SESSION_STARTING
    h.launcher_pid = launcher_pid
    h.maxaction = maxaction
    h.flags = flags
    h.start_ns = time.monotonic_ns() if start_ns is None else start_ns
    h.magic = PD_MAGIC
    return plan
