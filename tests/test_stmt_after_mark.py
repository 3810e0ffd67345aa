"""A `.statement` probe whose first instruction follows a mark's 1-byte nop
(tests/progs/stmt_after_mark.c), at -O0 and -O2, m64 and m32: the mark's window
would take that instruction, so the planner keeps both sites' windows apart and both
probes fire once a call, with or without the other one in the script; the line's
address probed as `.statement(ADDR).absolute` too."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, builder, have_sdt_h, run_pydyn

SRC = PROGS / "stmt_after_mark.c"
N = 5
NEXT = next(i for i, ln in enumerate(SRC.read_text().splitlines(), 1) if "/* NEXT */" in ln)
Progs = Callable[[Build], Path]

pytestmark = pytest.mark.skipif(not have_sdt_h(), reason="no <sys/sdt.h>")


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(SRC, tmp_path_factory.mktemp("stmtmark"), "sm")


def _mark(exe: Path) -> str:
    return f'probe process("{exe}").mark("here") {{ printf("M %d\\n", $arg1) }}\n'


def _stmt(exe: Path, where: str) -> str:
    return f'probe process("{exe}").statement({where}) {{ printf("S %d\\n", $i) }}\n'


def _sites(cache: Path, script: str) -> dict[str, tuple[int, str]]:
    """`-p2`'s sites: {"mark" or "statement": (link-time pc, plan)}."""
    listed = run_pydyn(cache, "-p2", "-e", script)
    assert listed.returncode == 0, listed.stderr
    out = {}
    for head, plan in re.findall(r"^(process\(.*)\n\s+plan: (.*)$", listed.stdout, re.M):
        pc = int(re.search(r"pc=\.\w+\+(0x[0-9a-f]+)", head)[1], 16)  # type: ignore[index]
        out["mark" if '.mark("here")' in head else "statement"] = (pc, plan)
    return out


def _run(cache: Path, exe: Path, script: str) -> list[str]:
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {N}")
    assert res.returncode == 0, res.stderr
    assert "not armed" not in res.stderr and "skipped" not in res.stderr, res.stderr
    assert f"total={sum(3 * i - 1 for i in range(N))}" in res.stdout, res.stdout
    return [ln for ln in res.stdout.splitlines() if ln[:2] in ("M ", "S ")]


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_mark_then_statement(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    line = f'"*@stmt_after_mark.c:{NEXT}"'
    both = _mark(exe) + _stmt(exe, line)
    sites = _sites(cache, both)
    (mark_pc, mark_plan), (stmt_pc, stmt_plan) = sites["mark"], sites["statement"]
    # what the test is about: the line starts at the instruction after the 1-byte nop
    assert stmt_pc == mark_pc + 1, sites
    assert mark_plan.startswith("trap: another probe site at"), sites
    assert _run(cache, exe, both) == [ln for i in range(N) for ln in (f"M {i}", f"S {i}")]
    # the statement alone, and the mark alone (its window may take the line then)
    assert _run(cache, exe, _stmt(exe, line)) == [f"S {i}" for i in range(N)]
    assert _run(cache, exe, _mark(exe)) == [f"M {i}" for i in range(N)]
    assert not stmt_plan.startswith("trap") or "out of line" in stmt_plan, sites


@pytest.mark.parametrize("b", BUILDS[1::2], ids=[b.id for b in BUILDS[1::2]])
def test_mark_then_statement_by_address(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    sites = _sites(cache, _mark(exe) + _stmt(exe, f'"*@stmt_after_mark.c:{NEXT}"'))
    stmt_pc = sites["statement"][0]
    with exe.open("rb") as f:
        from elftools.elf.elffile import ELFFile
        elf = ELFFile(f)
        first_page = min(seg["p_vaddr"] for seg in elf.iter_segments("PT_LOAD")) & ~0xFFF
    script = (_mark(exe) + f'probe process("{exe}").statement({first_page + stmt_pc:#x})'
              '.absolute { printf("S %d\\n", $i) }\n')
    assert _run(cache, exe, script) == [ln for i in range(N) for ln in (f"M {i}", f"S {i}")]
