"""The one definition of pydyn's shared-memory segment.

Every process of a session (the launcher, m64 and m32 targets, their children)
maps the same POSIX shared-memory segment, so its layout must not depend on the
ABI: only fixed-size integers, 64-bit fields aligned to 8 even on i386, explicit
padding, 64-bit offsets instead of pointers, and locks that are plain 32-bit
futex words (see runtime/pd_lock.h).  The C header (gen_c.py) and the Python
view (view.py) are both derived from the data below; nothing else may restate it.

Segment
-------
``pd_header`` at offset 0, then ``proctab_count`` ``pd_proc`` entries at
``proctab_off``, then ``globals_size`` bytes of script globals at
``globals_off``, then the output ring of ``ring_size`` bytes at ``ring_off``
(see view.plan_segment for the alignment of each area).  All integers are
little-endian (every supported ABI is).

Output ring
-----------
``ring_head`` (consumer) and ``ring_tail`` (committed producer end) are
free-running u32 byte positions; a position's offset in the ring is
``pos & (ring_size - 1)`` and ``ring_tail - ring_head`` (mod 2**32) bytes are
committed and unread.  ``ring_size`` is a power of two no larger than 2**31 so
that difference is never ambiguous.  Each record starts at an 8-aligned
position with a 16-byte ``pd_rec`` header; ``len`` counts header plus payload
and is a multiple of 8.  A record never wraps: a producer that would cross the
end of the ring first fills the rest with a ``PD_REC_PAD`` record, of which
only ``len`` and ``kind`` (the first 8 bytes, which always fit) are meaningful.

Record payload
--------------
``nargs`` arguments back to back, each starting 8-aligned (relative to the
record, hence in the ring):

* integer: i64, 8 bytes, little-endian two's complement;
* string: u32 ``n`` (byte count, no terminating NUL), the ``n`` bytes, then
  zero bytes up to the next multiple of 8, i.e. ``(n + 11) & ~7`` bytes in
  total (an empty string takes 8).

Arguments are not tagged: the reader knows each one's kind from the record's
``kind`` and ``fmt_id`` (for ``PD_REC_PRINTF``, from the format string).
record.py implements this encoding for the Python side.
"""

from __future__ import annotations

from typing import Final, NamedTuple

# Records are NamedTuples or plain classes, not dataclasses: a dataclass compiles its
# methods from source when the class is created (~0.5 ms each), and `dataclasses`
# imports `inspect`: ~15 ms of every launcher start with the classes of a warm run.


class ScalarType(NamedTuple):
    """A fixed-size integer type usable in the segment."""

    name: str
    size: int
    fmt: str  # struct-module code, used little-endian
    ctype: str  # spelling in the generated C header

    @property
    def align(self) -> int:
        # Natural alignment of the fixed-size type, on every ABI (8 for u64 even on i386).
        return self.size


TYPES: Final[dict[str, ScalarType]] = {
    t.name: t
    for t in (
        ScalarType("u8", 1, "B", "uint8_t"),
        ScalarType("u16", 2, "H", "uint16_t"),
        ScalarType("u32", 4, "I", "uint32_t"),
        ScalarType("u64", 8, "Q", "pd_u64"),
        ScalarType("i32", 4, "i", "int32_t"),
        ScalarType("i64", 8, "q", "pd_i64"),
        # A lock word for pd_lock()/pd_unlock(): u32 so m32 and m64 share it.
        ScalarType("futex", 4, "I", "uint32_t"),
    )
}


class Field(NamedTuple):
    """One member of a Struct.  ``count > 1`` makes an array: of u8 (bytes), or of 64-bit
    integers (the Python view reads either as bytes)."""

    name: str
    type: str
    count: int = 1   # type: ignore[assignment]  # shadows tuple.count, on purpose
    doc: str = ""

    def check(self) -> None:
        """Struct calls it for each of its fields."""
        if self.type not in TYPES:
            raise ValueError(f"field {self.name}: unknown type {self.type!r}")
        if self.count < 1:
            raise ValueError(f"field {self.name}: count must be >= 1")
        # bytes (names, paths) and tables of int64 (histogram buckets) are all the
        # segment needs; the Python view reads either as bytes
        if self.count > 1 and self.type not in ("u8", "i64", "u64"):
            raise ValueError(f"field {self.name}: only u8 (bytes) and 64-bit integers "
                             "(tables) may have a count")

    @property
    def scalar(self) -> ScalarType:
        return TYPES[self.type]

    @property
    def size(self) -> int:
        return self.scalar.size * self.count

    @property
    def align(self) -> int:
        return self.scalar.align

    @property
    def is_bytes(self) -> bool:
        return self.count > 1


