"""The histograms' drawing (runtime/pd_hist.c) against stap's expected outputs.

The expected texts are those of SystemTap's testsuite/systemtap.maps/*.exp (each
test names its file); the buckets are filled here by stap's bucket rules
(launcher/stats.py) and drawn by the runtime's C, built alone (histdraw.py): the one
drawing of both print(@hist_*(x)) and sprint(@hist_*(x)), whose sessions
test_hist_string.py runs.
"""

from __future__ import annotations

import pytest
from histdraw import draw, draw_linear, draw_log
from test_stats import LINEAR_VALUES

from pydyn.launcher.stats import (
    HIST_LOG_BUCKETS,
    hist_linear_bucket,
    hist_linear_buckets,
    hist_log_bucket,
)


def log_hist(values: list[int]) -> list[int]:
    buckets = [0] * HIST_LOG_BUCKETS
    for v in values:
        buckets[hist_log_bucket(v)] += 1
    return buckets


def linear_hist(values: list[int] | range, lo: int, hi: int, step: int) -> list[int]:
    buckets = [0] * hist_linear_buckets(lo, hi, step)
    for v in values:
        buckets[hist_linear_bucket(v, lo, hi, step)] += 1
    return buckets


# ---------------------------------------------------------------- histograms


def test_hist_log_full_range() -> None:
    # testsuite/systemtap.maps/log.{stp,exp}: every power of two, both signs,
    # plus twenty zeros.
    values = [1 << i for i in range(63)] + [-(1 << i) for i in range(64)] + [0] * 20
    assert draw_log(log_hist(values)) == LOG_EXP


LOG_EDGE_1 = """\
value |-------------------------------------------------- count
   -4 |                                                   0
   -2 |                                                   0
   -1 |@                                                  1
    0 |                                                   0
    1 |@                                                  1
    2 |                                                   0
    4 |                                                   0

"""
LOG_EDGE_2 = """\
value |-------------------------------------------------- count
    0 |@                                                  1
    1 |                                                   0
    2 |                                                   0

"""
LOG_EDGE_3 = """\
              value |-------------------------------------------------- count
1152921504606846976 |                                                   0
2305843009213693952 |                                                   0
4611686018427387904 |@                                                  1

"""
LOG_EDGE_4 = """\
value |-------------------------------------------------- count
    0 |                                                   0
    1 |@                                                  1
    2 |@@                                                 2
    4 |@                                                  1
    8 |                                                   0
   16 |                                                   0

"""


@pytest.mark.parametrize(("values", "expected"), [
    ([-1, 1], LOG_EDGE_1),
    ([0], LOG_EDGE_2),
    ([0x7FFFFFFFFFFFFFFF], LOG_EDGE_3),
    ([1, 2, 3, 4], LOG_EDGE_4),
])
def test_hist_log_edges(values: list[int], expected: str) -> None:
    # testsuite/systemtap.maps/log_edge.{stp,exp}
    assert draw_log(log_hist(values)) == expected


LINEAR_EXP = """\
value |-------------------------------------------------- count
    0 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@       177
   50 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@         170
  100 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                      117
  150 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                     122
  200 |@@@@@@@@@@@@@@@@@@@@@@@                             94
  250 |@@@@@@@@@@@@@@@@@@@@@@@                             94
  300 |@@@@@@@@@@@@@@@@@@@                                 79
  350 |@@@@@@@@@@@@@@@@@@@                                 79
  400 |@@@@@@@@@@@@@@@@                                    65
  450 |@@@@@@@@@@@@@@@@                                    67
  500 |@@@@@@@@@@@@@                                       55
  550 |@@@@@@@@@@@@@                                       54
  600 |@@@@@@@@@@@@                                        51
  650 |@@@@@@@@@@@                                         45
  700 |@@@@@@@@@@                                          41
  750 |@@@@@@@@@@                                          40
  800 |@@@@@@@@                                            34
  850 |@@@@@@@@                                            33
  900 |@@@@@@@                                             31
  950 |@@@@@@                                              27
 1000 |@@@@@                                               23
 1050 |@@@@@@                                              24
 1100 |@@@@                                                19
 1150 |@@@@                                                18
 1200 |@@@                                                 12
 1250 |@@                                                   9
 1300 |@                                                    7
 1350 |@                                                    7
 1400 |                                                     3
 1450 |                                                     3
 1500 |                                                     0
"""

