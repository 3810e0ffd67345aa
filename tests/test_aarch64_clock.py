"""The clocks and get_cycles() on aarch64 under qemu-user (test_clock.py's program and
checks).  There the kernel's clocksource is the host's, so pd_clock.c reads every
clock with clock_gettime; get_cycles() reads the virtual counter (cntvct_el0)."""

from __future__ import annotations

from pathlib import Path

import test_aarch64
from cbuild import PROGS, run_pydyn
from test_aarch64 import build_a64, qemu_cmd
from test_aarch64 import pytestmark as pytestmark  # the same skips: no cross compiler, qemu
from test_clock import FAST, N, check

a64dir = test_aarch64.a64dir

CYCLES = ('global cyc, back\nprobe process("{b}").mark("tick") {{ c = get_cycles(); '
          "if (c <= cyc) back++; cyc = c }}\n"
          'probe end {{ printf("cycles %d\\n", cyc > 0 && back == 0) }}\n')


def test_clocks_and_cycles(a64dir: Path, cache: Path) -> None:
    prog = build_a64(a64dir, [PROGS / "clock_marks.c"], "clock_marks")
    script = (FAST + CYCLES).format(b=prog)
    r = run_pydyn(cache, "-e", script, "-c", qemu_cmd(prog, str(N)))
    assert r.returncode == 0, r.stderr
    check(r.stdout)
    assert "cycles 1" in r.stdout.splitlines(), r.stdout
