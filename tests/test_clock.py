"""The clocks a probe reads (gettimeofday_ns, local_clock_ns; runtime/pd_clock.c) agree
with the program's own clock_gettime, m64 and m32, in a FAST handler (read without
the vector registers saved) and in an ordinary one.

The program reads CLOCK_REALTIME and CLOCK_MONOTONIC, then fires a mark with both, 4,000
times 5 us apart: about 20 ms, so each thread's clock anchor is taken again some 20
times.  The probe's reads come after the program's, so each difference is at least 0
(less at most the interpolation's error, well under a microsecond) and small; a wrong
cycle length or anchor would put them microseconds to milliseconds off.  A thread's
local_clock_ns() never goes back.
"""

from __future__ import annotations

import re
from pathlib import Path

from cbuild import PROGS, abi_program_fixture, run_pydyn

N = 4000
target = abi_program_fixture(PROGS / "clock_marks.c", "clock_marks")

STATS = ('printf("%s %d %d %d %d\\n", "{n}", @count({n}), @min({n}), @max({n}), @avg({n}))')
FAST = ("global dr, dm\n"
        'probe process("{b}").mark("tick") {{ dr <<< gettimeofday_ns() - $arg1; '
        "dm <<< local_clock_ns() - $arg2 }}\n"
        "probe end {{ " + STATS.format(n="dr") + "; " + STATS.format(n="dm") + " }}\n")
# the `if` and the assigned global make the handler an ordinary one (locked, full context)
PLAIN = ("global dr, dm, last, back\n"
         'probe process("{b}").mark("tick") {{ t = local_clock_ns(); if (t < last) back++; '
         "last = t; dr <<< gettimeofday_ns() - $arg1; dm <<< t - $arg2 }}\n"
         'probe end {{ printf("back %d\\n", back); ' + STATS.format(n="dr") + "; "
         + STATS.format(n="dm") + " }}\n")


def stats(out: str) -> dict[str, list[int]]:
    return {m[0]: [int(x) for x in m[1:]]
            for m in re.findall(r"^(d[rm]) (\d+) (-?\d+) (-?\d+) (-?\d+)$", out, re.M)}


def check(out: str) -> None:
    got = stats(out)
    assert set(got) == {"dr", "dm"}, out
    for name, (count, lo, hi, avg) in got.items():
        assert count == N, (name, out)
        # the probe reads after the program, a few ns later when nothing preempts it: the
        # closest pair shows the clocks agree in base and unit (the mean would measure
        # the machine's load)
        assert -1000 <= lo < 20_000, (name, out)
        assert lo <= avg and hi < 1_000_000_000, (name, out)


def test_fast_handler_clocks(target: Path, cache: Path) -> None:
    script = FAST.format(b=target)
    p3 = run_pydyn(cache, "-p3", "-e", script)
    assert p3.returncode == 0, p3.stderr
    # the mark's handler is FAST and reads registers (PD_PROBE_FAST | PD_PROBE_REGS)
    assert re.search(r"\{PD_PROBE_MARK, 6, probe_0,", p3.stdout), p3.stdout
    r = run_pydyn(cache, "-e", script, "-c", f"{target} {N}")
    assert r.returncode == 0, r.stderr
    check(r.stdout)


def test_plain_handler_clocks(target: Path, cache: Path) -> None:
    script = PLAIN.format(b=target)
    r = run_pydyn(cache, "-e", script, "-c", f"{target} {N}")
    assert r.returncode == 0, r.stderr
    assert "back 0" in r.stdout.splitlines(), r.stdout
    check(r.stdout)

