"""Statistics aggregates, histogram buckets and the end-of-session global dump, as stap
does them (the histograms' drawing is the runtime's, runtime/pd_hist.c).

Sources: runtime/stat-common.c (`__stp_stat_add`, `_stp_val_to_bucket`,
`_stp_bucket_to_val`),
runtime/stat.c (`_stp_stat_get`), runtime/*/arith.c (`_stp_div64`),
runtime/map.c (`_stp_map_sort`) and elaborate.cxx (`add_global_var_display`).
All arithmetic is int64 with C semantics: wrapping, and division truncating
toward zero (so `@avg` of -16700000000 over 13 is -1284615384, not ...385).

Values passed to `format_global_exit`:

* `int` -- a scalar long;  `str` -- a scalar string;
* `StatValue` or `StatSummary` -- a scalar statistic (`<<<`);
* `Mapping[tuple[int | str, ...], V]` -- an array, one key tuple per element
  (a bare int/str key is taken as a 1-tuple), V being all `int`, all `str`
  or all statistics.  Iteration order is insertion order, which is what stap's
  map list keeps and what breaks ties when stap sorts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..shmlayout.globals import PD_HIST_LOG_BUCKETS as HIST_LOG_BUCKETS
from ..shmlayout.globals import PD_HIST_MAX_BUCKETS as STP_MAX_BUCKETS  # linear: incl. under/over
from .format import format_printf

HIST_LOG_BUCKET0 = HIST_LOG_BUCKETS // 2  # the bucket of value 0; negatives below, positives above

_MASK64 = (1 << 64) - 1


def _wrap64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


def _wrap32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def _div64(x: int, y: int) -> int:
    """`_stp_div64(NULL, x, y)`: C division; 0 when y is 0."""
    if y == 0:
        return 0
    q = abs(x) // abs(y)
    return _wrap64(q if (x < 0) == (y < 0) else -q)


# ---------------------------------------------------------------- aggregates


@dataclass
class StatValue:
    """One `stat_data`: what `<<<` accumulates for one writer (one CPU in stap).

    `shift` is the `@variance(x, shift)` bit shift.  `avg_s`, `m2` and
    `variance_s` are stap's Welford state, in integers scaled by 2**shift --
    including its truncation drift, which `@variance` shows (it prints 5741,
    not 841, for 0..99).
    """

    shift: int = 0
    count: int = 0
    sum: int = 0
    min: int = 0
    max: int = 0
    avg_s: int = 0
    m2: int = 0
    variance_s: int = 0

    def add(self, value: int) -> None:
        """`__stp_stat_add` without the histogram."""
        val = _wrap64(value)
        scaled = _wrap64(val << self.shift)
        if self.count == 0:
            self.count = 1
            self.sum = self.min = self.max = val
            self.avg_s = scaled
            self.m2 = 0
            return
        self.count += 1
        self.sum = _wrap64(self.sum + val)
        self.max = max(self.max, val)
        self.min = min(self.min, val)
        delta = _wrap32(scaled - self.avg_s)  # stap declares `int delta`
        self.avg_s = _wrap64(self.avg_s + _div64(delta, self.count))
        self.m2 = _wrap64(self.m2 + delta * _wrap64(scaled - self.avg_s))
        self.variance_s = _div64(self.m2, self.count - 1)

    @property
    def avg(self) -> int:
        return _div64(self.sum, self.count)

    @property
    def variance(self) -> int:
        return summarize([self]).variance


@dataclass(frozen=True)
class StatSummary:
    """The aggregate a script reads: `_stp_stat_get` over all writers.

    stap reports "empty aggregate" for @min/@max/@avg/@variance when count is
    0; the fields are then 0 and the caller must check.
    """

    count: int
    sum: int
    min: int
    max: int
    avg: int
    variance: int


def summarize(parts: Sequence[StatValue]) -> StatSummary:
    """Combine per-writer stats like `_stp_stat_get` (total-variance formula)."""
    count = total = lo = hi = 0
    shift = 0
    for sd in parts:
        if not sd.count:
            continue
        shift = sd.shift
        if count == 0:
            lo, hi = sd.min, sd.max
        count += sd.count
        total = _wrap64(total + sd.sum)
        hi = max(hi, sd.max)
        lo = min(lo, sd.min)
    avg_s = _div64(_wrap64(total << shift), count)
    s1 = s2 = 0
    for sd in parts:
        if sd.count:
            d = _wrap64(sd.avg_s - avg_s)
            s1 = _wrap64(s1 + _wrap64(sd.count * d) * d)
            s2 = _wrap64(s2 + (sd.count - 1) * sd.variance_s)
    variance_s = _div64(_wrap64(s1 + s2), count - 1)
    return StatSummary(count, total, lo, hi, _div64(total, count), variance_s >> (2 * shift))


# ---------------------------------------------------------------- histograms


def hist_log_bucket(value: int) -> int:
    """`_stp_val_to_bucket`: 64 for 0, 64 + bit length above, mirrored below."""
    v = _wrap64(value)
    if v == 0:
        return HIST_LOG_BUCKET0
    res = HIST_LOG_BUCKET0 + abs(v).bit_length()
    return HIST_LOG_BUCKETS - res if v < 0 else res


def hist_log_value(bucket: int) -> int:
    """`_stp_bucket_to_val`: the label of a log bucket."""
    if bucket == HIST_LOG_BUCKET0:
        return 0
    if bucket < HIST_LOG_BUCKET0:
        return (-(1 << 63)) >> bucket
    return 1 << (bucket - HIST_LOG_BUCKET0 - 1)


def hist_linear_buckets(lo: int, hi: int, step: int) -> int:
    """`_stp_stat_calc_buckets`: bucket count including underflow and overflow."""
    if step == 0:
        raise ValueError("histogram: interval cannot be zero.")
    buckets = _div64(hi - lo, step) + 3
    if not 3 <= buckets <= STP_MAX_BUCKETS:
        raise ValueError(
            f"histogram: Number of buckets must be between 1 and {STP_MAX_BUCKETS - 2}\n"
            "Number_of_buckets = (stop - start) / interval.\n"
            "Please adjust your start, stop, and interval values.")
    return buckets


def hist_linear_bucket(value: int, lo: int, hi: int, step: int) -> int:
    """Bucket of `value`: 0 is underflow (< lo), the last is overflow."""
    buckets = hist_linear_buckets(lo, hi, step)
    v = _wrap64(value - lo)
    index = 0 if v < 0 else v // step + 1
    return min(index, buckets - 1)


# ---------------------------------------------------------------- exit report

Stat: TypeAlias = StatValue | StatSummary
Scalar: TypeAlias = int | str | StatValue | StatSummary
ExitValue: TypeAlias = Scalar | Mapping[Any, Scalar]

# elaborate.cxx add_global_var_display: longs in %d (%#x only for DWARF pointers, which
# a global never is here), stat
# fields in %#d, string values and indexes quoted with %#s, numeric indexes %#d.
_STAT_FIELDS = " @count=%#d @min=%#d @max=%#d @sum=%#d @avg=%#d"


def _stat_args(st: Stat) -> list[int | str]:
    return [st.count, st.min, st.max, st.sum, st.avg]


def _value_format(value: Scalar) -> tuple[str, list[int | str]]:
    if isinstance(value, (StatValue, StatSummary)):
        return _STAT_FIELDS, _stat_args(value)
    if isinstance(value, str):
        return '="%#s"', [value]
    return "=%d", [int(value)]


def _sort_key(value: Scalar) -> tuple[int, str]:
    # foreach (... in array-): descending by value; stats sort by @count.
    # One array holds one value type, so only one tuple slot ever differs.
    if isinstance(value, (StatValue, StatSummary)):
        return (value.count, "")
    if isinstance(value, str):
        return (0, value)
    return (int(value), "")


def _kind(value: Scalar) -> str:
    if isinstance(value, (StatValue, StatSummary)):
        return "stats"
    return "string" if isinstance(value, str) else "long"


def format_global_exit(name: str, value: ExitValue) -> list[str]:
    """The lines stap prints at exit for a global written but never read (no newlines)."""
    fmt_name = name.replace("%", "%%")
    if isinstance(value, Mapping):
        items = [(k if isinstance(k, tuple) else (k,), v) for k, v in value.items()]
        if len({_kind(v) for _, v in items}) > 1:
            raise TypeError(f"array {name} mixes value types")
        # Python's sort is stable (also with reverse=True), so equal values
        # keep insertion order, as stap's merge sort of its map list does.
        items.sort(key=lambda kv: _sort_key(kv[1]), reverse=True)
        lines = []
        for key, v in items:
            index = ",".join('"%#s"' if isinstance(k, str) else "%#d" for k in key)
            vfmt, vargs = _value_format(v)
            lines.append(format_printf(f"{fmt_name}[{index}]{vfmt}", [*key, *vargs]))
        return lines
    if isinstance(value, (StatValue, StatSummary)) and value.count == 0:
        return [f"{name} @count=0x0"]  # PR7053: an empty scalar aggregate
    vfmt, vargs = _value_format(value)
    return [format_printf(fmt_name + vfmt, vargs)]
