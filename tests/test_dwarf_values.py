"""Target variables read with their exact values on real processes, m64 and m32 at
-O0 and -O2: parameters that -O2 keeps only as their value at the function's entry
(`DW_OP_entry_value`: a hidden probe on the entry keeps the registers for the call,
recursion included) read in statement probes.

tests/progs/dwarf_entry.c; each test first checks that gcc emitted the form it is about
where it says so (`pydyn -L -v` prints each variable's location), then compares the
probe's values with what the program computes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, builder, run_pydyn

ENTRY_SRC = PROGS / "dwarf_entry.c"
Progs = Callable[[Build], Path]
IDS = [b.id for b in BUILDS]


def line_of(src: Path, mark: str) -> int:
    return next(i for i, ln in enumerate(src.read_text().splitlines(), 1) if f"/* {mark} */" in ln)


@pytest.fixture(scope="module")
def entry_progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(ENTRY_SRC, tmp_path_factory.mktemp("dwentry"), "de")


def locations(cache: Path, point: str) -> dict[str, str]:
    """What `-L -v` says each variable's location is at the probe point."""
    res = run_pydyn(cache, "-L", "-v", point)
    assert res.returncode == 0, res.stderr
    m = re.search(r'locations="([^"]*)"', res.stdout)
    assert m, res.stdout
    return dict(part.partition("=")[::2] for part in re.split(r" (?=\w+=)", m.group(1)))


@pytest.mark.parametrize("b", BUILDS, ids=IDS)
def test_entry_values_in_statement_probes(entry_progs: Progs, cache: Path, b: Build) -> None:
    exe = entry_progs(b)
    later, depth = line_of(ENTRY_SRC, "LATER"), line_of(ENTRY_SRC, "DEPTH")
    where = locations(cache, f'process("{exe}").statement("*@dwarf_entry.c:{later}")')
    if b.opt == "-O2":   # the calls reused the argument registers
        assert where["a"] == "DW_OP_entry_value DW_OP_stack_value", where
        assert locations(cache, f'process("{exe}").statement("*@dwarf_entry.c:{depth}")') \
            ["level"] == "DW_OP_entry_value DW_OP_stack_value"
    script = (f'probe process("{exe}").statement("*@dwarf_entry.c:{later}") '
              '{ printf("L a=%d b=%d\\n", $a, $b) } '
              f'probe process("{exe}").statement("*@dwarf_entry.c:{depth}") '
              '{ printf("D level=%d tag=%d %s\\n", $level, $tag, $$parms) } '
              f'probe process("{exe}").function("depth") {{ printf("E\\n") }}')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 3")
    assert res.returncode == 0, res.stderr
    assert "s=930" in res.stdout
    out = res.stdout.splitlines()
    assert [ln for ln in out if ln.startswith("L ")] == \
        [f"L a={1000 + i} b={7 * i}" for i in range(3)]
    assert out.count("E") == 4   # a function probe shares the entry with the hidden one
    # each level of the recursion reads its own call's entry; -O2 makes the deepest
    # level's path another copy of the line
    levels = [ln for ln in out if ln.startswith("D ")]
    want = [f"D level={n} tag={53 - n} level={n:#x} tag={53 - n:#x}" for n in range(4)]
    assert levels == (want if b.opt == "-O0" else want[-len(levels):]), res.stdout
    assert len(levels) >= 3 and "ERROR" not in res.stderr, res.stderr