LINEAR_OVERUNDER_EXP = """\
value |-------------------------------------------------- count
 <250 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@   680
  250 |@@@@@@                                              94
  300 |@@@@@                                               79
  350 |@@@@@                                               79
  400 |@@@@                                                65
  450 |@@@@                                                67
  500 |@@@                                                 55
  550 |@@@                                                 54
  600 |@@@                                                 51
  650 |@@@                                                 45
  700 |@@                                                  41
  750 |@@                                                  40
  800 |@@                                                  34
  850 |@@                                                  33
  900 |@@                                                  31
  950 |@                                                   27
 1000 |@                                                   23
>1000 |@@@@@@@                                            102
"""

LINEAR_UNDER_EXP = """\
value |-------------------------------------------------- count
<1800 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 100
 1800 |                                                     0
 1900 |                                                     0
"""

LINEAR_OVER_EXP = """\
value |-------------------------------------------------- count
   90 |                                                      0
  100 |                                                      0
 >100 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@ 9000
"""

LINEAR_LARGE_NEG_EXP = """\
       value |-------------------------------------------------- count
<-1000000000 |@                                                  1
 -1000000000 |@@@@                                               4
  -900000000 |                                                   0
  -800000000 |                                                   0
  -700000000 |                                                   0
  -600000000 |                                                   0
  -500000000 |@@@@@                                              5
  -400000000 |                                                   0
  -300000000 |                                                   0
  -200000000 |                                                   0
  -100000000 |@@                                                 2
           0 |@                                                  1
"""

LINEAR_NEARLYEMPTY_EXP = """\
value |-------------------------------------------------- count
  300 |                                                   0
  350 |                                                   0
  400 |@                                                  1
  450 |                                                   0
  500 |                                                   0
      ~
  850 |                                                   0
  900 |                                                   0
  950 |@                                                  1
 1000 |                                                   0
 1050 |                                                   0
"""


# The .exp files end at the last row; stap's histogram adds one blank line.
@pytest.mark.parametrize(("values", "params", "expected"), [
    (LINEAR_VALUES, (0, 1500, 50), LINEAR_EXP),  # linear.exp
    (LINEAR_VALUES, (250, 1000, 50), LINEAR_OVERUNDER_EXP),  # linear_overunder.exp
    (range(100), (1800, 2500, 100), LINEAR_UNDER_EXP),  # linear_under.exp
    (range(1000, 10000), (0, 100, 10), LINEAR_OVER_EXP),  # linear_over.exp
    ([0, -100000000, -100000000] + [-500000000] * 5 + [-1000000000] * 4 + [-10000000000],
     (-1000000000, 0, 100000000), LINEAR_LARGE_NEG_EXP),  # linear_large_neg.exp
    ([444, 999], (0, 1500, 50), LINEAR_NEARLYEMPTY_EXP),  # linear_nearlyempty.exp
])
def test_hist_linear(values: list[int] | range, params: tuple[int, int, int],
                     expected: str) -> None:
    lo, hi, step = params
    assert draw_linear(linear_hist(values, lo, hi, step), lo, hi, step) == \
        expected + "\n"


# testsuite/systemtap.maps/elision.{stp,exp}: the same histograms printed with
# -DHIST_ELISION=-1, 0, 1 and the default 2.
ELISION_A = {  # a <<< 444; a <<< 999; @hist_linear(a, 0, 1500, 50)
    -1: """\
value |-------------------------------------------------- count
  300 |                                                   0
  350 |                                                   0
  400 |@                                                  1
  450 |                                                   0
  500 |                                                   0
  550 |                                                   0
  600 |                                                   0
  650 |                                                   0
  700 |                                                   0
  750 |                                                   0
  800 |                                                   0
  850 |                                                   0
  900 |                                                   0
  950 |@                                                  1
 1000 |                                                   0
 1050 |                                                   0

""",
    0: """\
value |-------------------------------------------------- count
      ~
  400 |@                                                  1
      ~
  950 |@                                                  1

""",
    1: """\
value |-------------------------------------------------- count
      ~
  350 |                                                   0
  400 |@                                                  1
  450 |                                                   0
      ~
  900 |                                                   0
  950 |@                                                  1
 1000 |                                                   0

""",
    2: LINEAR_NEARLYEMPTY_EXP + "\n",
}

