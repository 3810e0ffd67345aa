"""Keyed counters with per-thread tables (runtime/pd_kstat.c).

An array whose every write is a statement `c[k]++`, `c[k]--`, `c[k] += v` or
`c[k] -= v` (and `delete`) keeps one int64 sum a key in the thread's own table, as
keyed statistics do; reads merge the tables.  Every result is checked against the
values the programs fire (tests/progs/kstat_threads.c, pstat_threads.c) and against
the locked map of the same script (an `if (pid() < 0) c[0] = 0`, never run and not
folded away, turns the optimisation off): the output must be identical.  Scripts the
detection must leave locked stay locked (`-p3`) and stay right.  A full table and a
handler finishing while another thread holds the globals lock are
test_stats_keyed_threads.py's tests, run with `c[k]++` too.
"""
# ruff: noqa: F811

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from cbuild import have_cc, have_sdt_h, run_pydyn_clean

# the same programs; `progs` is a fixture, so the tests' parameters of that name are not
# redefinitions
from test_stats_keyed_threads import prog, progs  # noqa: F401
from test_stats_threads import value

pytestmark = pytest.mark.skipif(not (have_cc() and have_sdt_h()),
                                reason="needs gcc and <sys/sdt.h>")
PER = 3000


def locked(stp: str, arrays: str) -> str:
    """`stp` with each of `arrays` (names) assigned once, dead code: the locked map."""
    return stp + "probe begin { if (pid() < 0) { " + "; ".join(
        f"{a}[0] = 0" for a in arrays) + " } }\n"


def kcount_calls(cache: Path, stp: str) -> int:
    return run_pydyn_clean(cache, "-p3", "-e", stp).stdout.count("pd_kstat_add(")


def cmod(a: int, b: int) -> int:
    return int(math.fmod(a, b))


def both(cache: Path, stp: str, cmd: str, arrays: str) -> list[str]:
    """The output of `stp` with per-thread tables, asserted equal to the locked map's."""
    assert kcount_calls(cache, stp) > 0
    assert kcount_calls(cache, locked(stp, arrays)) == 0
    fast = run_pydyn_clean(cache, "-e", stp, "-c", cmd)
    slow = run_pydyn_clean(cache, "-e", locked(stp, arrays), "-c", cmd)
    # (the target's own "done" line lands anywhere among the probes' output)
    got = [ln for ln in fast.stdout.splitlines() if "done" not in ln]
    assert got == [ln for ln in slow.stdout.splitlines() if "done" not in ln]
    return got


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_threads_count_exactly_as_the_locked_map(progs: dict[str, Path], cache: Path,
                                                 abi: str) -> None:
    binary = prog(progs, f"kstat{abi[1:]}")
    # distinct counts a key, so sorting by value does not depend on insertion order
    stp = (f'global c, t, r, n\nprobe process("{binary}").mark("hit") {{ '
           'if ($arg2 % 4 <= $arg1 % 4) c[$arg1 % 4]++; t[$arg3 % 7] += $arg3;\n'
           '  --r[$arg1 % 3]; r[$arg1 % 3] -= 2; ++n[tid()] }\n'
           'probe end { foreach ([k] in c-) printf("c %d %d\\n", k, c[k])\n'
           '  foreach ([k+] in t) printf("t %d %d\\n", k, t[k])\n'
           '  foreach ([k] in t- limit 2) printf("top %d\\n", k)\n'
           '  foreach (v = [k] in c+) printf("v %d %d\\n", k, v)\n'
           '  printf("in %d %d\\n", [3] in c, [9] in c)\n'
           '  s = 0; m = 0; foreach (k in n) { s += n[k]; m++ }; printf("n %d %d\\n", m, s) }\n')
    out = both(cache, stp, f"{binary} 8 {PER}", "ctrn")
    c: Counter[int] = Counter()
    t: Counter[int] = Counter()
    for th in range(8):
        for i in range(2 * PER):
            if i % 4 <= th % 4:
                c[th % 4] += 1
            t[cmod(value(th, i), 7)] += value(th, i)
    lines = [f"c {k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])]
    lines += [f"t {k} {t[k]}" for k in sorted(t)]
    lines += [f"top {k}" for k, _ in sorted(t.items(), key=lambda kv: -kv[1])[:2]]
    lines += [f"v {k} {v}" for k, v in sorted(c.items(), key=lambda kv: kv[1])]
    lines += ["in 1 0", f"n 8 {8 * 2 * PER}"]
    # r is read by its own updates (translate/analysis.py), so neither path reports it at exit
    assert out == lines


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("delete", ["delete c[2]", "delete c", "delete c[*]"])
def test_delete_between_rounds(progs: dict[str, Path], cache: Path, abi: str,
                               delete: str) -> None:
    binary = prog(progs, f"kstat{abi[1:]}")
    per = 1000
    stp = (f'global c\nprobe process("{binary}").mark("hit") {{ c[$arg1 % 4] += $arg2 }}\n'
           f'probe process("{binary}").mark("phase") {{ printf("before %d\\n", c[2])\n'
           f'  {delete}\n  printf("in %d %d %d\\n", [2] in c, [1] in c, c[2]) }}\n'
           'probe end { foreach ([k+] in c) printf("%d: %d\\n", k, c[k]) }\n')
    got = both(cache, stp, f"{binary} 8 {per}", "c")
    first, second = sum(range(per)), sum(range(per, 2 * per))
    all_keys = delete != "delete c[2]"
    assert got[:2] == [f"before {2 * first}", f"in 0 {0 if all_keys else 1} 0"]
    assert got[2:] == [f"{k}: {2 * (second if all_keys or k == 2 else first + second)}"
                       for k in range(4)]


@pytest.mark.parametrize("script,expect", [
    # an assignment anywhere
    ('global c\nprobe begin { c[1]++; c[1] += 4; c[2] = 7; printf("%d %d\\n", c[1], c[2]) }',
     "5 7"),
    # an update used as a value needs the old value
    ('global c\nprobe begin { c[1]++; x = c[1]++; printf("%d %d\\n", x, c[1]) }', "1 2"),
    ('global c\nprobe begin { c[1] += 2; printf("%d %d\\n", c[1] += 3, c[1]) }', "5 5"),
    # `global c%` drops its oldest entry, which needs one table
    ('global c%[2]\nprobe begin { c[1]++; c[2]++; c[3]++; foreach (k+ in c) printf("%d ", k);'
     ' println("") }', "2 3 "),
    # a local of the same name somewhere (a parameter)
    ('global c\nfunction f(c) { return c + 1 }\nprobe begin { c[1]++; printf("%d %d\\n", '
     'c[1], f(2)) }', "1 3"),
])
def test_other_uses_keep_the_locked_map(cache: Path, script: str, expect: str) -> None:
    assert kcount_calls(cache, script) == 0
    assert run_pydyn_clean(cache, "-e", script).stdout.splitlines()[0] == expect
