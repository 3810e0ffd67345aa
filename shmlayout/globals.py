"""The building blocks of the segment's globals area, defined once: the translator lays
script globals out with them (launcher/translate/layout.py, launcher/kstat.py), the
runtime uses the structs and numbers c_header.py renders from them into pd_shm.h (with
`_Static_assert`s on every size and offset).

A statistic is a `pd_stat` (seven int64 then its histogram buckets); an array is a
`pd_map_hdr` followed by `capacity` entries, each a `pd_map_ent` head, the key blob and
the value (runtime/pd_map.c); a scalar statistic only added to takes 1 + PD_PSTAT_SLOTS
slots, each a `pd_pslot_head` then a `pd_stat` (runtime/pd_pstat.c); the counter-only
scalars take one block a slot, a `pd_counter_blk` head then the counters
(runtime/pd_counter.c).  Keyed statistics' `pd_kstat`/`pd_kslot` are in layout.py.
"""

from __future__ import annotations

from typing import Final

# PD_PSTAT_SLOTS is layout.py's (the in-handler words count the same slots)
from .layout import PD_PSTAT_SLOTS, Const, ConstGroup, Field, Struct

PD_HIST_MAX_BUCKETS: Final = 128   # buckets a pd_stat keeps (log, or linear with its 2 extra)
PD_HIST_LOG_BUCKETS: Final = 128

STAT: Final = Struct("pd_stat", (
    Field("count", "i64"),
    Field("sum", "i64"),
    Field("min", "i64"),
    Field("max", "i64"),
    Field("avg_s", "i64", doc="stap's Welford state"),
    Field("m2", "i64"),
    Field("variance_s", "i64"),
    Field("hist", "i64", PD_HIST_MAX_BUCKETS),
), doc="a statistic's aggregate and histogram")

MAP_HDR: Final = Struct("pd_map_hdr", (
    Field("count", "u32", doc="entries in use"),
    Field("tombstones", "u32", doc="deleted entries still in probe chains"),
    Field("next_seq", "u64", doc="insertion number of the next new key"),
), doc="an array's header; its entries follow")

MAP_ENT: Final = Struct("pd_map_ent", (
    Field("state", "u32", doc="PD_ENTRY_*"),
    Field("hash", "u32"),
    Field("seq", "u64", doc="insertion number: an unsorted foreach visits in this order"),
), doc="the head of an array entry; the key blob and the value follow")

PSLOT_HEAD: Final = Struct("pd_pslot_head", (
    Field("seq", "u32", doc="odd while the slot is being written"),
    Field("lock", "futex", doc="slot 0 only: its writers' lock"),
), doc="a per-thread statistic slot's head; its struct pd_stat follows")

COUNTER_BLK: Final = Struct("pd_counter_blk", (
    Field("seq", "u32", doc="odd while an i386 owner writes both halves of a counter"),
), doc="a thread's block of counter-only scalars: this head, then every counter (int64)")

GLOBAL_STRUCTS: Final[tuple[Struct, ...]] = (STAT, MAP_HDR, MAP_ENT, PSLOT_HEAD, COUNTER_BLK)

STAT_HEAD: Final = STAT.offset("hist")           # struct pd_stat without its buckets
STAT_SIZE: Final = STAT.sizeof
MAP_HEAD: Final = MAP_HDR.sizeof
ENTRY_HEAD: Final = MAP_ENT.sizeof
PSTAT_SLOT_SIZE: Final = PSLOT_HEAD.sizeof + STAT.sizeof
COUNTER_HEAD: Final = COUNTER_BLK.sizeof

# pd_probe.kind and pd_probe.locks (runtime/pd_runtime.h)
PD_PROBE_BEGIN: Final = 1
PD_PROBE_END: Final = 2
PD_PROBE_ERROR: Final = 3
PD_PROBE_MARK: Final = 4
PD_PROBE_PROCESS_BEGIN: Final = 5
PD_PROBE_PROCESS_END: Final = 6
PD_PROBE_TIMER: Final = 7
PD_PROBE_THREAD_BEGIN: Final = 8
PD_PROBE_THREAD_END: Final = 9
PD_PROBE_LOCKS: Final = 1
PD_PROBE_FAST: Final = 2
PD_PROBE_REGS: Final = 4
PD_PROBE_SP: Final = 8

GLOBAL_CONST_GROUPS: Final[tuple[ConstGroup, ...]] = (
    ConstGroup("globals", "statistics, arrays, per-thread slots in the globals area", (
        Const("PD_HIST_MAX_BUCKETS", PD_HIST_MAX_BUCKETS, "buckets of a struct pd_stat"),
        Const("PD_HIST_LOG_BUCKETS", PD_HIST_LOG_BUCKETS, "buckets of a log histogram"),
        Const("PD_PSTAT_SLOTS", PD_PSTAT_SLOTS, "per-thread statistic slots (slot 0 on top)"),
        Const("PD_PSTAT_SLOT_SIZE", PSTAT_SLOT_SIZE, "pd_pslot_head + pd_stat"),
        Const("PD_ENTRY_EMPTY", 0, "pd_map_ent.state: never used"),
        Const("PD_ENTRY_USED", 1, "pd_map_ent.state"),
        Const("PD_ENTRY_DELETED", 2, "pd_map_ent.state: a tombstone"),
    )),
    ConstGroup("probe", "pd_probe.kind values and pd_probe.locks bits", (
        Const("PD_PROBE_BEGIN", PD_PROBE_BEGIN),
        Const("PD_PROBE_END", PD_PROBE_END),
        Const("PD_PROBE_ERROR", PD_PROBE_ERROR),
        Const("PD_PROBE_MARK", PD_PROBE_MARK, "a USDT mark or a function entry/exit"),
        Const("PD_PROBE_PROCESS_BEGIN", PD_PROBE_PROCESS_BEGIN),
        Const("PD_PROBE_PROCESS_END", PD_PROBE_PROCESS_END),
        Const("PD_PROBE_TIMER", PD_PROBE_TIMER),
        Const("PD_PROBE_THREAD_BEGIN", PD_PROBE_THREAD_BEGIN,
              "a new thread, before its start routine"),
        Const("PD_PROBE_THREAD_END", PD_PROBE_THREAD_END, "a created thread ending"),
        Const("PD_PROBE_LOCKS", PD_PROBE_LOCKS, "locks: run under the globals lock"),
        Const("PD_PROBE_FAST", PD_PROBE_FAST,
              "locks: only counter adds, compiled general-regs-only (translate/fast.py)"),
        Const("PD_PROBE_REGS", PD_PROBE_REGS,
              "locks: a FAST handler that reads the register context ($argN, $return)"),
        Const("PD_PROBE_SP", PD_PROBE_SP,
              "locks: with REGS, a FAST handler whose one register is sp (@entry frames)"),
    )),
)
GLOBAL_CONSTANTS: Final[tuple[Const, ...]] = tuple(
    c for g in GLOBAL_CONST_GROUPS for c in g.consts)