ELISION_C = {  # c <<< -2; c <<< -4096; @hist_log(c)
    -1: """\
 value |-------------------------------------------------- count
-16384 |                                                   0
 -8192 |                                                   0
 -4096 |@                                                  1
 -2048 |                                                   0
 -1024 |                                                   0
  -512 |                                                   0
  -256 |                                                   0
  -128 |                                                   0
   -64 |                                                   0
   -32 |                                                   0
   -16 |                                                   0
    -8 |                                                   0
    -4 |                                                   0
    -2 |@                                                  1
    -1 |                                                   0
     0 |                                                   0

""",
    0: """\
 value |-------------------------------------------------- count
       ~
 -4096 |@                                                  1
       ~
    -2 |@                                                  1

""",
    1: """\
 value |-------------------------------------------------- count
       ~
 -8192 |                                                   0
 -4096 |@                                                  1
 -2048 |                                                   0
       ~
    -4 |                                                   0
    -2 |@                                                  1
    -1 |                                                   0

""",
    2: """\
 value |-------------------------------------------------- count
-16384 |                                                   0
 -8192 |                                                   0
 -4096 |@                                                  1
 -2048 |                                                   0
 -1024 |                                                   0
       ~
    -8 |                                                   0
    -4 |                                                   0
    -2 |@                                                  1
    -1 |                                                   0
     0 |                                                   0

""",
}


@pytest.mark.parametrize("elision", [-1, 0, 1, 2])
def test_elision(elision: int) -> None:
    a = linear_hist([444, 999], 0, 1500, 50)
    assert draw_linear(a, 0, 1500, 50, elision=elision) == ELISION_A[elision]
    c = log_hist([-2, -4096])
    assert draw_log(c, elision=elision) == ELISION_C[elision]


def test_elision_small_cases() -> None:
    # elision.exp, default elision: b <<< -10 over @hist_linear(b, -100, 100, 10),
    # and a single 0 in @hist_linear(a, 0, 1500, 50) and in @hist_log.
    assert draw_linear(linear_hist([-10], -100, 100, 10), -100, 100, 10) == """\
value |-------------------------------------------------- count
  -30 |                                                   0
  -20 |                                                   0
  -10 |@                                                  1
    0 |                                                   0
   10 |                                                   0

"""
    assert draw_linear(linear_hist([1500], 0, 1500, 50), 0, 1500, 50) == """\
value |-------------------------------------------------- count
 1400 |                                                   0
 1450 |                                                   0
 1500 |@                                                  1

"""
    assert draw_linear(linear_hist([0], 0, 1500, 50), 0, 1500, 50, elision=0) == """\
value |-------------------------------------------------- count
    0 |@                                                  1

"""
    assert draw_log(log_hist([128]), elision=0) == """\
value |-------------------------------------------------- count
      ~
  128 |@                                                  1

"""


def test_empty_histogram_draws_nothing() -> None:
    # the callers report stap's "empty aggregate" first (pd_stat_emit_hist,
    # pd_stat_sprint_hist): no bucket to draw from
    assert draw([0] * HIST_LOG_BUCKETS, True) == ""
    assert draw([0] * 33, False, 0, 50) == ""


def test_a_small_buffer_keeps_the_drawing_s_start() -> None:
    # sprint(): stap's _stp_stat_print_histogram_buf into MAXSTRINGLEN bytes keeps the
    # first MAXSTRINGLEN - 1 of the drawing, cut anywhere
    full = draw_log(log_hist([1 << i for i in range(40)]))
    assert len(full) > 512
    for cap in (1, 2, 7, 57, 58, 512):
        assert draw(log_hist([1 << i for i in range(40)]), True, cap=cap) == full[:cap - 1]


def test_width() -> None:
    # -D HIST_WIDTH=10: the dashes and the largest bar are 10 long; the scale is the
    # largest count over the width, rounded up (25 / 10 -> 3)
    buckets = linear_hist([1] * 25 + [2] * 5, 0, 4, 1)
    assert draw_linear(buckets, 0, 4, 1, width=10) == """\
value |---------- count
    0 |            0
    1 |@@@@@@@@   25
    2 |@           5
    3 |            0
    4 |            0

"""