class Member(NamedTuple):
    """A Field placed at an offset; ``is_pad`` for padding the layout inserted."""

    field: Field
    offset: int
    is_pad: bool = False

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def end(self) -> int:
        return self.offset + self.field.size


def align_up(value: int, align: int) -> int:
    return (value + align - 1) & ~(align - 1)


class Struct:
    """A C struct laid out with natural alignment and explicit padding.

    Padding members are named ``_pad0``, ``_pad1``, ...; the size is rounded up
    to a multiple of 8, or, when ``size`` is given, filled to exactly ``size``
    with a ``_reserved`` tail (room to grow without moving anything).
    """

    members: tuple[Member, ...]
    sizeof: int
    align: int

    def __init__(self, name: str, fields: tuple[Field, ...], size: int | None = None,
                 doc: str = "") -> None:
        self.name, self.fields, self.size, self.doc = name, fields, size, doc
        self._lay_out()

    def __repr__(self) -> str:
        return f"Struct({self.name!r}, {len(self.fields)} fields, sizeof {self.sizeof})"

    def _lay_out(self) -> None:
        if not self.fields:
            raise ValueError(f"struct {self.name}: no fields")
        seen: set[str] = set()
        members: list[Member] = []
        off = 0
        npad = 0
        for f in self.fields:
            f.check()
            if f.name.startswith("_"):
                raise ValueError(f"struct {self.name}: field names starting with _ are reserved")
            if f.name in seen:
                raise ValueError(f"struct {self.name}: duplicate field {f.name}")
            seen.add(f.name)
            at = align_up(off, f.align)
            if at > off:
                members.append(Member(Field(f"_pad{npad}", "u8", at - off, "padding"), off, True))
                npad += 1
            members.append(Member(f, at))
            off = at + f.size
        if self.size is not None:
            if self.size % 8:
                raise ValueError(f"struct {self.name}: size {self.size} not a multiple of 8")
            if off > self.size:
                raise ValueError(f"struct {self.name}: fields need {off} bytes > size {self.size}")
            if self.size > off:
                tail = Field("_reserved", "u8", self.size - off, "room to grow; keep zero")
                members.append(Member(tail, off, True))
            end = self.size
        else:
            end = align_up(off, 8)
            if end > off:
                members.append(Member(Field(f"_pad{npad}", "u8", end - off, "padding"), off, True))
        self.members = tuple(members)
        self.sizeof = end
        self.align = max(f.align for f in self.fields)

    def member(self, name: str) -> Member:
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(f"{self.name} has no field {name!r}")

    def offset(self, name: str) -> int:
        return self.member(name).offset


class Const(NamedTuple):
    name: str
    value: int
    doc: str = ""


class ConstGroup(NamedTuple):
    """Constants that belong together (an enum, or one concern)."""

    name: str
    doc: str
    consts: tuple[Const, ...]


# --- constants -------------------------------------------------------------
# Module-level ints for Python users; the Const entries below carry the same
# names and values (tests check they agree) plus the docs for the C header.

PD_MAGIC: Final = 0x4D48535F4E594450
PD_LAYOUT_VERSION: Final = 7
PD_CHECKSUM_LEN: Final = 32

PD_SESSION_STARTING: Final = 0
PD_SESSION_RUNNING: Final = 1
PD_SESSION_STOPPING: Final = 2
PD_SESSION_STOPPED: Final = 3

PD_PROC_FREE: Final = 0
PD_PROC_ALIVE: Final = 1
PD_PROC_EXITED: Final = 2
PD_PROC_KILLED: Final = 3
PD_PROC_EXECED: Final = 4
PD_PROC_REFUSED: Final = 5

PD_PROCF_END_PROBES: Final = 1
PD_PROCF_ENDED: Final = 2

PD_ABI_X86_64: Final = 1
PD_ABI_I386: Final = 2
PD_ABI_AARCH64: Final = 3

