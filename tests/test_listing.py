"""`pydyn -l` / `-L` / `-L -v`: golden listings on built programs and on Debian's python3.11."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn

PYTHON = "/usr/bin/python3.11"

PROG_C = r"""
#include <sys/sdt.h>
#include <stdint.h>
volatile int8_t c8 = -3; volatile uint16_t u16 = 7; volatile int32_t i32 = -9;
volatile uint64_t u64 = 11;
int main(int argc, char **argv) {
    (void)argv;
    int8_t a = c8; uint16_t b = u16; int32_t c = i32; uint64_t d = u64;
    DTRACE_PROBE4(lst, typed, a, b, c, d);
    DTRACE_PROBE(lst, bare);
    if (argc > 1) DTRACE_PROBE1(lst, dup, c);
    else DTRACE_PROBE1(lst, dup, d);
    return 0;
}
"""

LIB_C = r"""
#include <sys/sdt.h>
int lib_fn(int x) { DTRACE_PROBE1(lst, in_lib, x); return x + 1; }
"""


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object) -> Path:
    d = tmp_path_factory.mktemp("listing")
    (d / "prog.c").write_text(PROG_C)
    (d / "lib.c").write_text(LIB_C)
    build_c(d / "prog.c", d / "prog")
    build_c(d / "prog.c", d / "prog_two")
    build_c(d / "lib.c", d / "liblst.so", extra=["-shared", "-fPIC"])
    (d / "prog_notes.txt").write_text("not an ELF file\n")
    return d


def test_list_marks_sorted_once_each(cache: Path, progs: Path) -> None:
    r = run_pydyn(cache, "-l", f'process("{progs}/prog").mark("*")')
    assert r.returncode == 0, r.stderr
    p = f'process("{progs}/prog")'
    assert r.stdout.splitlines() == [f'{p}.mark("bare")', f'{p}.mark("dup")',
                                     f'{p}.mark("typed")']
    assert r.stderr == ""


def test_list_with_context_variables_as_stap(cache: Path, progs: Path) -> None:
    r = run_pydyn(cache, "-L", f'process("{progs}/prog").mark("*")')
    assert r.returncode == 0, r.stderr
    p = f'process("{progs}/prog")'
    assert r.stdout.splitlines() == [
        f'{p}.mark("bare")',
        f'{p}.mark("dup") $arg1:long',
        f'{p}.mark("typed") $arg1:long $arg2:long $arg3:long $arg4:long']


def test_list_verbose_shows_types_specs_and_every_site(cache: Path, progs: Path) -> None:
    r = run_pydyn(cache, "-L", "-v", f'process("{progs}/prog").mark("*")')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    p = re.escape(f'process("{progs}/prog")')
    typed = [ln for ln in lines if '.mark("typed")' in ln]
    assert len(typed) == 1
    assert re.fullmatch(p + r'\.mark\("typed"\) \$arg1:int8 \$arg2:uint16 \$arg3:int32 '
                        r'\$arg4:uint64 args="-1@\S+ 2@\S+ -4@\S+ 8@\S+" pc=0x[0-9a-f]+',
                        typed[0]), typed[0]
    dup = [ln for ln in lines if '.mark("dup")' in ln]
    assert len(dup) == 2, lines            # two sites of one mark, both visible
    assert {ln.split(" $")[1].split()[0] for ln in dup} == {"arg1:int32", "arg1:uint64"}
    assert len({ln.rsplit("pc=", 1)[1] for ln in dup}) == 2
    assert re.fullmatch(p + r'\.mark\("bare"\) args="" pc=0x[0-9a-f]+',
                        next(ln for ln in lines if "bare" in ln))


def test_path_glob_names_every_elf_and_skips_other_files(cache: Path, progs: Path) -> None:
    r = run_pydyn(cache, "-l", f'process("{progs}/*").mark("[bi]*")')
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f'process("{progs}/liblst.so").mark("in_lib")',
        f'process("{progs}/prog").mark("bare")',
        f'process("{progs}/prog_two").mark("bare")']
    assert r.stderr == ""


def test_nothing_matches_is_one_error_exit_1(cache: Path, progs: Path) -> None:
    r = run_pydyn(cache, "-l", f'process("{progs}/prog").mark("tyepd")')
    assert r.returncode == 1
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        f'pydyn: error: -l \'process("{progs}/prog").mark("tyepd")\': probe point '
        f'\'process("{progs}/prog").mark("tyepd")\' matches no mark',
        "hint: did you mean typed?"]
    r = run_pydyn(cache, "-l", f'process("{progs}/nothing*").mark("*")')
    assert r.returncode == 1
    assert "no ELF file matches" in r.stderr and "Traceback" not in r.stderr
    r = run_pydyn(cache, "-l", f'process("{progs}/prog_notes.txt").mark("*")')
    assert r.returncode == 1 and "Traceback" not in r.stderr


@pytest.mark.skipif(not os.path.exists(PYTHON), reason="Debian's python3.11 not installed")
def test_python311_golden(cache: Path) -> None:
    r = run_pydyn(cache, "-l", f'process("{PYTHON}").mark("*")')
    assert r.returncode == 0, r.stderr
    names = ["audit", "function__entry", "function__return", "gc__done", "gc__start",
             "import__find__load__done", "import__find__load__start", "line"]
    assert r.stdout.splitlines() == [f'process("{PYTHON}").mark("{n}")' for n in names]
    r = run_pydyn(cache, "-L", f'process("{PYTHON}").mark("function__entry")')
    assert r.stdout == (f'process("{PYTHON}").mark("function__entry") '
                        "$arg1:long $arg2:long $arg3:long\n")
    r = run_pydyn(cache, "-L", "-v", f'process("{PYTHON}").mark("function__entry")')
    assert re.fullmatch(re.escape(f'process("{PYTHON}").mark("function__entry")')
                        + r' \$arg1:uint64 \$arg2:uint64 \$arg3:int32 args="[^"]+" '
                          r"pc=0x[0-9a-f]+\n", r.stdout), r.stdout


@pytest.mark.skipif(not any(Path("/usr/lib").glob("*/libpython3*.so*")),
                    reason="no libpython shared library")
def test_shared_library_glob(cache: Path) -> None:
    r = run_pydyn(cache, "-l", 'process("/usr/lib/*/libpython*.so*").mark("gc__*")')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines and all(re.fullmatch(r'process\("/usr/lib/[^"]+/libpython[^"]*\.so[^"]*"\)'
                                      r'\.mark\("gc__(start|done)"\)', ln) for ln in lines)
    assert {ln.rsplit('"', 2)[1] for ln in lines} == {"gc__start", "gc__done"}
