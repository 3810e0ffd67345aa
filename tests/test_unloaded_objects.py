"""The exit report names the probed programs and libraries no process of the session
loaded (their probes could not fire), m64 and m32: the runtime sets the object's bit
in the segment header when it arms it in a process (pd_header.objects_loaded_lo/hi),
the launcher warns for each object left without one, with the programs of the same
name the session did run (a -c command that found another copy on PATH).  -w
silences it; a program that ran gives none."""

from __future__ import annotations

import shutil
from pathlib import Path

from cbuild import PROGS, abi_program_fixture, run_pydyn

target = abi_program_fixture(PROGS / "one_hit.c", "one_hit")

SCRIPT = ('global n\nprobe process("{b}").mark("one") {{ n += $arg1 }}\n'
          'probe process("{b}").function("main") {{ n++ }}\n'
          'probe end {{ printf("n=%d\\n", n) }}\n')


def copy_elsewhere(target: Path, tmp_path: Path) -> Path:
    other = tmp_path / "elsewhere" / target.name
    other.parent.mkdir()
    shutil.copy2(target, other)
    return other


def test_probed_program_never_loaded(target: Path, tmp_path: Path, cache: Path) -> None:
    other = copy_elsewhere(target, tmp_path)
    r = run_pydyn(cache, "-e", SCRIPT.format(b=target), "-c", f"{other} 7")
    assert r.returncode == 0, r.stderr
    assert "n=0" in r.stdout.splitlines(), r.stdout
    assert (f"WARNING: no process of the session loaded {target}: "
            f'process("{target}").mark("one") and 1 more probe point(s) never fired\n'
            f"hint: the session ran {other}\n") in r.stderr, r.stderr


def test_no_warning_with_w_or_when_loaded(target: Path, tmp_path: Path, cache: Path) -> None:
    other = copy_elsewhere(target, tmp_path)
    quiet = run_pydyn(cache, "-w", "-e", SCRIPT.format(b=target), "-c", f"{other} 7")
    assert quiet.returncode == 0, quiet.stderr
    assert "no process of the session loaded" not in quiet.stderr, quiet.stderr
    ran = run_pydyn(cache, "-e", SCRIPT.format(b=target), "-c", f"{target} 7")
    assert ran.returncode == 0, ran.stderr
    assert "n=8" in ran.stdout.splitlines(), ran.stdout
    assert "WARNING" not in ran.stderr, ran.stderr