PD_REC_PAD: Final = 0
PD_REC_PRINTF: Final = 1
PD_REC_ERROR: Final = 2
PD_REC_WARNING: Final = 3
PD_REC_EXIT: Final = 4
PD_REC_PROC: Final = 5
PD_REC_TEXT: Final = 6
PD_REC_SYSTEM: Final = 7

PD_FLAG_DRAIN_WAITS: Final = 1
PD_FLAG_MERGE_TEXT: Final = 2
PD_FLAG_DRAIN_IDLE: Final = 4

# per-thread statistic slot indices 1..PD_PSTAT_SLOTS (slot 0 is shared): the slots of a
# statistic, a keyed table or a counter block in the globals area (globals.py), and the
# in-handler words
PD_PSTAT_SLOTS: Final = 64
PD_TSLOTS: Final = PD_PSTAT_SLOTS + 1

PD_LOCK_WAITERS: Final = 0x80000000
PD_LOCK_TID_MASK: Final = 0x3FFFFFFF

CONST_GROUPS: Final[tuple[ConstGroup, ...]] = (
    ConstGroup("segment", "segment identification", (
        Const("PD_MAGIC", PD_MAGIC, 'pd_header.magic: "PDYN_SHM" little-endian'),
        Const("PD_LAYOUT_VERSION", PD_LAYOUT_VERSION, "bumped on any layout change"),
        Const("PD_CHECKSUM_LEN", PD_CHECKSUM_LEN, "bytes in pd_header.checksum (SHA-256)"),
    )),
    ConstGroup("session", "pd_header.session_state", (
        Const("PD_SESSION_STARTING", PD_SESSION_STARTING, "segment set up, begin probes pending"),
        Const("PD_SESSION_RUNNING", PD_SESSION_RUNNING, "probes fire"),
        Const("PD_SESSION_STOPPING", PD_SESSION_STOPPING, "exit requested, end probes pending"),
        Const("PD_SESSION_STOPPED", PD_SESSION_STOPPED, "no probe may fire any more"),
    )),
    ConstGroup("proc", "pd_proc.state", (
        Const("PD_PROC_FREE", PD_PROC_FREE, "entry unused"),
        Const("PD_PROC_ALIVE", PD_PROC_ALIVE, "process attached and running"),
        Const("PD_PROC_EXITED", PD_PROC_EXITED, "exited normally, exit_status valid"),
        Const("PD_PROC_KILLED", PD_PROC_KILLED, "killed by a signal, exit_status = signal"),
        Const("PD_PROC_EXECED", PD_PROC_EXECED, "replaced by exec; the new image has a new entry"),
        Const("PD_PROC_REFUSED", PD_PROC_REFUSED, "module not attached (layout/checksum mismatch)"),
    )),
    ConstGroup("procf", "pd_proc.flags", (
        Const("PD_PROCF_END_PROBES", PD_PROCF_END_PROBES,
              "the image has process.end probes (a process.end naming another program not)"),
        Const("PD_PROCF_ENDED", PD_PROCF_ENDED,
              "its process.end probes ran (exit, a fatal signal, or before an exec)"),
    )),
    ConstGroup("abi", "pd_proc.abi", (
        Const("PD_ABI_X86_64", PD_ABI_X86_64, "x86-64 (m64)"),
        Const("PD_ABI_I386", PD_ABI_I386, "i386 (m32)"),
        Const("PD_ABI_AARCH64", PD_ABI_AARCH64, "AArch64"),
    )),
    ConstGroup("rec", "pd_rec.kind", (
        Const("PD_REC_PAD", PD_REC_PAD, "filler up to the end of the ring; skip len bytes"),
        Const("PD_REC_PRINTF", PD_REC_PRINTF, "formatted output; fmt_id selects the format"),
        Const("PD_REC_ERROR", PD_REC_ERROR, "runtime error message"),
        Const("PD_REC_WARNING", PD_REC_WARNING, "runtime warning message"),
        Const("PD_REC_EXIT", PD_REC_EXIT, "the script called exit()"),
        Const("PD_REC_PROC", PD_REC_PROC, "process event (attach, exit, exec)"),
        Const("PD_REC_TEXT", PD_REC_TEXT, "preformatted text"),
        Const("PD_REC_SYSTEM", PD_REC_SYSTEM, "a shell command for the launcher (system())"),
    )),
    ConstGroup("flag", "pd_header.flags bits", (
        Const("PD_FLAG_DRAIN_WAITS", PD_FLAG_DRAIN_WAITS, "the consumer sleeps: wake it on commit"),
        Const("PD_FLAG_MERGE_TEXT", PD_FLAG_MERGE_TEXT,
              "the drain may join consecutive TEXT records of one pid (not --json)"),
        Const("PD_FLAG_DRAIN_IDLE", PD_FLAG_DRAIN_IDLE,
              "the consumer sleeps on an idle ring: the next commit clears it and wakes it"),
    )),
    ConstGroup("tslot", "in-handler words (runtime/pd_quiesce.c)", (
        Const("PD_TSLOTS", PD_TSLOTS,
              "pd_tslot entries: statistic slot indices 0..64 (PD_PSTAT_SLOTS + 1)"),
    )),
    ConstGroup("lock", "futex lock words (runtime/pd_lock.h)", (
        Const("PD_LOCK_WAITERS", PD_LOCK_WAITERS, "set while someone sleeps on the word"),
        Const("PD_LOCK_TID_MASK", PD_LOCK_TID_MASK, "holder TID bits of a held word"),
    )),
)

