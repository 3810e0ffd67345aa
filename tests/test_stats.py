"""Aggregates, histogram buckets and the exit report against SystemTap's expected outputs
(the histograms' drawing: test_hist_draw.py).

Statistics expectations are copied verbatim from stap's
testsuite/systemtap.maps/*.exp (each test names its file); exit-report lines
from testsuite/systemtap.base/global_end.exp and elaborate.cxx
`add_global_var_display`.  Two revisions of linear*.exp disagree on
@variance; these are the values of the revision (ed9360d4 in larytet/SystemTap)
that agrees with the Welford code in runtime/stat-common.c.
"""

from __future__ import annotations

import pytest

from pydyn.launcher.stats import (
    HIST_LOG_BUCKET0,
    StatSummary,
    StatValue,
    format_global_exit,
    hist_linear_bucket,
    hist_linear_buckets,
    hist_log_bucket,
    hist_log_value,
    summarize,
)

pytestmark = pytest.mark.unit   # no compiler, no target process: `make check`


def stat_of(values: list[int] | range, shift: int = 0) -> StatValue:
    st = StatValue(shift=shift)
    for v in values:
        st.add(v)
    return st


# testsuite/systemtap.maps/linear.stp and linear_overunder.stp add these.
LINEAR_VALUES = [key * m for key in range(100)
                 for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 12, 13, 14, 15)]


# ---------------------------------------------------------------- statistics


def test_linear_stats() -> None:
    # testsuite/systemtap.maps/linear.exp
    st = stat_of(LINEAR_VALUES)
    assert (st.count, st.sum, st.min, st.max, st.avg) == (1600, 653400, 0, 1485, 408)
    assert st.variance == 450768


def test_linear_under_stats() -> None:
    # testsuite/systemtap.maps/linear_under.exp: 0..99, integer Welford drift
    st = stat_of(range(100))
    assert (st.count, st.sum, st.min, st.max, st.avg, st.variance) == \
        (100, 4950, 0, 99, 49, 5741)


def test_linear_over_stats() -> None:
    # testsuite/systemtap.maps/linear_over.exp: 1000..9999
    st = stat_of(range(1000, 10000))
    assert (st.count, st.sum, st.min, st.max, st.avg, st.variance) == \
        (9000, 49495500, 1000, 9999, 5499, 47241750)


def test_variance_with_shift() -> None:
    # testsuite/systemtap.maps/linear_nearlyempty.exp: @variance(agg, 7)
    st = stat_of([444, 999], shift=7)
    assert (st.count, st.sum, st.min, st.max, st.avg, st.variance) == \
        (2, 1443, 444, 999, 721, 154012)


def test_avg_truncates_toward_zero() -> None:
    # testsuite/systemtap.maps/linear_large_neg.exp: avg=-1284615384 (C division)
    values = [0, -100000000, -100000000] + [-500000000] * 5 + [-1000000000] * 4 \
        + [-10000000000]
    st = stat_of(values)
    assert (st.count, st.sum, st.min, st.max, st.avg) == \
        (13, -16700000000, -10000000000, 0, -1284615384)


def test_single_value_variance_is_zero() -> None:
    # stat.c: variance_s = _stp_div64(NULL, S1 + S2, count - 1), and a
    # division by zero yields 0.
    assert stat_of([42]).variance == 0
    assert StatValue().avg == 0


def test_summarize_per_writer_parts() -> None:
    # _stp_stat_get over several CPUs: counts/sums add, min/max combine, and
    # the total-variance formula merges the per-CPU Welford states.
    a, b = stat_of([444]), stat_of([999])
    total = summarize([a, StatValue(), b])
    assert total == StatSummary(2, 1443, 444, 999, 721, total.variance)
    # S1 = 1*(444-721)^2 + 1*(999-721)^2 = 154013, S2 = 0, / (2-1)
    assert total.variance == 154013
    assert summarize([]) == StatSummary(0, 0, 0, 0, 0, 0)


def test_sum_wraps_like_int64() -> None:
    st = stat_of([(1 << 63) - 1, 1])
    assert st.sum == -(1 << 63)


# ---------------------------------------------------------------- buckets


def test_log_buckets() -> None:
    # testsuite/systemtap.maps/log_edge.exp: -1 -> 63, 1 -> 65, 0 -> 64,
    # 0x7fffffffffffffff -> 127, 2 and 3 -> 66, 4 -> 67.
    assert [hist_log_bucket(v) for v in (-1, 1, 0, 0x7FFFFFFFFFFFFFFF, 2, 3, 4)] == \
        [63, 65, HIST_LOG_BUCKET0, 127, 66, 66, 67]
    assert hist_log_bucket(-(1 << 63)) == 0
    assert [hist_log_value(b) for b in (0, 62, 63, 64, 65, 66, 127)] == \
        [-(1 << 63), -2, -1, 0, 1, 2, 1 << 62]


