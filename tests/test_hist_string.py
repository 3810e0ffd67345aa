"""Histograms printed into strings, and statistics of array elements that do not exist.

`sprint(@hist_log(s))` / `sprintln(...)` draw in the handler, in the traced process
(m64 and m32) or the launcher, with the runtime's C (runtime/pd_hist.c); `print()` of a
histogram sends its buckets, which the launcher draws with the same C: the two texts
are byte for byte the same, a string's cut at MAXSTRINGLEN - 1 bytes as stap's
_stp_stat_print_histogram_buf cuts it, and `println`/`sprintln` add no newline
(translate.cxx's print_format of a histogram).  `-D HIST_WIDTH` and `-D HIST_ELISION`
shape both.  An element `delete` removed, or never added to, has `@count` and `@sum`
0 and is an empty aggregate for the rest and for its histogram (translate.cxx's
visit_stat_op and visit_print_format).
"""

from __future__ import annotations

import re
from pathlib import Path

from cbuild import PROGS, abi_program_fixture, run_pydyn, run_pydyn_clean
from histdraw import draw, draw_linear, draw_log

from pydyn.launcher.stats import (
    HIST_LOG_BUCKETS,
    hist_linear_bucket,
    hist_linear_buckets,
    hist_log_bucket,
)

N = 123


def values() -> list[int]:
    return [(1 << (i % 31)) + i for i in range(N)]


prog = abi_program_fixture(PROGS / "hist_values.c", "hist_values", "prog")


def test_sprint_in_the_target_is_print_s_drawing(prog: Path, cache: Path) -> None:
    script = f"""
global s, lin, a, t, u
probe process("{prog}").mark("v") {{ s <<< $arg1; lin <<< $arg1 % 60; a[$arg2] <<< $arg1 }}
probe process("{prog}").mark("done") {{
  t = sprint(@hist_log(s)); u = sprintln(@hist_linear(lin, 0, 50, 10))
  printf("<%s><%s>%d %d\\n", t, u, strlen(t), strlen(u))
  print(@hist_log(s)); println(@hist_linear(lin, 0, 50, 10))
  printf("[%s]\\n", sprint(@hist_log(a[1])))
}}
"""
    out = run_pydyn_clean(cache, "-e", script, "-c", str(prog)).stdout
    log = [0] * HIST_LOG_BUCKETS
    lin = [0] * hist_linear_buckets(0, 50, 10)
    one = [0] * HIST_LOG_BUCKETS
    for i, v in enumerate(values()):
        log[hist_log_bucket(v)] += 1
        lin[hist_linear_bucket(v % 60, 0, 50, 10)] += 1
        if i % 3 == 1:
            one[hist_log_bucket(v)] += 1
    full_log, full_lin = draw_log(log), draw_linear(lin, 0, 50, 10)
    assert len(full_log) > 511 > len(full_lin)
    # the string: the drawing's first MAXSTRINGLEN - 1 bytes; print: all of it
    head = f"<{full_log[:511]}><{full_lin}>511 {len(full_lin)}\n"
    assert out.startswith(head)
    rest = out[len(head):]
    assert rest.startswith(full_log + full_lin)
    assert rest[len(full_log + full_lin):] == f"[{draw_log(one)[:511]}]\n"


def test_width_and_elision_shape_print_and_sprint(cache: Path) -> None:
    script = r"""
global h
probe begin {
  for (i = 0; i < 40; i++) h <<< (i < 30 ? 1 : 4)
  h <<< 40
  x = sprint(@hist_linear(h, 0, 40, 1))
  print(@hist_linear(h, 0, 40, 1)); print(x); printf("%d\n", strlen(x))
  exit()
}
"""
    r = run_pydyn_clean(cache, "-D", "HIST_WIDTH=10", "-D", "HIST_ELISION=0", "-e", script)
    buckets = [0] * hist_linear_buckets(0, 40, 1)
    for v in [1] * 30 + [4] * 10 + [40]:
        buckets[hist_linear_bucket(v, 0, 40, 1)] += 1
    want = draw_linear(buckets, 0, 40, 1, width=10, elision=0)
    assert want.startswith("value |---------- count\n")
    assert r.stdout == f"{want}{want}{len(want)}\n"


def test_hist_in_string_one_bucket(cache: Path) -> None:
    # systemtap.maps/hist_in_string: @hist_linear(x, 0, 0, 1) of 128 zeros, one row
    script = r"""
global l
probe begin { for (i = 0; i < 128; i++) l <<< 0; print(sprint(@hist_linear(l, 0, 0, 1))); exit() }
"""
    out = run_pydyn_clean(cache, "-e", script).stdout
    assert out == draw([0, 128, 0], False, 0, 1)
    # 128 over a bar of 50: a scale of 3, so 42 '@'
    assert out.splitlines()[1] == "    0 |" + "@" * 42 + "128".rjust(50 - 42 + 1 + 3)


def test_missing_elements_and_empty_histograms(cache: Path) -> None:
    script = r"""
global a, e
probe begin {
  a[1] <<< 5; a[2] <<< 7; a[2] <<< 8; delete a[1]; e <<< 1; delete e
  printf("%d %d %d %d %d\n", @count(a[1]), @sum(a[1]), @count(a[9]), @sum(a[2]), @count(e))
  try { println(@min(a[1])) } catch (m) { println("min: ", m) }
  try { print(@hist_log(a[1])) } catch (m) { println("print: ", m) }
  try { println(sprint(@hist_log(e))) } catch (m) { println("sprint: ", m) }
  try { println(sprintln(@hist_log(a[3]))) } catch (m) { println("sprintln: ", m) }
  println(strlen(sprint(@hist_log(a[2]))) > 0)
  exit()
}
"""
    out = run_pydyn_clean(cache, "-e", script).stdout
    assert out.splitlines() == [
        "0 0 0 15 0",
        "min: empty aggregate",
        "print: empty aggregate",
        "sprint: empty aggregate",
        "sprintln: empty aggregate",
        "1"]


def test_empty_histogram_error_is_reported(cache: Path) -> None:
    r = run_pydyn(cache, "-e", "global e probe begin { e <<< 1; delete e; "
                  "println(sprint(@hist_log(e))); exit() }")
    assert r.returncode == 1
    assert r.stdout == ""
    assert re.search(r"^ERROR: empty aggregate near ", r.stderr, re.M), r.stderr


def test_deleted_keyed_statistics_in_the_target(prog: Path, cache: Path) -> None:
    # systemtap.base/array_slicing's "delete pmaps", in the traced process: the keyed
    # statistics its threads add to, a slice of them deleted
    script = f"""
global st
probe process("{prog}").mark("v") {{ st[$arg2, 1] <<< $arg1; st[$arg2, 2] <<< 1 }}
probe process("{prog}").mark("done") {{
  delete st[1, *]
  printf("%d %d %d %d\\n", @count(st[1, 1]), @sum(st[1, 2]), @count(st[2, 1]), @count(st[2, 2]))
  try {{ println(@max(st[1, 1])) }} catch (m) {{ println("max: ", m) }}
}}
"""
    out = run_pydyn_clean(cache, "-e", script, "-c", str(prog)).stdout
    assert out == f"0 0 {N // 3} {N // 3}\nmax: empty aggregate\n"


def test_hist_width_takes_a_number(cache: Path) -> None:
    r = run_pydyn(cache, "-D", "HIST_WIDTH=wide", "-e", "probe begin { exit() }")
    assert r.returncode == 1
    assert r.stderr.startswith("pydyn: error: -D HIST_WIDTH=wide: HIST_WIDTH takes a number")