CONSTANTS: Final[tuple[Const, ...]] = tuple(c for g in CONST_GROUPS for c in g.consts)


# --- structs ---------------------------------------------------------------

HEADER: Final = Struct("pd_header", (
    Field("magic", "u64", doc="PD_MAGIC once the header is complete"),
    Field("layout_version", "u32", doc="PD_LAYOUT_VERSION"),
    Field("header_size", "u32", doc="sizeof(struct pd_header)"),
    Field("checksum", "u8", PD_CHECKSUM_LEN, doc="digest of the generated probe source"),
    Field("segment_size", "u64", doc="bytes in the whole segment"),
    Field("proctab_off", "u64", doc="offset of the pd_proc table"),
    Field("proctab_count", "u32", doc="entries in the pd_proc table"),
    Field("proc_entry_size", "u32", doc="sizeof(struct pd_proc)"),
    Field("globals_off", "u64", doc="offset of the script globals"),
    Field("globals_size", "u64", doc="bytes of script globals"),
    Field("ring_off", "u64", doc="offset of the output ring"),
    Field("ring_size", "u32", doc="bytes in the ring, a power of two"),
    Field("session_state", "u32", doc="PD_SESSION_*"),
    Field("launcher_pid", "i32"),
    Field("target_pid", "i32"),
    Field("error_count", "u32", doc="runtime errors reported"),
    Field("skipped_count", "u32", doc="probe hits skipped (lock busy, ring full, ...)"),
    Field("mismatch_count", "u32", doc="processes refused for a layout/checksum mismatch"),
    Field("attach_count", "u32", doc="processes that attached"),
    Field("exit_requested", "u32", doc="nonzero once exit() was called"),
    Field("ring_head", "u32", doc="consumer position, free-running mod 2^32"),
    Field("ring_tail", "u32", doc="committed producer position, free-running mod 2^32"),
    Field("ring_lock", "futex", doc="serialises producers"),
    Field("globals_lock", "futex", doc="protects the script globals"),
    Field("proctab_lock", "futex", doc="protects pd_proc allocation"),
    Field("ring_space_seq", "u32", doc="futex: producers waiting for space sleep on it"),
    Field("ring_data_seq", "u32", doc="futex: the consumer sleeps on it"),
    Field("ring_waiters", "u32", doc="producers sleeping on ring_space_seq"),
    Field("lock_recoveries", "u32", doc="locks taken over from a dead holder"),
    Field("maxaction", "u32", doc="statement budget per probe hit"),
    Field("flags", "u32"),
    Field("start_ns", "u64", doc="CLOCK_MONOTONIC at session start"),
    # Per-thread statistic slots (runtime/pd_pstat.c): bit k set while some thread owns
    # slot k+1 of every `s <<< v` statistic; slot 0 is the shared, locked fallback.
    Field("stat_slots", "u64", doc="bitmap of claimed per-thread statistic slots"),
    Field("stat_slots_hw", "u32", doc="slots ever claimed, highest index + 1 (merges read these)"),
    Field("stat_slot_fallbacks", "u32", doc="threads that found no free slot (use slot 0)"),
    # Handlers in flight at the session stop (runtime/pd_quiesce.c): a thread with a
    # statistic slot k sets the busy word of pd_tslot k while it runs one; the others
    # count themselves here, atomically.
    Field("tslots_off", "u64", doc="offset of the pd_tslot array (1 + 64 entries)"),
    Field("inflight_unslotted", "u32", doc="handlers running in threads without a slot"),
    Field("procs_unlisted", "u32", doc="processes that found no free pd_proc entry"),
    Field("lock_timeouts", "u32", doc="lock waits given up (holder stopped, or STUCK_CONTEXT_MS)"),
    # Bit o of lo (o < 32), o - 32 of hi (o < 64): object o of the module's pd_objects was
    # found loaded in some process of the session (runtime/pd_arm.c), so the launcher can
    # say at the exit which probed programs and libraries no process ever loaded.
    Field("objects_loaded_lo", "u32", doc="objects 0-31 some process loaded, a bit each"),
    Field("objects_loaded_hi", "u32", doc="objects 32-63 some process loaded, a bit each"),
    # Hits skipped by the reentrancy guard (also in skipped_count): the exit report names
    # the cause, as stap's "Skipped due to reentrancy", and the probe.
    Field("reentered_count", "u32", doc="probe hits skipped: their thread was in a handler"),
    Field("reentered_probe", "u32", doc="1 + index of the last probe so skipped; 0: none"),
), size=512, doc="segment header, at offset 0")