def test_linear_buckets() -> None:
    # stat-common.c: (stop - start) / interval + 3 buckets; bucket 0 is
    # underflow, (v - start) / interval + 1 otherwise, capped at overflow.
    assert hist_linear_buckets(0, 1500, 50) == 33
    assert [hist_linear_bucket(v, 0, 1500, 50) for v in (-1, 0, 49, 50, 1500, 1549, 1550)] == \
        [0, 1, 1, 2, 31, 31, 32]
    with pytest.raises(ValueError, match="interval cannot be zero"):
        hist_linear_buckets(0, 10, 0)
    # testsuite/systemtap.maps/linear_neg.exp expects "Number of buckets".
    with pytest.raises(ValueError, match="Number of buckets must be between 1 and 126"):
        hist_linear_buckets(0, 1500, -1)
    with pytest.raises(ValueError, match="Number of buckets"):
        hist_linear_buckets(0, 1500, 1)


# ---------------------------------------------------------------- exit report


def test_global_end_report() -> None:
    # testsuite/systemtap.base/global_end.{stp,exp}
    assert format_global_exit("gamma", "abcdefghijklmnopqrstuvwxyz") == \
        ['gamma="abcdefghijklmnopqrstuvwxyz"']
    alpha = {("one", 1): 1, ("one", 2): 2, ("two", 1): 3, ("two", 2): 4}
    # foreach ([..] in alpha-): by decreasing value
    assert format_global_exit("alpha", alpha) == [
        'alpha["two",2]=4', 'alpha["two",1]=3', 'alpha["one",2]=2',
        'alpha["one",1]=1']
    assert format_global_exit("iota", {"one": "eleven", "two": "twelve"}) == \
        ['iota["two"]="twelve"', 'iota["one"]="eleven"']
    assert format_global_exit("phi", stat_of([1, 2, 3, 4])) == \
        ["phi @count=4 @min=1 @max=4 @sum=10 @avg=2"]


def test_global_end_var_scalars() -> None:
    # testsuite/systemtap.base/global_end.exp, global_end_var part
    assert format_global_exit("gs0_save", 0x29) == ["gs0_save=41"]
    assert format_global_exit("ga1", {("foo",): 2}) == ['ga1["foo"]=2']
    # %d of an int64: negative values are signed
    assert format_global_exit("x", -1) == ["x=-1"]
    assert format_global_exit("x", 0) == ["x=0"]


def test_empty_values() -> None:
    # elaborate.cxx add_global_var_display: PR7053 empty scalar aggregate;
    # an empty array prints nothing (the foreach has no iterations).
    assert format_global_exit("phi", StatValue()) == ["phi @count=0x0"]
    assert format_global_exit("arr", {}) == []
    assert format_global_exit("s", "") == ['s=""']


def test_stat_arrays_sort_by_count() -> None:
    # add_global_var_display prints stats arrays as `name[idx] @count=...`;
    # foreach (... in arr-) on stats sorts by @count (translate.cxx, -5 =
    # SORT_COUNT), numeric indexes in %#d.
    arr = {(1, "a"): stat_of([5]), (2, "b"): stat_of([1, 2, 3]),
           (-3, "c"): stat_of([-7, 7])}
    assert format_global_exit("lat", arr) == [
        'lat[2,"b"] @count=3 @min=1 @max=3 @sum=6 @avg=2',
        'lat[-3,"c"] @count=2 @min=-7 @max=7 @sum=0 @avg=0',
        'lat[1,"a"] @count=1 @min=5 @max=5 @sum=5 @avg=5']
    summary = summarize([stat_of([10, 20])])
    assert format_global_exit("s", {"k": summary}) == \
        ['s["k"] @count=2 @min=10 @max=20 @sum=30 @avg=15']


def test_sort_is_stable_and_by_string() -> None:
    # runtime/map.c _stp_map_sort: a stable merge sort of the insertion-ordered
    # list; strings compare with strcmp.
    assert format_global_exit("a", {"x": 1, "y": 2, "z": 1, "w": 2}) == \
        ['a["y"]=2', 'a["w"]=2', 'a["x"]=1', 'a["z"]=1']
    assert format_global_exit("s", {1: "apple", 2: "pear", 3: "Zebra"}) == \
        ['s[2]="pear"', 's[1]="apple"', 's[3]="Zebra"']
    with pytest.raises(TypeError, match="mixes value types"):
        format_global_exit("m", {1: 1, 2: "x"})
