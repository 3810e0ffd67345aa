"""Statement and label probes: `.statement("FUNC@FILE:LINE")`, `"*@FILE:N-M"` ranges,
`.statement(ADDR).absolute` and `.function("F").label("L")`, with the parameters and locals in
scope read at that pc (`$i`, `$acc`, `$n`, `$$locals`, `$$vars`), on
tests/progs/dwarf_stmt.c at -O0 and -O2, m64 and m32; every value is checked
against the loop's iteration.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, builder, run_pydyn
from elftools.elf.elffile import ELFFile

SRC = PROGS / "dwarf_stmt.c"
N = 4
LOOP = next(i for i, ln in enumerate(SRC.read_text().splitlines(), 1) if "/* LOOP */" in ln)
Progs = Callable[[Build], Path]


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(SRC, tmp_path_factory.mktemp("stmt"), "st")


def acc_before(i: int) -> int:
    return sum(3 * k for k in range(i))


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_locals_at_a_line(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    script = (f'probe process("{exe}").statement("sum_to@dwarf_stmt.c:{LOOP}") {{ '
              'printf("s %s i=%d acc=%d n=%d|%s|%s\\n", ppfunc(), $i, $acc, $n, $$locals, '
              '$$vars) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {N}")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("s ")]
    # stap's order: the loop's block (i) first, then the function's scope
    assert lines == [f"s sum_to i={i} acc={acc_before(i)} n={N}|i={i:#x} "
                     f"acc={acc_before(i):#x}|i={i:#x} n={N:#x} acc={acc_before(i):#x}"
                     for i in range(N)], res.stdout
    assert f"sum={acc_before(N)}" in res.stdout


@pytest.mark.parametrize("b", BUILDS[1::2], ids=[b.id for b in BUILDS[1::2]])
def test_any_function_a_line_range_and_an_address(progs: Progs, cache: Path,
                                                  b: Build) -> None:
    exe = progs(b)
    # lines LOOP-1..LOOP: two statements an iteration, both with i in scope
    script = (f'global n\nprobe process("{exe}").statement("*@dwarf_stmt.c:{LOOP - 1}-{LOOP}") '
              '{ n[$i]++ }\nprobe end { foreach (k+ in n) printf("%d:%d\\n", k, n[k]) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {N}")
    assert res.returncode == 0, res.stderr
    assert re.findall(r"^(\d+):(\d+)$", res.stdout, re.M) == [(str(i), "2") for i in range(N)]
    # the address -p2 shows for the line, probed as .statement(ADDR).absolute: stap's
    # pc=SECTION+OFFSET is relative to the object's first page, ADDR a link-time address
    listed = run_pydyn(cache, "-u", "-p2", "-e", f'probe process("{exe}").statement('
                       f'"sum_to@dwarf_stmt.c:{LOOP}") {{}}')
    assert listed.returncode == 0, listed.stderr
    sites = re.findall(rf'^process\("{re.escape(str(exe))}"\)\.statement\("sum_to@\S*dwarf_stmt\.c:'
                       rf'{LOOP}"\) /\* pc=(\.absolute|\.dynamic)\+(0x[0-9a-f]+) \*/',
                       listed.stdout, re.M)
    assert len(sites) == 1, listed.stdout + listed.stderr
    section, offset = sites[0]
    with exe.open("rb") as f:
        elf = ELFFile(f)
        assert section == (".absolute" if elf["e_type"] == "ET_EXEC" else ".dynamic")
        first_page = min(seg["p_vaddr"] for seg in elf.iter_segments("PT_LOAD")) & ~0xFFF
    script = (f'probe process("{exe}").statement({first_page + int(offset, 16):#x}).absolute '
              '{ printf("a %d\\n", $i) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {N}")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("a ")] == [
        f"a {i}" for i in range(N)]


@pytest.mark.parametrize(("point", "message"), [
    ('statement("sum_to@dwarf_stmt.c:1")', "matches no statement in"),
    ('statement("sum_to@dwarf_stmt.c:x")', "bad line number 'x'"),
    ('statement("sum_to")', "a statement is FUNC@FILE:LINE"),
    ("statement(1)", "needs .absolute"),
])
def test_bad_statements(progs: Progs, cache: Path, point: str, message: str) -> None:
    exe = progs(BUILDS[1])
    res = run_pydyn(cache, "-e", f'probe process("{exe}").{point} {{ }}', "-c", f"{exe} 1")
    assert res.returncode == 1
    assert message in res.stderr.splitlines()[0], res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_label(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    script = (f'probe process("{exe}").function("sum_to").label("do*") {{ '
              'printf("l %s acc=%d n=%d\\n", ppfunc(), $acc, $n) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {N}")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("l ")] == [
        f"l sum_to acc={acc_before(N)} n={N}"]
    res = run_pydyn(cache, "-e", f'probe process("{exe}").function("main").label("done") {{ }}')
    assert res.returncode == 1 and "matches no label" in res.stderr


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_listing_variables_with_types(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    res = run_pydyn(cache, "-L", f'process("{exe}").statement("sum_to@dwarf_stmt.c:{LOOP}")')
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f'process("{exe}").statement("sum_to@{SRC}:{LOOP}") $i:long int $n:long int '
        "$acc:long int"]
    res = run_pydyn(cache, "-L", f'process("{exe}").function("sum_to")')
    decl = next(i for i, ln in enumerate(SRC.read_text().splitlines(), 1)
                if ln.startswith("PROBED long sum_to("))
    assert res.stdout.splitlines() == [
        f'process("{exe}").function("sum_to@{SRC}:{decl}") $n:long int $acc:long int'], \
        res.stdout