PROC: Final = Struct("pd_proc", (
    Field("pid", "i32"),
    Field("ppid", "i32"),
    Field("state", "u32", doc="PD_PROC_*"),
    Field("abi", "u32", doc="PD_ABI_*"),
    Field("sites_armed", "u32", doc="probe sites installed"),
    Field("sites_failed", "u32", doc="probe sites that could not be installed"),
    Field("exit_status", "i32", doc="exit code, or signal number when KILLED"),
    Field("flags", "u32", doc="PD_PROCF_*"),
    Field("start_ns", "u64", doc="CLOCK_MONOTONIC at attach"),
    Field("end_ns", "u64", doc="CLOCK_MONOTONIC at exit/exec, 0 while alive"),
    Field("comm", "u8", 16, doc="NUL-padded"),
    Field("exe", "u8", 192, doc="NUL-padded, truncated"),
), size=256, doc="one process of the session, in the table at proctab_off")

REC: Final = Struct("pd_rec", (
    Field("len", "u32", doc="total bytes including this header, multiple of 8"),
    Field("kind", "u16", doc="PD_REC_*"),
    Field("nargs", "u16", doc="arguments in the payload"),
    Field("fmt_id", "u32", doc="format index for PD_REC_PRINTF"),
    Field("pid", "i32", doc="producing process"),
), size=16, doc="header of one record in the output ring")

# Keyed statistics with per-thread tables (runtime/pd_kstat.c): in the globals area a
# keyed statistic is its merged map, then one pd_kstat, then 1 + N slots, each a pd_kslot
# followed by that slot's own hash table (pd_map.c's layout, values without unused buckets).
KSTAT: Final = Struct("pd_kstat", (
    Field("next_seq", "u64", doc="insertion numbers of new keys, shared by every slot"),
), size=64, doc="one keyed statistic's slot area (after its merged map)")

KSLOT: Final = Struct("pd_kslot", (
    Field("lock", "futex", doc="the slot's writers and the readers merging it"),
), size=64, doc="one per-thread table of a keyed statistic (a cache line of its own)")

# One per statistic slot index (entry 0 unused), each a cache line of its own: the
# owner writes `busy` twice a probe hit and no other thread may share the line.
TSLOT: Final = Struct("pd_tslot", (
    Field("busy", "u32", doc="0 idle; 1 a FAST handler; 2 + probe index: another handler"),
    Field("tid", "i32", doc="owner thread, written when it takes the slot"),
    Field("pid", "i32", doc="owner process (a dead owner's busy word is ignored)"),
), size=64, doc="a thread's in-handler word, polled by the launcher at the stop")

STRUCTS: Final[tuple[Struct, ...]] = (HEADER, PROC, REC, KSTAT, KSLOT, TSLOT)
