"""Pass 3c, layout: where each script global lives in the segment's globals area.

Every ABI reads the same offsets (they are compiled into both modules), so they are
computed here once: each global a multiple of 64 bytes (a cache line of its own),
then the per-thread counter blocks of the counter-only scalars."""

from __future__ import annotations

from typing import NamedTuple

from ...shmlayout.globals import (
    COUNTER_HEAD,
    MAP_HEAD,
    PD_PSTAT_SLOTS,
    PSTAT_SLOT_SIZE,
)
from .. import kstat
from .analysis import GlobalPlan
from .limits import Limits
from .types import Types


class Slot(NamedTuple):
    offset: int
    size: int


class GlobalsLayout(NamedTuple):
    slots: dict[str, Slot]                    # every global's place in the area
    counters: dict[str, int]                  # counter-only scalar -> its index in a block
    kstats: dict[str, kstat.KstatLayout]      # arrays with per-thread tables
    counter_area: int                         # the per-thread counter blocks ...
    counter_stride: int                       # ... one cache line or more each
    size: int                                 # the whole area

    def offset(self, name: str) -> int:
        return self.slots[name].offset

    def counter_read(self, name: str) -> str:
        """C reading counter-only scalar `name`: its base plus every thread's slot."""
        return (f"pd_counter_read(c->globals, {self.offset(name)}, {self.counter_area}, "
                f"{counter_at(self.counters[name])}, {self.counter_stride})")

    def counter_add(self, name: str, delta: str) -> str:
        """C adding `delta` to counter-only scalar `name` (the thread's own slot)."""
        return (f"pd_counter_add(c, {self.offset(name)}, {counter_at(self.counters[name])}, "
                f"{self.counter_area}, {self.counter_stride}, {delta});")


def counter_at(index: int) -> int:
    """Where counter `index` is in a thread's block: after the sequence word."""
    return COUNTER_HEAD + 8 * index


def lay_out(types: Types, plan: GlobalPlan, limits: Limits) -> GlobalsLayout:
    """Pass 3c: the globals area of `types`' globals under `plan`."""
    slots: dict[str, Slot] = {}
    kstats: dict[str, kstat.KstatLayout] = {}
    off = 0
    for var in types.globals.values():
        if var.name in plan.kstats:
            lay = kstat.layout(limits.capacity(var), limits.key_size(var),
                               limits.entry_size(var),
                               kstat.hist_buckets(var.hist_log, var.hist_linear),
                               PD_PSTAT_SLOTS, var.name in plan.kcounts)
            kstats[var.name] = lay
            size = lay.size
        elif var.array is not None:
            size = MAP_HEAD + limits.capacity(var) * limits.entry_size(var)
        elif var.name in plan.pstats:
            size = (1 + PD_PSTAT_SLOTS) * PSTAT_SLOT_SIZE
        else:
            size = limits.type_size(var.type)
        slots[var.name] = Slot(off, size)
        off += (size + 63) & ~63
    counters = {n: i for i, n in enumerate(n for n in types.globals if n in plan.counters)}
    # one cache line or more a thread (threads adding to their own slot share none),
    # starting with the i386 writers' sequence word (runtime/pd_counter.c)
    stride = (COUNTER_HEAD + len(counters) * 8 + 63) & ~63
    return GlobalsLayout(slots, counters, kstats, off, stride, off + PD_PSTAT_SLOTS * stride)