LOG_EXP = """\
               value |-------------------------------------------------- count
-9223372036854775808 |@                                                   1
-4611686018427387904 |@                                                   1
-2305843009213693952 |@                                                   1
-1152921504606846976 |@                                                   1
 -576460752303423488 |@                                                   1
 -288230376151711744 |@                                                   1
 -144115188075855872 |@                                                   1
  -72057594037927936 |@                                                   1
  -36028797018963968 |@                                                   1
  -18014398509481984 |@                                                   1
   -9007199254740992 |@                                                   1
   -4503599627370496 |@                                                   1
   -2251799813685248 |@                                                   1
   -1125899906842624 |@                                                   1
    -562949953421312 |@                                                   1
    -281474976710656 |@                                                   1
    -140737488355328 |@                                                   1
     -70368744177664 |@                                                   1
     -35184372088832 |@                                                   1
     -17592186044416 |@                                                   1
      -8796093022208 |@                                                   1
      -4398046511104 |@                                                   1
      -2199023255552 |@                                                   1
      -1099511627776 |@                                                   1
       -549755813888 |@                                                   1
       -274877906944 |@                                                   1
       -137438953472 |@                                                   1
        -68719476736 |@                                                   1
        -34359738368 |@                                                   1
        -17179869184 |@                                                   1
         -8589934592 |@                                                   1
         -4294967296 |@                                                   1
         -2147483648 |@                                                   1
         -1073741824 |@                                                   1
          -536870912 |@                                                   1
          -268435456 |@                                                   1
          -134217728 |@                                                   1
           -67108864 |@                                                   1
           -33554432 |@                                                   1
           -16777216 |@                                                   1
            -8388608 |@                                                   1
            -4194304 |@                                                   1
            -2097152 |@                                                   1
            -1048576 |@                                                   1
             -524288 |@                                                   1
             -262144 |@                                                   1
             -131072 |@                                                   1
              -65536 |@                                                   1
              -32768 |@                                                   1
              -16384 |@                                                   1
               -8192 |@                                                   1
               -4096 |@                                                   1
               -2048 |@                                                   1
               -1024 |@                                                   1
                -512 |@                                                   1
                -256 |@                                                   1
                -128 |@                                                   1
                 -64 |@                                                   1
                 -32 |@                                                   1
                 -16 |@                                                   1
                  -8 |@                                                   1
                  -4 |@                                                   1
                  -2 |@                                                   1
                  -1 |@                                                   1
                   0 |@@@@@@@@@@@@@@@@@@@@                               20
                   1 |@                                                   1
                   2 |@                                                   1
                   4 |@                                                   1
                   8 |@                                                   1
                  16 |@                                                   1
                  32 |@                                                   1
                  64 |@                                                   1
                 128 |@                                                   1
                 256 |@                                                   1
                 512 |@                                                   1
                1024 |@                                                   1
                2048 |@                                                   1
                4096 |@                                                   1
                8192 |@                                                   1
               16384 |@                                                   1
               32768 |@                                                   1
               65536 |@                                                   1
              131072 |@                                                   1
              262144 |@                                                   1
              524288 |@                                                   1
             1048576 |@                                                   1
             2097152 |@                                                   1
             4194304 |@                                                   1
             8388608 |@                                                   1
            16777216 |@                                                   1
            33554432 |@                                                   1
            67108864 |@                                                   1
           134217728 |@                                                   1
           268435456 |@                                                   1
           536870912 |@                                                   1
          1073741824 |@                                                   1
          2147483648 |@                                                   1
          4294967296 |@                                                   1
          8589934592 |@                                                   1
         17179869184 |@                                                   1
         34359738368 |@                                                   1
         68719476736 |@                                                   1
        137438953472 |@                                                   1
        274877906944 |@                                                   1
        549755813888 |@                                                   1
       1099511627776 |@                                                   1
       2199023255552 |@                                                   1
       4398046511104 |@                                                   1
       8796093022208 |@                                                   1
      17592186044416 |@                                                   1
      35184372088832 |@                                                   1
      70368744177664 |@                                                   1
     140737488355328 |@                                                   1
     281474976710656 |@                                                   1
     562949953421312 |@                                                   1
    1125899906842624 |@                                                   1
    2251799813685248 |@                                                   1
    4503599627370496 |@                                                   1
    9007199254740992 |@                                                   1
   18014398509481984 |@                                                   1
   36028797018963968 |@                                                   1
   72057594037927936 |@                                                   1
  144115188075855872 |@                                                   1
  288230376151711744 |@                                                   1
  576460752303423488 |@                                                   1
 1152921504606846976 |@                                                   1
 2305843009213693952 |@                                                   1
 4611686018427387904 |@                                                   1

"""
