"""The building blocks of the segment's globals area, defined once: the translator lays
script globals out with them (launcher/translate/layout.py), the runtime reads the same
numbers from pd_shm.h (c_header.py renders them, with `_Static_assert`s).

A statistic is a `pd_stat` (seven int64 then the histogram buckets); an array is a
`pd_map_hdr` followed by entries, each a `pd_map_ent` head then key and value; a
scalar statistic only added to takes 1 + PD_PSTAT_SLOTS per-thread slots of a
`pd_pstat_slot` head and a `pd_stat` (runtime/pd_pstat.c); counter-only scalars take
one block a slot, a `pd_counter_blk` head then the counters (runtime/pd_counter.c).
"""

from __future__ import annotations

from typing import Final

from .layout import Const, ConstGroup

PD_HIST_MAX_BUCKETS: Final = 128   # most buckets a statistic keeps (log or linear)
PD_HIST_LOG_BUCKETS: Final = 128
PD_PSTAT_SLOTS: Final = 64         # per-thread slots of a statistic (slot 0 shared on top)
STAT_HEAD: Final = 8 * 7           # struct pd_stat without its buckets
STAT_SIZE: Final = STAT_HEAD + 8 * PD_HIST_MAX_BUCKETS
MAP_HEAD: Final = 16               # struct pd_map_hdr
ENTRY_HEAD: Final = 16             # struct pd_map_ent: each entry's {state, hash, seq}
PSTAT_HEAD: Final = 8              # struct pd_pstat_slot: {seq, lock} before its pd_stat
PSTAT_SLOT_SIZE: Final = PSTAT_HEAD + STAT_SIZE
COUNTER_HEAD: Final = 8            # a counter block's sequence word (i386 writers)

# pd_probe.kind and pd_probe.locks (runtime/pd_runtime.h)
PD_PROBE_BEGIN: Final = 1
PD_PROBE_END: Final = 2
PD_PROBE_ERROR: Final = 3
PD_PROBE_MARK: Final = 4
PD_PROBE_PROCESS_BEGIN: Final = 5
PD_PROBE_PROCESS_END: Final = 6
PD_PROBE_TIMER: Final = 7
PD_PROBE_LOCKS: Final = 1
PD_PROBE_FAST: Final = 2

GLOBALS_CONSTS: Final = ConstGroup("globals area",
                                   "script globals: statistics, arrays, per-thread slots "
                                   "and counter blocks", (
    Const("PD_HIST_MAX_BUCKETS", PD_HIST_MAX_BUCKETS, "buckets of a struct pd_stat"),
    Const("PD_HIST_LOG_BUCKETS", PD_HIST_LOG_BUCKETS, "buckets of a log histogram"),
    Const("PD_PSTAT_SLOTS", PD_PSTAT_SLOTS, "per-thread statistic slots (slot 0 on top)"),
    Const("PD_PSTAT_SLOT_SIZE", PSTAT_SLOT_SIZE, "{u32 seq, u32 lock, struct pd_stat}"),
    Const("PD_STAT_SIZE", STAT_SIZE, "sizeof(struct pd_stat)"),
    Const("PD_MAP_HEAD", MAP_HEAD, "sizeof(struct pd_map_hdr)"),
    Const("PD_ENTRY_HDR", ENTRY_HEAD, "an array entry's {u32 state, u32 hash, u64 seq}"),
    Const("PD_COUNTER_HEAD", COUNTER_HEAD, "a counter block's sequence word"),
))

PROBE_CONSTS: Final = ConstGroup("probe kinds",
                                 "pd_probe.kind values and pd_probe.locks bits", (
    Const("PD_PROBE_BEGIN", PD_PROBE_BEGIN),
    Const("PD_PROBE_END", PD_PROBE_END),
    Const("PD_PROBE_ERROR", PD_PROBE_ERROR),
    Const("PD_PROBE_MARK", PD_PROBE_MARK),
    Const("PD_PROBE_PROCESS_BEGIN", PD_PROBE_PROCESS_BEGIN),
    Const("PD_PROBE_PROCESS_END", PD_PROBE_PROCESS_END),
    Const("PD_PROBE_TIMER", PD_PROBE_TIMER),
    Const("PD_PROBE_LOCKS", PD_PROBE_LOCKS, "pd_probe.locks: run under the globals lock"),
    Const("PD_PROBE_FAST", PD_PROBE_FAST, "pd_probe.locks: FAST handler (general-regs-only)"),
))
