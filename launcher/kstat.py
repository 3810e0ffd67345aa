"""Keyed statistics with per-thread tables (runtime/pd_kstat.c).

`s[k] <<< v` on a global statistic array goes to the hash table of the thread's own
slot (the index pd_pstat.c claims, shared with scalar statistics), under that slot's
lock word only; the globals lock is taken by readers (`@count(s[k])`, `k in s`,
`foreach`, the exit report), which merge the slots, and by `delete`, which clears
them -- stap's pmaps, with threads for CPUs.  Keyed counters (translate/analysis.py's
_find_kcount_globals: arrays whose every write is `c[k] += v`) use the same tables
with an int64 sum for a value.

The area of such a statistic in the globals: the merged map first (the layout of any
array, so foreach and the exit report iterate it unchanged), then a pd_kstat, then
1 + N slots, each a pd_kslot and a table of `max_entries` keys like the merged one,
whose values keep only the histogram buckets the statistic uses.  N is at most the
number of per-thread slots and shrinks so the tables stay within KSTAT_BUDGET; threads
whose index is above N share slot 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..shmlayout.globals import ENTRY_HEAD, MAP_HEAD, PD_HIST_MAX_BUCKETS, STAT_HEAD
from ..shmlayout.layout import KSLOT, KSTAT

KSTAT_BUDGET = 64 << 20   # bytes of per-thread tables one keyed statistic may take
# and one keyed counter: `c[execname()]++` is common, and each array's tables are
# mapped into every 32-bit process of the session too
KCOUNT_BUDGET = 32 << 20


def _align64(n: int) -> int:
    return (n + 63) & ~63


@dataclass(frozen=True)
class KstatLayout:
    """Where the parts of one keyed statistic's area are, and how big."""

    nslots: int       # per-thread slots (slot 0, shared, comes on top)
    nbuckets: int     # histogram buckets a slot's value keeps
    kstat_off: int    # struct pd_kstat, after the merged map
    slot_stride: int  # struct pd_kslot + its table
    value_size: int   # a slot table's value: struct pd_stat's head + nbuckets
    size: int         # the whole area


def hist_buckets(hist_log: bool, hist_linear: tuple[int, int, int] | None) -> int:
    """Buckets pd_stat_add writes (pd_map.c): log wins when both are used."""
    if hist_log:
        return PD_HIST_MAX_BUCKETS
    if hist_linear is not None:
        lo, hi, step = hist_linear
        return min((hi - lo) // step + 3, PD_HIST_MAX_BUCKETS)
    return 0


def layout(capacity: int, key_size: int, merged_entry_size: int, nbuckets: int,
           max_slots: int, counter: bool = False) -> KstatLayout:
    """`counter`: a keyed counter's tables, whose values are one int64 sum."""
    value = 8 if counter else STAT_HEAD + 8 * nbuckets
    stride = _align64(KSLOT.sizeof + MAP_HEAD + capacity * (ENTRY_HEAD + key_size + value))
    nslots = max(1, min(max_slots, (KCOUNT_BUDGET if counter else KSTAT_BUDGET) // stride - 1))
    kstat_off = _align64(MAP_HEAD + capacity * merged_entry_size)
    return KstatLayout(nslots, nbuckets, kstat_off, stride, value,
                       kstat_off + KSTAT.sizeof + (1 + nslots) * stride)


def descriptors_c(name: str, lay: KstatLayout, slot_map_fields: str) -> list[str]:
    """The slot tables' map descriptor (`slot_map_fields`: the merged map's initializer
    with the value and entry sizes of a slot) and the pd_kstatdesc tying them together."""
    return [f"static const struct pd_mapdesc mks_{name} = {{{slot_map_fields}}};",
            f"static const struct pd_kstatdesc kd_{name} = {{&md_{name}, &mks_{name}, "
            f"{lay.nslots}, {lay.nbuckets}, {lay.kstat_off}, {lay.slot_stride}}};"]
