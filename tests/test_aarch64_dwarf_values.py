"""aarch64 under qemu-user: the DWARF forms of tests/test_dwarf_values.py as gcc emits
them there -- parameters kept only as `DW_OP_entry_value` of x0/x1 read by statement
probes (recursion included), and a struct of two longs passed in x0 and x1
(`DW_OP_reg0 DW_OP_piece 8 DW_OP_reg1 DW_OP_piece 8`) and one in x2 read by member;
guru mode's writes of tests/test_guru_writes.py (x0-x30 of the saved context loaded
back by the stub and by the trap).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_aarch64
from cbuild import run_pydyn
from test_aarch64 import build_a64, qemu_cmd
from test_aarch64 import pytestmark as pytestmark  # the same skips: no cross compiler, qemu
from test_dwarf_values import BYVALUE_SRC, ENTRY_SRC, byvalue, line_of, locations, reads
from test_guru_writes import KEEP, SEEN, WRITES
from test_guru_writes import SRC as WRITES_SRC

a64dir = test_aarch64.a64dir

def test_entry_values(a64dir: Path, cache: Path) -> None:
    exe = build_a64(a64dir, [ENTRY_SRC], "dwentry", extra=("-g",))
    depth = line_of(ENTRY_SRC, "DEPTH")
    assert locations(cache, f'process("{exe}").statement("*@dwarf_entry.c:{depth}")') \
        ["level"] == "DW_OP_entry_value DW_OP_stack_value"
    script = (f'probe process("{exe}").statement("*@dwarf_entry.c:{line_of(ENTRY_SRC, "LATER")}") '
              '{ printf("L a=%d b=%d\\n", $a, $b) } '
              f'probe process("{exe}").statement("*@dwarf_entry.c:{depth}") '
              '{ printf("D level=%d tag=%d\\n", $level, $tag) }')
    res = run_pydyn(cache, "-e", script, "-c", qemu_cmd(exe, "3"), timeout=300)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert "s=930" in out
    assert [ln for ln in out if ln.startswith("L ")] == \
        [f"L a={1000 + i} b={7 * i}" for i in range(3)]
    levels = [ln for ln in out if ln.startswith("D ")]
    assert len(levels) >= 3 and levels == \
        [f"D level={n} tag={53 - n}" for n in range(4)][-len(levels):], res.stdout

def test_struct_by_value(a64dir: Path, cache: Path) -> None:
    exe = build_a64(a64dir, [BYVALUE_SRC], "dwbyval", extra=("-g",))
    entry = f'process("{exe}").function("take")'
    where = locations(cache, entry)
    assert where["p"] == "DW_OP_reg0 DW_OP_piece DW_OP_reg1 DW_OP_piece" and where["s"] == "x2"
    res = run_pydyn(cache, "-e", f"probe {entry} {{ {reads('E', 'p s')} }}",
                    "-c", qemu_cmd(exe, "2"), timeout=300)
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("E ")] == \
        [f"E {byvalue(i, 'p s')}" for i in range(2)], res.stdout
    assert "sum=1398" in res.stdout


@pytest.mark.parametrize("mode", ["auto", "trap"])
def test_guru_writes(a64dir: Path, cache: Path, mode: str) -> None:
    exe = build_a64(a64dir, [WRITES_SRC], "guruw", extra=("-g",))
    res = run_pydyn(cache, "-g", f"--probe-mode={mode}", "-e",
                    WRITES.format(exe=exe, keep=KEEP), "-c", qemu_cmd(exe), timeout=300)
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if not ln.startswith("read ")] == SEEN, \
        res.stdout
